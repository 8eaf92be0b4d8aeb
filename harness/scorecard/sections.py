"""The scorecard's sections on predictions at the papers' size and on training, and how its
tables write a number (:func:`value_text`).

``predicted``: one row per claim, reading, pool of studies and group (the papers' parameter
count and steps, how far beyond the largest size and the last evaluation measured, the
prediction and its interval, or why it was not made, and its own calibration), with a figure
per claim. ``training``: one row per curve
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


def _reach(x: float | None) -> str | None:
    """How far beyond the measured an axis reaches: "5.9x", or "within"."""
    return None if x is None else f"{x:.1f}x" if x > 1.0 else "within"


PREDICTED_WORDS = (
    "Each effect predicted at the papers' setting on both axes it extrapolates: their size (4.76 M parameters, "
    "the claim's reference variant built at the papers' size with the study's vocabulary) and their training steps "
    "(5,000). Each seed's effect is fitted by least squares as a surface in log2(parameters) and log2(steps) over "
    "every evaluation of the curves of the studies read that share a recipe (seeds matched by number), with an "
    "offset at a run's last evaluation (the learning rate's cosine ends there, and the papers' 5,000 steps are the "
    "end of a run), and read there; the interval is the t-interval over seeds of those per-seed predictions, judged "
    "by the claim's own rules. It is **extrapolated, not measured**, at the context length measured (the papers' "
    "T = 256 is not extrapolated), and only as good as the surface's shape. **not predictable** says why none was "
    "made: fewer than three sizes or three evaluation steps on an axis it extrapolates, the size more than 16x "
    "beyond the largest measured or the steps more than 4x beyond the last evaluation, a failed backtest on either "
    "axis (without the largest size; without the later half of the steps) or a curvature distinguishable from 0. "
    "The last column is this prediction's own calibration: studies of its own design simulated at the noise "
    "measured in it, under log-linear, curved, saturating and emergent truths, through the same rules "
    "(docs/calibration.md gives the published ladder's)."
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
            "params": [None if p is None else f"{p / 1e6:.2f}M" for p in rows.get_column("params").to_list()],
            "steps": rows.get_column("steps"),
            "extrapolation": [_reach(x) for x in rows.get_column("extrapolation")],
            "steps_x": [_reach(x) for x in rows.get_column("steps_extrapolation")],
            "paper": texts(rows, "paper_value"),
            "estimate": texts(rows, "estimate"),
            "ci_low": rows.get_column("ci_low"),
            "ci_high": rows.get_column("ci_high"),
            "n_seeds": rows.get_column("n_seeds"),
            "verdict": rows.get_column("verdict"),
            "calibration": rows.get_column("calibration"),
            "__kind": rows.get_column("settled"),
        }
    )
    table_block = Table(
        frame,
        kind_column="__kind",
        stub="claim",
        signed=("ci_low",),
        max_rows=300,
        labels={
            "paper": "paper's value",
            "estimate": "predicted",
            "params": "at parameters",
            "steps": "at steps",
            "steps_x": "beyond the last step",
            "extrapolation": "beyond the largest size",
            "calibration": "this design at this noise, simulated",
        },
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
