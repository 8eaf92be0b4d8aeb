"""A :class:`~harness.report.document.Document` as plain text for the terminal, fitting a
width (100 columns by default).

A table is a fixed-width table of :func:`harness.report.text_cells.text_table`'s cells (numbers
right-aligned). When a row does not fit the width, its verdict and its other long text
cells go under it, indented and wrapped; a verdict is followed by its kind in brackets
(``[settled]``), the only means plain text has (``colour=True`` also colours it with ANSI
codes: a settled verdict bold and green, as bold means settled in every rendering).
Paragraphs, captions and notes are wrapped to the width; a figure is named, not drawn.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from harness.analysis.results_types import NOT_TESTABLE, SETTLED
from harness.report.document import Document, Figure, Note, Paragraph, Section, Table
from harness.report.text_cells import TextTable, text_table

#: Width of the terminal output, in characters.
WIDTH = 100
#: A text cell wider than this goes under its row when the row does not fit.
_LONG_CELL = 24
_ANSI = {SETTLED: "\x1b[1;32m", NOT_TESTABLE: "\x1b[2m"}


def _verdict_text(text: str, kind: str | None, colour: bool) -> str:
    if kind is None:
        return text
    tagged = f"{text} [{kind}]"
    return f"{_ANSI[kind]}{tagged}\x1b[0m" if colour and kind in _ANSI else tagged


def _verdict_lines(text: str, kind: str | None, width: int, colour: bool) -> list[str]:
    """A verdict under its row: its words wrapped, then its kind in brackets, never split."""
    indent = "     "
    lines = _wrap(text, width, indent)
    if kind is None:
        return lines
    tag = f"[{kind}]"
    if len(lines[-1]) + 1 + len(tag) <= width:
        lines[-1] += f" {tag}"
    else:
        lines.append(indent + tag)
    if colour and kind in _ANSI:
        lines = [f"{_ANSI[kind]}{line}\x1b[0m" for line in lines]
    return lines


def _wrap(text: str, width: int, indent: str = "") -> list[str]:
    wrapped = textwrap.wrap(
        text,
        width=width,
        initial_indent=indent,
        subsequent_indent=indent,
        break_on_hyphens=False,
        break_long_words=False,
    )
    return wrapped or [indent.rstrip()]


def _under(t: TextTable, width: int) -> set[int]:
    """Columns that go under their row: none when every row fits ``width``, else the
    verdict and the long text cells."""
    cells = [[*r] for r in t.rows]
    for row, kind in zip(cells, t.kinds, strict=True):
        if t.verdict is not None:
            row[t.verdict] = _verdict_text(row[t.verdict], kind, False)
    widths = [max(len(x) for x in col) for col in zip(t.labels, *cells, strict=True)]
    if 1 + sum(widths) + 2 * (len(widths) - 1) <= width:
        return set()
    long = {j for j, w in enumerate(widths) if not t.numeric[j] and w > _LONG_CELL and j != t.stub}
    return long | ({t.verdict} if t.verdict is not None else set())


def table_text(table: Table, *, width: int = WIDTH, colour: bool = False, max_rows: int | None = None) -> list[str]:
    """One table as lines of text (see the module docstring)."""
    t = text_table(table, max_rows=max_rows)
    under = _under(t, width)
    inline = [j for j in range(len(t.labels)) if j not in under]
    rows = [[t.labels[j] for j in inline]] + [[r[j] for j in inline] for r in t.rows]
    if t.verdict is not None and t.verdict in inline:
        at = inline.index(t.verdict)
        for row, kind in zip(rows[1:], t.kinds, strict=True):
            row[at] = _verdict_text(row[at], kind, colour)
    widths = [max(len(r[i]) for r in rows) for i in range(len(inline))]
    gap = "  " if 1 + sum(widths) + 2 * (len(widths) - 1) <= width else " "  # a column's worth of room
    lines = [table.title] if table.title else []
    for i, row in enumerate(rows):
        cells = [(c.rjust(w) if t.numeric[j] else c.ljust(w)) for c, w, j in zip(row, widths, inline, strict=True)]
        lines.append((" " + gap.join(cells)).rstrip())
        if i == 0:
            continue
        for j in sorted(under, key=lambda j: j != t.verdict):
            text = t.rows[i - 1][j]
            if j == t.verdict:
                lines += _verdict_lines(text, t.kinds[i - 1], width, colour)
            elif text:
                lines += _wrap(f"{t.labels[j]}: {text}", width, "     ")
    if t.more:
        lines.append(f" ({t.more} more rows in the parquet table)")
    if table.caption:
        lines += _wrap(f"({table.caption})", width, " ")
    return lines


def _section(section: Section, *, width: int, colour: bool, max_rows: int | None) -> list[str]:
    lines = [section.title]
    for block in section.blocks:
        if isinstance(block, Table):
            lines += table_text(block, width=width, colour=colour, max_rows=max_rows)
        elif isinstance(block, Paragraph):
            lines += _wrap(block.text.replace("**", "").replace("`", ""), width)
        elif isinstance(block, Note):
            lines += _wrap(f"note: {block.text}", width)
        elif isinstance(block, Figure):
            lines += _wrap(f"[figure {block.name}.png{': ' + block.caption if block.caption else ''}]", width)
    return lines


def render_terminal(
    document: Document,
    *,
    sections: Sequence[str] | None = None,
    width: int = WIDTH,
    title: bool = False,
    notes: bool = False,
    colour: bool = False,
    max_rows: int | None = None,
) -> str:
    """The document's sections as plain text that fits a terminal.

    Parameters
    ----------
    document : Document
        What to render.
    sections : sequence of str, optional
        The keys of the sections to render; all by default.
    width : int
        Columns: a table row wider than that puts its verdict (and its other long text
        cells) under it, indented and wrapped.
    title, notes : bool
        Also the document's title (first) and its notes (last).
    colour : bool
        ANSI colours: a settled verdict bold green, an untestable one dim.
    max_rows : int, optional
        Rows shown per table; a line says how many more it holds.

    Returns
    -------
    str
        The lines, joined by newlines; each verdict ends with its kind in brackets.
    """
    lines = [document.title, ""] if title else []
    for k, section in enumerate(document.select(sections)):
        lines += ([""] if k else []) + _section(section, width=width, colour=colour, max_rows=max_rows)
    if notes and document.notes:
        lines += ["", "Notes:"]
        for note in document.notes:
            lines += textwrap.wrap(
                note.text, width=width, initial_indent=" - ", subsequent_indent="   ", break_on_hyphens=False
            )
    return "\n".join(lines)


__all__ = ["WIDTH", "render_terminal", "table_text"]
