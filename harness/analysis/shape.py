"""Is a t-based verdict readable? The shape of the per-seed values.

The t-interval, the t-test and the confidence sequence assume normal per-seed values;
the sign-flip test assumes symmetric ones. With skewed values of mean 0 all of them reject
too often (exponential values at 5 seeds: t 12 %; lognormal at 10 seeds: t 15 %, sign-flip
14 %; the confidence sequence peeked at from 2 to 40 seeds: 12 % and 20 %:
``benchmarks/calibration.py``), and no test of the mean is then trustworthy at these n.

The check: Shapiro-Wilk's test of normality (``scipy.stats.shapiro``, from 3 seeds) at
:data:`SHAPE_ALPHA` = 0.10, chosen by simulation. Under normal values it fires in 10 % of
studies (where a claim is then withheld, a small loss of power); it fires in 58 % of
exponential and 70 % of lognormal studies at 10 seeds and in 90-96 % at 20, and a claim
made only where it is quiet keeps the 5 % level from about 20 seeds for both shapes. Below
10 seeds it has little power: the verdict rests on the normality assumption, which the
report states. Where it fires, the verdict says so beside its interval, with the sign-flip
p next to the t p, and withholds its claim.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

SHAPE_TEST = "Shapiro-Wilk"
SHAPE_ALPHA = 0.10
SHAPE_MIN_SEEDS = 3


@dataclass(frozen=True)
class ShapeCheck:
    """Shapiro-Wilk's p of the per-seed values, their sample skewness (Fisher-Pearson,
    bias-adjusted) and whether the check fires (p < :data:`SHAPE_ALPHA`)."""

    pvalue: float
    skewness: float
    fires: bool

    @property
    def words(self) -> str:
        """``"per-seed values skewed or with an outlier (Shapiro-Wilk p=0.02, skewness +1.9)"``."""
        return (
            f"per-seed values skewed or with an outlier ({SHAPE_TEST} p={self.pvalue:.2g}, "
            f"skewness {self.skewness:+.1f})"
        )


def shape_check(values: np.ndarray) -> ShapeCheck | None:
    """The check on one study's per-seed values; None below :data:`SHAPE_MIN_SEEDS` seeds or
    with zero spread (no test possible)."""
    from scipy import stats  # here, not at the top: the result types import ShapeCheck and stay light

    values = np.asarray(values, dtype=float)
    if len(values) < SHAPE_MIN_SEEDS or not np.ptp(values) > 0:
        return None
    p = float(stats.shapiro(values).pvalue)
    skew = float(stats.skew(values, bias=False))
    return ShapeCheck(p, skew if math.isfinite(skew) else 0.0, p < SHAPE_ALPHA)


def shapiro_pvalues(values: np.ndarray) -> np.ndarray:
    """Shapiro-Wilk's p of each study of a batch (studies, seeds): NaN below
    :data:`SHAPE_MIN_SEEDS` seeds (and where scipy gives none, e.g. zero spread)."""
    from scipy import stats

    values = np.asarray(values, dtype=float)
    if values.shape[-1] < SHAPE_MIN_SEEDS:
        return np.full(values.shape[:-1], np.nan)
    return np.asarray(stats.shapiro(values, axis=-1).pvalue)


def shape_check_fires(values: np.ndarray) -> np.ndarray:
    """Whether the check fires, for a batch of studies (studies, seeds): False below
    :data:`SHAPE_MIN_SEEDS` seeds (a NaN p never fires)."""
    return np.asarray(shapiro_pvalues(values) < SHAPE_ALPHA)


__all__ = [
    "SHAPE_ALPHA",
    "SHAPE_MIN_SEEDS",
    "SHAPE_TEST",
    "ShapeCheck",
    "shape_check",
    "shape_check_fires",
    "shapiro_pvalues",
]
