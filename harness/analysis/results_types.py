"""Frozen result objects of the analysis, in the style of ``scipy.stats``.

Every statistic returns one of these: an ``estimate``, a ``confidence_interval`` with
``.low``/``.high`` (``None`` when it cannot be computed, e.g. one seed: the ``message``
then says why, never a silent NaN), a ``pvalue``, the number of seeds that entered
(``n_seeds``) and the per-seed values, the ``method`` used, the number of seed blocks
dropped because a trial was missing, diverged or failed (``n_dropped``), and a
``verdict`` worded with the uncertainty in mind.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, NamedTuple

import numpy as np

from harness.errors import InputError

NEEDS_TWO_SEEDS = "needs at least 2 seeds for an interval"


class ConfidenceInterval(NamedTuple):
    """A two-sided interval, like ``scipy.stats._result_classes.ConfidenceInterval``."""

    low: float
    high: float

    def excludes(self, value: float) -> bool:
        """True when ``value`` lies outside [low, high]."""
        return bool(value < self.low or value > self.high)


def _fmt(x: float | None, signed: bool = True, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:+.{digits}f}" if signed else f"{x:.{digits}f}"


def format_interval(ci: ConfidenceInterval | None, signed: bool = True, digits: int = 3) -> str:
    """``[low, high]`` with signs, or ``n/a`` when there is no interval."""
    if ci is None:
        return "n/a"
    return f"[{_fmt(ci.low, signed, digits)}, {_fmt(ci.high, signed, digits)}]"


def format_pvalue(p: float | None) -> str:
    if p is None or math.isnan(p):
        return "n/a"
    return f"{p:.2g}" if p >= 1e-3 else f"{p:.1e}"


def has_spread(values: np.ndarray) -> bool:
    """True when the values are not all equal (up to rounding): a t-statistic is defined."""
    values = np.asarray(values, dtype=float)
    if len(values) < 2:
        return False
    return bool(np.std(values, ddof=1) > 1e-12 * max(1.0, float(np.max(np.abs(values)))))


def _readonly(values: Any) -> np.ndarray:
    arr = np.array(values, dtype=float)
    arr.setflags(write=False)
    return arr


@dataclass(frozen=True)
class AnalysisSettings:
    """What the report analyses: the 2x2 factorial's variant names, the tau reference.

    The factorial is {``base``, ``a``} x {``b``, ``ab``}: ``a`` and ``b`` each change one
    component of ``base`` and ``ab`` changes both (defaults: baseline, ega, mope,
    ega-mope). ``tau_reference`` +- ``tau_margin`` is the equivalence region of the TOST
    test for the learned EGA threshold. ``seed`` drives every resampling (bootstrap,
    permutation), so a report is reproducible.
    """

    base: str = "baseline"
    a: str = "ega"
    b: str = "mope"
    ab: str = "ega-mope"
    metric: str = "val_loss"
    tau_reference: float = 0.35
    tau_margin: float = 0.05
    confidence: float = 0.95
    power: float = 0.8
    n_resamples: int = 9999
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0.0 < self.confidence < 1.0:
            raise InputError(f"AnalysisSettings.confidence must lie in (0, 1), got {self.confidence}")
        if not 0.0 < self.power < 1.0:
            raise InputError(f"AnalysisSettings.power must lie in (0, 1), got {self.power}")
        if not self.tau_margin > 0.0:
            raise InputError(f"AnalysisSettings.tau_margin must be positive, got {self.tau_margin}")
        if self.n_resamples < 1:
            raise InputError(f"AnalysisSettings.n_resamples must be >= 1, got {self.n_resamples}")
        names = (self.base, self.a, self.b, self.ab)
        if len(set(names)) != 4:
            raise InputError(f"AnalysisSettings: the four factorial variants must differ, got {names}")

    @property
    def factorial(self) -> dict[str, str]:
        return {"base": self.base, "a": self.a, "b": self.b, "ab": self.ab}

    @classmethod
    def from_mapping(cls, spec: Mapping[str, Any] | None) -> AnalysisSettings:
        """From a study spec's ``analysis:`` block, e.g.
        ``{"factorial": {"base": ..., "a": ..., "b": ..., "ab": ...}, "tau": {"reference": 0.35, "margin": 0.05},
        "confidence": 0.95}``; flat field names are accepted too. Unknown keys are an error."""
        if not spec:
            return cls()
        known = {f.name for f in fields(cls)}
        kwargs: dict[str, Any] = {}
        for key, value in dict(spec).items():
            if key == "factorial":
                for sub, name in dict(value or {}).items():
                    if sub not in ("base", "a", "b", "ab"):
                        raise InputError(f"analysis.factorial: unknown key {sub!r}; known: base, a, b, ab")
                    kwargs[sub] = name
            elif key == "tau":
                for sub, v in dict(value or {}).items():
                    if sub not in ("reference", "margin"):
                        raise InputError(f"analysis.tau: unknown key {sub!r}; known: reference, margin")
                    kwargs[f"tau_{sub}"] = v
            elif key in known:
                kwargs[key] = value
            else:
                raise InputError(f"analysis: unknown key {key!r}; known: factorial, tau, {', '.join(sorted(known))}")
        return cls(**kwargs)


@dataclass(frozen=True)
class ContrastResult:
    """A paired-seed contrast (a main effect or the 2x2 interaction) in one cell or
    averaged over cells.

    ``per_seed`` holds the contrast of each complete seed block (``seeds`` its seed ids);
    ``confidence_interval`` is the t-interval and ``pvalue`` the matching t-test p-value;
    ``bootstrap_interval`` is a bootstrap interval over seeds (``bootstrap_method``:
    BCa, or percentile with fewer than 10 seeds); ``permutation_pvalue`` is the sign-flip
    (paired permutation) p-value. Positive estimates mean: the treatment lowers the loss
    (main effect), or the combination gains more than the two parts (interaction).
    """

    name: str
    kind: str  # "interaction" | "main_effect"
    metric: str
    estimate: float
    confidence_interval: ConfidenceInterval | None
    pvalue: float | None
    n_seeds: int
    per_seed: np.ndarray
    seeds: tuple
    method: str
    n_dropped: int = 0
    dropped_seeds: tuple = ()
    bootstrap_interval: ConfidenceInterval | None = None
    bootstrap_method: str | None = None
    permutation_pvalue: float | None = None
    sd: float | None = None
    confidence: float = 0.95
    n_cells: int = 1
    cell: Mapping[str, Any] = field(default_factory=dict)
    message: str = ""

    @property
    def standard_error(self) -> float | None:
        return None if self.sd is None or self.n_seeds < 2 else self.sd / math.sqrt(self.n_seeds)

    @property
    def verdict(self) -> str:
        """Words that do not claim more than the interval shows."""
        if self.n_seeds < 2 or self.confidence_interval is None:
            return "too few seeds" if self.n_seeds < 2 else (self.message or "no interval")
        ci = self.confidence_interval
        level = f"{self.confidence:.0%} CI"
        if self.kind == "interaction":
            if ci.low > 0:
                return f"superadditive ({level} excludes 0)"
            if ci.high < 0:
                return f"subadditive ({level} excludes 0)"
            return "not distinguishable from additive"
        if ci.low > 0:
            return f"better than control ({level} excludes 0)"
        if ci.high < 0:
            return f"worse than control ({level} excludes 0)"
        return "not distinguishable from control"

    def to_row(self) -> dict[str, Any]:
        """One flat row for tables (polars/parquet)."""
        ci, boot = self.confidence_interval, self.bootstrap_interval
        return {
            "effect": self.name,
            "kind": self.kind,
            "metric": self.metric,
            "estimate": float(self.estimate),
            "ci_low": None if ci is None else float(ci.low),
            "ci_high": None if ci is None else float(ci.high),
            "pvalue": self.pvalue,
            "boot_low": None if boot is None else float(boot.low),
            "boot_high": None if boot is None else float(boot.high),
            "permutation_pvalue": self.permutation_pvalue,
            "sd": self.sd,
            "n_seeds": self.n_seeds,
            "n_dropped": self.n_dropped,
            "n_cells": self.n_cells,
            "method": self.method,
            "verdict": self.verdict,
            "message": self.message,
        }


@dataclass(frozen=True)
class TrendResult:
    """The slope of an effect against ``log(x)`` (x = parameter count or context length).

    ``estimate`` is the slope per unit of natural log (an e-fold increase of x);
    ``per_seed`` the slope fitted within each seed; ``x_values`` the distinct x of the
    cells and ``cell_estimates`` the effect averaged over seeds there (for plots).
    """

    effect: str
    against: str
    metric: str
    estimate: float
    confidence_interval: ConfidenceInterval | None
    pvalue: float | None
    n_seeds: int
    per_seed: np.ndarray
    seeds: tuple
    method: str
    intercept: float
    x_values: np.ndarray
    cell_estimates: np.ndarray
    n_dropped: int = 0
    confidence: float = 0.95
    message: str = ""

    @property
    def verdict(self) -> str:
        if self.confidence_interval is None:
            return self.message or "too few seeds"
        ci = self.confidence_interval
        what = "size" if self.against == "params" else "context" if self.against == "context_length" else self.against
        if ci.low > 0:
            return f"effect grows with {what} ({self.confidence:.0%} CI of slope > 0)"
        if ci.high < 0:
            return f"effect shrinks with {what} ({self.confidence:.0%} CI of slope < 0)"
        return f"no detectable trend with {what}"

    def to_row(self) -> dict[str, Any]:
        ci = self.confidence_interval
        return {
            "effect": self.effect,
            "against": f"log({self.against})",
            "metric": self.metric,
            "slope": float(self.estimate),
            "ci_low": None if ci is None else float(ci.low),
            "ci_high": None if ci is None else float(ci.high),
            "pvalue": self.pvalue,
            "n_seeds": self.n_seeds,
            "n_dropped": self.n_dropped,
            "n_x": int(len(self.x_values)),
            "method": self.method,
            "verdict": self.verdict,
            "message": self.message,
        }


@dataclass(frozen=True)
class SeedsNeededResult:
    """Seeds needed to detect ``effect`` with ``power`` at level ``alpha``, given the
    seed-to-seed standard deviation ``sd`` of the per-seed contrast (paired design,
    one-sample t-test on the per-seed contrasts)."""

    n_seeds: int | None
    effect: float
    sd: float
    power: float
    alpha: float
    alternative: str
    effect_size: float
    method: str
    message: str = ""


@dataclass(frozen=True)
class HeterogeneityResult:
    """Does the learned tau differ between the levels of ``factor``? One-way ANOVA and
    Kruskal-Wallis across per-run values."""

    factor: str
    levels: tuple
    group_means: tuple
    group_sizes: tuple
    anova_pvalue: float | None
    kruskal_pvalue: float | None
    message: str = ""

    @property
    def verdict(self) -> str:
        if self.anova_pvalue is None:
            return self.message or "not testable"
        return (
            f"differs across {self.factor} (ANOVA p={format_pvalue(self.anova_pvalue)})"
            if self.anova_pvalue < 0.05
            else f"no detectable difference across {self.factor} (ANOVA p={format_pvalue(self.anova_pvalue)})"
        )


@dataclass(frozen=True)
class OpenFractionResult:
    """The fraction of open gates beside two explanations of it.

    ``gaussian_tail`` = mean over runs of 1 - Phi(tau): what a standard-normal
    (z-normalised) energy predicts. ``difference`` = open - tail per run, with its
    t-interval: an interval covering 0 means the Gaussian tail alone explains the
    measured fraction. ``content_fraction`` is the corpus's content-word fraction and
    ``ground_truth`` the true salient fraction of a synthetic corpus, when known.
    """

    estimate: float
    confidence_interval: ConfidenceInterval | None
    gaussian_tail: float
    difference: float
    difference_interval: ConfidenceInterval | None
    difference_pvalue: float | None
    n_runs: int
    content_fraction: float | None = None
    ground_truth: float | None = None
    confidence: float = 0.95
    message: str = ""

    @property
    def verdict(self) -> str:
        parts = [f"open {self.estimate:.3f} vs 1-Phi(tau) {self.gaussian_tail:.3f}"]
        if self.difference_interval is None:
            parts.append("(too few runs to compare)")
        elif self.difference_interval.excludes(0.0):
            parts.append("(differs from the Gaussian tail: CI of the difference excludes 0)")
        else:
            parts.append("(consistent with the Gaussian tail alone)")
        if self.content_fraction is not None:
            parts.append(f"; content-word fraction {self.content_fraction:.3f}")
        if self.ground_truth is not None:
            parts.append(f"; ground truth {self.ground_truth:.3f}")
        return " ".join(parts)


@dataclass(frozen=True)
class TauStabilityResult:
    """The learned EGA threshold across seeds, against ``reference`` +- ``margin``.

    ``estimate`` is the mean over seeds of the per-seed tau (each run's mean over layers
    and heads, averaged over the seed's runs); ``confidence_interval`` its t-interval;
    ``tost_pvalue`` the two one-sided tests' p-value (max of the two): below
    1 - ``confidence`` the mean is *equivalent* to the reference within the margin.
    ``pvalue`` is the ordinary two-sided t-test against the reference.
    """

    estimate: float
    confidence_interval: ConfidenceInterval | None
    pvalue: float | None
    tost_pvalue: float | None
    equivalent: bool
    reference: float
    margin: float
    n_seeds: int
    n_runs: int
    per_seed: np.ndarray
    seeds: tuple
    method: str
    head_spread: float | None = None
    heterogeneity: tuple = ()
    open_fraction: OpenFractionResult | None = None
    n_dropped: int = 0
    confidence: float = 0.95
    message: str = ""

    @property
    def verdict(self) -> str:
        if self.tost_pvalue is None:
            return "too few seeds" if self.n_seeds < 2 else (self.message or "not testable")
        band = f"{self.reference:g} ± {self.margin:g}"
        p = format_pvalue(self.tost_pvalue)
        return f"equivalent to {band} (TOST p={p})" if self.equivalent else f"not equivalent to {band} (TOST p={p})"


@dataclass(frozen=True)
class MopeScalesResult:
    """Clusters of the learned MOPE widths sigma on a log scale.

    ``centres`` (sigma, ascending, in positions = characters) are the cluster means of
    log(sigma) exponentiated; ``k`` was chosen by ``criterion`` (values per candidate k
    in ``scores``); ``nearest_scale`` names, for each centre, the closest corpus length
    scale in log distance (``corpus_lengths``: e.g. character 1, word, clause,
    sentence lengths in characters).
    """

    k: int
    centres: np.ndarray
    weights: np.ndarray
    labels: np.ndarray
    scores: Mapping[int, float]
    criterion: str
    n: int
    corpus_lengths: Mapping[str, float] = field(default_factory=dict)
    nearest_scale: tuple = ()
    method: str = ""
    message: str = ""


__all__ = [
    "NEEDS_TWO_SEEDS",
    "AnalysisSettings",
    "ConfidenceInterval",
    "ContrastResult",
    "HeterogeneityResult",
    "MopeScalesResult",
    "OpenFractionResult",
    "SeedsNeededResult",
    "TauStabilityResult",
    "TrendResult",
    "format_interval",
    "format_pvalue",
    "_readonly",
    "has_spread",
]
