"""A :class:`~harness.report.document.Table` as rows of text, for the text renderers
(markdown and terminal); the HTML renderer formats the same rules with great-tables.

Rules (the module docstring of :mod:`harness.report.document`): p-values as
:func:`~harness.analysis.results_types.format_pvalue` writes them, integers as integers,
percent columns as ``12.5%``, floats with the table's decimals (signed columns with their
sign), ``X_low``/``X_high`` as ``[low, high]`` (``n/a`` when missing), ``merge`` patterns
filled in, a missing value as the table's ``missing`` text (default ``–``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import polars as pl

from harness.analysis.results_types import format_pvalue
from harness.report.document import LABELS, Table

#: The text of a missing value, unless the table says otherwise.
MISSING = "–"
#: The text of a missing interval.
MISSING_INTERVAL = "n/a"


@dataclass(frozen=True)
class TextTable:
    """A table as text: ``labels`` of the shown columns, one list of cell texts per row,
    each row's verdict kind and boldness, where the stub and the verdict are (indices into
    ``labels``, None when absent), which columns hold numbers (right-aligned), and how many
    rows were left out (``more``)."""

    labels: list[str]
    rows: list[list[str]]
    kinds: list[str | None]
    bold: list[bool]
    stub: int | None
    verdict: int | None
    numeric: list[bool]
    more: int


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or value == ""


def _signed_columns(table: Table) -> set[str]:
    signed = set(table.signed) | {f"{c}__bits" for c in table.signed}
    for low, high, _ in table.interval_pairs:  # an interval is signed when its low end is
        if low in signed:
            signed.add(high)
    return signed


def _number_text(table: Table, column: str, dtype: pl.DataType, value: Any, signed: bool) -> str:
    if "pvalue" in column and dtype.is_numeric():
        return format_pvalue(float(value))
    if dtype.is_integer():
        return str(int(value))
    if dtype.is_float():
        if column in table.percent or column.removesuffix("_high") + "_low" in table.percent:
            return f"{100 * float(value):.1f}%"
        return f"{float(value):{'+' if signed else ''}.{table.decimals}f}"
    return str(value)


def _plain_text(table: Table, frame: pl.DataFrame, column: str, row: dict[str, Any], signed_row: bool) -> str:
    value = row[column]
    if _missing(value):
        return table.missing.get(column, MISSING)
    signed = signed_row and column in _signed_columns(table)
    return _number_text(table, column, frame.schema[column], value, signed)


def _merged(table: Table, frame: pl.DataFrame, column: str, row: dict[str, Any], signed_row: bool) -> str:
    """``column`` shown through its ``merge`` pattern; a ``<<...>>`` part is left out when
    a column in it is missing, the whole cell is missing when ``column`` itself is."""
    if _missing(row[column]):
        return table.missing.get(column, MISSING)

    def fill(part: str) -> str | None:
        names = re.findall(r"\{(\w+)\}", part)
        if any(_missing(row[n]) for n in names):
            return None
        return re.sub(r"\{(\w+)\}", lambda m: _plain_text(table, frame, m.group(1), row, signed_row), part)

    out = []
    for optional, plain in re.findall(r"<<(.*?)>>|([^<]+|<)", table.merge[column]):
        text = fill(optional or plain)
        if text is not None:
            out.append(text)
        elif not optional:
            return table.missing.get(column, MISSING)
    return "".join(out)


def _interval_text(table: Table, frame: pl.DataFrame, low: str, high: str, row: dict, signed_row: bool) -> str:
    if _missing(row[low]) or _missing(row[high]):
        return table.missing.get(low, MISSING_INTERVAL)
    return f"[{_plain_text(table, frame, low, row, signed_row)}, {_plain_text(table, frame, high, row, signed_row)}]"


def with_bits(table: Table, frame: pl.DataFrame) -> tuple[pl.DataFrame, list[str]]:
    """A ``<column>__bits`` column (the value / ln 2) right after each of ``table.bits``."""
    added = []
    for column in table.bits:
        if column in frame.columns and frame.schema[column].is_numeric():
            at = frame.columns.index(column) + 1
            frame = frame.insert_column(at, (frame.get_column(column) / math.log(2)).alias(f"{column}__bits"))
            added.append(f"{column}__bits")
    return frame, added


def group_labels(frame: pl.DataFrame, group_by: list[str]) -> list[str]:
    """``tinyshakespeare / nano / T=128``: one label per row from the grouping columns."""
    labels = []
    for row in frame.select(group_by).iter_rows():
        parts = [f"T={v}" if c == "context_length" else str(v) for c, v in zip(group_by, row, strict=True)]
        labels.append(" / ".join(parts))
    return labels


def text_table(table: Table, *, max_rows: int | None = None) -> TextTable:
    """The table's shown columns as text (see the module docstring); ``max_rows``
    (default: the table's) rows at most."""
    limit = table.max_rows if max_rows is None else min(max_rows, table.max_rows)
    frame = table.frame.head(limit)
    frame, bits = with_bits(table, frame)
    lows = {low: high for low, high, _ in table.interval_pairs}
    columns = []
    for c in table.shown_columns:
        columns.append(c)
        if f"{c}__bits" in bits:
            columns.append(f"{c}__bits")
    group_by = [c for c in table.group_by if c in frame.columns]
    groups = group_labels(frame, group_by) if group_by else None
    labels = [_bits_label(table, c) if c.endswith("__bits") else table.label(c) for c in columns]
    rows = []
    for i, row in enumerate(frame.iter_rows(named=True)):
        signed_row = True if table.signed_rows is None else bool(row[table.signed_rows])
        cells = []
        for c in columns:
            if c in lows:
                cells.append(_interval_text(table, frame, c, lows[c], row, signed_row))
            elif c in table.merge:
                cells.append(_merged(table, frame, c, row, signed_row))
            else:
                cells.append(_plain_text(table, frame, c, row, signed_row))
        rows.append(([groups[i]] if groups else []) + cells)
    numeric = [frame.schema[c].is_numeric() for c in columns]
    if groups:
        labels, numeric = ["cell", *labels], [False, *numeric]
    shift = 1 if groups else 0
    return TextTable(
        labels=labels,
        rows=rows,
        kinds=table.kinds()[:limit],
        bold=frame.get_column(table.bold_rows).fill_null(False).to_list() if table.bold_rows else [False] * len(rows),
        stub=columns.index(table.stub) + shift if table.stub in columns else None,
        verdict=columns.index(table.verdict_column) + shift if table.verdict_column in columns else None,
        numeric=numeric,
        more=table.frame.height - frame.height,
    )


def _bits_label(table: Table, column: str) -> str:
    base = column[: -len("__bits")]
    return f"{table.labels.get(base, LABELS.get(base, base.replace('_', ' ')))} (bits)"


__all__ = ["MISSING", "MISSING_INTERVAL", "TextTable", "group_labels", "text_table", "with_bits"]
