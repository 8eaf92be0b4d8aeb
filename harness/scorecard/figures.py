"""The scorecard's figures, drawn from its table alone (:mod:`harness.report.plots_training`):

- per claim read over training, its effect (or level) against the training step with the 95 %
  band, the paper's value (a level: its band) as a line, one panel per study and cell, one
  curve per reading and initial value of tau (``training-<claim>.png``; for tau's claim these
  are tau's curves per initial value);
- per claim predicted from three or more sizes, its effect against the parameter count with
  each size's 95 % interval (one curve per study and reading, at that study's steps), the
  prediction at the papers' size and steps with its interval and the surface's slope against
  size there, one panel per pool of studies and group; a refused prediction shows the sizes and
  says why (``predicted-<claim>.png``).
"""

from __future__ import annotations

from typing import Any

import polars as pl

from harness.analysis.results import cell_label
from harness.report.document import Figure
from harness.report.plots_training import (
    Curve,
    Extrapolation,
    Panel,
    Reference,
    over_training_plot,
    prediction_plot,
)

_CELL = ("dataset", "size", "context_length")


def _reference(row: dict[str, Any]) -> Reference | None:
    """The paper's value (a level: its band) from a row of the claim."""
    value, band = row.get("paper_value"), row.get("band")
    if value is None:
        return None
    if band is not None:
        return Reference(f"paper {value:g} ± {band:g}", value, value - band, value + band)
    return Reference(f"paper {value:+g}", value)


def _ylabel(row: dict[str, Any]) -> str:
    metric = row.get("metric") or "value"
    if row.get("band") is not None:
        return metric
    return f"gain in {metric}" if metric != "tail" else "open fraction - Gaussian tail"


def _short(reading: str) -> str:
    return reading.split(" (")[0]


def _training_panels(rows: pl.DataFrame) -> list[Panel]:
    panels = []
    keys = ["study", *_CELL]
    rows = rows.sort(["study", "dataset", "params", "context_length"], nulls_last=True, maintain_order=True)
    for key, part in rows.partition_by(keys, as_dict=True, maintain_order=True).items():
        curves = []
        for (reading, group), curve in part.partition_by(
            ["reading", "group"], as_dict=True, maintain_order=True
        ).items():
            curve = curve.sort("step")
            last = curve.row(curve.height - 1, named=True)
            since = f" since step {last['stable_from']:,}" if last.get("stable_from") is not None else ""
            label = f"{_short(reading)}{f', {group}' if group else ''}: {last['verdict_kind']}{since}"
            curves.append(
                Curve(
                    label,
                    curve["step"].to_list(),
                    curve["estimate"].to_list(),
                    curve["ci_low"].to_list(),
                    curve["ci_high"].to_list(),
                )
            )
        title = f"{key[0]}: {cell_label(_CELL, list(key[1:]))}"
        panels.append(Panel(title, curves))
    return panels


def training_figures(table: pl.DataFrame) -> list[Figure]:
    """One figure per claim read over training (see the module docstring)."""
    rows = table.filter((pl.col("kind") == "training") & pl.col("estimate").is_not_null())
    figures = []
    for (claim,), part in rows.partition_by("claim", as_dict=True, maintain_order=True).items():
        first = part.row(0, named=True)
        png = over_training_plot(
            _training_panels(part),
            title=f"{claim} over training: {first['statement']}",
            ylabel=_ylabel(first),
            reference=_reference(first),
            zero=first.get("band") is None,
        )
        caption = (
            f"**{claim}** at every evaluation step (95 % band over seeds; the paper's value as a line). The "
            "legend gives each curve's final verdict kind and the step from which it no longer changed."
        )
        figures.append(Figure(f"training-{claim}", png, caption))
    return figures


def _size_curve(cells: pl.DataFrame, label: str) -> Curve:
    cells = cells.sort("params")
    return Curve(
        label,
        cells["params"].to_list(),
        cells["estimate"].to_list(),
        cells["ci_low"].to_list(),
        cells["ci_high"].to_list(),
    )


def _prediction_panels(claim_rows: pl.DataFrame, predicted: pl.DataFrame) -> list[Panel]:
    """One panel per pool of studies and group: each study's cells against size (one curve per
    reading and study, labelled with its steps) and the prediction at the papers' size and steps."""
    panels = []
    cells = claim_rows.filter((pl.col("kind") == "cell") & pl.col("group").is_null())
    for key, part in predicted.partition_by(
        ["study", "dataset", "context_length"], as_dict=True, maintain_order=True
    ).items():
        curves, predictions, notes = [], [], []
        members = str(key[0]).split(" + ")
        for row in part.iter_rows(named=True):
            mine = cells.filter(
                pl.col("study").is_in(members)
                & (pl.col("dataset") == key[1])
                & (pl.col("context_length") == key[2])
                & (pl.col("reading") == row["reading"])
            )
            added = 0
            for (study,), measured in mine.partition_by(["study"], as_dict=True, maintain_order=True).items():
                steps = measured.get_column("steps").drop_nulls()
                at = f", {int(steps.max()):,} steps" if steps.len() else ""
                curves.append(_size_curve(measured, f"{_short(row['reading'])} ({study}{at}): {row['verdict_kind']}"))
                predictions.append(None)
                added += 1
            if row["verdict_kind"] == "not predictable" or not added:
                notes.append(f"{_short(row['reading'])}: {row['verdict']}")
                continue
            predictions[-1] = Extrapolation(row["params"], row["estimate"], row["ci_low"], row["ci_high"], row["slope"])
        title = f"{key[0]}: {cell_label(('dataset', 'context_length'), list(key[1:]))}"
        if curves:  # a panel needs a measured size to draw on its log axis
            panels.append(Panel(title, curves, predictions, "; ".join(notes)))
    return panels


def prediction_figures(table: pl.DataFrame) -> list[Figure]:
    """One figure per claim predicted from three or more sizes (see the module docstring)."""
    predicted = table.filter((pl.col("kind") == "predicted") & (pl.col("levels").fill_null(0) >= 3))
    figures = []
    for (claim,), part in predicted.partition_by("claim", as_dict=True, maintain_order=True).items():
        first = part.row(0, named=True)
        panels = _prediction_panels(table.filter(pl.col("claim") == claim), part)
        if not panels:
            continue
        png = prediction_plot(
            panels,
            title=f"{claim} against size, predicted at the papers' size and steps (extrapolated, not measured)",
            ylabel=_ylabel(first),
            reference=_reference(first),
        )
        caption = (
            f"**{claim}**: each size's effect at the end of each study's runs with its 95 % interval (one curve "
            "per study: its steps in the legend), and the prediction at the papers' size and training steps with "
            "its 95 % interval (◇), with the surface's slope against log2(parameters) at those steps (dashed)."
        )
        figures.append(Figure(f"predicted-{claim}", png, caption))
    return figures


__all__ = ["prediction_figures", "training_figures"]
