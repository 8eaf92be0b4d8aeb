"""An effect predicted beyond the sizes measured, refused when it cannot be honest.

With three or more sizes of one study (cells that differ only in size), each seed's paired
effect is fitted by least squares against ``log2(params)`` (the trend's unit: per doubling),
and each seed's line is read at the parameter count ``at``:

    y_s(x) = a_s + b_s log2 x,     p_s = a_s + b_s log2 at,

with a ``confidence`` t-interval over seeds of the per-seed predictions p_s (the seed is the
unit: its line carries its own intercept and slope, so slopes that differ between seeds are
in the interval). The prediction is **refused** (:attr:`PredictionResult.refused` says why)
when the study has fewer than :data:`MIN_SIZES` sizes, when ``at`` lies more than
:data:`MAX_EXTRAPOLATION` times beyond the largest size measured, or when the **backtest**
fails: each seed's line fitted without the largest size predicts that size, and the
``confidence`` t-interval over seeds of the per-seed errors

    e_s = y_s(x_max) - (a'_s + b'_s log2 x_max)     (a', b': the fit without x_max)

must cover 0 (a paired test of "the smaller sizes' line reaches the largest"; a truth that is
linear in log2 x gives errors of mean 0, so the backtest refuses such a truth at about
1 - ``confidence``). ``benchmarks/calibration.py`` measures the coverage at the predicted
point under a log-linear truth with seed-specific slopes, and how often the backtest refuses
a curved one, with these same functions (:func:`line_fits`, :func:`predict`,
:func:`backtest_errors`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from harness.analysis.contrasts import check_confidence, interaction_weights, seed_blocks, sort_key, t_interval
from harness.analysis.results import cell_columns, require_columns, require_table
from harness.analysis.results_types import ConfidenceInterval, has_spread, readonly_array
from harness.analysis.shape import shape_check
from harness.analysis.trends import trend_points
from harness.errors import InputError

#: Fewest sizes a prediction is made from (two give a line with no check on its shape).
MIN_SIZES = 3
#: Farthest a prediction reaches: the predicted parameter count over the largest measured.
MAX_EXTRAPOLATION = 16.0


# ----------------------------------------------------------------------------- the arithmetic
def line_fits(lx: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Least-squares intercepts and slopes of ``y`` against ``lx`` along the last axis.

    ``lx``: (k,) the log2 sizes; ``y``: (..., k) the effects (a batch of studies and seeds);
    returns (intercepts, slopes), each of shape ``y.shape[:-1]``:
    ``b = sum((x - xbar)(y - ybar)) / sum((x - xbar)^2)``, ``a = ybar - b xbar``."""
    lx = np.asarray(lx, dtype=float)
    y = np.asarray(y, dtype=float)
    centred = lx - lx.mean()
    slopes = (y * centred).sum(axis=-1) / (centred**2).sum()  # (...,)
    return y.mean(axis=-1) - slopes * lx.mean(), slopes


def predict(lx: np.ndarray, y: np.ndarray, at: float) -> np.ndarray:
    """Each line of :func:`line_fits` read at log2 size ``at``: (...,)."""
    intercepts, slopes = line_fits(lx, y)
    return intercepts + slopes * at


def backtest_errors(lx: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Measured minus predicted at the largest size, each line fitted without it:
    ``y[..., -1] - predict(lx[:-1], y[..., :-1], lx[-1])`` (``lx`` ascending): (...,)."""
    lx = np.asarray(lx, dtype=float)
    y = np.asarray(y, dtype=float)
    return y[..., -1] - predict(lx[:-1], y[..., :-1], float(lx[-1]))


def backtest_fails(errors: np.ndarray, confidence: float) -> np.ndarray:
    """Whether the ``confidence`` t-interval over seeds (last axis) of the backtest errors
    excludes 0 (a batch: one answer per study)."""
    ci, _ = t_interval(np.asarray(errors, dtype=float), confidence=confidence, axis=-1)
    return (np.asarray(ci.low) > 0) | (np.asarray(ci.high) < 0)


# ----------------------------------------------------------------------------- results
@dataclass(frozen=True)
class Backtest:
    """The fit without the largest size against the largest size's measured effect:
    ``predicted`` and ``measured`` (means over seeds), the per-seed ``errors``
    (measured - predicted) and their ``confidence`` t-interval (None: no test possible);
    ``passed``: the interval covers 0."""

    predicted: float
    measured: float
    errors: np.ndarray
    interval: ConfidenceInterval | None
    passed: bool

    @property
    def words(self) -> str:
        shown = "no interval" if self.interval is None else f"[{self.interval.low:+.4f}, {self.interval.high:+.4f}]"
        verb = "covers" if self.passed else ("does not cover" if self.interval is not None else "cannot test")
        return (
            f"the line without the largest size predicts {self.predicted:+.4f} there, measured {self.measured:+.4f}; "
            f"the error's interval {shown} {verb} 0"
        )


@dataclass(frozen=True)
class PredictionResult:
    """An effect predicted at ``at`` parameters from per-seed lines against log2(params).

    ``estimate``: the mean of the per-seed predictions ``per_seed``, ``confidence_interval``
    their t-interval (None when refused or untestable), ``pvalue`` the t-test against 0,
    ``slope`` the mean per-seed slope per doubling; ``x_values`` the sizes' parameter counts
    (the reference variant's), ascending, with ``size_names``; ``extrapolation`` = ``at`` /
    the largest; ``backtest`` (None below :data:`MIN_SIZES`); ``refused`` the reason a
    prediction is not made (None: it is)."""

    effect: str
    metric: str
    at: float
    estimate: float
    confidence_interval: ConfidenceInterval | None
    pvalue: float | None
    slope: float
    per_seed: np.ndarray
    seeds: tuple
    x_values: np.ndarray
    size_names: tuple[str, ...]
    extrapolation: float
    backtest: Backtest | None
    refused: str | None
    confidence: float = 0.95
    message: str = ""
    shape: Any = None

    @property
    def n_seeds(self) -> int:
        return len(self.per_seed)

    @property
    def n_sizes(self) -> int:
        return len(self.x_values)


def refusal(n_sizes: int, extrapolation: float, backtest: Backtest | None) -> str | None:
    """Why a prediction is not made, in words (None: it is), by the rules of the module
    docstring; a papers' size at or below the largest measured is not extrapolated either (its
    cells and trend say what there is)."""
    if n_sizes < MIN_SIZES:
        return f"{n_sizes} size{'s' if n_sizes != 1 else ''} measured; a prediction needs {MIN_SIZES} or more"
    if extrapolation <= 1.0:
        return (
            f"nothing to extrapolate: the papers' size is {extrapolation:.2g}x the largest measured, within the "
            "sizes measured (read the measured cells and the trend)"
        )
    if extrapolation > MAX_EXTRAPOLATION:
        return (
            f"the papers' size is {extrapolation:.1f}x the largest measured, beyond the "
            f"{MAX_EXTRAPOLATION:g}x a prediction may reach"
        )
    if backtest is None or backtest.interval is None:
        return "no backtest possible (fewer than 2 seeds with every size, or zero spread)"
    if not backtest.passed:
        return f"the backtest failed: {backtest.words}"
    return None


# ----------------------------------------------------------------------------- the prediction
def _size_matrix(
    df: pl.DataFrame, weights: dict[str, float], reference: str, metric: str
) -> tuple[np.ndarray, np.ndarray, tuple[str, ...], list, str]:
    """(log2 x of each size ascending, effects (seeds, sizes) of the seeds with every size,
    the size names, those seeds, a note on the seeds left out)."""
    cells = cell_columns(df, None)
    if "size" not in cells:
        raise InputError("a prediction across sizes needs the size column")
    for column in cells:
        if column != "size" and df.get_column(column).n_unique() > 1:
            raise InputError(f"a prediction reads cells that differ only in size; {column} varies")
    blocks = seed_blocks(df, tuple(weights), metric, cells)
    points, _ = trend_points(df, blocks, weights, cells, "params", reference)
    by_x: dict[float, str] = {}
    for (cell, _seed), (_, lx, _, _) in zip(blocks.keys, points, strict=True):
        by_x.setdefault(lx, str(cell[cells.index("size")]))
    lxs = sorted(by_x)
    seeds = sorted({p[0] for p in points}, key=sort_key)
    table = {(p[0], p[1]): p[2] for p in points}
    complete = [s for s in seeds if all((s, lx) in table for lx in lxs)]
    y = np.array([[table[(s, lx)] for lx in lxs] for s in complete], dtype=float).reshape(len(complete), len(lxs))
    note = f"{len(seeds) - len(complete)} seed(s) lack a size and are left out" if len(complete) < len(seeds) else ""
    return np.array(lxs), y, tuple(by_x[lx] for lx in lxs), complete, note


def _backtest(lx: np.ndarray, y: np.ndarray, confidence: float) -> Backtest:
    errors = backtest_errors(lx, y)  # (seeds,)
    predicted = predict(lx[:-1], y[:, :-1], float(lx[-1]))
    interval = None
    if len(errors) >= 2 and has_spread(errors):
        interval = t_interval(errors, confidence=confidence)[0]
    passed = interval is not None and not interval.excludes(0.0)
    return Backtest(float(np.mean(predicted)), float(np.mean(y[:, -1])), readonly_array(errors), interval, passed)


def effect_prediction(
    df: pl.DataFrame,
    *,
    at: float,
    treatment: str | None = None,
    control: str = "baseline",
    base: str = "baseline",
    a: str = "ega",
    b: str = "mope",
    ab: str = "ega-mope",
    metric: str = "val_loss",
    confidence: float = 0.95,
) -> PredictionResult:
    """The paired effect predicted at ``at`` parameters from the sizes of ``df`` (see the
    module docstring).

    ``treatment`` given: the main effect ``L_control - L_treatment``; else the interaction
    ``L_a + L_b - L_base - L_ab``. ``df``: one study's rows whose cells differ only in
    ``size`` (one corpus, one context length); a size's x is the mean parameter count of
    ``control`` (or ``base``) there. Only the seeds with every size enter (paired seeds).
    A refused prediction keeps its sizes, distance and backtest, and has no interval."""
    check_confidence(confidence)
    if not (at > 0 and math.isfinite(at)):
        raise InputError(f"effect_prediction: at must be a positive parameter count, got {at!r}")
    if treatment is None:
        weights, name, reference = interaction_weights(base, a, b, ab), f"interaction {a} x {b}", base
    else:
        weights, name, reference = {control: 1.0, treatment: -1.0}, f"{treatment} vs {control}", control
    df = require_table(df)
    require_columns(df, ("params", "size"))
    lx, y, names, seeds, note = _size_matrix(df, weights, reference, metric)
    x_values = readonly_array(np.exp2(lx))
    extrapolation = float(at / x_values[-1]) if len(x_values) else math.inf
    backtest = _backtest(lx, y, confidence) if len(lx) >= MIN_SIZES and len(seeds) else None
    refused = refusal(len(lx), extrapolation, backtest)
    per_seed = predict(lx, y, math.log2(at)) if len(lx) >= 2 and len(seeds) else np.zeros(0)
    ci, pvalue, shape = None, None, None
    if refused is None and len(per_seed) >= 2 and has_spread(per_seed):
        ci, pvalue = t_interval(per_seed, confidence=confidence)
        shape = shape_check(per_seed)
    return PredictionResult(
        effect=name,
        metric=metric,
        at=float(at),
        estimate=float(np.mean(per_seed)) if len(per_seed) else math.nan,
        confidence_interval=ci,
        pvalue=pvalue,
        slope=float(np.mean(line_fits(lx, y)[1])) if len(lx) >= 2 and len(seeds) else math.nan,
        per_seed=readonly_array(per_seed),
        seeds=tuple(seeds),
        x_values=x_values,
        size_names=names,
        extrapolation=extrapolation,
        backtest=backtest,
        refused=refused,
        confidence=confidence,
        message=note,
        shape=shape,
    )


__all__ = [
    "MAX_EXTRAPOLATION",
    "MIN_SIZES",
    "Backtest",
    "PredictionResult",
    "backtest_errors",
    "backtest_fails",
    "effect_prediction",
    "line_fits",
    "predict",
    "refusal",
]
