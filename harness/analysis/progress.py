"""Cells compared at matched progress: each cell's runs read at the step where its reference
variant's mean validation loss reaches one common level, not at one common step.

Why: cells of different context lengths (or sizes) trained for the same steps stand at
different points of training. At 2,048 tokens per step the T = 512 baseline ends where the
T = 128 baseline stood long before its end, so a trend of an effect against T read at equal
steps mixes "longer context" with "less far along". Read at matched progress, every cell is
compared where its reference model is equally good.

The level: L* = max over cells c of the reference's mean final loss, the loss of the cell that
got least far, so that every cell reaches it. In cell c, with the reference's mean curve m_c(s)
over seeds at the evaluation steps s, the matched step

    s_c = the first s at which m_c(s) <= L*, interpolated linearly between evaluations,

and every run of the cell is read there: its validation loss interpolated linearly at s_c
between its own evaluations. The result is a results table (one row per trial), so every
contrast and trend reads it with the same functions and intervals as the final numbers
(:func:`~harness.analysis.trends.effect_trend`); ``steps`` holds s_c (rounded).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from harness.analysis.results import cell_columns, finished, require_columns, require_table
from harness.errors import InputError

#: Columns of the curves that identify a trial (besides its cell).
_TRIAL = ("trial_id", "variant", "seed")


@dataclass(frozen=True)
class MatchedProgress:
    """The runs read at matched progress: ``table`` (one row per trial, as a results table),
    the common ``level`` L* and each cell's matched step (``steps``: cell values -> s_c)."""

    table: pl.DataFrame
    level: float
    steps: dict[tuple, float]


def _first_crossing(steps: np.ndarray, losses: np.ndarray, level: float) -> float | None:
    """The first step at which the curve ``losses`` (at ``steps``, ascending) reaches ``level``,
    interpolated linearly between the evaluations around it; None if it never does."""
    below = np.flatnonzero(losses <= level)
    if below.size == 0:
        return None
    i = int(below[0])
    if i == 0:
        return float(steps[0])
    s0, s1, l0, l1 = steps[i - 1], steps[i], losses[i - 1], losses[i]
    return float(s0 + (s1 - s0) * (l0 - level) / (l0 - l1))


def _reference_curves(curves: pl.DataFrame, cells: list[str], reference: str) -> pl.DataFrame:
    """The reference variant's mean validation loss over seeds, per cell and step."""
    ref = curves.filter(pl.col("variant") == reference)
    if ref.height == 0:
        raise InputError(f"matched progress: no curve of the reference variant {reference!r}")
    return ref.group_by([*cells, "step"]).agg(pl.col("val_loss").mean()).sort([*cells, "step"])


def matched_progress(curves: pl.DataFrame, *, reference: str = "baseline") -> MatchedProgress:
    """Every trial of ``curves`` (``curves.parquet``: one row per trial and evaluation) read at
    its cell's matched step (see the module docstring), the cells matched on ``reference``'s
    mean validation loss."""
    curves = finished(require_table(curves, "curves table"))
    require_columns(curves, ["variant", "seed", "step", "val_loss"], "curves table")
    curves = curves.filter(pl.col("val_loss").is_finite())
    cells = list(cell_columns(curves, None))
    mean = _reference_curves(curves, cells, reference)
    groups = mean.partition_by(cells, as_dict=True, maintain_order=True) if cells else {(): mean}
    level = max(float(part.get_column("val_loss")[-1]) for part in groups.values())
    steps: dict[tuple, float] = {}
    for key, part in groups.items():
        found = _first_crossing(part.get_column("step").to_numpy(), part.get_column("val_loss").to_numpy(), level)
        assert found is not None, "every cell reaches the level of the cell that got least far"
        steps[key] = found
    runs = _runs(curves, cells).items()
    rows = [_trial_at(run, steps[key[: len(cells)]]) for key, run in runs if key[: len(cells)] in steps]
    return MatchedProgress(table=pl.DataFrame(rows, infer_schema_length=None), level=level, steps=steps)


def _runs(curves: pl.DataFrame, cells: list[str]) -> dict[tuple, pl.DataFrame]:
    """Each trial's curve (sorted by step), keyed by its cell values then its trial columns."""
    keys = [*cells, *(c for c in _TRIAL if c in curves.columns)]
    return {key: part.sort("step") for key, part in curves.partition_by(keys, as_dict=True).items()}


def _trial_at(run: pl.DataFrame, step: float) -> dict:
    """One trial's row of the results table: its factor columns and its validation loss
    interpolated at ``step`` (None past its last evaluation)."""
    first = run.row(0, named=True)
    steps, losses = run.get_column("step").to_numpy(), run.get_column("val_loss").to_numpy()
    inside = steps[0] <= step <= steps[-1]
    loss = float(np.interp(step, steps, losses)) if inside else None
    keep = {k: v for k, v in first.items() if k not in ("step", "tokens", "val_loss", "train_loss", "gen_gap")}
    return {**keep, "val_loss": loss, "steps": int(round(step)), "status": "finished" if inside else "incomplete"}


__all__ = ["MatchedProgress", "matched_progress"]
