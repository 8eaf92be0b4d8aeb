"""The scorecard's sections on predictions at the papers' size and on training, and how its
tables write a number (:func:`value_text`).

``predicted``: one row per claim, reading, study and group of sizes (the papers' parameter
count, how far beyond the largest size measured, the steps trained, the prediction and its
interval, or why it was not made), with a figure per claim. ``training``: one row per curve
(claim, reading, study, cell, initial value of tau) with its last step's estimate, its final
kind and since which step it has not changed, with a figure per claim.
"""

from __future__ import annotations

import polars as pl

from harness.report.document import Paragraph, Section, Table
from harness.scorecard.figures import prediction_figures, training_figures


def value_text(value: float | None, metric: str | None, sign: str | None) -> str | None:
    """A row's number as the tables show it: a parameter bound as a percentage ("0.26 %"), a
    count as a whole number ("12,480"), any other value with its sign and 4 decimals."""
    if value is None or value != value:
        return None
    if metric == "parameters" and sign == "<":
        return f"{100 * value:.3g} %"
    if metric in ("parameters", "clusters"):
        return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.2f}"
    return f"{value:+.4f}"


def paper_text(value: float | None, metric: str | None, sign: str | None) -> str | None:
    """The paper's number as :func:`value_text` writes it, a bound with its "<"."""
    text = value_text(value, metric, sign)
    return None if text is None else f"< {text}" if sign == "<" else text


def texts(rows: pl.DataFrame, column: str) -> list[str | None]:
    """:func:`value_text` of ``column`` in every row (each row's own metric and sign; the
    paper's value with its bound: :func:`paper_text`)."""
    write = paper_text if column == "paper_value" else value_text
    return [write(r[column], r["metric"], r["sign"]) for r in rows.iter_rows(named=True)]


PREDICTED_WORDS = (
    "Where one study measured a claim at three or more sizes (cells that differ only in size), each seed's "
    "effect is fitted by least squares against log2(parameters) and read at the papers' parameter count (the "
    "claim's reference variant built at the papers' size with the study's vocabulary); the interval is the "
    "t-interval over seeds of those per-seed predictions, judged by the claim's own rules. It is "
    "**extrapolated, not measured**: at the study's step count, not the papers' 5,000 unless the study trained "
    "them, and only as good as the log-linear shape. **not predictable** says why none was made: fewer than "
    "three sizes, the papers' size more than 16x the largest measured, or a failed backtest (the line from the "
    "smaller sizes misses the largest size's measured effect: the 95 % t-interval over seeds of the per-seed "
    "errors excludes 0). The backtest catches strong curvature only: docs/calibration.md gives its rates."
)


def predicted_section(table: pl.DataFrame) -> Section | None:
    """The predictions at the papers' size (None when the table has none)."""
    rows = table.filter(pl.col("kind") == "predicted")
    if rows.height == 0:
        return None
    frame = pl.DataFrame(
        {
            "claim": rows.get_column("claim"),
            "reading": rows.get_column("reading"),
            "study": rows.get_column("study"),
            "cell": [f"{r['dataset']}/T={r['context_length']}" for r in rows.iter_rows(named=True)],
            "sizes": rows.get_column("levels"),
            "steps": rows.get_column("steps"),
            "params": [None if p is None else f"{p / 1e6:.2f}M" for p in rows.get_column("params").to_list()],
            "extrapolation": [None if x is None else f"{x:.1f}x" for x in rows.get_column("extrapolation")],
            "paper": texts(rows, "paper_value"),
            "estimate": texts(rows, "estimate"),
            "ci_low": rows.get_column("ci_low"),
            "ci_high": rows.get_column("ci_high"),
            "n_seeds": rows.get_column("n_seeds"),
            "verdict": rows.get_column("verdict"),
            "__kind": rows.get_column("settled"),
        }
    )
    table_block = Table(
        frame,
        kind_column="__kind",
        stub="claim",
        signed=("ci_low",),
        max_rows=300,
        labels={"paper": "paper's value", "estimate": "predicted", "params": "at parameters"},
    )
    blocks = [Paragraph(PREDICTED_WORDS), table_block, *prediction_figures(table)]
    return Section("predicted", "At the papers' size: extrapolated, not measured", tuple(blocks))


TRAINING_WORDS = (
    "Every claim read at every evaluation step of every cell (the curves table), paired over seeds, with the "
    "same readers, intervals, margins and rules as the final numbers. The steps are one curve, not many tests: "
    "each step is adjusted within its claim's family as the cell's final row is, never across steps, and the "
    "verdict of record is the final row's. *Since* is the step from which the verdict kind has not changed: a "
    "kind reached only at the last evaluation is one that more training could still change."
)


def training_section(table: pl.DataFrame) -> Section | None:
    """One row per curve (its last step) and a figure per claim (None without training rows)."""
    rows = table.filter(pl.col("kind") == "training")
    if rows.height == 0:
        return None
    curve = ["claim", "reading", "study", "dataset", "size", "context_length", "group"]
    last = rows.sort("step").group_by(curve, maintain_order=True).last()
    frame = pl.DataFrame(
        {
            "claim": last.get_column("claim"),
            "reading": last.get_column("reading"),
            "study": last.get_column("study"),
            "cell": [
                f"{r['dataset']}/{r['size']}/T={r['context_length']}" + (f" ({r['group']})" if r["group"] else "")
                for r in last.iter_rows(named=True)
            ],
            "step": last.get_column("step"),
            "estimate": texts(last, "estimate"),
            "ci_low": last.get_column("ci_low"),
            "ci_high": last.get_column("ci_high"),
            "n_seeds": last.get_column("n_seeds"),
            "verdict": last.get_column("where"),
            "__kind": last.get_column("settled"),
        }
    )
    table_block = Table(
        frame,
        kind_column="__kind",
        stub="claim",
        signed=("ci_low",),
        max_rows=300,
        labels={"verdict": "kind, and since when"},
    )
    blocks = [Paragraph(TRAINING_WORDS), table_block, *training_figures(table)]
    return Section("training", "Over training", tuple(blocks))


__all__ = [
    "PREDICTED_WORDS",
    "TRAINING_WORDS",
    "paper_text",
    "predicted_section",
    "texts",
    "training_section",
    "value_text",
]
