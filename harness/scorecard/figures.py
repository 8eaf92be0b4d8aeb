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
    axis_label,
    over_training_figure,
    png_bytes,
)
from harness.report.plots_training import prediction_figure as prediction_plot_figure

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
    """The axis in words and unit: a gain's metric (``gain in validation loss (nats)``) or a
    level's name (``learned tau (mean over heads)``)."""
    return axis_label(row.get("metric"), gain=row.get("band") is None)


def _paper_words(row: dict[str, Any]) -> str:
    value, band = row.get("paper_value"), row.get("band")
    if value is None:
        return ""
    return f" (papers: {value:g} ± {band:g})" if band is not None else f" (papers: {value:+.3g})"


def _counted(kinds: list[str]) -> str:
    """``inconclusive in every cell`` or ``2 inconclusive, 1 not resolvable``."""
    counts = {k: kinds.count(k) for k in dict.fromkeys(kinds)}
    if len(counts) == 1:
        return f"{kinds[0]} in {'every cell' if len(kinds) > 1 else 'its cell'}"
    return ", ".join(f"{n} {k}" for k, n in counts.items())


def training_title(claim: str, rows: pl.DataFrame) -> str:
    """What a training figure shows, in one sentence from its rows: where the curves end
    against the papers' value, and the verdict kinds they end with ("tau-035 over training: ends
    at +0.058 to +0.079 (papers: 0.35 ± 0.05); smaller in every cell")."""
    last = rows.sort("step").group_by(["study", *_CELL, "reading", "group"], maintain_order=True).last()
    first = rows.row(0, named=True)
    signed = first.get("band") is None
    values = [v for v in last.get_column("estimate").to_list() if v is not None]
    shown = [f"{v:+.3f}" if signed else f"{v:.3f}" for v in (min(values), max(values))] if values else []
    ends = ("ends at " + (shown[0] if shown[0] == shown[1] else f"{shown[0]} to {shown[1]}")) if shown else "ends"
    return f"{claim} over training: {ends}{_paper_words(first)}; {_counted(last.get_column('verdict_kind').to_list())}"


def prediction_title(claim: str, predicted: pl.DataFrame) -> str:
    """What a prediction figure shows: the prediction at the papers' size against their value
    with its kind, or why none was made."""
    made = predicted.filter(pl.col("verdict_kind") != "not predictable")
    if made.height == 0:
        reason = (predicted.row(0, named=True)["verdict"] or "").removeprefix("not predictable: ").split(";")[0]
        return f"{claim} against size: no prediction at the papers' size and steps ({reason})"
    r = made.row(0, named=True)
    steps = f" and {int(r['steps']):,} steps" if r.get("steps") is not None else " and steps"
    return (
        f"{claim} at the papers' {r['params'] / 1e6:.2f} M parameters{steps}: {r['estimate']:+.3f} "
        f"[{r['ci_low']:+.3f}, {r['ci_high']:+.3f}]{_paper_words(r)}, {r['verdict_kind']} "
        "(extrapolated, not measured)"
    )


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


def training_figure(claim: str, rows: pl.DataFrame):
    """The figure of one claim's training rows (a ``matplotlib.figure.Figure``)."""
    first = rows.row(0, named=True)
    return over_training_figure(
        _training_panels(rows),
        title=training_title(claim, rows),
        ylabel=_ylabel(first),
        reference=_reference(first),
        zero=first.get("band") is None,
    )


def training_figures(table: pl.DataFrame) -> list[Figure]:
    """One figure per claim read over training (see the module docstring)."""
    rows = table.filter((pl.col("kind") == "training") & pl.col("estimate").is_not_null())
    figures = []
    for (claim,), part in rows.partition_by("claim", as_dict=True, maintain_order=True).items():
        caption = (
            f"**{claim}** at every evaluation step (95 % band over seeds; the paper's value as a line). The "
            "legend gives each curve's final verdict kind and the step from which it no longer changed."
        )
        figures.append(Figure(f"training-{claim}", png_bytes(training_figure(claim, part)), caption))
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
                # the reason alone (the row's full words are on the card): a panel's note is one line
                reason = (row["verdict"] or "").split(";")[0]
                notes.append(f"{_short(row['reading'])}: {reason}")
                continue
            predictions[-1] = Extrapolation(row["params"], row["estimate"], row["ci_low"], row["ci_high"], row["slope"])
        title = f"{key[0]}: {cell_label(('dataset', 'context_length'), list(key[1:]))}"
        if curves:  # a panel needs a measured size to draw on its log axis
            panels.append(Panel(title, curves, predictions, "; ".join(notes)))
    return panels


def prediction_figure(claim: str, table: pl.DataFrame, predicted: pl.DataFrame):
    """The figure of one claim's predictions (``predicted``: its predicted rows) with the
    sizes they rest on (a ``matplotlib.figure.Figure``)."""
    first = predicted.row(0, named=True)
    return prediction_plot_figure(
        _prediction_panels(table.filter(pl.col("claim") == claim), predicted),
        title=prediction_title(claim, predicted),
        ylabel=_ylabel(first),
        reference=_reference(first),
    )


def prediction_figures(table: pl.DataFrame) -> list[Figure]:
    """One figure per claim predicted from three or more sizes (see the module docstring)."""
    predicted = table.filter((pl.col("kind") == "predicted") & (pl.col("levels").fill_null(0) >= 3))
    figures = []
    for (claim,), part in predicted.partition_by("claim", as_dict=True, maintain_order=True).items():
        if not _prediction_panels(table.filter(pl.col("claim") == claim), part):
            continue
        caption = (
            f"**{claim}**: each size's effect at the end of each study's runs with its 95 % interval (one curve "
            "per study: its steps in the legend), and the prediction at the papers' size and training steps with "
            "its 95 % interval (◇), with the surface's slope against log2(parameters) at those steps (dashed)."
        )
        figures.append(Figure(f"predicted-{claim}", png_bytes(prediction_figure(claim, table, part)), caption))
    return figures


__all__ = [
    "prediction_figure",
    "prediction_figures",
    "prediction_title",
    "training_figure",
    "training_figures",
    "training_title",
]
