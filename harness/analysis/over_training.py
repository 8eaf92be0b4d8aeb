"""Effects over training: the curves table (``curves.parquet``, one row per trial and
evaluation) read at each evaluation step as a results table, so that every contrast, the
interaction and the levels are read there with the same functions, intervals and rules as the
final numbers.

:func:`step_frames` turns the curves into one results-like table per step: the trial's factor
columns, the evaluation's ``val_loss``, ``train_loss``, ``gen_gap``, ``tau_mean``,
``open_fraction``, ``pc1_cosine``, ``steps`` = the step, and ``status`` ``finished`` where the
evaluation's loss is finite (an evaluation counts whether or not its trial later diverged; a
non-finite one keeps the trial's status, so its seed block is dropped as a diverged run's is).
:func:`effects_over_training` reads the study's factorial at every step (the report's section),
:func:`level_over_training` a level (tau) per initial value, and :func:`stable_from` says from
which step on a verdict stopped changing.

The steps are one curve, not many tests: nothing is adjusted across steps, and the verdict of
record is the final one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl

from harness.analysis.contrasts import interaction_contrast, main_effect
from harness.analysis.paired_tests import t_interval
from harness.analysis.results import at_reference_tau_init, cell_columns, require_columns, require_table
from harness.analysis.results_types import AnalysisSettings, has_spread
from harness.models.variants import DEFAULT_TAU_INIT

#: Columns of :func:`effects_over_training`'s table besides the cell columns.
EFFECT_COLUMNS: tuple[str, ...] = ("effect", "metric", "step", "estimate", "ci_low", "ci_high", "n_seeds")
_EFFECT_TYPES = (pl.String, pl.String, pl.Int64, pl.Float64, pl.Float64, pl.Float64, pl.Int64)


def step_frames(curves: pl.DataFrame) -> list[tuple[int, pl.DataFrame]]:
    """(step, the curves at that step as a results table) for every evaluation step, in order
    (see the module docstring)."""
    curves = require_table(curves)
    require_columns(curves, ("step", "variant", "seed", "val_loss"))
    loss = pl.col("val_loss").cast(pl.Float64)
    finite = (loss.is_not_null() & loss.is_finite()).fill_null(False)
    status = pl.col("status") if "status" in curves.columns else pl.lit(None, dtype=pl.String)
    frame = curves.filter(pl.col("step").is_not_null()).with_columns(
        pl.col("step").alias("steps"), pl.when(finite).then(pl.lit("finished")).otherwise(status).alias("status")
    )
    parts = frame.partition_by("step", as_dict=True, maintain_order=True)
    return sorted(((int(key[0]), part) for key, part in parts.items()), key=lambda kv: kv[0])


def interval_side(low: float | None, high: float | None) -> str:
    """Where a 95 % interval lies against 0: ``"above 0"``, ``"below 0"``, ``"covers 0"``, or
    ``"no interval"``."""
    if low is None or high is None or not (np.isfinite(low) and np.isfinite(high)):
        return "no interval"
    return "above 0" if low > 0 else "below 0" if high < 0 else "covers 0"


def stable_from(steps: Sequence[int], kinds: Sequence[str]) -> int | None:
    """The first step from which every later kind equals the last one (None: no steps).

    >>> stable_from([250, 500, 750, 1000], ["absent", "smaller", "replicated", "replicated"])
    750
    """
    if not steps:
        return None
    order = np.argsort(np.asarray(steps))
    ordered = [(steps[i], kinds[i]) for i in order]
    first = ordered[-1][0]
    for step, kind in reversed(ordered):
        if kind != ordered[-1][1]:
            break
        first = step
    return int(first)


def _cell_effects(cell_df: pl.DataFrame, settings: AnalysisSettings, cells: Sequence[str]) -> list[dict[str, Any]]:
    """The factorial's main effects and interaction in one cell, as rows (unadjusted)."""
    present = set(cell_df.get_column("variant").drop_nulls().to_list())
    common = dict(metric=settings.metric, confidence=settings.confidence, rng=settings.seed, by=list(cells))
    results = []
    if settings.base in present:
        for treatment in (settings.a, settings.b, settings.ab):
            if treatment in present:
                results.append(main_effect(cell_df, treatment, settings.base, **common))
    if {settings.base, settings.a, settings.b, settings.ab} <= present:
        s = settings
        results.append(interaction_contrast(cell_df, base=s.base, a=s.a, b=s.b, ab=s.ab, **common))
    return [res.to_row() for res in results]


def effects_over_training(curves: pl.DataFrame, settings: AnalysisSettings | None = None) -> pl.DataFrame:
    """The study's factorial effects (``settings.a``, ``b``, ``ab`` against ``base``, and the
    interaction where a cell holds all four) in every cell at every evaluation step, paired by
    seed, at tau's reference initial value, with the report's own
    :func:`~harness.analysis.main_effect` and :func:`~harness.analysis.interaction_contrast` on
    each :func:`step_frames` table. Columns: the cell columns and :data:`EFFECT_COLUMNS`
    (``ci``: the ``settings.confidence`` t-interval over seeds; nothing adjusted)."""
    settings = settings or AnalysisSettings()
    out = []
    for step, frame in step_frames(curves):
        paired, _ = at_reference_tau_init(frame)
        cells = list(cell_columns(paired, None))
        groups = paired.partition_by(cells, as_dict=True, maintain_order=True) if cells else {(): paired}
        for key, cell_df in groups.items():
            cell = dict(zip(cells, key, strict=True))
            out += [
                {**cell, **{c: row.get(c) for c in EFFECT_COLUMNS}, "step": step}
                for row in _cell_effects(cell_df, settings, cells)
            ]
    if not out:
        return pl.DataFrame(schema=dict(zip(EFFECT_COLUMNS, _EFFECT_TYPES, strict=True)))
    return pl.DataFrame(out, infer_schema_length=None)


def _level_rows(part: pl.DataFrame, column: str, confidence: float) -> dict[str, Any]:
    per_seed = part.group_by("seed").agg(pl.col(column).mean()).get_column(column).to_numpy()
    ci = t_interval(per_seed, confidence=confidence)[0] if len(per_seed) >= 2 and has_spread(per_seed) else None
    return {
        "estimate": float(np.mean(per_seed)),
        "ci_low": None if ci is None else float(ci.low),
        "ci_high": None if ci is None else float(ci.high),
        "n_seeds": len(per_seed),
    }


def level_over_training(
    curves: pl.DataFrame, *, column: str = "tau_mean", confidence: float = 0.95, variants: Sequence[str] | None = None
) -> pl.DataFrame:
    """A level (tau, the open fraction) of the runs that have it, per cell, initial value of
    tau and step: the mean over seeds of each seed's mean over its runs, with the
    ``confidence`` t-interval over seeds. Columns: the cell columns, ``tau_init``, ``step``,
    ``estimate``, ``ci_low``, ``ci_high``, ``n_seeds``."""
    curves = require_table(curves)
    require_columns(curves, ("step", "seed", column))
    rows = curves.filter(pl.col(column).is_not_null() & pl.col(column).cast(pl.Float64).is_finite())
    if variants is not None:
        rows = rows.filter(pl.col("variant").is_in(list(variants)))
    tau0 = pl.col("tau_init").cast(pl.Float64) if "tau_init" in rows.columns else pl.lit(None, dtype=pl.Float64)
    rows = rows.with_columns(tau0.fill_null(DEFAULT_TAU_INIT).alias("tau_init"))
    keys = [*cell_columns(rows, None), "tau_init", "step"]
    out = []
    for key, part in rows.partition_by(keys, as_dict=True, maintain_order=True).items():
        out.append({**dict(zip(keys, key, strict=True)), **_level_rows(part, column, confidence)})
    frame = pl.DataFrame(out, infer_schema_length=None) if out else pl.DataFrame(schema={k: pl.Float64 for k in keys})
    return frame.sort(keys) if out else frame


__all__ = [
    "EFFECT_COLUMNS",
    "effects_over_training",
    "interval_side",
    "level_over_training",
    "stable_from",
    "step_frames",
]
