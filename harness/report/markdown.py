"""A :class:`~harness.report.document.Document` as markdown: ``summary.md`` and the MLflow
run description.

Paragraphs are written as they are (their light markdown is markdown); tables as pipe
tables with the cells of :func:`harness.report.text_cells.text_table`, markdown's special
characters escaped; a verdict's kind in markdown's only means: **bold** settled, plain not
distinguishable, _italic_ not testable (a key under the first table with kinds); a row in
bold has its label in bold; figures as images of the sibling file ``<name>.png``; notes
as quotes, the document's notes as a list at the end.

MLflow keeps at most a few thousand characters of a run's description: ``max_chars``
shortens the long text cells (160, then 60 characters, then none), never the rows, and cuts
the text only as a last resort; ``max_rows`` limits every table.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from harness.analysis.results_types import NOT_DISTINGUISHABLE, NOT_TESTABLE, SETTLED, VERDICT_KINDS
from harness.report.document import Document, Figure, Note, Paragraph, Section, Table
from harness.report.text_cells import text_table

_EMPHASIS = {SETTLED: "**{}**", NOT_TESTABLE: "_{}_"}


def escape(text: str) -> str:
    """Text inside a markdown table cell: markdown's special characters escaped."""
    return re.sub(r"([\\`*_|])", r"\\\1", text)


def kind_legend() -> str:
    """The key of the verdict kinds, as markdown shows them."""
    shown = {SETTLED: "in **bold**", NOT_DISTINGUISHABLE: "plain", NOT_TESTABLE: "in _italics_"}
    return "Verdicts " + "; ".join(f"{shown[k]}: {k}, {VERDICT_KINDS[k]}" for k in shown) + "."


def _short(text: str, limit: int | None) -> str:
    return text if limit is None or len(text) <= limit else text[:limit] + "…"


def table_markdown(table: Table, *, max_rows: int | None = None, cell_chars: int | None = None) -> str:
    """One table as a pipe table (``cell_chars``: text cells longer than that shortened)."""
    t = text_table(table, max_rows=max_rows)
    lines = []
    if table.title:
        lines += [f"**{escape(table.title)}**", ""]
    lines.append("| " + " | ".join(escape(label) for label in t.labels) + " |")
    lines.append("| " + " | ".join("--:" if n else ":--" for n in t.numeric) + " |")
    for cells, kind, bold in zip(t.rows, t.kinds, t.bold, strict=True):
        out = []
        for j, cell in enumerate(cells):
            text = escape(cell if t.numeric[j] else _short(cell, cell_chars))
            if j == t.verdict and kind is not None:
                text = _EMPHASIS.get(kind, "{}").format(text)
            elif j == t.stub and bold:  # a row mark (a trailing " *") stays outside the bold
                name, mark = (text[:-3], text[-3:]) if text.endswith(" \\*") else (text, "")
                text = f"**{name}**{mark}"
            out.append(text)
        lines.append("| " + " | ".join(out) + " |")
    if t.more:
        lines += ["", f"{t.more} more rows in the parquet table."]
    if table.caption:
        lines += ["", escape(table.caption)]
    return "\n".join(lines)


def _block(block, *, max_rows: int | None, cell_chars: int | None) -> str:
    if isinstance(block, Paragraph):
        return block.text
    if isinstance(block, Table):
        return table_markdown(block, max_rows=max_rows, cell_chars=cell_chars)
    if isinstance(block, Figure):
        image = f"![{block.name}]({block.name}.png)"
        return f"{image}\n\n{block.caption}" if block.caption else image
    if isinstance(block, Note):
        return f"> {block.text}"
    raise TypeError(f"not a block: {type(block).__name__}")


def _section(
    section: Section, level: int, *, legend: list[bool], max_rows: int | None, cell_chars: int | None
) -> list[str]:
    out = [f"{'#' * level} {section.title}", ""]
    for block in section.blocks:
        out += [_block(block, max_rows=max_rows, cell_chars=cell_chars), ""]
        if isinstance(block, Table) and block.kind_column is not None and legend[0]:
            out += [kind_legend(), ""]
            legend[0] = False  # once per document
    return out


def _render(
    document: Document,
    *,
    sections: Sequence[str] | None,
    title: bool,
    level: int,
    notes: bool,
    legend: bool,
    max_rows: int | None,
    cell_chars: int | None,
    footer: Sequence[str],
) -> str:
    lines = [f"{'#' * (level - 1)} {document.title}", ""] if title and level > 1 else []
    pending_legend = [legend]
    for section in document.select(sections):
        lines += _section(section, level, legend=pending_legend, max_rows=max_rows, cell_chars=cell_chars)
    for paragraph in footer:
        lines += [paragraph, ""]
    if notes and document.notes:
        lines += [f"{'#' * level} Notes", "", *(f"- {n.text}" for n in document.notes), ""]
    return "\n".join(lines)


def render_markdown(
    document: Document,
    *,
    sections: Sequence[str] | None = None,
    title: bool = True,
    level: int = 2,
    notes: bool = True,
    legend: bool = True,
    max_rows: int | None = None,
    max_chars: int | None = None,
    footer: Sequence[str] = (),
) -> str:
    """The document as markdown.

    Parameters
    ----------
    sections : section keys, optional
        The sections shown (all by default), in the document's order.
    title : bool
        The document's title as the heading one level above the sections'.
    level : int
        The heading level of the sections (``##`` by default).
    notes : bool
        The document's notes, as a list at the end.
    legend : bool
        The key of the verdict kinds under the first table with kinds.
    max_rows : int, optional
        Rows shown of each table.
    max_chars : int, optional
        The longest the text may be: long text cells are shortened (160, 60, then 0
        characters, every row kept), then the text is cut with "…".
    footer : paragraphs
        Written after the sections (e.g. a link to the full report).
    """
    options = dict(sections=sections, title=title, level=level, notes=notes, legend=legend, footer=footer)
    for cell_chars in (None, 160, 60, 0) if max_chars is not None else (None,):
        text = _render(document, max_rows=max_rows, cell_chars=cell_chars, **options)
        if max_chars is None or len(text) <= max_chars:
            return text
    return text[: max_chars - 1] + "…"


__all__ = ["escape", "kind_legend", "render_markdown", "table_markdown"]
