"""Frozen result objects of tau's analysis (:mod:`harness.analysis.tau`): its stability
against the reference band, its heterogeneity across the levels of a factor, and the
open fraction of the gates beside the Gaussian tail. The conventions are those of
:mod:`harness.analysis.results_types`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from harness.analysis.results_types import (
    NOT_DISTINGUISHABLE,
    NOT_TESTABLE,
    SETTLED,
    ConfidenceInterval,
    VerdictKind,
    format_interval,
    format_pvalue,
    interval_kind,
    no_test_reason,
    readonly_array,
)


@dataclass(frozen=True)
class HeterogeneityResult:
    """Does the learned tau differ between the levels of ``factor``, with the seed as the
    unit?

    ``design`` is ``"crossed"`` (the same seeds run every level: repeated-measures ANOVA
    on the seed x level means, ``statsmodels`` ``AnovaRM``, with Friedman's test, or
    Wilcoxon's for two levels, as the rank check), ``"nested"`` (each seed runs one
    level: one-way ANOVA on the per-seed means, Kruskal-Wallis as the rank check) or
    ``"runs"`` (no seed column: runs are the units). ``pvalue_holm`` is adjusted across
    the factors tested (Holm). ``equivalence_pvalue`` is the largest over levels of the
    TOST p-value of that level's mean against ``reference`` +- ``margin``
    (intersection-union test): below ``alpha`` the mean lies within the band at *every*
    level, the only basis for "converges to the reference whatever the factor".
    """

    factor: str
    levels: tuple
    group_means: tuple
    group_sizes: tuple
    design: str
    test: str
    pvalue: float | None
    rank_test: str = ""
    rank_pvalue: float | None = None
    pvalue_holm: float | None = None
    n_seeds: int = 0
    dropped_seeds: tuple = ()
    reference: float | None = None
    margin: float | None = None
    equivalence_pvalue: float | None = None
    equivalence_pvalue_holm: float | None = None
    alpha: float = 0.05
    message: str = ""

    @property
    def differs(self) -> bool:
        p = self.pvalue_holm if self.pvalue_holm is not None else self.pvalue
        return p is not None and p < self.alpha

    @property
    def equivalent_at_every_level(self) -> bool:
        p = self.equivalence_pvalue_holm if self.equivalence_pvalue_holm is not None else self.equivalence_pvalue
        return p is not None and p < self.alpha

    @property
    def verdict_kind(self) -> VerdictKind:
        """Settled when tau differs across the levels, or lies within the band at every level."""
        if self.pvalue is None:
            return NOT_TESTABLE
        return SETTLED if self.differs or self.equivalent_at_every_level else NOT_DISTINGUISHABLE

    @property
    def verdict(self) -> str:
        if self.pvalue is None:
            return self.message or "no test possible"
        p = f"{self.test} p={format_pvalue(self.pvalue)}"
        if self.pvalue_holm is not None:
            p += f", Holm p={format_pvalue(self.pvalue_holm)}"
        head = (
            f"differs across {self.factor} ({p})" if self.differs else f"not distinguishable across {self.factor} ({p})"
        )
        if self.equivalence_pvalue is None or self.reference is None:
            return head
        band = f"{self.reference:g} ± {self.margin:g}"
        q = self.equivalence_pvalue_holm if self.equivalence_pvalue_holm is not None else self.equivalence_pvalue
        if self.equivalent_at_every_level:
            return f"{head}; mean within {band} at every level (TOST, largest p={format_pvalue(q)})"
        return f"{head}; equivalence to {band} at every level not shown (TOST, largest p={format_pvalue(q)})"


@dataclass(frozen=True)
class OpenFractionResult:
    """The fraction of open gates beside two readings of it.

    ``gaussian_tail`` is what standard-normal (z-normalised) energies predict: per run
    the mean over heads of ``1 - Phi(tau_h)`` (from ``tau_heads``), or ``1 - Phi(tau_mean)``
    when the table has no per-head taus (``reference_method`` says which; the latter is
    biased whenever heads differ). ``difference`` = open - tail (per-seed means) with
    its t-interval and t-test p-value: an interval covering 0 means the measured
    fraction is *consistent with* the tail, not that the tail explains it.
    ``content_fraction`` is the corpus's content-word fraction and ``ground_truth`` the
    true salient fraction of a synthetic corpus, when known. ``difference_per_seed`` holds the
    per-seed values of open - tail (the unit the interval is over).
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
    reference_method: str = "mean over heads of 1 - Phi(tau_h)"
    n_seeds: int = 0
    difference_per_seed: np.ndarray = field(default_factory=lambda: readonly_array([]))

    @property
    def test(self) -> str:
        return "t-test of open - tail over seeds"

    @property
    def verdict_kind(self) -> VerdictKind:
        """The interval of the difference open - tail decides."""
        return interval_kind(self.difference_interval)

    @property
    def verdict(self) -> str:
        parts = [f"open {self.estimate:.3f} vs Gaussian tail {self.gaussian_tail:.3f}:"]
        if self.difference_interval is None:
            parts.append(self.message if self.message.startswith("no test possible") else "no test possible")
        elif self.difference_interval.excludes(0.0):
            parts.append(f"differs from the Gaussian tail ({self.confidence:.0%} CI of the difference excludes 0)")
        else:
            parts.append(f"consistent with the Gaussian tail ({self.confidence:.0%} CI of the difference covers 0)")
        if self.content_fraction is not None:
            parts.append(f"; content-word fraction {self.content_fraction:.3f}")
        if self.ground_truth is not None:
            parts.append(f"; ground truth {self.ground_truth:.3f}")
        return " ".join(parts).replace(" ;", ";")


@dataclass(frozen=True)
class CellStability:
    """Where a new seed's run lands in one cell of a design with several gated runs per
    seed (the cells are what tells a seed's runs apart: variant, size, context...):
    ``prediction_interval`` is the t prediction interval over the cell's per-seed taus
    (None below 2 seeds or with zero spread), ``within_band_fraction`` the share of the
    cell's runs inside the band and ``stable`` whether the interval lies inside it."""

    label: str
    n_seeds: int
    prediction_interval: ConfidenceInterval | None
    within_band_fraction: float
    stable: bool


@dataclass(frozen=True)
class TauStabilityResult:
    """The learned EGA threshold across seeds, against ``reference`` +- ``margin``.

    Two questions, kept apart. *Is the mean near the reference?* ``estimate`` is the mean
    over seeds of the per-seed tau (each run's mean over layers and heads, averaged over
    the seed's runs); ``confidence_interval`` its t-interval; ``tost_pvalue`` the two
    one-sided tests' p-value (max of the two), ``equivalence_interval`` the matching
    (1 - 2 alpha) t-interval (90 % for alpha = 0.05): below alpha the mean is
    *equivalent* to the reference within the margin. ``pvalue`` is the ordinary
    two-sided t-test against the reference.

    *Where does a new seed's run land?* With one gated run per seed,
    ``prediction_interval`` is the t prediction interval for a new seed's tau, ``mean +-
    t_{1-alpha/2, n-1} s sqrt(1 + 1/n)``: it holds a new seed's tau with probability
    ``confidence`` (on average over studies; it is not a tolerance interval, so it does
    not say that 95 % of new runs fall in it). With several gated runs per seed (one per
    cell) the seed mean says nothing about where a run lands: ``cells`` holds one
    :class:`CellStability` per cell, ``prediction_interval`` is the envelope of the
    cells' intervals, and ``stable`` needs every cell's interval inside the band.
    ``within_band_fraction`` is the share of the units the claim is about inside the band
    (``band_unit``: seeds with one run per seed, runs otherwise).

    When the runs start tau at several values (``tau_init``), a mean pooled over them would
    average runs that end in different places: the mean, its tests and ``per_seed`` read the
    runs at the reference initial value (``mean_tau_init``, as the contrasts do), while the
    cells and the heterogeneity table keep every initial value.
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
    prediction_interval: ConfidenceInterval | None = None
    equivalence_interval: ConfidenceInterval | None = None
    within_band_fraction: float | None = None
    stable: bool = False
    cells: tuple[CellStability, ...] = ()
    band_unit: str = "seeds"
    n_band_units: int = 0
    mean_tau_init: float | None = None

    @property
    def band(self) -> ConfidenceInterval:
        return ConfidenceInterval(self.reference - self.margin, self.reference + self.margin)

    @property
    def test(self) -> str:
        return "TOST (two one-sided t-tests)"

    @property
    def verdict_kind(self) -> VerdictKind:
        """Settled when the mean is shown equivalent to the band (TOST), stable or not."""
        if no_test_reason(self.per_seed) is not None or self.tost_pvalue is None:
            return NOT_TESTABLE
        return SETTLED if self.equivalent or self.stable else NOT_DISTINGUISHABLE

    @property
    def new_seed_words(self) -> str:
        """Where a new seed's run lands, in the words its prediction interval supports."""
        level = f"{self.confidence:.0%}"
        if not self.cells:
            pi = format_interval(self.prediction_interval, False, 3)
            return f"a new seed's tau falls in {pi} with {level} probability"
        untestable = [c.label for c in self.cells if c.prediction_interval is None]
        if untestable:
            cells = ", ".join(untestable)
            return f"where a new seed's run lands is not testable in cell(s) {cells} (under 2 seeds or zero spread)"
        if self.stable:
            return (
                f"in each of its {len(self.cells)} cells a new seed's run falls in that cell's interval with {level} "
                f"probability, all within {format_interval(self.prediction_interval, False, 3)}"
            )
        worst = max(
            self.cells,
            key=lambda c: max(self.band.low - c.prediction_interval.low, c.prediction_interval.high - self.band.high),
        )
        return (
            f"in cell {worst.label} a new seed's run falls in {format_interval(worst.prediction_interval, False, 3)} "
            f"with {level} probability ({sum(not c.stable for c in self.cells)} of {len(self.cells)} cells reach "
            "beyond the band)"
        )

    @property
    def within_band_text(self) -> str:
        """``"5 of 12 runs (42%) lie inside the band"``; empty without units."""
        if self.within_band_fraction is None or not self.n_band_units:
            return ""
        inside = round(self.within_band_fraction * self.n_band_units)
        return f"{inside} of {self.n_band_units} {self.band_unit} ({self.within_band_fraction:.0%}) lie inside the band"

    @property
    def verdict(self) -> str:
        reason = no_test_reason(self.per_seed)
        if reason is not None:
            return reason
        if self.tost_pvalue is None:
            return self.message or "no test possible"
        band = f"{self.reference:g} ± {self.margin:g}"
        tost = f"TOST p={format_pvalue(self.tost_pvalue)}"
        where = self.new_seed_words
        if self.stable:
            return f"stable: {where}, inside {band} (mean equivalent, {tost})"
        if self.equivalent:
            return f"mean equivalent to {band} ({tost}) but not stable: {where}"
        return f"not stable: {where}; mean not shown equivalent to {band} ({tost})"


__all__ = ["CellStability", "HeterogeneityResult", "OpenFractionResult", "TauStabilityResult"]
