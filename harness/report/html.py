"""A :class:`~harness.report.document.Document` as one self-contained HTML page.

Tables are rendered by great-tables (``great_tables.GT``) from their polars frames: number
formats follow :mod:`harness.report.text_cells`'s rules, units go into the column labels, each
``X_low``/``X_high`` pair becomes one ``[low, high]`` column, a loss column may get its
value in bits beside it, rows may be grouped, and the verdict column is coloured by the
row's *kind* (:data:`~harness.analysis.results_types.VerdictKind`, a property the
statistics set on the verdict, never read back from its words): settled, not
distinguishable, not testable (:data:`KIND_COLOURS`, their key under each such table);
a settled verdict is also bold, as in the markdown and the terminal: bold means settled.

The page loads nothing from anywhere: its CSS is inline, each table holds its own
``<style>`` (scoped by the table's id), figures are ``data:`` URIs (MLflow previews the page
in a sandboxed iframe that cannot load sibling files), and
:func:`strip_external_resources` removes any reference a future great-tables might add.
"""

from __future__ import annotations

import base64
import hashlib
import html
import math
import re
import time
from collections.abc import Sequence
from typing import Any

import polars as pl
from great_tables import GT, from_column, loc, style
from great_tables import html as gt_html

from harness.analysis.results_types import NOT_DISTINGUISHABLE, NOT_TESTABLE, SETTLED, VERDICT_KINDS, format_pvalue
from harness.report.document import LABELS, Document, Figure, Note, Paragraph, Section, Table
from harness.report.text_cells import MISSING, MISSING_INTERVAL, group_labels, with_bits

#: Background and text colour of a verdict cell, by the verdict's kind.
KIND_COLOURS: dict[str, tuple[str, str]] = {
    SETTLED: ("#d8f0df", "#14532d"),
    NOT_DISTINGUISHABLE: ("#e9eef5", "#1f2937"),
    NOT_TESTABLE: ("#f1f1f1", "#6b6b6b"),
}

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;
color:#222;line-height:1.45}
h1{font-size:1.5em}h2{font-size:1.2em;border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
img{max-width:100%;margin:.6em 0}.note{color:#8a5a00}.info{color:#555}.gt_table{margin-left:0 !important}
figcaption{font-size:.9em;color:#555}
"""


def inline_markdown(text: str) -> str:
    """A paragraph's light markdown as HTML: escaped, ``**bold**`` and ```code```."""
    out = html.escape(text)
    out = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", out)
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", out)


def kind_legend() -> str:
    """The colour key of the verdict kinds (HTML)."""
    items = []
    for kind, meaning in VERDICT_KINDS.items():
        fill, ink = KIND_COLOURS[kind]
        weight = "bold" if kind == SETTLED else "normal"  # bold means settled, as in markdown and the terminal
        items.append(
            f"<span style='background:{fill};color:{ink};font-weight:{weight};padding:0 .35em;border-radius:3px'>"
            f"{kind}</span>: {meaning}"
        )
    return "; ".join(items)


def strip_external_resources(page: str) -> str:
    """Remove whatever would load from outside the page: CSS ``@import`` rules,
    ``<link>`` elements, ``<script src=...>`` elements and CSS ``url(http...)`` values
    (the page must render alone, in MLflow's sandboxed iframe and offline)."""
    page = re.sub(r"@import\s+[^;]+;", "", page)
    page = re.sub(r"<link\b[^>]*>", "", page, flags=re.IGNORECASE)
    page = re.sub(r"<script\b[^>]*\bsrc\s*=[^>]*>\s*</script>", "", page, flags=re.IGNORECASE)
    return re.sub(r"url\(\s*['\"]?(?:https?:)?//[^)]*\)", "none", page, flags=re.IGNORECASE)


# ----------------------------------------------------------------------------- tables
def _table_id(table: Table) -> str:
    """A stable id (the table's CSS is scoped by it): the same table renders the same page."""
    df = table.frame
    key = (df.columns, df.rows()[:50], df.height, tuple(table.units.items()), tuple(table.group_by), table.title)
    return f"table-{hashlib.sha1(repr(key).encode()).hexdigest()[:10]}"


def _pvalue_text(p: Any) -> Any:
    """A p-value as the terminal writes it (``format_pvalue``); missing stays missing."""
    return None if p is None or (isinstance(p, float) and math.isnan(p)) else format_pvalue(float(p))


def _kind_colours(kinds: list[str | None]) -> pl.DataFrame:
    """Each verdict cell's background, ink and weight: bold where settled, as in markdown."""
    colours = [KIND_COLOURS.get(k or NOT_TESTABLE, KIND_COLOURS[NOT_TESTABLE]) for k in kinds]
    return pl.DataFrame(
        {
            "__fill": [c[0] for c in colours],
            "__ink": [c[1] for c in colours],
            "__weight": ["bold" if k == SETTLED else "normal" for k in kinds],
        }
    )


def _render(gt: GT, *, nowrap: Sequence[str] = ()) -> str:
    """The table's HTML in the report's look: compact rows, left-aligned title, numbers
    and intervals (``nowrap``) kept on one line."""
    gt = gt.tab_options(
        table_font_size="13px",
        data_row_padding="3px",
        column_labels_font_weight="bold",
        heading_align="left",
        source_notes_font_size="12px",
        row_group_font_weight="bold",
        row_group_background_color="#f5f5f5",
    )
    if nowrap:
        gt = gt.tab_style(style.css("white-space: nowrap"), loc.body(columns=list(nowrap)))
    return strip_external_resources(gt.as_raw_html())


def _prepare(table: Table) -> tuple[pl.DataFrame, list[str]]:
    """The frame great-tables gets: rows cut to ``max_rows``, the group label, the bits
    columns, the kind colours; merged parts emptied where their main column is missing."""
    shown = table.frame.head(table.max_rows)
    group_by = [c for c in table.group_by if c in shown.columns]
    if group_by:
        shown = shown.with_columns(pl.Series("__group", group_labels(shown, group_by), dtype=pl.String)).drop(group_by)
    shown, bits = with_bits(table, shown)
    if table.kind_column is not None:
        shown = pl.concat([shown, _kind_colours(shown.get_column(table.kind_column).to_list())], how="horizontal")
    for target, pattern in table.merge.items():
        for name in set(re.findall(r"\{(\w+)\}", pattern)) - {target}:
            empty = pl.col(target).is_null() | (pl.col(name).cast(pl.String) == "")
            shown = shown.with_columns(pl.when(empty).then(None).otherwise(pl.col(name)).alias(name))
    return shown, bits


def _format_numbers(gt: GT, table: Table, shown: pl.DataFrame, bits: Sequence[str]) -> GT:
    """p-values as the terminal writes them, integers, percentages, fixed decimals (with a
    sign in the signed columns, in the ``signed_rows`` only when the table names them)."""
    signed = set(table.signed) | {f"{c}__bits" for c in table.signed}
    for low, high, _ in table.interval_pairs:
        if low in signed:
            signed.add(high)
    rows = pl.col(table.signed_rows) if table.signed_rows else None
    for column, dtype in shown.schema.items():
        if column.startswith("__") and column not in bits:
            continue
        percent = column in table.percent or column.removesuffix("_high") + "_low" in table.percent
        if "pvalue" in column and dtype.is_numeric():
            gt = gt.fmt(_pvalue_text, columns=column)
        elif dtype.is_integer():
            gt = gt.fmt_integer(column)
        elif percent and dtype.is_float():
            gt = gt.fmt_percent(column, decimals=1)
        elif dtype.is_float() and column in signed and rows is not None:
            gt = gt.fmt_number(column, rows=rows, decimals=table.decimals, force_sign=True)
            gt = gt.fmt_number(column, rows=~rows, decimals=table.decimals)
        elif dtype.is_float():
            gt = gt.fmt_number(column, decimals=table.decimals, force_sign=column in signed)
    return gt


def _merge_columns(gt: GT, table: Table, shown: pl.DataFrame) -> GT:
    """Intervals as ``[low, high]`` (``n/a`` without one) and the ``merge`` patterns; the
    missing text of every other shown column."""
    intervals = set()
    for low, high, _ in table.interval_pairs:
        intervals |= {low, high}
        gt = gt.cols_merge([low, high], pattern="<<[{0}, {1}]>>")
        missing = table.missing.get(low, MISSING_INTERVAL)
        gt = gt.text_transform(loc.body(columns=low), fn=lambda text, m=missing: text or m)
    for target, pattern in table.merge.items():
        names = [target, *dict.fromkeys(n for n in re.findall(r"\{(\w+)\}", pattern) if n != target)]
        gt_pattern = re.sub(r"\{(\w+)\}", lambda m, names=names: "{" + str(names.index(m.group(1))) + "}", pattern)
        gt = gt.cols_merge(names, pattern=gt_pattern)
    for column in shown.columns:
        if not column.startswith("__") and column not in intervals and column not in table.merged_away:
            gt = gt.sub_missing(column, missing_text=table.missing.get(column, MISSING))
    return gt


def _labels(gt: GT, table: Table, shown: pl.DataFrame, bits: Sequence[str]) -> GT:
    labels = {c: table.label(c) for c in table.shown_columns if c in shown.columns}
    for column in bits:
        base = column[: -len("__bits")]
        labels[base], labels[column] = table.units.get(base) or "value", "bits"
        gt = gt.tab_spanner(table.labels.get(base, LABELS.get(base, base.replace("_", " "))), columns=[base, column])
    gt = gt.cols_label(**labels)
    merged = {high for _, high, _ in table.interval_pairs} | table.merged_away  # cols_merge hides these
    hide = [c for c in shown.columns if c not in {*labels, *bits, *merged, "__group"}]
    return gt.cols_hide(hide) if hide else gt


def table_html(table: Table) -> str:
    """One table as great-tables HTML (see the module docstring)."""
    shown, bits = _prepare(table)
    stub = table.stub if table.stub in shown.columns else None
    gt = GT(
        shown, rowname_col=stub, groupname_col="__group" if "__group" in shown.columns else None, id=_table_id(table)
    )
    gt = _format_numbers(gt, table, shown, bits)
    gt = _merge_columns(gt, table, shown)
    gt = _labels(gt, table, shown, bits)
    if table.bold_rows is not None:
        gt = gt.tab_style(style.text(weight="bold"), loc.body(rows=pl.col(table.bold_rows)))
        if stub is not None:
            gt = gt.tab_style(style.text(weight="bold"), loc.stub(rows=pl.col(table.bold_rows)))
    if table.kind_column is not None:
        gt = gt.tab_style(
            style=[
                style.fill(color=from_column("__fill")),
                style.text(color=from_column("__ink"), weight=from_column("__weight")),
            ],
            locations=loc.body(columns=table.verdict_column),
        )
    gt = gt.cols_align("left", columns=[c for c in (table.verdict_column,) if c in table.shown_columns])
    if stub is not None:
        gt = gt.tab_stubhead(table.labels.get(stub, LABELS.get(stub, stub)))
    if table.title:
        gt = gt.tab_header(title=table.title)
    if table.caption:
        gt = gt.tab_source_note(table.caption)
    if table.kind_column is not None:
        gt = gt.tab_source_note(gt_html(f"Verdict colours: {kind_legend()}."))
    if table.frame.height > table.max_rows:
        gt = gt.tab_source_note(f"{table.frame.height - table.max_rows} more rows in the parquet table.")
    lows = {low for low, _, _ in table.interval_pairs}
    numeric = [c for c, t in shown.schema.items() if t.is_numeric() and not c.startswith("__")]
    nowrap = [c for c in numeric if c in table.shown_columns or c in lows or c in bits]
    return _render(gt, nowrap=nowrap)


# ----------------------------------------------------------------------------- page
def _figure_html(figure: Figure) -> str:
    data = base64.b64encode(figure.png).decode("ascii")
    img = f"<img alt='{html.escape(figure.name)}' src='data:image/png;base64,{data}'>"
    if not figure.caption:
        return img
    return f"<figure>{img}<figcaption>{inline_markdown(figure.caption)}</figcaption></figure>"


def _note_html(note: Note) -> str:
    return f"<p class='{'note' if note.kind == 'caution' else 'info'}'>{inline_markdown(note.text)}</p>"


def section_html(section: Section) -> str:
    """A section: its heading and its blocks in order."""
    parts = [f"<h2>{html.escape(section.title)}</h2>"]
    for block in section.blocks:
        if isinstance(block, Paragraph):
            parts.append(f"<p>{inline_markdown(block.text)}</p>")
        elif isinstance(block, Table):
            parts.append(table_html(block))
        elif isinstance(block, Figure):
            parts.append(_figure_html(block))
        elif isinstance(block, Note):
            parts.append(_note_html(block))
    return "\n".join(parts)


def render_html(
    document: Document, *, generated_by: str = "harness.report", sections: Sequence[str] | None = None
) -> str:
    """The document as one self-contained HTML page: the title, a line saying when and by
    what it was generated, each section, then the document's notes.

    Parameters
    ----------
    document : Document
        What to render.
    generated_by : str
        Named in the line under the title.
    sections : sequence of str, optional
        The keys of the sections to render, in the document's order; all by default.

    Returns
    -------
    str
        The page: CSS inline, figures as ``data:`` URIs, nothing loaded from anywhere
        (:func:`strip_external_resources`), so that MLflow's sandboxed preview shows it whole.
    """
    title = html.escape(document.title)
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>{title}</title><style>{_CSS}</style></head><body>",
        f"<h1>{title}</h1>",
        f"<p>Generated {time.strftime('%Y-%m-%d %H:%M:%S')} by {html.escape(generated_by)}.</p>",
    ]
    parts += [section_html(s) for s in document.select(sections)]
    if document.notes:
        items = "".join(
            f"<li class='{'note' if n.kind == 'caution' else 'info'}'>{inline_markdown(n.text)}</li>"
            for n in document.notes
        )
        parts.append(f"<h2>Notes</h2><ul>{items}</ul>")
    parts.append("</body></html>")
    return strip_external_resources("\n".join(parts))


__all__ = [
    "KIND_COLOURS",
    "inline_markdown",
    "kind_legend",
    "render_html",
    "section_html",
    "strip_external_resources",
    "table_html",
]
