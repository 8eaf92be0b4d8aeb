"""An effect predicted at a setting beyond the sizes and training steps measured, refused
when it cannot be honest: the tables' side of :mod:`harness.analysis.surface`.

**The points.** Every evaluation of every run in the curves (``curves.parquet``: one row per
trial and evaluation; a study without curves: its final results, one point per run) of one or
more studies of one design (one corpus, one context length, one recipe but for ``max_steps``),
each a paired effect per seed: ``sum_v w_v metric_v`` over the variants of a contrast
(``L_control - L_treatment``) or of the 2x2 interaction (``L_a + L_b - L_base - L_ab``), where
every variant has a finite value at that evaluation. A point's x is ``log2`` of the reference
variant's parameter count at its size (the control, or the 2x2's base) and ``log2`` of the
evaluation's step. A run's length is the last step evaluated at its size in its study.

**Seeds across studies** are matched by their number: seed s fixes initialisation and data
order, so seed s at one size is the same model in every study of the recipe until their
schedules part. A seed enters only with every point (paired); the others are named and left
out. Two studies that hold a run of the same size and length for the same seeds hold the same
runs: the first one read is kept.

**The fit, checks and refusals** are :mod:`harness.analysis.surface`'s; :func:`effect_surface`
returns them as a :class:`SurfacePrediction`, with the per-seed effects kept so that the
scorecard can simulate studies of the same design at the same noise
(:mod:`harness.analysis.surface_calibration`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from harness.analysis.contrasts import check_confidence, interaction_weights
from harness.analysis.paired_tests import t_interval
from harness.analysis.results import at_reference_tau_init, require_columns, require_table, unfinished_mask
from harness.analysis.results_types import PAPERS_FACTORIAL, ConfidenceInterval, has_spread, readonly_array
from harness.analysis.shape import shape_check
from harness.analysis.surface import (
    CHECKS,
    MODEL,
    SurfaceDesign,
    SurfacePlan,
    plan_surface,
    refusal_words,
)
from harness.errors import InputError


# ----------------------------------------------------------------------------- the points
def _evaluations(study: str, df: pl.DataFrame, weights: Mapping[str, float], metric: str) -> pl.DataFrame:
    """One study's paired effects: (study, size, seed, step, run_steps, effect), every variant
    finite at that evaluation (a curves table), or finished (a results table: step = steps)."""
    df = require_table(df)
    require_columns(df, ("variant", "seed", "size", metric), f"study {study}")
    if "step" not in df.columns:
        require_columns(df, ("steps",), f"study {study} (no curves: its final results need their steps)")
        df = df.filter(~unfinished_mask(df)).with_columns(pl.col("steps").alias("step"))
    df, _ = at_reference_tau_init(df.filter(pl.col("variant").is_in(list(weights))))
    value = pl.col(metric).cast(pl.Float64)
    df = df.filter(value.is_not_null() & value.is_finite().fill_null(False) & pl.col("step").is_not_null())
    keys = ["size", "seed", "step"]
    if df.select(keys + ["variant"]).is_duplicated().any():
        raise InputError(
            f"study {study}: several runs of one variant, seed, size and step (one corpus and context per prediction)"
        )
    if df.height == 0:
        return pl.DataFrame(schema={"study": pl.String, "size": pl.String, "seed": pl.Int64, "step": pl.Int64})
    wide = df.with_columns(value.alias("__y")).pivot(on="variant", index=keys, values="__y")
    if not set(weights) <= set(wide.columns):
        return wide.clear().select(keys)
    effect = sum(pl.col(v) * w for v, w in weights.items())
    out = wide.filter(pl.all_horizontal(pl.col(v).is_not_null() for v in weights)).select(*keys, effect.alias("effect"))
    runs = df.group_by("size").agg(pl.col("step").max().alias("run_steps"))
    return out.join(runs, on="size").with_columns(pl.lit(study).alias("study"), pl.col("size").cast(pl.String))


@dataclass(frozen=True)
class SurfaceEffects:
    """The points of one prediction: the ``design``, the per-seed effects ``y`` (seeds,
    points) of the ``seeds`` with every point, the study each run came from (``run_studies``)
    and a ``note`` on what was left out."""

    design: SurfaceDesign
    y: np.ndarray
    seeds: tuple
    run_studies: tuple[str, ...]
    note: str


def _params_by_size(frames: Sequence[tuple[str, pl.DataFrame]], reference: str) -> dict[str, float]:
    """Each size's x: the reference variant's mean parameter count there (every study)."""
    missing = [name for name, df in frames if "params" not in df.columns]
    if missing:
        raise InputError(f"a prediction across sizes needs each run's parameter count: no params column in {missing}")
    parts = [
        df.filter(pl.col("variant") == reference).select(pl.col("size").cast(pl.String), "params") for _, df in frames
    ]
    table = pl.concat(parts).group_by("size").agg(pl.col("params").cast(pl.Float64).mean())
    out = {str(s): float(p) for s, p in table.iter_rows() if p is not None}
    if any(not (p > 0) for p in out.values()):
        raise InputError("a prediction across sizes needs a positive parameter count at every size")
    return out


def surface_effects(
    frames: Sequence[tuple[str, pl.DataFrame]], weights: Mapping[str, float], reference: str, metric: str
) -> SurfaceEffects:
    """The points (see the module docstring) of ``frames``: (study name, its curves, or its
    results without curves), of one corpus and context length."""
    params = _params_by_size(frames, reference)
    parts = [_evaluations(name, df, weights, metric) for name, df in frames]
    points = pl.concat([p for p in parts if p.height], how="diagonal_relaxed") if any(p.height for p in parts) else None
    if points is None:
        raise InputError(f"no seed has every variant of {sorted(weights)} at any evaluation")
    kept = (
        points.select("size", "run_steps", "study")
        .unique(maintain_order=True)
        .unique(["size", "run_steps"], keep="first", maintain_order=True)
    )
    dropped_runs = points.select("size", "run_steps", "study").unique().height - kept.height
    points = points.join(kept, on=["size", "run_steps", "study"])
    points = points.with_columns(pl.col("size").replace_strict(params, return_dtype=pl.Float64).alias("params"))
    grid = points.select("size", "params", "run_steps", "study", "step").unique().sort("params", "run_steps", "step")
    seeds_all = sorted(points.get_column("seed").unique().to_list())
    counts = points.group_by("seed").len()
    complete = sorted(s for s, n in counts.iter_rows() if n == grid.height)
    wide = points.filter(pl.col("seed").is_in(complete)).pivot(
        on="seed", index=["size", "run_steps", "step"], values="effect"
    )
    wide = grid.join(wide, on=["size", "run_steps", "step"], how="left")
    y = wide.select([str(s) for s in complete]).to_numpy().T if complete else np.zeros((0, grid.height))
    sizes = grid.select("size", "params").unique().sort("params")
    index = {s: i for i, s in enumerate(sizes.get_column("size").to_list())}
    runs = grid.select("size", "run_steps", "study").unique(maintain_order=True)
    run_index = {(r[0], r[1]): i for i, r in enumerate(runs.iter_rows())}
    design = SurfaceDesign(
        u=np.log2(grid.get_column("params").to_numpy()),
        v=np.log2(grid.get_column("step").cast(pl.Float64).to_numpy()),
        size=np.array([index[s] for s in grid.get_column("size")]),
        run=np.array(
            [run_index[(s, r)] for s, r in zip(grid.get_column("size"), grid.get_column("run_steps"), strict=True)]
        ),
        run_steps=grid.get_column("run_steps").to_numpy(),
        size_names=tuple(sizes.get_column("size").to_list()),
        size_params=sizes.get_column("params").to_numpy(),
    )
    notes = []
    if len(complete) < len(seeds_all):
        notes.append(f"{len(seeds_all) - len(complete)} seed(s) lack an evaluation and are left out")
    if dropped_runs:
        notes.append(f"{dropped_runs} run(s) of a size and length another study also holds are read once")
    return SurfaceEffects(
        design, np.asarray(y, dtype=float), tuple(complete), tuple(runs.get_column("study")), "; ".join(notes)
    )


# ----------------------------------------------------------------------------- the prediction
@dataclass(frozen=True)
class SurfacePrediction:
    """An effect predicted at ``params`` parameters and ``steps`` training steps from each seed's
    surface over size x steps (:mod:`harness.analysis.surface`).

    ``estimate``: the mean of the per-seed predictions ``per_seed``, ``confidence_interval``
    their t-interval (None when refused or untestable), ``pvalue`` the t-test against 0;
    ``slope`` / ``steps_slope``: the mean per-seed slope per doubling of parameters / of steps at
    the target; ``checks``: each check run -> its interval (low, high); ``refused``: why no
    prediction is made (None: it is). ``effects`` and ``plan`` are what it was read from (the
    calibration simulates the same design at the same noise)."""

    effect: str
    metric: str
    params: float
    steps: float
    estimate: float
    confidence_interval: ConfidenceInterval | None
    pvalue: float | None
    per_seed: np.ndarray
    slope: float | None
    steps_slope: float | None
    checks: Mapping[str, tuple[float, float]]
    refused: str | None
    effects: SurfaceEffects
    plan: SurfacePlan
    confidence: float = 0.95
    shape: Any = None

    @property
    def n_seeds(self) -> int:
        return len(self.per_seed)

    @property
    def design(self) -> SurfaceDesign:
        return self.effects.design

    @property
    def size_extrapolation(self) -> float:
        return self.plan.size_extrapolation

    @property
    def steps_extrapolation(self) -> float:
        return self.plan.steps_extrapolation

    def check_words(self, name: str) -> str:
        """One check's interval in words: "[-0.0120, +0.0310] covers 0"."""
        low, high = self.checks[name]
        side = "covers 0" if low <= 0 <= high else "excludes 0"
        return f"[{low:+.4f}, {high:+.4f}] {side}"


def _weights(treatment: str | None, control: str, base: str, a: str, b: str, ab: str) -> tuple[dict, str, str]:
    """(variant weights, the effect's name, the reference variant whose count is a size's x)."""
    if treatment is None:
        return interaction_weights(base, a, b, ab), f"interaction {a} x {b}", base
    return {control: 1.0, treatment: -1.0}, f"{treatment} vs {control}", control


def effect_surface(
    frames: Sequence[tuple[str, pl.DataFrame]],
    *,
    params: float,
    steps: float,
    treatment: str | None = None,
    control: str = PAPERS_FACTORIAL.base,
    base: str = PAPERS_FACTORIAL.base,
    a: str = PAPERS_FACTORIAL.a,
    b: str = PAPERS_FACTORIAL.b,
    ab: str = PAPERS_FACTORIAL.ab,
    metric: str = "val_loss",
    confidence: float = 0.95,
    model: str = MODEL,
) -> SurfacePrediction:
    """The paired effect predicted at ``params`` parameters and ``steps`` training steps from
    ``frames`` (study name, its curves or results: one design, one corpus and context length;
    see the module docstring). ``treatment`` given: ``L_control - L_treatment``; else the
    interaction ``L_a + L_b - L_base - L_ab``. A refused prediction keeps its design,
    distances and checks, and has no interval."""
    check_confidence(confidence)
    if not (params > 0 and steps > 0 and math.isfinite(params) and math.isfinite(steps)):
        raise InputError(f"effect_surface: the target must be positive counts, got params={params!r}, steps={steps!r}")
    weights, name, reference = _weights(treatment, control, base, a, b, ab)
    effects = surface_effects(frames, weights, reference, metric)
    plan = plan_surface(effects.design, params, steps, model)
    y = effects.y
    if len(y) < 2:
        plan = _refuse(plan, f"{len(y)} seed(s) with every evaluation: no interval over seeds")
    read = plan.read(y, confidence) if len(y) else None
    checks = {} if read is None else {k: (float(lo), float(hi)) for k, (lo, hi) in read.checks.items()}
    per_seed = np.zeros(0) if read is None or plan.predict is None else read.per_seed
    result = dict(effect=name, metric=metric, params=float(params), steps=float(steps), effects=effects, plan=plan)
    words = {k: f"[{lo:+.4f}, {hi:+.4f}] excludes 0" for k, (lo, hi) in checks.items()}
    refused = plan.refused if read is None else refusal_words(plan, read, words)
    if refused is None and not has_spread(per_seed):
        refused = "the per-seed predictions have no spread: no interval"
    ci, pvalue, shape = None, None, None
    if refused is None:
        ci, pvalue = t_interval(per_seed, confidence=confidence)
        shape = shape_check(per_seed)
    slopes = [None if w is None or not len(y) else float(np.mean(y @ w)) for w in (plan.slope_size, plan.slope_steps)]
    return SurfacePrediction(
        **result,
        estimate=float(np.mean(per_seed)) if len(per_seed) else math.nan,
        confidence_interval=ci,
        pvalue=pvalue,
        per_seed=readonly_array(per_seed),
        slope=slopes[0],
        steps_slope=slopes[1],
        checks=checks,
        refused=refused,
        confidence=confidence,
        shape=shape,
    )


def _refuse(plan: SurfacePlan, why: str) -> SurfacePlan:
    from dataclasses import replace

    return plan if plan.refused is not None else replace(plan, refused=why)


__all__ = [
    "CHECKS",
    "SurfaceEffects",
    "SurfacePrediction",
    "effect_surface",
    "surface_effects",
]
