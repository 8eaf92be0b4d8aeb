"""How skewed can the seeds be? An upper bound on the lognormal shape that pooled per-seed values allow.

A skew-robust verdict (:mod:`harness.scorecard.calibration`) holds its level for per-seed values as
skewed as a lognormal of shape sigma. The sigma to guard against is the one the seeds themselves
allow, not a worst case they reject. Each group of per-seed values (a paired contrast in one cell)
has its own location and scale, so only its *configuration* u = (x - mean) / sd carries the shape,
and its likelihood under a location-scale family of standard density f is (Fraser's maximal
invariant)

    L(sigma; u) = integral over a, b > 0 of  prod_i f_sigma(a + b u_i) b^(n - 2)  da db,

with f_sigma the density of Y = (exp(sigma Z) - 1) / sigma, Z standard normal (a lognormal of shape
sigma; the normal at sigma = 0). A contrast's sign is a convention, so each group counts both
orientations equally: L(sigma; u) / 2 + L(sigma; -u) / 2. Pooled over the groups, the log-likelihood
is profiled on a grid of shapes; the estimate is its maximum and the upper bound the largest shape
within the one-sided likelihood-ratio limit (2 log LR <= chi2_1(1 - 2 (1 - confidence))). The bound's
coverage at the published design is simulated by ``benchmarks/calibration.py``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

#: The shapes profiled: 0 (normal) to 1.5 in steps of 0.05.
SIGMA_GRID: tuple[float, ...] = tuple(round(0.05 * i, 2) for i in range(31))
#: Groups of fewer values carry no shape.
MIN_GROUP = 3
#: The integration grid of the invariant likelihood: location a and log-scale log b (u standardised).
_LOCATIONS = np.linspace(-8.0, 8.0, 97)
_LOG_SCALES = np.linspace(-4.0, 3.0, 85)


@dataclass(frozen=True)
class SkewBound:
    """The skew the pooled seeds allow: ``sigma_upper`` the upper ``confidence`` bound on the
    lognormal shape, ``sigma_estimate`` the maximum-likelihood shape, over ``groups`` groups holding
    ``values`` values; ``pvalue_at_one`` the one-sided likelihood-ratio p of shape 1."""

    sigma_upper: float
    sigma_estimate: float
    groups: int
    values: int
    confidence: float
    pvalue_at_one: float

    @property
    def words(self) -> str:
        return (
            f"lognormal shape at most {self.sigma_upper:.2f} ({self.confidence:.0%} upper bound; maximum likelihood "
            f"{self.sigma_estimate:.2f}; shape 1 p={self.pvalue_at_one:.2g}) from {self.groups} contrasts, "
            f"{self.values} seed values"
        )


def _log_density(y: np.ndarray, sigma: float) -> np.ndarray:
    """log f_sigma(y): the density of (exp(sigma Z) - 1) / sigma (the normal's at sigma = 0)."""
    if sigma == 0.0:
        return -0.5 * y * y - 0.5 * math.log(2.0 * math.pi)
    arg = 1.0 + sigma * y
    inside = arg > 0
    safe = np.where(inside, arg, 1.0)
    z = np.log(safe) / sigma
    return np.where(inside, -0.5 * z * z - 0.5 * math.log(2.0 * math.pi) - np.log(safe), -np.inf)


def _log_invariant_likelihoods(u: np.ndarray, sigma: float) -> np.ndarray:
    """log L(sigma; u) of each group of ``u`` (groups, n), integrated on the grid (log b as the
    variable: b^(n - 1) d log b)."""
    scales = np.exp(_LOG_SCALES)
    y = _LOCATIONS[:, None, None, None] + scales[None, :, None, None] * u[None, None, :, :]  # (a, b, groups, n)
    log_terms = _log_density(y, sigma).sum(axis=-1) + (u.shape[-1] - 1) * _LOG_SCALES[None, :, None]
    top = log_terms.max(axis=(0, 1))  # (groups,)
    step = (_LOCATIONS[1] - _LOCATIONS[0]) * (_LOG_SCALES[1] - _LOG_SCALES[0])
    return top + np.log(np.exp(log_terms - top).sum(axis=(0, 1)) * step)


def _log_likelihood(configurations: Sequence[np.ndarray], sigma: float) -> float:
    """The pooled log-likelihood of shape ``sigma``, each group in either orientation."""
    total = 0.0
    for n in sorted({len(u) for u in configurations}):
        u = np.stack([c for c in configurations if len(c) == n])  # (groups, n)
        pair = np.stack([_log_invariant_likelihoods(u, sigma), _log_invariant_likelihoods(-u, sigma)])
        total += float(np.sum(np.logaddexp.reduce(pair, axis=0) - math.log(2.0)))
    return total


def configurations(groups: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Each group of at least :data:`MIN_GROUP` values with spread, standardised (mean 0, sd 1)."""
    out = []
    for g in groups:
        g = np.asarray(g, dtype=float)
        if len(g) >= MIN_GROUP and np.ptp(g) > 0:
            out.append((g - g.mean()) / g.std(ddof=1))
    return out


def skew_sigma_bound(
    groups: Sequence[np.ndarray], *, confidence: float = 0.95, grid: Sequence[float] = SIGMA_GRID
) -> SkewBound | None:
    """The skew that ``groups`` of per-seed values allow (see the module docstring); None without a
    group of :data:`MIN_GROUP` values or more."""
    configs = configurations(groups)
    if not configs:
        return None
    profile = np.array([_log_likelihood(configs, float(s)) for s in grid])
    best = int(np.argmax(profile))
    limit = float(stats.chi2.isf(2.0 * (1.0 - confidence), 1))  # one-sided: chi2_1 at 90 % for 95 %
    deviance = 2.0 * (profile[best] - profile)
    upper = float(max(s for s, d in zip(grid, deviance, strict=True) if d <= limit))
    at_one = list(grid).index(1.0) if 1.0 in grid else None
    p_one = float(stats.chi2.sf(deviance[at_one], 1) / 2.0) if at_one is not None and grid[best] < 1.0 else 1.0
    values = int(sum(len(u) for u in configs))
    return SkewBound(upper, float(grid[best]), len(configs), values, confidence, p_one)


__all__ = ["MIN_GROUP", "SIGMA_GRID", "SkewBound", "configurations", "skew_sigma_bound"]
