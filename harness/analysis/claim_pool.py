"""A claim read as a whole: the mean of its independent cells' effects, with an interval calibrated
at the heterogeneity the cells show, and its power.

Each cell (a size, a run length, a context length, a corpus) of each study gives one paired effect
over its seeds. The cells of one claim are not replicates of one number: the effect may differ by
size, steps or context. Their mean is read with the t over the K cell means on K - 1 degrees of
freedom,

    m = mean_k y_k,   s = sd_k y_k,   m +- t_{1 - alpha/2, K - 1} s / sqrt(K),

which treats the cells as a sample of the settings the claim covers, so the spread between cells
(the heterogeneity) is in its width; its null rate held at the level in simulated cards of the
published design, where a fixed-effect mean and Hartung-Knapp random effects did not
(docs/calibration.md). Cochran's Q (weights 1 / se_k^2) and I^2 say how much the cells differ.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from harness.analysis.paired_tests import t_interval
from harness.analysis.results_types import ConfidenceInterval


@dataclass(frozen=True)
class PooledEffect:
    """The mean of ``k`` cell effects (``estimate``), its t-interval over them (``confidence_interval``),
    the ``1 - 2 alpha`` one (``equivalence``), the t-test p against 0, the sd across cells, and the
    heterogeneity: Cochran's Q, its p (chi2 on k - 1) and I^2 (None without the cells' own errors)."""

    estimate: float
    confidence_interval: ConfidenceInterval | None
    equivalence: ConfidenceInterval | None
    pvalue: float | None
    k: int
    sd: float | None
    q: float | None
    q_pvalue: float | None
    i_squared: float | None


def pool_cells(
    estimates: Sequence[float], ses: Sequence[float] | None = None, *, confidence: float = 0.95
) -> PooledEffect:
    """The claim's pooled effect over independent cells (see the module docstring)."""
    y = np.asarray(estimates, dtype=float)
    k = len(y)
    if k < 2 or not np.ptp(y) > 0:
        return PooledEffect(float(y.mean()) if k else math.nan, None, None, None, k, None, None, None, None)
    ci, p = t_interval(y, confidence=confidence)
    eq, _ = t_interval(y, confidence=1.0 - 2.0 * (1.0 - confidence))
    q = q_p = i2 = None
    if ses is not None and np.all(np.asarray(ses, dtype=float) > 0):
        w = 1.0 / np.asarray(ses, dtype=float) ** 2
        q = float(np.sum(w * (y - np.sum(w * y) / np.sum(w)) ** 2))
        q_p = float(stats.chi2.sf(q, k - 1))
        i2 = max(0.0, (q - (k - 1)) / q) if q > 0 else 0.0
    return PooledEffect(float(y.mean()), ci, eq, float(p), k, float(y.std(ddof=1)), q, q_p, i2)


def t_power(shift: float, se: float, df: int, critical: float) -> float | None:
    """The chance that a t on ``df`` degrees of freedom exceeds ``critical`` in either direction when
    the truth lies ``shift`` from the null and the estimate's standard error is ``se`` (noncentral
    t; None without a positive ``se``)."""
    if not se > 0 or df < 1 or not math.isfinite(shift):
        return None
    ncp = shift / se
    if abs(ncp) > 40.0:  # beyond the noncentral t's numerical range: the test all but always rejects
        return 1.0
    power = float(stats.nct.sf(critical, df, ncp) + stats.nct.cdf(-critical, df, ncp))
    return power if math.isfinite(power) else None


__all__ = ["PooledEffect", "pool_cells", "t_power"]
