"""Does an effect grow or shrink with model size or context length? The slope of a
paired-seed contrast against ``log2(x)`` (per doubling of x), fitted within each seed, with
a t-interval over seeds (:func:`effect_trend`). The report and the scorecard state every
slope in this one unit.

Cells of one seed share its data order (and, at one size, its initial weights), so they
are correlated, while seeds are independent: one slope per seed is the unit of
replication. From two levels of x the "slope" is a two-point difference, and the verdict
words it so.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
import polars as pl

from harness.analysis.contrasts import (
    SeedBlocks,
    check_confidence,
    interaction_weights,
    seed_blocks,
    sort_key,
)
from harness.analysis.paired_tests import TTest
from harness.analysis.results import cell_columns, numeric_column, require_columns, require_table
from harness.analysis.results_types import (
    NEEDS_TWO_SEEDS,
    PAPERS_FACTORIAL,
    ConfidenceInterval,
    TrendResult,
    has_spread,
    readonly_array,
)
from harness.analysis.shape import shape_check
from harness.errors import InputError


def effect_trend(
    df: pl.DataFrame,
    *,
    against: str = "context_length",
    treatment: str | None = None,
    control: str = PAPERS_FACTORIAL.base,
    base: str = PAPERS_FACTORIAL.base,
    a: str = PAPERS_FACTORIAL.a,
    b: str = PAPERS_FACTORIAL.b,
    ab: str = PAPERS_FACTORIAL.ab,
    metric: str = "val_loss",
    confidence: float = 0.95,
    by: Sequence[str] | None = None,
    method: Literal["per-seed", "cluster"] = "per-seed",
) -> TrendResult:
    """Does an effect grow or shrink with model size or context length? The slope of the
    per-cell effect against ``log2(x)``, i.e. per doubling of x (``against``: ``"params"`` or
    ``"context_length"``), with its interval.

    ``treatment`` given: the main effect ``L_control - L_treatment``; else the
    interaction ``L_a + L_b - L_base - L_ab``. The x of a cell for ``params`` is the
    mean parameter count of ``control`` (or ``base``) there. Other cell columns that
    vary (e.g. dataset) enter as fixed effects (one intercept per level).

    Method. ``"per-seed"`` (default): a slope is fitted by least squares within each
    seed across its complete cells, and the slopes get a t-interval over seeds. Cells of
    one seed share its data order (and, at one size, its initial weights), so they are
    correlated, while seeds are independent: one slope per seed is the unit of
    replication, the interval has n_seeds - 1 degrees of freedom and needs no model of
    the within-seed correlation; with a balanced design the mean slope equals the pooled
    OLS slope. ``"cluster"``: pooled OLS over (cell, seed) points with seed-clustered
    standard errors (statsmodels, t with n_seeds - 1 df), a cross-check; cluster-robust
    errors are biased low with the handful of seeds a study has, hence not the default.
    """
    check_confidence(confidence)
    _check_trend_options(df, against, method)
    if treatment is None:
        weights, name = interaction_weights(base, a, b, ab), f"interaction {a} x {b}"
        reference = base
    else:
        weights, name = {control: 1.0, treatment: -1.0}, f"{treatment} vs {control}"
        reference = control
    df, cells = _trend_cells(df, by, against)
    blocks = seed_blocks(df, tuple(weights), metric, cells)
    points, controls = trend_points(df, blocks, weights, cells, against, reference)
    distinct_x = sorted({p[1] for p in points})
    if len(distinct_x) < 2:
        raise InputError(
            f"effect_trend: need at least 2 distinct values of {against} among complete cells, got {len(distinct_x)}"
        )
    levels = sorted({p[3] for p in points}, key=sort_key)
    slopes, intercepts, used, seeds_all = _per_seed_slopes(points, levels)
    notes = []
    if blocks.dropped:
        notes.append(f"dropped {len(blocks.dropped)} incomplete (cell, seed) block(s)")
    if len(used) < len(seeds_all):
        notes.append(f"{len(seeds_all) - len(used)} seed(s) lack the cells for a slope")
    if method == "cluster":
        fit = _cluster_fit(points, levels, confidence, against)
    else:
        fit = _per_seed_fit(slopes, intercepts, confidence, against)
    notes += fit.pop("notes")
    if controls and len(levels) > 1:
        fit["method"] += f", fixed effects for {', '.join(controls)}"
    return TrendResult(
        effect=name,
        against=against,
        metric=metric,
        n_seeds=len(used) if method == "per-seed" else len(seeds_all),
        per_seed=readonly_array(slopes),
        seeds=tuple(used),
        x_values=readonly_array(np.exp2(np.array(distinct_x))),
        cell_estimates=readonly_array([np.mean([p[2] for p in points if p[1] == lx]) for lx in distinct_x]),
        n_dropped=len(blocks.dropped),
        confidence=confidence,
        message="; ".join(notes),
        n_diverged=blocks.n_diverged,
        **fit,
    )


def _check_trend_options(df: pl.DataFrame, against: str, method: str) -> None:
    """``against`` a known axis or a column of ``df``, ``method`` one of the two fits."""
    if against not in ("params", "context_length") and against not in getattr(df, "columns", ()):
        raise InputError(
            f"effect_trend: against must be 'params', 'context_length' or a numeric column, got {against!r}"
        )
    if method not in ("per-seed", "cluster"):
        raise InputError(f"effect_trend: method must be 'per-seed' or 'cluster', got {method!r}")


def _trend_cells(df: pl.DataFrame, by: Sequence[str] | None, against: str) -> tuple[pl.DataFrame, tuple[str, ...]]:
    """The checked table and the columns that make a cell: ``by`` (default: the cell columns
    present) with ``against`` among them, except for ``params``, read per cell from the trials."""
    df = require_table(df)
    require_columns(df, (against,))
    numeric_column(df, against)
    cells = cell_columns(df, by)
    if against != "params" and against not in cells:
        cells = (*cells, against)
    if against == "params" and not cells:
        raise InputError("effect_trend against params needs cell columns (e.g. size) to group trials")
    return df, cells


def trend_points(
    df: pl.DataFrame,
    blocks: SeedBlocks,
    weights: Mapping[str, float],
    cells: Sequence[str],
    against: str,
    reference: str,
) -> tuple[list[tuple], list[str]]:
    """(seed, log2 x, contrast, levels of the other cell columns) of every complete block,
    and the names of those other columns (fixed effects)."""
    w = np.array([weights[v] for v in blocks.variants])
    contrast = blocks.values @ w if len(blocks.keys) else np.zeros(0)  # (n_blocks,)
    if against == "params":  # x of a cell: the reference variant's mean parameter count there
        ref = df.filter(pl.col("variant") == reference)
        xs = {
            tuple(k): float(np.nanmean(g.get_column("params").cast(pl.Float64).to_numpy()))
            for k, g in (ref.partition_by(list(cells), as_dict=True).items())
        }
    else:
        xs = {cell: float(cell[list(cells).index(against)]) for cell in blocks.all_cells}
    if any(not (x > 0) for c, x in xs.items() if c in blocks.all_cells):
        raise InputError(f"effect_trend: {against} must be positive in every cell to take its log")
    controls = [c for c in cells if c != against and not (against == "params" and c == "size")]
    points = []
    for (cell, seed), y in zip(blocks.keys, contrast, strict=True):
        cd = dict(zip(cells, cell, strict=True))
        points.append((seed, math.log2(xs[cell]), float(y), tuple(cd[c] for c in controls)))
    return points, controls


def _trend_design(points: Sequence[tuple], levels: Sequence[tuple]) -> np.ndarray:
    """Intercept, log2 x and one indicator per level of the other cell columns but the first."""
    cols = [np.ones(len(points)), np.array([p[1] for p in points])]
    for lev in levels[1:]:
        cols.append(np.array([1.0 if p[3] == lev else 0.0 for p in points]))
    return np.column_stack(cols)  # (n_points, 2 + n_levels - 1)


def _per_seed_slopes(points: Sequence[tuple], levels: Sequence[tuple]) -> tuple[np.ndarray, list, list, list]:
    """Least-squares slope and intercept within each seed that has the cells to separate
    the slope from the fixed effects; the seeds used and all seeds."""
    seeds_all = sorted({p[0] for p in points}, key=sort_key)
    slopes, intercepts, used = [], [], []
    for seed in seeds_all:
        pts = [p for p in points if p[0] == seed]
        X = _trend_design(pts, levels)
        if np.linalg.matrix_rank(X) < X.shape[1]:
            continue
        coef, *_ = np.linalg.lstsq(X, np.array([p[2] for p in pts]), rcond=None)
        slopes.append(coef[1])
        intercepts.append(coef[0])
        used.append(seed)
    return np.array(slopes, dtype=float), intercepts, used, seeds_all


def _per_seed_fit(slopes: np.ndarray, intercepts: list, confidence: float, against: str) -> dict[str, Any]:
    """The mean per-seed slope with its t-interval over seeds."""
    fit: dict[str, Any] = dict(
        estimate=float(np.mean(slopes)) if len(slopes) else math.nan,
        intercept=float(np.mean(intercepts)) if intercepts else math.nan,
        confidence_interval=None,
        pvalue=None,
        method=f"per-seed OLS slope on log2({against}) (per doubling), t-interval over seeds",
        notes=[],
    )
    if len(slopes) < 2:
        fit["notes"].append(f"{len(slopes)} seed slope(s): {NEEDS_TWO_SEEDS}")
    elif not has_spread(slopes):
        fit["notes"].append("every seed gives the same slope (zero spread): no test possible")
    else:
        slope_test = TTest(confidence).run(slopes)
        fit["confidence_interval"], fit["pvalue"] = slope_test.interval, slope_test.p_value
        fit["shape"] = shape_check(slopes)
    return fit


def _cluster_fit(points: Sequence[tuple], levels: Sequence[tuple], confidence: float, against: str) -> dict[str, Any]:
    """Pooled OLS over (cell, seed) points with seed-clustered standard errors."""
    import statsmodels.api as sm

    X = _trend_design(points, levels)
    y = np.array([p[2] for p in points])
    groups = np.unique(np.array([str(p[0]) for p in points]), return_inverse=True)[1]
    n_groups = len(np.unique(groups))
    fit: dict[str, Any] = dict(confidence_interval=None, pvalue=None, notes=[])
    if n_groups < 2:
        fit["notes"].append(NEEDS_TWO_SEEDS)
        ols = sm.OLS(y, X).fit()
    else:
        ols = sm.OLS(y, X).fit(cov_type="cluster", cov_kwds={"groups": groups}, use_t=True)
        low, high = ols.conf_int(alpha=1 - confidence)[1]
        fit["confidence_interval"], fit["pvalue"] = ConfidenceInterval(float(low), float(high)), float(ols.pvalues[1])
    fit.update(
        estimate=float(ols.params[1]),
        intercept=float(ols.params[0]),
        method=f"pooled OLS of the effect on log2({against}), seed-clustered SE (t, {n_groups - 1} df)",
    )
    return fit


__all__ = ["effect_trend", "trend_points"]
