"""The report's tables as HTML, rendered by great-tables (``great_tables.GT``) from polars frames.

Two renderers:

- :func:`verdict_table_html`: the verdict table at the top of the report. One row per
  headline question (``effect``, estimate with its unit, the interval, ``p (test)``,
  ``Holm p``, seeds, verdict); the primary hypothesis marked ``*`` and set in bold; each
  verdict cell coloured by its *kind* (:data:`~harness.analysis.results_types.VerdictKind`,
  a property the statistics set on the verdict object, never read back from its words):
  settled (the test supports the claim), not distinguishable (the test ran and supports no
  claim), not testable (too few seeds, zero spread).
- :func:`frame_table_html`: any other table of the report. Number formats follow the
  column names (``*pvalue*`` as p-values, ``X_low``/``X_high`` merged into one interval
  ``[low, high]``, integers as integers), units go into the column labels (``nats``, a
  ``bits`` column beside a loss), rows may be grouped (e.g. by cell), and a
  ``verdict_kind`` column colours the ``verdict`` column as in the verdict table.

The output is one ``<div>`` holding its own ``<style>`` (scoped by the table's id) and
the ``<table>``: no font, stylesheet or script is loaded from anywhere, so the report stays
one self-contained file (MLflow previews it in a sandboxed iframe that cannot load
anything else). :func:`strip_external_resources` removes any such reference a future
great-tables might add (``@import``, ``<link>``, ``<script src>``, ``url(http...)``).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import polars as pl
from great_tables import GT, from_column, html, loc, style

from harness.analysis.results_types import (
    NOT_DISTINGUISHABLE,
    NOT_TESTABLE,
    SETTLED,
    VERDICT_KINDS,
    format_pvalue,
)

if TYPE_CHECKING:  # report.py imports this module: no cycle at run time
    from harness.analysis.report import Verdict

#: Background and text colour of a verdict cell, by the verdict's kind.
KIND_COLOURS: dict[str, tuple[str, str]] = {
    SETTLED: ("#d8f0df", "#14532d"),
    NOT_DISTINGUISHABLE: ("#e9eef5", "#1f2937"),
    NOT_TESTABLE: ("#f1f1f1", "#6b6b6b"),
}

#: Column labels of the report's tables (any other column: its name, underscores as spaces).
LABELS: dict[str, str] = {
    "pvalue": "p",
    "pvalue_holm": "Holm p",
    "permutation_pvalue": "permutation p",
    "fisher_pvalue": "Fisher p (vs control)",
    "rank_pvalue": "rank-test p",
    "tost_max_pvalue": "TOST p (largest)",
    "tost_max_pvalue_holm": "TOST Holm p",
    "n_seeds": "seeds",
    "n_dropped": "dropped",
    "n_runs": "runs",
    "n_diverged": "diverged",
    "n_x": "levels",
    "seeds_now": "seeds now",
    "seed_sd": "seed sd",
    "centre_sigma": "centre σ",
    "nearest_scale": "nearest corpus scale",
    "rank_test": "rank test",
}

#: Interval columns ``<prefix>_low`` / ``<prefix>_high``: the label of the merged column.
INTERVAL_LABELS: dict[str, str] = {
    "ci": "{level} CI",
    "boot": "bootstrap CI",
    "sd_ci": "sd {level} CI",
    "seeds_needed": "range",
}


def loss_unit(metric: str) -> str:
    """The unit of a metric's values: ``nats`` for a loss (mean cross-entropy), else ``""``."""
    return "nats" if metric.endswith("loss") else ""


def _table_id(prefix: str, df: pl.DataFrame, *extra: Any) -> str:
    """A stable id (the table's CSS is scoped by it): the same table renders the same page."""
    digest = hashlib.sha1(repr((df.columns, df.rows()[:50], df.height, extra)).encode()).hexdigest()[:10]
    return f"{prefix}-{digest}"


def _pvalue_text(p: Any) -> Any:
    """A p-value as the terminal writes it (``format_pvalue``); missing stays missing."""
    return None if p is None or (isinstance(p, float) and math.isnan(p)) else format_pvalue(float(p))


def _kind_colours(kinds: pl.Series) -> pl.DataFrame:
    fill = [KIND_COLOURS.get(k, KIND_COLOURS[NOT_TESTABLE])[0] for k in kinds.to_list()]
    ink = [KIND_COLOURS.get(k, KIND_COLOURS[NOT_TESTABLE])[1] for k in kinds.to_list()]
    return pl.DataFrame({"__fill": fill, "__ink": ink})


def _colour_verdicts(gt: GT, column: str = "verdict") -> GT:
    """Colour ``column`` by the hidden ``__fill`` / ``__ink`` columns (one per row)."""
    return gt.tab_style(
        style=[style.fill(color=from_column("__fill")), style.text(color=from_column("__ink"))],
        locations=loc.body(columns=column),
    ).cols_hide(["__fill", "__ink"])


def kind_legend() -> str:
    """The colour key of the verdict kinds (HTML)."""
    items = []
    for kind, meaning in VERDICT_KINDS.items():
        fill, ink = KIND_COLOURS[kind]
        items.append(
            f"<span style='background:{fill};color:{ink};padding:0 .35em;border-radius:3px'>{kind}</span>: {meaning}"
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


# ----------------------------------------------------------------------------- verdicts
def verdict_frame(verdicts: Sequence[Verdict]) -> pl.DataFrame:
    """The verdict table's data, one row per verdict (what :func:`verdict_table_html` renders)."""
    rows = []
    for v in verdicts:
        ci = v.confidence_interval
        finite = v.estimate is not None and math.isfinite(float(v.estimate))
        rows.append(
            {
                "effect": f"{v.effect} *" if v.role == "primary" else v.effect,
                "estimate": float(v.estimate) if finite else None,
                "unit": v.unit,
                "ci_low": None if ci is None else float(ci.low),
                "ci_high": None if ci is None else float(ci.high),
                "pvalue": v.pvalue,
                "test": v.test,
                "pvalue_holm": v.pvalue_holm,
                "n_seeds": v.n_seeds,
                "verdict": v.verdict,
                "kind": v.kind,
                "signed": v.signed,
                "primary": v.role == "primary",
            }
        )
    schema = {
        "effect": pl.String,
        "estimate": pl.Float64,
        "unit": pl.String,
        "ci_low": pl.Float64,
        "ci_high": pl.Float64,
        "pvalue": pl.Float64,
        "test": pl.String,
        "pvalue_holm": pl.Float64,
        "n_seeds": pl.Int64,
        "verdict": pl.String,
        "kind": pl.String,
        "signed": pl.Boolean,
        "primary": pl.Boolean,
    }
    return pl.DataFrame(rows, schema=schema)


def verdict_table_html(
    verdicts: Sequence[Verdict], *, confidence: float = 0.95, title: str = "", footer: str = ""
) -> str:
    """The verdict table as a great-tables HTML table (see the module docstring)."""
    frame = verdict_frame(verdicts)
    if frame.height == 0:
        return "<p class='note'>No verdict: no headline question could be computed from this table.</p>"
    frame = pl.concat([frame, _kind_colours(frame.get_column("kind"))], how="horizontal")
    numbers = ["estimate", "ci_low", "ci_high"]
    gt = (
        GT(frame, rowname_col="effect", id=_table_id("verdicts", frame, confidence, title))
        .fmt_number(numbers, rows=pl.col("signed"), decimals=4, force_sign=True)
        .fmt_number(numbers, rows=~pl.col("signed"), decimals=4)
        .fmt(_pvalue_text, columns=["pvalue", "pvalue_holm"])
        .fmt_integer("n_seeds")
        .cols_merge(["ci_low", "ci_high"], pattern="<<[{0}, {1}]>>")
        .cols_merge(["pvalue", "test"], pattern="<<{0} ({1})>>")
        .text_transform(loc.body(columns=["ci_low", "pvalue"]), fn=lambda text: text or "n/a")
        .sub_missing(["estimate", "n_seeds"], missing_text="n/a")
        .sub_missing(["pvalue_holm", "unit"], missing_text="")
        .cols_label(
            estimate="estimate",
            unit="unit",
            ci_low=f"{confidence:.0%} CI",
            pvalue="p (test)",
            pvalue_holm="Holm p",
            n_seeds="seeds",
            verdict="verdict",
        )
        .cols_align("left", columns=["unit", "verdict"])
        .tab_stubhead("effect")
        .tab_style(style.text(weight="bold"), loc.body(rows=pl.col("primary")))
        .tab_style(style.text(weight="bold"), loc.stub(rows=pl.col("primary")))
        .cols_hide(["kind", "signed", "primary"])
    )
    gt = _colour_verdicts(gt)
    if title:
        gt = gt.tab_header(title=title)
    if footer:
        gt = gt.tab_source_note(footer)
    gt = gt.tab_source_note(html(f"Verdict colours: {kind_legend()}."))
    return _render(gt, nowrap=["estimate", "ci_low", "pvalue", "pvalue_holm"])


# ----------------------------------------------------------------------------- any table
def _interval_pairs(columns: Sequence[str]) -> list[tuple[str, str, str]]:
    """``(low, high, prefix)`` for every ``<prefix>_low`` with its ``<prefix>_high``."""
    out = []
    for c in columns:
        if c.endswith("_low") and (high := f"{c[: -len('_low')]}_high") in columns:
            out.append((c, high, c[: -len("_low")]))
    return out


def _label(column: str, units: Mapping[str, str]) -> str:
    label = LABELS.get(column, column.replace("_", " "))
    unit = units.get(column)
    return f"{label} ({unit})" if unit else label


def _group_labels(df: pl.DataFrame, group_by: Sequence[str]) -> pl.Series:
    """``tinyshakespeare / nano / T=128``: one label per row from the grouping columns."""
    labels = []
    for row in df.select(group_by).iter_rows():
        parts = [f"T={v}" if c == "context_length" else str(v) for c, v in zip(group_by, row, strict=True)]
        labels.append(" / ".join(parts))
    return pl.Series("__group", labels, dtype=pl.String)


def _with_bits(df: pl.DataFrame, bits: Sequence[str]) -> tuple[pl.DataFrame, list[str]]:
    """A ``<column>__bits`` column (the value / ln 2) right after each column of ``bits``."""
    added = []
    for column in bits:
        if column in df.columns and df.schema[column].is_numeric():
            at = df.columns.index(column) + 1
            df = df.insert_column(at, (df.get_column(column) / math.log(2)).alias(f"{column}__bits"))
            added.append(f"{column}__bits")
    return df, added


def frame_table_html(
    df: pl.DataFrame,
    *,
    units: Mapping[str, str] | None = None,
    signed: Sequence[str] = (),
    percent: Sequence[str] = (),
    bits: Sequence[str] = (),
    group_by: Sequence[str] = (),
    stub: str | None = None,
    confidence: float = 0.95,
    decimals: int = 4,
    title: str = "",
    max_rows: int = 200,
) -> str:
    """Render a report table with great-tables.

    Parameters
    ----------
    df : polars.DataFrame
        The table as the report keeps it (the parquet file holds the same columns).
    units : mapping column -> unit, optional
        Shown in the column label, e.g. ``{"estimate": "nats"}``.
    signed : columns
        Numbers shown with their sign (effects, slopes); an interval follows its low column.
    percent : columns
        Fractions shown as percentages (rates, weights).
    bits : columns
        Loss columns (nats) that get a ``bits`` column beside them (value / ln 2), both
        under a spanner with the column's label.
    group_by : columns
        Rows grouped under one heading per distinct value (e.g. the cell columns); the
        columns themselves are not repeated.
    stub : column, optional
        The row label column (default: ``effect`` or ``variant`` when present).
    confidence : float
        The level written in the label of a ``ci_low``/``ci_high`` interval.
    max_rows : int
        Rows shown; a note says how many more the parquet table holds.
    """
    units = dict(units or {})
    shown = df.head(max_rows)
    group_by = [c for c in group_by if c in shown.columns]
    if group_by:
        shown = shown.with_columns(_group_labels(shown, group_by)).drop(group_by)
    shown, bits_columns = _with_bits(shown, bits)
    kinds = "verdict_kind" in shown.columns and "verdict" in shown.columns
    if kinds:
        shown = pl.concat([shown, _kind_colours(shown.get_column("verdict_kind"))], how="horizontal")
    stub = stub or next((c for c in ("effect", "variant", "factor") if c in shown.columns), None)
    gt = GT(
        shown,
        rowname_col=stub,
        groupname_col="__group" if group_by else None,
        id=_table_id("table", df, tuple(units.items()), tuple(group_by), title),
    )
    intervals = _interval_columns(shown)  # merged and labelled by _merge_intervals
    gt = _format_numbers(
        gt, shown, signed=signed, percent=percent, decimals=decimals, bits_columns=bits_columns, intervals=intervals
    )
    gt = _merge_intervals(gt, shown, confidence=confidence, units=units)
    labels = {c: _label(c, units) for c in shown.columns if not c.startswith("__") and c not in intervals}
    for column in bits_columns:
        base = column[: -len("__bits")]
        labels[base], labels[column] = units.get(base) or "value", "bits"
        gt = gt.tab_spanner(LABELS.get(base, base.replace("_", " ")), columns=[base, column])
    gt = gt.cols_label(**{c: t for c, t in labels.items() if c in shown.columns})
    if kinds:
        gt = _colour_verdicts(gt).cols_hide("verdict_kind")
    if stub is not None:
        gt = gt.tab_stubhead(LABELS.get(stub, stub))
    if title:
        gt = gt.tab_header(title=title)
    if df.height > max_rows:
        gt = gt.tab_source_note(f"{df.height - max_rows} more rows in the parquet table.")
    numeric = [c for c, t in shown.schema.items() if t.is_numeric() and not c.startswith("__")]
    return _render(gt, nowrap=[c for c in numeric if c not in intervals or c.endswith("_low")])


def _format_numbers(
    gt: GT,
    shown: pl.DataFrame,
    *,
    signed: Sequence[str],
    percent: Sequence[str],
    decimals: int,
    bits_columns: Sequence[str],
    intervals: set[str],
) -> GT:
    """p-values as the terminal writes them, integers, percentages, fixed decimals; a
    missing value as a dash, except in the ``intervals`` columns (merged as ``n/a``)."""
    signed_all = set(signed) | {f"{c}__bits" for c in signed}
    for low, high, _ in _interval_pairs(shown.columns):  # an interval is signed when its low end is
        if low in signed_all:
            signed_all.add(high)
    for column, dtype in shown.schema.items():
        if column.startswith("__") and column not in bits_columns:
            continue
        if "pvalue" in column and dtype.is_numeric():
            gt = gt.fmt(_pvalue_text, columns=column)
        elif dtype.is_integer():
            gt = gt.fmt_integer(column)
        elif column in percent and dtype.is_float():
            gt = gt.fmt_percent(column, decimals=1)
        elif dtype.is_float():
            gt = gt.fmt_number(column, decimals=decimals, force_sign=column in signed_all)
    other = [c for c in shown.columns if not c.startswith("__") and c not in intervals]
    return gt.sub_missing(other, missing_text="–")


def _interval_columns(shown: pl.DataFrame) -> set[str]:
    return {c for low, high, _ in _interval_pairs(shown.columns) for c in (low, high)}


def _merge_intervals(gt: GT, shown: pl.DataFrame, *, confidence: float, units: Mapping[str, str]) -> GT:
    """Each ``X_low``/``X_high`` pair as one ``[low, high]`` column (``n/a`` without one)."""
    for low, high, prefix in _interval_pairs(shown.columns):
        gt = gt.cols_merge([low, high], pattern="<<[{0}, {1}]>>")
        gt = gt.text_transform(loc.body(columns=low), fn=lambda text: text or "n/a")
        label = INTERVAL_LABELS.get(prefix, f"{prefix.replace('_', ' ')} interval").format(level=f"{confidence:.0%}")
        unit = units.get(low) or units.get(prefix)
        gt = gt.cols_label(**{low: f"{label} ({unit})" if unit else label})
    return gt


__all__ = [
    "INTERVAL_LABELS",
    "KIND_COLOURS",
    "LABELS",
    "frame_table_html",
    "kind_legend",
    "loss_unit",
    "strip_external_resources",
    "verdict_frame",
    "verdict_table_html",
]
