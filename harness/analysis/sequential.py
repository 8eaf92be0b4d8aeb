"""Anytime-valid intervals: a confidence sequence for the mean of per-seed values.

A fixed-n t-interval is valid only when the number of seeds was fixed before the data
came in. A study that adds seeds until the answer looks settled "peeks": checked after
every seed from 2 to 40, a 95 % t-interval excludes a true mean of 0 at some point in
about a quarter of null studies (:func:`peeking_error_rates`). A *confidence sequence*
is a family of intervals ``CS_n``, one per number of seeds, that hold the true mean
*simultaneously*::

    P( there is an n >= 2 with mu outside CS_n ) <= alpha

so a study may look after every batch, stop on any rule, and report the interval it
stopped at with its stated confidence. The price is width: about 1.7 to 3 times the
t-interval's at the same n (the table of docs/sequential.md).

The construction (:func:`confidence_sequence`) is the scale-invariant Gaussian-mixture
t-test martingale: Lai (1976)'s t-mixture, with the flat mixture over the mean replaced
by a Gaussian one as in Wang & Ramdas (2023), which makes it a true test martingale (in
the filtration of the scale-invariant statistics) so that Ville's inequality applies.
For a candidate mean ``m`` let ``y_i = x_i - m``, ``S = sum y_i`` and ``Q = sum y_i^2``.
Mixing the likelihood ratio of N(theta sigma, sigma^2) against N(0, sigma^2) over the
standardised effect ``theta ~ N(0, 1/c)`` and over the scale with the right Haar measure
``d sigma / sigma`` gives, in closed form,

    M_n(m) = sqrt(c / (n + c)) * (1 - S^2 / ((n + c) Q)) ** (-n / 2),    M_1 = 1,

a nonnegative martingale under ``mu = m`` whatever sigma is. Ville's inequality,
``P(sup_n M_n(mu) >= 1/alpha) <= alpha``, makes ``CS_n = {m : M_n(m) < 1/alpha}`` a
(1 - alpha) confidence sequence. Solving for ``m`` (``S^2/Q`` is a function of the
t-statistic) gives the interval around the sample mean ``xbar`` with sample sd ``s``:

    r = (alpha sqrt(c / (n + c))) ** (2 / n),   K = (n + c)(1 - r),
    CS_n = xbar +- s sqrt(K (n - 1) / (n (n - K)))     when K < n, else (-inf, inf).

It is scale- and shift-equivariant (it depends on the data through ``xbar`` and ``s``
only), its width shrinks like ``sqrt(log n / n)``, and ``1 / M_n(0)`` is an anytime-valid
p-value. The mixture precision ``c`` spreads the interval's tightness over ``n``: it is
chosen, before any data, to minimise the width at ``n = tightest_at`` (a sequential
study uses ``sqrt(min * max)`` of its seeds).

Why not ``confseq``: the package (0.0.11, January 2023, "early-stage development and
should not be considered stable", tested on Python 3.7-3.9, a C++/Boost build) has
sub-Gaussian boundaries with a *known* variance proxy and betting confidence sequences for
values in a *known* bounded range. Neither fits per-seed loss contrasts, whose scale is
unknown and whose range has no natural bound; the closed form above is a few lines of
numpy and is checked against a direct numerical integration of the mixture in the tests.

References: H. Robbins (1970), "Statistical methods related to the law of the iterated
logarithm"; T. L. Lai (1976), "On confidence sequences", Ann. Statist. 4(2); S. R. Howard,
A. Ramdas, J. McAuliffe, J. Sekhon (2021), "Time-uniform, nonparametric, nonasymptotic
confidence sequences", Ann. Statist. 49(2); H. Wang, A. Ramdas (2023), "Anytime-valid
t-tests and confidence sequences for Gaussian means with unknown variance", arXiv:2310.03722.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import optimize, stats

from harness.analysis.results_types import (
    NEEDS_TWO_SEEDS,
    NOT_DISTINGUISHABLE,
    NOT_TESTABLE,
    SETTLED,
    ConfidenceInterval,
    VerdictKind,
    has_spread,
)
from harness.errors import InputError

METHOD = "anytime-valid t-mixture confidence sequence (Lai 1976; Wang & Ramdas 2023)"
#: Where the interval of :func:`confidence_sequence` is tightest when the caller says nothing.
DEFAULT_TIGHTEST_AT = 10.0


@dataclass(frozen=True)
class ConfidenceSequenceResult:
    """The anytime-valid interval at the current number of seeds.

    ``low``/``high`` hold the mean with probability ``confidence`` *simultaneously* at
    every n (so also at a data-dependent stopping point); they are ``-inf``/``inf`` while
    too few seeds bound it, and None when no interval exists (fewer than 2 seeds, zero
    spread; ``message`` says which). ``pvalue`` is the anytime-valid p-value against
    ``popmean`` (``min(1, 1 / M_n(popmean))``): at most ``1 - confidence`` exactly when the
    interval excludes ``popmean``.
    """

    low: float | None
    high: float | None
    estimate: float
    n: int
    confidence: float
    pvalue: float | None
    popmean: float
    tightest_at: float
    mixture_precision: float
    method: str = METHOD
    message: str = ""

    @property
    def confidence_interval(self) -> ConfidenceInterval | None:
        """The interval as the analysis's other results carry it (None: no interval)."""
        return None if self.low is None or self.high is None else ConfidenceInterval(self.low, self.high)

    @property
    def half_width(self) -> float | None:
        """Half the interval's width (``inf`` while unbounded, None without an interval)."""
        return None if self.low is None or self.high is None else (self.high - self.low) / 2.0

    @property
    def bounded(self) -> bool:
        return self.half_width is not None and math.isfinite(self.half_width)


#: The parent-run metric ``sequential/stopped_by`` (an MLflow metric is a number): why the study stopped.
STOPPED_BY_CODES: dict[str | None, float] = {None: 0.0, "precision": 1.0, "settled": 2.0, "max": 3.0}


@dataclass(frozen=True)
class SequentialSummary:
    """What a sequential study did, for its report: the rule (in words), where the
    confidence sequence was made tightest, the seeds it ran, why it stopped
    (``precision``, ``settled``, ``max``; None while it has not) in words
    (``stop_text``), and every decision of its log (mappings with ``seeds_scheduled``,
    ``n_seeds``, ``estimate``, ``low``, ``high``, ``action``, ``text``)."""

    rule: str
    tightest_at: float
    seeds_scheduled: int
    stopped_by: str | None
    stop_text: str
    decisions: tuple[Mapping[str, Any], ...] = ()

    @property
    def stopped_by_code(self) -> float:
        return STOPPED_BY_CODES.get(self.stopped_by, 0.0)


def _equivalent(cs: ConfidenceSequenceResult, smallest_effect: float | None) -> bool:
    """The bounded anytime-valid interval lies inside +-``smallest_effect``."""
    ci = cs.confidence_interval
    return ci is not None and smallest_effect is not None and ci.inside(-smallest_effect, smallest_effect)


def sequential_verdict(kind: str, cs: ConfidenceSequenceResult, smallest_effect: float | None = None) -> str:
    """The primary verdict read off the anytime-valid interval (``kind``: ``interaction``
    or ``main_effect``). An interval inside +-``smallest_effect`` is an equivalence claim
    with that margin (the interval is a level-alpha test at every n, so also at the stop)."""
    level = f"{cs.confidence:.0%} anytime-valid CI"
    reference = "additive" if kind == "interaction" else "control"
    if cs.low is None or cs.high is None:
        return f"no test possible ({cs.message})" if cs.message else "no test possible"
    if not cs.bounded:
        return f"not distinguishable from {reference} ({level} unbounded at {cs.n} seeds)"
    if cs.low > 0:
        return f"{'superadditive' if kind == 'interaction' else 'better than control'} ({level} excludes 0)"
    if cs.high < 0:
        return f"{'subadditive' if kind == 'interaction' else 'worse than control'} ({level} excludes 0)"
    if _equivalent(cs, smallest_effect):
        return f"equivalent to {reference} within +-{smallest_effect:g} ({level} inside the margin)"
    return f"not distinguishable from {reference}"


def sequential_verdict_kind(cs: ConfidenceSequenceResult, smallest_effect: float | None = None) -> VerdictKind:
    """The kind of :func:`sequential_verdict`'s verdict: settled when the anytime-valid
    interval excludes 0 or lies inside +-``smallest_effect``; not testable without one."""
    ci = cs.confidence_interval
    if ci is None:
        return NOT_TESTABLE
    return SETTLED if cs.bounded and (ci.excludes(0.0) or _equivalent(cs, smallest_effect)) else NOT_DISTINGUISHABLE


# ----------------------------------------------------------------------------- the boundary
def _check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise InputError(f"confidence must lie in (0, 1), got {confidence}")


def half_width_factor(n: Any, mixture_precision: float, alpha: float) -> Any:
    """``sqrt(K (n - 1) / (n (n - K)))``: the half-width in units of the sample sd at n
    seeds (``inf`` where the sequence is still unbounded); vectorised over ``n``."""
    n = np.asarray(n, dtype=float)
    c = float(mixture_precision)
    r = np.exp((2.0 / n) * (math.log(alpha) + 0.5 * np.log(c / (n + c))))
    k = (n + c) * (1.0 - r)
    with np.errstate(divide="ignore", invalid="ignore"):
        factor = np.sqrt(k * (n - 1.0) / (n * (n - k)))
    out = np.where((k < n) & (n >= 2), factor, np.inf)
    return float(out) if out.ndim == 0 else out


@functools.lru_cache(maxsize=64)
def mixture_precision_for(tightest_at: float, alpha: float) -> float:
    """The mixture precision ``c`` that makes the interval narrowest at ``n = tightest_at``
    seeds (a grid over log c, then Brent's method inside the best bracket)."""
    if not tightest_at >= 2:
        raise InputError(f"tightest_at must be at least 2 seeds, got {tightest_at}")
    grid = np.linspace(-16.0, 8.0, 481)  # log c
    widths = np.array([half_width_factor(tightest_at, math.exp(g), alpha) for g in grid])
    best = int(np.argmin(widths))
    lo, hi = grid[max(best - 1, 0)], grid[min(best + 1, len(grid) - 1)]
    res = optimize.minimize_scalar(
        lambda g: half_width_factor(tightest_at, math.exp(g), alpha), bounds=(lo, hi), method="bounded"
    )
    return float(math.exp(res.x if res.fun <= widths[best] else grid[best]))


def log_mixture_martingale(values: np.ndarray, popmean: float, mixture_precision: float) -> float:
    """``log M_n(popmean)`` of the scale-invariant Gaussian-mixture t-martingale (see the
    module docstring); 0 for n <= 1."""
    y = np.asarray(values, dtype=float) - popmean
    n = len(y)
    q = float(np.sum(y * y))
    if n <= 1 or q == 0.0:
        return 0.0
    c = mixture_precision
    ratio = min(float(np.sum(y)) ** 2 / ((n + c) * q), 1.0)  # S^2 / ((n + c) Q) < 1 by Cauchy-Schwarz
    return 0.5 * math.log(c / (n + c)) - 0.5 * n * math.log1p(-ratio)


def confidence_sequence(
    values: Any, *, confidence: float = 0.95, tightest_at: float = DEFAULT_TIGHTEST_AT, popmean: float = 0.0
) -> ConfidenceSequenceResult:
    """Anytime-valid confidence interval for the mean of per-seed values (normal, unknown
    variance), valid simultaneously at every n >= 2: the t-mixture confidence sequence of
    Lai (1976) in the Gaussian-mixture form of Wang & Ramdas (2023); formula in the module
    docstring.

    Parameters
    ----------
    values : array-like of float
        One value per seed (e.g. a paired contrast), in the order the seeds came in.
    confidence : float
        1 - alpha, the probability that *every* interval of the sequence holds the mean.
    tightest_at : float
        The number of seeds at which the interval is made narrowest (fixed before the
        data: choosing it after looking voids the guarantee).
    popmean : float
        The mean the anytime-valid p-value tests.

    Returns
    -------
    ConfidenceSequenceResult
        ``low``, ``high``, ``method``, ``pvalue``, ``estimate``, ``n`` ...

    Examples
    --------
    >>> res = confidence_sequence([0.021, 0.034, 0.012, 0.027, 0.030, 0.018], tightest_at=6)
    >>> round(res.low, 4), round(res.high, 4), res.bounded
    (0.0079, 0.0394, True)
    """
    _check_confidence(confidence)
    x = np.asarray(values, dtype=float).ravel()
    if not np.all(np.isfinite(x)):
        raise InputError("confidence_sequence: values must be finite numbers (a diverged seed is dropped before)")
    alpha = 1.0 - confidence
    c = mixture_precision_for(float(tightest_at), alpha)
    n = len(x)
    common = dict(n=n, confidence=confidence, popmean=popmean, tightest_at=float(tightest_at), mixture_precision=c)
    estimate = float(np.mean(x)) if n else math.nan
    if n < 2:
        reason = "no seed" if n == 0 else f"1 seed: {NEEDS_TWO_SEEDS}"
        return ConfidenceSequenceResult(None, None, estimate, pvalue=None, message=reason, **common)
    if not has_spread(x):
        message = "every seed gives the same value (zero spread): no test possible"
        return ConfidenceSequenceResult(None, None, estimate, pvalue=None, message=message, **common)
    sd = float(np.std(x, ddof=1))
    half = sd * half_width_factor(n, c, alpha)
    pvalue = min(1.0, math.exp(-log_mixture_martingale(x, popmean, c)))
    message = "" if math.isfinite(half) else f"unbounded at {n} seeds (too few for an anytime-valid interval)"
    return ConfidenceSequenceResult(
        estimate - half, estimate + half, estimate, pvalue=pvalue, message=message, **common
    )


def confidence_sequence_path(
    values: np.ndarray, *, confidence: float = 0.95, tightest_at: float = DEFAULT_TIGHTEST_AT
) -> ConfidenceInterval:
    """The sequence at every prefix of ``values`` along the last axis, vectorised for
    simulations: ``low[..., k]``/``high[..., k]`` is the interval after ``k + 1`` seeds
    (``-inf``/``inf`` while unbounded, NaN at the first seed)."""
    _check_confidence(confidence)
    alpha = 1.0 - confidence
    c = mixture_precision_for(float(tightest_at), alpha)
    n, mean, var = _running_mean_var(values)
    half = np.sqrt(var) * half_width_factor(np.maximum(n, 2.0), c, alpha)
    half = np.where(n >= 2, half, np.nan)
    return ConfidenceInterval(mean - half, mean + half)


def t_interval_path(values: np.ndarray, *, confidence: float = 0.95) -> ConfidenceInterval:
    """The fixed-n t-interval at every prefix (what a researcher who peeks would look at)."""
    n, mean, var = _running_mean_var(values)
    quantile = stats.t.ppf(0.5 + confidence / 2.0, np.maximum(n - 1.0, 1.0))
    half = np.where(n >= 2, quantile * np.sqrt(var / n), np.nan)
    return ConfidenceInterval(mean - half, mean + half)


def _running_mean_var(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The mean and sample variance (ddof=1) of every prefix along the last axis, from
    running sums: with S_k = sum x_i and Q_k = sum x_i^2 over the first k values,
    ``mean_k = S_k / k`` and ``var_k = (Q_k - k mean_k^2) / (k - 1)``, clipped at 0
    against rounding (NaN at k = 1). Returns ``(k, mean, var)``, ``k = 1 .. K`` as floats."""
    x = np.asarray(values, dtype=float)
    n = np.arange(1, x.shape[-1] + 1, dtype=float)
    mean = np.cumsum(x, axis=-1) / n
    with np.errstate(divide="ignore", invalid="ignore"):
        var = (np.cumsum(x * x, axis=-1) - n * mean * mean) / (n - 1.0)  # NaN at n = 1
    return n, mean, np.maximum(var, 0.0)


__all__ = [
    "DEFAULT_TIGHTEST_AT",
    "METHOD",
    "STOPPED_BY_CODES",
    "ConfidenceSequenceResult",
    "SequentialSummary",
    "confidence_sequence",
    "confidence_sequence_path",
    "half_width_factor",
    "log_mixture_martingale",
    "mixture_precision_for",
    "sequential_verdict",
    "sequential_verdict_kind",
    "t_interval_path",
]
