"""Frozen result objects of the analysis, in the style of ``scipy.stats``.

Every statistic returns one of these: an ``estimate``, a ``confidence_interval`` with
``.low``/``.high`` (``None`` when it cannot be computed, e.g. one seed or zero spread: the
``message`` then says why, never a silent NaN), a ``pvalue``, the number of seeds that
entered (``n_seeds``) and the per-seed values, the ``method`` used, the number of seed
blocks dropped because a trial was missing, diverged or failed (``n_dropped``), and a
``verdict`` worded by the rules of docs/statistics.md: a test that fails to reject says
"not distinguishable from" or "consistent with"; a claim of sameness needs an
equivalence test or a prediction interval inside the band; with too few seeds or zero
spread the verdict is "no test possible (...)".
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, Literal, NamedTuple

import numpy as np

from harness.analysis.shape import SHAPE_ALPHA, ShapeCheck
from harness.analysis.verdict_words import few_seeds_words, format_interval, format_pvalue, shape_words
from harness.errors import InputError

NEEDS_TWO_SEEDS = "needs at least 2 seeds for an interval"

#: What a verdict amounts to, as its test decided it (the report colours verdicts by it):
#: ``settled``: the test supports the verdict's claim (an interval excluding 0, an
#: equivalence shown, a difference shown; for a Holm-adjusted row, also after the
#: adjustment); ``not distinguishable``: the test ran and supports no claim (an interval
#: covering 0, an equivalence not shown); ``not testable``: no test was possible (too few
#: seeds, zero spread, no complete seed).
VerdictKind = Literal["settled", "not distinguishable", "not testable"]
SETTLED: VerdictKind = "settled"
NOT_DISTINGUISHABLE: VerdictKind = "not distinguishable"
NOT_TESTABLE: VerdictKind = "not testable"
VERDICT_KINDS: dict[str, str] = {
    SETTLED: "a claim the test supports",
    NOT_DISTINGUISHABLE: "the test ran and supports no claim",
    NOT_TESTABLE: "no test possible (too few seeds, zero spread)",
}

#: Below this many seeds no bootstrap interval is shown (the percentile bootstrap covers
#: 47 % at n = 2 and 83 % at n = 5 for a nominal 95 %: benchmarks/calibration.py); from
#: here on the BCa interval is shown.
BOOTSTRAP_MIN_SEEDS = 10
BOOTSTRAP_SMALL_N = (
    f"no bootstrap interval below {BOOTSTRAP_MIN_SEEDS} seeds (it under-covers there: see docs/calibration.md)"
)


class FactorialNames(NamedTuple):
    """The four variants of a 2x2: ``base``, ``a`` and ``b`` each change one component of
    ``base``, ``ab`` changes both. The interaction is ``L_a + L_b - L_base - L_ab``."""

    base: str
    a: str
    b: str
    ab: str


#: The papers' 2x2 (the default of every contrast, trend and prediction; one place to name it).
PAPERS_FACTORIAL = FactorialNames(base="baseline", a="ega", b="mope", ab="ega-mope")


class ConfidenceInterval(NamedTuple):
    """A two-sided interval, like ``scipy.stats._result_classes.ConfidenceInterval``
    (``low``/``high`` are floats, or arrays for a vectorised call)."""

    low: Any
    high: Any

    def excludes(self, value: float) -> bool:
        """True when ``value`` lies outside [low, high]."""
        return bool(value < self.low or value > self.high)

    def inside(self, low: float, high: float) -> bool:
        """True when the whole interval lies within [low, high]."""
        return bool(self.low >= low and self.high <= high)


def interval_kind(ci: ConfidenceInterval | None, *, untestable: bool = False, value: float = 0.0) -> VerdictKind:
    """The kind of a verdict that rests on ``ci`` excluding ``value``: not testable without
    an interval (or when ``untestable``), settled when it excludes ``value``."""
    if untestable or ci is None:
        return NOT_TESTABLE
    return SETTLED if ci.excludes(value) else NOT_DISTINGUISHABLE


def has_spread(values: np.ndarray) -> bool:
    """True when the values are not all equal (up to rounding): a t-statistic is defined."""
    values = np.asarray(values, dtype=float)
    if len(values) < 2:
        return False
    return bool(np.std(values, ddof=1) > 1e-12 * max(1.0, float(np.max(np.abs(values)))))


def no_test_reason(values: np.ndarray, unit: str = "seed") -> str | None:
    """The verdict when no test is possible on these per-``unit`` values, else None:
    "no test possible (no complete seed)", "(1 seed)" or "(zero spread)"."""
    n = len(values)
    if n == 0:
        return f"no test possible (no complete {unit})"
    if n == 1:
        return f"no test possible (1 {unit})"
    if not has_spread(values):
        return "no test possible (zero spread)"
    return None


def readonly_array(values: Any) -> np.ndarray:
    """A float copy of ``values`` that cannot be written (frozen results stay frozen)."""
    arr = np.array(values, dtype=float)
    arr.setflags(write=False)
    return arr


@dataclass(frozen=True)
class PrimaryHypothesis:
    """The study's primary question (``analysis.primary`` in a spec): ``interaction`` (the
    2x2 interaction contrast) or a main effect ``{treatment: X, control: Y}`` (the paired
    gain ``L_control - L_treatment``). Its verdict uses the unadjusted level; the other
    headline verdicts are Holm-adjusted as one family."""

    kind: Literal["interaction", "main_effect"] = "interaction"
    treatment: str | None = None
    control: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("interaction", "main_effect"):
            raise InputError(f"analysis.primary: kind must be 'interaction' or 'main_effect', got {self.kind!r}")
        if self.kind == "main_effect":
            if not self.treatment or not self.control:
                raise InputError("analysis.primary: a main effect needs both treatment and control")
            if self.treatment == self.control:
                raise InputError(f"analysis.primary: treatment and control are the same variant {self.treatment!r}")

    @classmethod
    def parse(cls, value: Any) -> PrimaryHypothesis | None:
        """From a spec value: ``"interaction"``, ``{"treatment": X, "control": Y}``, None,
        or a PrimaryHypothesis."""
        if value is None or isinstance(value, PrimaryHypothesis):
            return value
        if value == "interaction":
            return cls("interaction")
        if isinstance(value, Mapping):
            unknown = set(value) - {"treatment", "control"}
            if unknown:
                raise InputError(f"analysis.primary: unknown key {sorted(unknown)[0]!r}; known: treatment, control")
            return cls("main_effect", value.get("treatment"), value.get("control"))
        raise InputError(f"analysis.primary: expected 'interaction' or {{treatment: X, control: Y}}, got {value!r}")

    def to_spec(self) -> str | dict[str, str]:
        """The spec's spelling (inverse of :meth:`parse`)."""
        if self.kind == "interaction":
            return "interaction"
        return {"treatment": str(self.treatment), "control": str(self.control)}


@dataclass(frozen=True)
class AnalysisSettings:
    """What the report analyses: the 2x2 factorial's variant names, the tau reference,
    the primary hypothesis and the smallest effect of interest.

    The factorial is {``base``, ``a``} x {``b``, ``ab``}: ``a`` and ``b`` each change one
    component of ``base`` and ``ab`` changes both (defaults: baseline, ega, mope,
    ega-mope). ``tau_reference`` +- ``tau_margin`` is the equivalence region of the TOST
    test for the learned EGA threshold and the band a stable tau's prediction interval
    must lie in. ``primary`` is the primary hypothesis (None: the interaction whenever
    the table holds the four factorial variants). ``smallest_effect`` (in units of
    ``metric``, nats for a loss) is the smallest effect worth detecting: "seeds needed"
    is computed at it. ``seed`` drives every resampling (bootstrap, permutation), so a
    report is reproducible; each section of the study report draws from a generator of its
    own, seeded from ``seed`` and the section's name, so that adding a section leaves the
    others' draws as they were.
    """

    base: str = PAPERS_FACTORIAL.base
    a: str = PAPERS_FACTORIAL.a
    b: str = PAPERS_FACTORIAL.b
    ab: str = PAPERS_FACTORIAL.ab
    metric: str = "val_loss"
    tau_reference: float = 0.35
    tau_margin: float = 0.05
    confidence: float = 0.95
    power: float = 0.8
    n_resamples: int = 9999
    seed: int = 0
    primary: PrimaryHypothesis | None = None
    smallest_effect: float | None = None

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
        object.__setattr__(self, "primary", PrimaryHypothesis.parse(self.primary))
        if self.smallest_effect is not None and not (
            math.isfinite(self.smallest_effect) and self.smallest_effect > 0.0
        ):
            raise InputError(f"analysis.smallest_effect must be a positive number (nats), got {self.smallest_effect!r}")

    @property
    def alpha(self) -> float:
        return 1.0 - self.confidence

    @property
    def factorial(self) -> dict[str, str]:
        return {"base": self.base, "a": self.a, "b": self.b, "ab": self.ab}

    def primary_or_default(self) -> PrimaryHypothesis:
        """The declared primary hypothesis, else the interaction."""
        return self.primary or PrimaryHypothesis("interaction")

    @classmethod
    def from_mapping(cls, spec: Mapping[str, Any] | None) -> AnalysisSettings:
        """From a study spec's ``analysis:`` block, e.g.
        ``{"factorial": {"base": ..., "a": ..., "b": ..., "ab": ...}, "tau": {"reference": 0.35, "margin": 0.05},
        "confidence": 0.95, "primary": "interaction", "smallest_effect": 0.02}``; flat field names
        are accepted too. Unknown keys are an error."""
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
            elif key == "primary":
                kwargs["primary"] = PrimaryHypothesis.parse(value)
            elif key in known:
                kwargs[key] = value
            else:
                raise InputError(f"analysis: unknown key {key!r}; known: factorial, tau, {', '.join(sorted(known))}")
        return cls(**kwargs)


def _qualified(claim: str, res: Any, quantity: str) -> str:
    """A contrast's or trend's claim with what weakens it beside it: a failed shape check
    (the claim withheld where the interval excludes 0), fewer than 6 seeds, diverged runs."""
    ci = res.confidence_interval
    text = claim
    shape = res.shape
    if shape is not None and shape.fires and ci is not None:
        claims = ci.excludes(0.0)
        words = shape_words(shape, res.pvalue, getattr(res, "permutation_pvalue", None), claims=claims)
        text = f"{quantity} {res.estimate:+.3g} {format_interval(ci)}; {words}" if claims else f"{claim}; {words}"
    if ci is not None:
        alternative = getattr(res, "alternative", "two-sided")
        few = few_seeds_words(res.n_seeds, alternative=alternative, alpha=1 - res.confidence)
        if few:
            text += f" — {few}"
    if res.n_diverged:
        text += f"; conditional on the runs that converged ({res.n_diverged} diverged)"
    return text


#: What a contrast estimates: the 2x2 interaction (superadditivity), a main effect (treatment
#: against control) or any other linear contrast of the variants.
ContrastKind = Literal["interaction", "main_effect", "contrast"]


@dataclass(frozen=True)
class TestResult:
    """What one test of per-seed values says (:mod:`harness.analysis.paired_tests`): the
    ``estimate`` it is about (the mean; the skewness for Shapiro-Wilk), its ``interval``
    (``None``: the test gives none, or none could be computed, and ``note`` says why), its
    ``p_value`` (``None``: none), the ``method`` and a ``note`` of what weakens or withholds
    it. Floats for one study, arrays for a batch of simulated studies (the calibration's)."""

    __test__ = False  # a result, not a pytest test class

    estimate: Any
    interval: ConfidenceInterval | None = None
    p_value: Any = None
    method: str = ""
    note: str = ""

    def rejects(self, alpha: float) -> Any:
        """``p_value < alpha``: False where there is no p (or it is NaN); elementwise for a batch."""
        if self.p_value is None:
            return False
        below = np.asarray(self.p_value) < alpha
        return bool(below) if below.ndim == 0 else below


#: The keys of :attr:`ContrastResult.tests`: the paired t-test, the BCa bootstrap, the sign-flip
#: test, the Shapiro-Wilk shape check, and the multi-bootstrap of :func:`~harness.analysis.multi_bootstrap`.
T_TEST, BCA_TEST, SIGN_FLIP_TEST, SHAPE_CHECK, MULTI_BOOTSTRAP = "t", "bca", "sign_flip", "shapiro", "multi_bootstrap"


@dataclass(frozen=True)
class ContrastResult:
    """A paired-seed contrast (a main effect or the 2x2 interaction) in one cell or
    averaged over cells.

    ``per_seed`` holds the contrast of each seed (``seeds`` its seed ids), averaged over
    the cells complete for that seed; ``tests`` the tests it ran on them, by key
    (:data:`T_TEST`, :data:`BCA_TEST`, :data:`SIGN_FLIP_TEST`, :data:`SHAPE_CHECK`; none
    with fewer than 2 seeds or zero spread), and ``verdict_test`` the one whose interval and
    p the verdict reads. The old flat names read them: ``confidence_interval`` is the
    t-interval and ``pvalue`` the matching t-test p-value; ``bootstrap_interval`` is a BCa
    bootstrap interval over seeds, shown only from :data:`BOOTSTRAP_MIN_SEEDS` seeds (None
    below, with the reason in ``message``); ``permutation_pvalue`` is the sign-flip (paired
    permutation) p-value; ``shape`` the shape check. Positive estimates mean: the treatment
    lowers the loss (main effect), or the combination gains more than the two parts
    (interaction). ``n_diverged`` counts the diverged runs of the contrast's variants: the
    contrast is then conditional on the runs that converged, and the verdict says so.
    ``excluded_cells`` names the cells where no seed had every variant.
    """

    name: str
    kind: ContrastKind
    metric: str
    estimate: float
    n_seeds: int
    per_seed: np.ndarray
    seeds: tuple
    method: str
    tests: Mapping[str, TestResult] = field(default_factory=dict)
    verdict_test: str = T_TEST
    n_dropped: int = 0
    dropped_seeds: tuple = ()
    sd: float | None = None
    confidence: float = 0.95
    n_cells: int = 1
    cell: Mapping[str, Any] = field(default_factory=dict)
    message: str = ""
    n_diverged: int = 0
    excluded_cells: tuple = ()
    alternative: str = "two-sided"

    def __post_init__(self) -> None:
        # frozen results stay frozen: the tests are read, never rebound
        object.__setattr__(self, "tests", MappingProxyType(dict(self.tests)))

    def _read(self, key: str, what: str) -> Any:
        """``what`` (``"interval"`` or ``"p_value"``) of the test ``key``; None where it did not run."""
        test = self.tests.get(key)
        return None if test is None else getattr(test, what)

    @property
    def confidence_interval(self) -> ConfidenceInterval | None:
        """The interval the verdict reads (the t-interval; None: no test possible)."""
        return self._read(self.verdict_test, "interval")

    @property
    def pvalue(self) -> float | None:
        """The p-value of :attr:`confidence_interval`'s test (the paired t-test)."""
        return self._read(self.verdict_test, "p_value")

    @property
    def bootstrap_interval(self) -> ConfidenceInterval | None:
        return self._read(BCA_TEST, "interval")

    @property
    def bootstrap_method(self) -> str | None:
        """ "BCa" where a bootstrap interval is shown, else None."""
        return None if self.bootstrap_interval is None else self.tests[BCA_TEST].method

    @property
    def permutation_pvalue(self) -> float | None:
        return self._read(SIGN_FLIP_TEST, "p_value")

    @property
    def shape(self) -> ShapeCheck | None:
        """The shape check of the per-seed values (None: not checked, below 3 seeds or zero spread)."""
        test = self.tests.get(SHAPE_CHECK)
        if test is None or test.p_value is None:
            return None
        return ShapeCheck(test.p_value, test.estimate, test.p_value < SHAPE_ALPHA)

    @property
    def standard_error(self) -> float | None:
        return None if self.sd is None or self.n_seeds < 2 else self.sd / math.sqrt(self.n_seeds)

    @property
    def test(self) -> str:
        """Which test ``pvalue`` belongs to."""
        return "paired t-test over seeds"

    @property
    def claims(self) -> bool:
        """True when the verdict's words claim an effect: the interval excludes 0 and the
        per-seed values pass the shape check (where it fires the claim is withheld)."""
        ci = self.confidence_interval
        return ci is not None and ci.excludes(0.0) and not (self.shape is not None and self.shape.fires)

    @property
    def verdict(self) -> str:
        """Words that do not claim more than the interval shows, with what weakens them
        beside them: a failed shape check, few seeds, diverged runs."""
        return _qualified(self._claim(), self, "estimate")

    def _claim(self) -> str:
        reason = no_test_reason(self.per_seed)
        if reason is not None:
            return reason
        if self.confidence_interval is None:
            return self.message or "no test possible"
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

    @property
    def verdict_kind(self) -> VerdictKind:
        """What :attr:`verdict` amounts to (:data:`VerdictKind`): its interval decides, and a
        claim withheld for the shape of the per-seed values is not settled."""
        kind = interval_kind(self.confidence_interval, untestable=no_test_reason(self.per_seed) is not None)
        return NOT_DISTINGUISHABLE if kind == SETTLED and not self.claims else kind

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
            "n_diverged": self.n_diverged,
            "n_cells": self.n_cells,
            "method": self.method,
            "verdict": self.verdict,
            "verdict_kind": self.verdict_kind,
            "message": self.message,
        }


@dataclass(frozen=True)
class TrendResult:
    """The slope of an effect against ``log2(x)`` (x = parameter count or context length).

    ``estimate`` is the slope per doubling of x (the one unit of the report and the scorecard);
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
    n_diverged: int = 0
    shape: Any = None  # harness.analysis.shape.ShapeCheck of the per-seed slopes (None: not checked)

    @property
    def test(self) -> str:
        return "t-test of the per-seed slopes"

    @property
    def claims(self) -> bool:
        """True when the verdict's words claim a trend (see :attr:`ContrastResult.claims`)."""
        ci = self.confidence_interval
        return ci is not None and ci.excludes(0.0) and not (self.shape is not None and self.shape.fires)

    @property
    def two_levels(self) -> bool:
        """Two distinct x: the "slope" is a two-point difference, and is worded as one."""
        return len(self.x_values) == 2

    @property
    def verdict(self) -> str:
        return _qualified(self._claim(), self, "difference" if self.two_levels else "slope")

    def _claim(self) -> str:
        reason = no_test_reason(self.per_seed)
        if reason is not None and self.method.startswith("per-seed"):
            return reason
        if self.confidence_interval is None:
            return self.message or "no test possible"
        ci = self.confidence_interval
        what = "size" if self.against == "params" else "context" if self.against == "context_length" else self.against
        if self.two_levels:
            level = f"{self.confidence:.0%} CI; 2 levels: a difference, not a slope"
            if ci.excludes(0.0):
                return f"effect {'larger' if ci.low > 0 else 'smaller'} at the larger {what} ({level})"
            return f"effect at the two {what}s not distinguishable ({level})"
        if ci.low > 0:
            return f"effect grows with {what} ({self.confidence:.0%} CI of slope > 0)"
        if ci.high < 0:
            return f"effect shrinks with {what} ({self.confidence:.0%} CI of slope < 0)"
        return f"slope against {what} not distinguishable from 0"

    @property
    def verdict_kind(self) -> VerdictKind:
        """What :attr:`verdict` amounts to: the slope's interval decides (a claim withheld
        for the shape of the per-seed slopes is not settled)."""
        untestable = no_test_reason(self.per_seed) is not None and self.method.startswith("per-seed")
        kind = interval_kind(self.confidence_interval, untestable=untestable)
        return NOT_DISTINGUISHABLE if kind == SETTLED and not self.claims else kind

    def to_row(self) -> dict[str, Any]:
        ci = self.confidence_interval
        return {
            "effect": self.effect,
            "against": f"log2({self.against})",
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
            "verdict_kind": self.verdict_kind,
            "message": self.message,
        }


@dataclass(frozen=True)
class SeedsNeededResult:
    """Seeds needed to detect ``effect`` with ``power`` at level ``alpha``, given the
    seed-to-seed standard deviation ``sd`` of the per-seed contrast (paired design,
    one-sample t-test on the per-seed contrasts).

    ``sd_interval`` is the chi-square confidence interval of ``sd`` when it was estimated
    from ``sd_df + 1`` seeds; ``n_seeds_range`` the seeds needed at its two ends (low sd:
    fewer seeds; high sd: more; None for "more than the search limit"). ``post_hoc`` is
    True when ``effect`` is the observed estimate rather than a stated smallest effect of
    interest: such a figure says little and is labelled as post-hoc.
    """

    n_seeds: int | None
    effect: float
    sd: float
    power: float
    alpha: float
    alternative: str
    effect_size: float
    method: str
    message: str = ""
    sd_interval: ConfidenceInterval | None = None
    sd_df: int | None = None
    n_seeds_range: tuple[int | None, int | None] | None = None
    post_hoc: bool = False

    def range_text(self) -> str:
        """``"12 (range 4 to 310)"``; "more than N" where the search stopped."""

        def one(n: int | None) -> str:
            return "n/a" if n is None else str(n)

        head = one(self.n_seeds) if self.n_seeds is not None else (self.message or "n/a")
        if self.n_seeds_range is None:
            return head
        low, high = self.n_seeds_range
        return f"{head} (range {one(low)} to {one(high) if high is not None else 'more than the limit'})"


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
    "BCA_TEST",
    "BOOTSTRAP_MIN_SEEDS",
    "BOOTSTRAP_SMALL_N",
    "NEEDS_TWO_SEEDS",
    "NOT_DISTINGUISHABLE",
    "NOT_TESTABLE",
    "MULTI_BOOTSTRAP",
    "SETTLED",
    "SHAPE_CHECK",
    "SIGN_FLIP_TEST",
    "T_TEST",
    "VERDICT_KINDS",
    "AnalysisSettings",
    "ConfidenceInterval",
    "ContrastResult",
    "MopeScalesResult",
    "PrimaryHypothesis",
    "SeedsNeededResult",
    "TestResult",
    "TrendResult",
    "VerdictKind",
    "format_interval",
    "format_pvalue",
    "has_spread",
    "interval_kind",
    "no_test_reason",
    "readonly_array",
]
