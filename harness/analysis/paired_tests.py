"""Paired tests as small objects: each reads the per-seed values of a paired contrast (the
seed's ``L_control - L_treatment``, or any per-seed quantity) and returns a frozen
:class:`~harness.analysis.results_types.TestResult` (estimate, interval, p-value, method, note).

A test is a frozen object whose fields are its options (level, alternative, resamples, band)
and whose ``run(diffs, *, rng=None)`` is the test itself (:class:`PairedTest`): the contrasts
(:func:`~harness.analysis.interaction_contrast`, :func:`~harness.analysis.main_effect`) keep
the results of the tests they ran in :attr:`ContrastResult.tests
<harness.analysis.results_types.ContrastResult.tests>`, and the calibration runs the very same
objects on thousands of simulated studies at once (``diffs`` of shape (studies, seeds): every
field of the result is then an array over studies).

- :class:`TTest`: the one-sample t-test and t-interval of the mean (``scipy.stats.ttest_1samp``).
- :class:`SignFlip`: the paired permutation test, exact over all 2^n sign flips when it can be.
- :class:`BCa`: the bias-corrected and accelerated bootstrap interval (``scipy.stats.bootstrap``),
  shown only from :data:`~harness.analysis.results_types.BOOTSTRAP_MIN_SEEDS` seeds.
- :class:`TOST`: two one-sided t-tests of equivalence to a band ``reference +- margin``.
- :class:`Shapiro`: Shapiro-Wilk's check of the shape of the values (:mod:`harness.analysis.shape`).

The functions below them (:func:`t_interval`, :func:`bootstrap_interval`,
:func:`sign_flip_pvalue`, :func:`tost_pvalue`) are the formulas the objects run, kept as
functions for the callers that need one number (a trend's slope test, a divergence rate's
sign flip).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np
from scipy import stats

from harness.analysis.results_types import (
    BOOTSTRAP_MIN_SEEDS,
    BOOTSTRAP_SMALL_N,
    ConfidenceInterval,
    TestResult,
)
from harness.analysis.shape import SHAPE_ALPHA, SHAPE_MIN_SEEDS, SHAPE_TEST, shape_check, shapiro_pvalues

Alternative = Literal["two-sided", "less", "greater"]
_BOOTSTRAP_BATCH_FLOATS = 20_000_000  # resampled values held at once by a batched bootstrap (160 MB)


# ----------------------------------------------------------------------------- formulas
def t_interval(
    values: np.ndarray,
    *,
    confidence: float = 0.95,
    alternative: str = "two-sided",
    popmean: float = 0.0,
    axis: int = -1,
) -> tuple[ConfidenceInterval, Any]:
    """The t-interval of the mean and the one-sample t-test p-value against ``popmean``
    (``scipy.stats.ttest_1samp``), along ``axis``: floats for one sample, arrays for a
    batch (the calibration simulates thousands of studies in one call)."""
    res = stats.ttest_1samp(values, popmean, alternative=alternative, axis=axis)
    ci = res.confidence_interval(confidence_level=confidence)
    if np.ndim(res.pvalue) == 0:
        return ConfidenceInterval(float(ci.low), float(ci.high)), float(res.pvalue)
    return ConfidenceInterval(ci.low, ci.high), res.pvalue


def bootstrap_interval(
    values: np.ndarray,
    *,
    confidence: float = 0.95,
    n_resamples: int = 9999,
    rng: Any = None,
    method: str = "BCa",
    axis: int = -1,
) -> ConfidenceInterval:
    """Bootstrap interval of the mean over seeds (``scipy.stats.bootstrap``), along
    ``axis``. The report shows only BCa, and only from :data:`BOOTSTRAP_MIN_SEEDS` seeds:
    below that both BCa and percentile under-cover (benchmarks/calibration.py)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # degenerate resamples give NaN: the caller checks
        res = stats.bootstrap(
            (values,),
            np.mean,
            n_resamples=n_resamples,
            confidence_level=confidence,
            method=method,
            rng=rng,
            axis=axis,
            vectorized=True,
            batch=max(1, min(n_resamples, _BOOTSTRAP_BATCH_FLOATS // max(1, np.size(values)))),
        )
    ci = res.confidence_interval
    if np.ndim(ci.low) == 0:
        return ConfidenceInterval(float(ci.low), float(ci.high))
    return ConfidenceInterval(ci.low, ci.high)


def sign_flip_pvalue(
    values: np.ndarray, *, alternative: str = "two-sided", n_resamples: int = 9999, rng: Any = None, axis: int = -1
) -> Any:
    """Paired permutation test: under H0 each seed's contrast is as likely to have either
    sign (``scipy.stats.permutation_test``, statistic the mean). Exact (all 2^n sign
    patterns) when 2^n <= n_resamples, else random flips. Along ``axis`` for a batch."""
    res = stats.permutation_test(
        (values,),
        lambda x, axis: np.mean(x, axis=axis),
        permutation_type="samples",
        vectorized=True,
        n_resamples=n_resamples,
        alternative=alternative,
        rng=rng,
        axis=axis,
    )
    return float(res.pvalue) if np.ndim(res.pvalue) == 0 else res.pvalue


def tost_pvalue(values: np.ndarray, low: float, high: float, *, axis: int = -1) -> Any:
    """Two one-sided t-tests (Schuirmann): H0 mean <= low, and H0 mean >= high.

    ``p = max(P(T_{n-1} >= (m - low)/se), P(T_{n-1} <= (m - high)/se))``; below alpha
    the mean lies within (low, high) at level alpha, i.e. the (1 - 2 alpha) t-interval
    lies inside the bounds. Along ``axis`` for a batch of samples.
    """
    p_low = stats.ttest_1samp(values, low, alternative="greater", axis=axis).pvalue
    p_high = stats.ttest_1samp(values, high, alternative="less", axis=axis).pvalue
    p = np.maximum(p_low, p_high)
    return float(p) if np.ndim(p) == 0 else p


def _mean(diffs: np.ndarray) -> Any:
    """The mean over seeds (the last axis): a float for one study, an array for a batch."""
    m = np.mean(diffs, axis=-1)
    return float(m) if np.ndim(m) == 0 else m


# ----------------------------------------------------------------------------- the tests
@runtime_checkable
class PairedTest(Protocol):
    """A test of per-seed values: ``run`` takes ``diffs`` of shape (seeds,) or, for a batch of
    studies, (studies, seeds), and a ``rng`` (seed or ``numpy.random.Generator``) where it
    resamples; it returns a :class:`~harness.analysis.results_types.TestResult`."""

    def run(self, diffs: np.ndarray, *, rng: Any = None) -> TestResult: ...


@dataclass(frozen=True)
class TTest:
    """The one-sample t-test of the mean against ``popmean`` and its t-interval:
    ``t = (m - popmean) / (s / sqrt(n))`` on n - 1 degrees of freedom, interval
    ``m +- t_{(1+confidence)/2, n-1} s / sqrt(n)`` (one-sided for ``alternative`` "less" or
    "greater"). Covers well from 2 seeds for normal values (docs/calibration.md). No resampling."""

    confidence: float = 0.95
    alternative: Alternative = "two-sided"
    popmean: float = 0.0

    def run(self, diffs: np.ndarray, *, rng: Any = None) -> TestResult:
        ci, p = t_interval(diffs, confidence=self.confidence, alternative=self.alternative, popmean=self.popmean)
        return TestResult(_mean(diffs), ci, p, f"paired t over seeds ({self.alternative})")


@dataclass(frozen=True)
class SignFlip:
    """The paired permutation test of the mean: under H0 each seed's value is as likely to have
    either sign, so ``p`` is the share of the 2^n sign patterns (all of them when
    ``2^n <= n_resamples``, else ``n_resamples`` random ones drawn from ``rng``) whose mean is
    as extreme as the observed one. Assumes symmetric values; its smallest possible two-sided p
    is ``2 / 2^n`` (0.0625 at 5 seeds), and the note says so below 6 seeds."""

    alternative: Alternative = "two-sided"
    n_resamples: int = 9999

    def run(self, diffs: np.ndarray, *, rng: Any = None) -> TestResult:
        p = sign_flip_pvalue(diffs, alternative=self.alternative, n_resamples=self.n_resamples, rng=rng)
        n = np.shape(diffs)[-1]
        note = ""
        if n < 6 and self.alternative == "two-sided":
            note = f"{n} seeds: the smallest possible sign-flip p-value is {2 / 2**n:.3g}"
        exact = "exact" if 2**n <= self.n_resamples else f"{self.n_resamples} random flips"
        return TestResult(_mean(diffs), None, p, f"sign-flip ({exact}, {self.alternative})", note)


@dataclass(frozen=True)
class BCa:
    """The bootstrap interval of the mean over seeds (``scipy.stats.bootstrap``; ``method``
    "BCa": bias-corrected and accelerated, Efron 1987; "percentile" only for the calibration's
    comparison), from ``n_resamples`` resamples drawn from ``rng``. None below ``min_seeds``
    seeds (both under-cover there: 83 % at 5 seeds for a nominal 95 %) and where the resamples
    are degenerate; the note says which. For a batch the interval is returned as computed
    (NaN where undefined)."""

    confidence: float = 0.95
    n_resamples: int = 9999
    method: str = "BCa"
    min_seeds: int = BOOTSTRAP_MIN_SEEDS

    def run(self, diffs: np.ndarray, *, rng: Any = None) -> TestResult:
        n = np.shape(diffs)[-1]
        if n < self.min_seeds:
            small = BOOTSTRAP_SMALL_N if self.min_seeds == BOOTSTRAP_MIN_SEEDS else f"below {self.min_seeds} seeds"
            return TestResult(_mean(diffs), None, None, self.method, small)
        ci = bootstrap_interval(
            diffs, confidence=self.confidence, n_resamples=self.n_resamples, rng=rng, method=self.method
        )
        if np.ndim(ci.low) == 0 and not (np.isfinite(ci.low) and np.isfinite(ci.high)):
            undefined = f"{self.method} bootstrap interval undefined (degenerate resamples)"
            return TestResult(_mean(diffs), None, None, self.method, undefined)
        return TestResult(_mean(diffs), ci, None, self.method)


@dataclass(frozen=True)
class TOST:
    """Two one-sided t-tests (Schuirmann 1987) of equivalence to the band
    ``reference +- margin``: ``p = max(P(T >= (m - low)/se), P(T <= (m - high)/se))``, below
    alpha when the ``1 - 2 alpha`` t-interval (``interval``, alpha = 1 - ``confidence``) lies
    inside the band. A claim of sameness needs it; a t-test that fails to reject is not one."""

    reference: float
    margin: float
    confidence: float = 0.95

    def run(self, diffs: np.ndarray, *, rng: Any = None) -> TestResult:
        p = tost_pvalue(diffs, self.reference - self.margin, self.reference + self.margin)
        level = 1.0 - 2.0 * (1.0 - self.confidence)
        e = stats.ttest_1samp(diffs, self.reference, axis=-1).confidence_interval(confidence_level=level)
        interval = ConfidenceInterval(float(e.low), float(e.high)) if np.ndim(p) == 0 else ConfidenceInterval(*e)
        return TestResult(_mean(diffs), interval, p, f"TOST vs {self.reference:g} ± {self.margin:g}")


@dataclass(frozen=True)
class Shapiro:
    """Shapiro-Wilk's test of normality of the per-seed values (``scipy.stats.shapiro``, from
    3 seeds): the check beside every t-based verdict (:mod:`harness.analysis.shape`). ``estimate``
    is the sample skewness (bias-adjusted) and ``p_value`` Shapiro-Wilk's p; it fires below
    :data:`~harness.analysis.shape.SHAPE_ALPHA` = 0.10, and a claim is then withheld. No p
    (None; NaN in a batch) below 3 seeds or with zero spread."""

    def run(self, diffs: np.ndarray, *, rng: Any = None) -> TestResult:
        values = np.asarray(diffs, dtype=float)
        if values.ndim > 1:
            skewness = stats.skew(values, axis=-1, bias=False) if values.shape[-1] >= SHAPE_MIN_SEEDS else math.nan
            return TestResult(skewness, None, shapiro_pvalues(values), SHAPE_TEST)
        check = shape_check(values)
        if check is None:
            return TestResult(
                math.nan, None, None, SHAPE_TEST, f"no shape check (fewer than {SHAPE_MIN_SEEDS} seeds or zero spread)"
            )
        return TestResult(check.skewness, None, check.pvalue, SHAPE_TEST, check.words if check.fires else "")

    def fires(self, diffs: np.ndarray) -> Any:
        """Whether the check fires (p < :data:`~harness.analysis.shape.SHAPE_ALPHA`): a bool, or
        an array over a batch of studies (False where there is no p)."""
        return self.run(diffs).rejects(SHAPE_ALPHA)


__all__ = [
    "BCa",
    "PairedTest",
    "SignFlip",
    "Shapiro",
    "TOST",
    "TTest",
    "bootstrap_interval",
    "sign_flip_pvalue",
    "t_interval",
    "tost_pvalue",
]
