"""A claim's verdict from the report's own intervals: the scorecard adds no inference.

Each classifier takes the intervals the analysis layer computed for one row (:class:`Intervals`:
the ``confidence`` t-interval over seeds, the ``1 - 2 alpha`` t-interval that the TOST
equivalence test reads, the shape check of the per-seed values, and for a claim about runs the
prediction interval) and the paper's number, and returns a :class:`ClaimVerdict`: one of
:data:`CLAIM_KINDS` (or :data:`TREND_KINDS`), the words, and the interval it rests on. The
kind itself comes from one vectorised rule per quantity (:func:`effect_kinds`,
:func:`level_kinds`, :func:`trend_kinds`), so that the calibration simulates exactly what a
scorecard does (:mod:`harness.bench.simulate.scorecard`).

A sign needs two intervals to exclude the null: the report's 95 % t-interval and the
**skew-robust** one, the same interval widened to the critical |t| that holds both for normal
seeds and for strongly skewed ones (lognormal, sigma 1) with the shape check quiet
(:func:`~harness.scorecard.calibration.skew_robust_critical`, simulated by
``benchmarks/calibration.py`` at each number of seeds; docs/calibration.md gives the values).
Where the t-interval excludes the null and the robust one does not, the sign is withheld
(``inconclusive``, saying so); a signed kind compares the robust interval with the paper's
number. A signed effect (the paper's sign s, value v, the claim's smallest effect delta):

- both intervals exclude 0: the sign and v decide, whatever delta says: ``reversed``
  (opposite sign), ``replicated`` (sign s, covers v), ``smaller`` / ``larger`` (sign s,
  wholly between 0 and v / beyond v); an effect whose 90 % interval also lies within +-delta
  says "nonzero but within +-delta: negligible by this claim's margin". An *ordering* (sign s,
  no value: "beats", "worse") is read against its margin: ``replicated`` only when the robust
  interval lies wholly beyond +-delta in the sign's direction, ``smaller`` when it lies wholly
  between 0 and delta, else ``inconclusive`` (a sign, but not one the claim's "clearly" needs);
- it covers 0: ``absent`` when the 90 % interval lies within +-delta (equivalence to 0);
  ``not resolvable`` when the 90 % interval is wider than 2 delta (no outcome could show
  equivalence at this precision: the words give the seeds needed); else ``inconclusive``.

A claim of no difference (sign "0") is ``replicated`` when equivalence within +-delta is shown
and ``larger`` when the interval excludes 0 otherwise. A level (tau, the open fraction, the
energy direction's cosine) is judged by the paper's band ``v +- band`` and where it starts
(:func:`level_kinds`): ``replicated`` only when its 90 % interval lies inside the band having
moved from the start (and, for a claim about runs, a new seed's run predictably inside the
band); overlap alone is ``inconclusive``; a start inside the band cannot show convergence.
A trend from three or more levels is ``grows`` / ``shrinks`` / ``flat`` / ``not resolvable`` /
``inconclusive``; ``flat`` needs the slope's skew-robust 95 % interval, the one a sign rests on
(a flat trend is carried to the papers' setting), within +-delta / D per doubling, D the
doublings from the largest level measured to the papers' level (the measured span when the
papers' level lies within it; at least 1): what the slope would add by the papers' setting
stays within the claim's margin. From two levels it is a ``difference``, never flat. A claim
the harness cannot judge (a probe of its own, or a paper's statement with no target) is read
as a ``figure``: the estimate and its interval, no verdict. Per-seed values that fail the
shape check make any row ``inconclusive`` with the report's words and the sign-flip p, and
below 20 seeds the measured false-positive rate of a t claim on such values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any, Literal, get_args

import numpy as np
from scipy import stats

from harness.analysis.results_types import (
    NOT_DISTINGUISHABLE,
    NOT_TESTABLE,
    SETTLED,
    ConfidenceInterval,
    VerdictKind,
    format_interval,
)
from harness.analysis.verdict_words import few_seeds_words, format_pvalue, shape_words
from harness.scorecard.calibration import skew_robust_critical, skew_robust_pvalue

ClaimKind = Literal[
    "replicated",
    "smaller",
    "larger",
    "reversed",
    "below",
    "above",
    "absent",
    "not resolvable",
    "inconclusive",
    "not measured",
]
#: The verdicts a claim can get at one cell (:data:`KIND_MEANINGS` says what each means).
CLAIM_KINDS: tuple[str, ...] = get_args(ClaimKind)
TrendKind = Literal["grows", "shrinks", "flat", "difference", "not resolvable", "inconclusive"]
#: The verdicts a claim's trend can get along size or context.
TREND_KINDS: tuple[str, ...] = get_args(TrendKind)
#: The kinds that assert a direction (a ``difference`` does when its ``signed`` is True).
SIGNED_KINDS: tuple[str, ...] = ("replicated", "smaller", "larger", "reversed", "grows", "shrinks", "difference")
#: A row shown as a number only: a probe of the harness's own, or a statement with no target.
FIGURE = "figure"

#: What each kind means, in one line (the page's legend and docs/scorecard.md). The intervals:
#: "95 %" is the t-interval over seeds, "90 %" the 1 - 2 alpha one of the TOST.
KIND_MEANINGS: dict[str, str] = {
    "replicated": "the 95 % interval and its skew-robust widening exclude 0 with the paper's sign and the robust one "
    "covers its value (an ordering: lies beyond the claim's margin); a level: its 90 % interval lies inside the "
    "paper's band, having moved there (and, for runs, a new run predictably in it); a claim of no difference: "
    "its 90 % interval lies within ± the claim's margin",
    "smaller": "both 95 % intervals exclude 0 with the paper's sign and the robust one lies between 0 and the "
    "paper's value (an ordering: within its margin; a level: moved towards the band, stopped short of it)",
    "larger": "both 95 % intervals exclude 0 with the paper's sign and the robust one lies beyond the paper's value "
    "(a level: beyond the band; a claim of no difference: an effect it does not report)",
    "reversed": "both 95 % intervals exclude 0 with the opposite sign (a level: moved away from the band)",
    "below": "the sign is not shown (the 95 % interval covers 0), but the skew-robust interval lies wholly below "
    "the paper's value: the paper's number is excluded",
    "above": "the sign is not shown (the 95 % interval covers 0), but the skew-robust interval lies wholly above "
    "the paper's value: the paper's number is excluded",
    "absent": "the 95 % interval covers 0 and the 90 % interval lies within ± the claim's margin "
    "(equivalence to 0; a level: did not move from its start)",
    "not resolvable": "the 95 % interval covers 0 and the 90 % interval is wider than twice the claim's margin: "
    "no outcome at this precision could show equivalence; the row says how many seeds would",
    "inconclusive": "none of these: the interval covers 0 and values beyond the margin, overlaps the band "
    "only, the t-interval excludes 0 but its skew-robust widening does not, an ordering not shown beyond its "
    "margin, a sign lost to the card's procedure, or no interval",
    "figure": "a number, not a verdict: a probe of the harness's own or a statement the paper gives no target "
    "for (its estimate and interval are shown; it is in no family)",
    "not measured": "no study read can measure it (the row names the study that would)",
    "not predictable": "a prediction at the papers' size is not made: fewer than three sizes in one study, the "
    "papers' size more than 16x the largest measured, or a failed backtest (the row says which)",
    "grows": "three or more levels: the slope per doubling excludes 0 in the paper's direction",
    "shrinks": "three or more levels: the slope per doubling excludes 0 against the paper's direction",
    "flat": "three or more levels: the skew-robust 95 % interval of the slope per doubling (the one a sign rests "
    "on) lies within ± the claim's margin spread over the doublings from the largest level measured to the "
    "papers' (at least 1)",
    "difference": "two levels only: a difference between them, not a trend (its words say grows or shrinks "
    "only when the interval excludes 0)",
}


@dataclass(frozen=True)
class ClaimVerdict:
    """A verdict: its kind, its words, the interval it rests on (in words), whether it asserts a
    direction resting on both intervals excluding the null (``signed``: the card's procedure
    can take it away) and what its test settled (:data:`~harness.analysis.results_types.VerdictKind`)."""

    kind: str
    words: str
    rests_on: str
    signed: bool = False
    settled: VerdictKind = NOT_DISTINGUISHABLE


@dataclass(frozen=True)
class Intervals:
    """The intervals of one row, from the analysis layer: ``ci`` the ``confidence``
    t-interval over seeds, ``equivalence`` the ``1 - 2 alpha`` one (None: no test possible,
    ``reason`` says why); ``pvalue`` the t-test against the row's null (0, or a level's start);
    ``sd`` the seed-to-seed sd; ``shape`` the shape check of the per-seed values; for a claim
    about runs, ``prediction`` (where a new seed's run lands) and ``stable`` (inside the band).
    Derived: ``robust``, the t-interval widened to the skew-robust critical value, and
    ``robust_pvalue``, the t p made valid on seeds skewed up to the lognormal shape ``skew_sigma``
    (the card's bound; None: the shipped floor)."""

    estimate: float
    ci: ConfidenceInterval | None
    equivalence: ConfidenceInterval | None
    n_seeds: int
    confidence: float = 0.95
    reason: str = ""
    pvalue: float | None = None
    sd: float | None = None
    shape: Any = None
    permutation_pvalue: float | None = None
    prediction: ConfidenceInterval | None = None
    stable: bool | None = None
    skew_sigma: float | None = None
    unit: str = "seeds"

    @property
    def testable(self) -> bool:
        return self.ci is not None and self.equivalence is not None

    @property
    def ci_words(self) -> str:
        return f"{self.confidence:.0%} t-interval over {self.n_seeds} {self.unit}"

    @property
    def equivalence_words(self) -> str:
        return f"{1 - 2 * (1 - self.confidence):.0%} t-interval over {self.n_seeds} {self.unit} (TOST)"

    @cached_property
    def robust_critical(self) -> float | None:
        """The skew-robust critical |t| at this row's seeds and level (None: not simulated)."""
        return skew_robust_critical(self.n_seeds, 1.0 - self.confidence, sigma=self.skew_sigma)

    @cached_property
    def standard_error(self) -> float | None:
        """The mean's standard error: the t-interval's half-width over the t's own critical value
        (None without an interval)."""
        if self.ci is None or self.n_seeds < 2:
            return None
        return 0.5 * (self.ci.high - self.ci.low) / float(stats.t.isf((1.0 - self.confidence) / 2.0, self.n_seeds - 1))

    @cached_property
    def robust(self) -> ConfidenceInterval | None:
        """The t-interval widened to the skew-robust critical value: ``centre +- c se``, ``se`` its
        half-width over the t's own critical value (None: no interval, or no simulated critical
        value, which signs nothing)."""
        c, se = self.robust_critical, self.standard_error
        if c is None or se is None:
            return None
        half = c * se
        centre = 0.5 * (self.ci.low + self.ci.high)
        return ConfidenceInterval(centre - half, centre + half)

    @cached_property
    def robust_pvalue(self) -> float | None:
        """The t-test's p made skew-robust (:func:`~harness.scorecard.calibration.skew_robust_pvalue`):
        the p the card's procedure adjusts."""
        return (
            None if self.pvalue is None else float(skew_robust_pvalue(self.pvalue, self.n_seeds, sigma=self.skew_sigma))
        )

    @property
    def robust_words(self) -> str:
        c = self.robust_critical
        if c is None:
            return "no skew-robust value"
        shape = "" if self.skew_sigma is None else f", lognormal shape {self.skew_sigma:.2f}"
        return f"skew-robust: |t| > {c:.2f} at {self.n_seeds} {self.unit}{shape}"

    def against(self, value: float) -> float | None:
        """The two-sided t-test p of the mean against ``value`` (None without an interval)."""
        se = self.standard_error
        if se is None or not se > 0:
            return None
        return float(2.0 * stats.t.sf(abs(self.estimate - value) / se, self.n_seeds - 1))


# ----------------------------------------------------------------------------- the rules
def _arrays(*xs: Any) -> list[np.ndarray]:
    return [np.asarray(x, dtype=float) for x in xs]


def _robust_or_t(lo: np.ndarray, hi: np.ndarray, robust_low: Any, robust_high: Any) -> tuple[np.ndarray, np.ndarray]:
    """The robust bounds, or the t-interval's where none is given (a caller that has none)."""
    if robust_low is None or robust_high is None:
        return lo, hi
    return _arrays(robust_low, robust_high)  # type: ignore[return-value]


def effect_kinds(
    ci_low: Any,
    ci_high: Any,
    eq_low: Any,
    eq_high: Any,
    *,
    sign: str,
    paper_value: float | None,
    margin: float,
    robust_low: Any = None,
    robust_high: Any = None,
) -> np.ndarray:
    """The kind of a paired effect from its intervals (arrays for a batch of studies; see the
    module docstring): the one rule the scorecard and its calibration share. ``robust_*``: the
    skew-robust interval (default: the t-interval itself)."""
    lo, hi, elo, ehi = _arrays(ci_low, ci_high, eq_low, eq_high)
    rlo, rhi = _robust_or_t(lo, hi, robust_low, robust_high)
    excl, rexcl, up = (lo > 0) | (hi < 0), (rlo > 0) | (rhi < 0), rlo > 0
    within = (elo >= -margin) & (ehi <= margin)
    unresolvable = (ehi - elo) > 2.0 * margin
    if sign == "0":
        signed = np.where(rexcl, "larger", "inconclusive")
        return np.select(
            [within, excl, unresolvable], [np.full(lo.shape, "replicated"), signed, "not resolvable"], "inconclusive"
        ).astype(str)
    if sign == "±":
        signed = np.where(rexcl, "replicated", "inconclusive")
        return np.select([excl, within, unresolvable], [signed, "absent", "not resolvable"], "inconclusive").astype(str)
    s = 1.0 if sign == "+" else -1.0
    if paper_value is None:  # an ordering: shown only beyond the claim's margin
        beyond, short = (rlo > margin, rhi < margin) if s > 0 else (rhi < -margin, rlo > -margin)
        towards = np.select([beyond, short], ["replicated", "smaller"], "inconclusive")
    else:
        v = float(paper_value)
        short = rhi < v if s > 0 else rlo > v
        towards = np.select([(rlo <= v) & (v <= rhi), short], ["replicated", "smaller"], "larger")
    signed = np.where(~rexcl, "inconclusive", np.where(np.where(up, 1.0, -1.0) != s, "reversed", towards))
    kinds = np.select([excl, within, unresolvable], [signed, "absent", "not resolvable"], "inconclusive")
    if paper_value is None:
        return kinds.astype(str)
    v = float(paper_value)
    unsigned = (kinds == "inconclusive") | (kinds == "not resolvable")
    return np.select([unsigned & (rhi < v), unsigned & (rlo > v)], ["below", "above"], kinds).astype(str)


def level_kinds(
    ci_low: Any,
    ci_high: Any,
    eq_low: Any,
    eq_high: Any,
    *,
    start: Any,
    band: tuple[float, float],
    margin: float,
    runs_ok: Any = True,
    robust_low: Any = None,
    robust_high: Any = None,
) -> np.ndarray:
    """The kind of a level that starts at ``start`` against the paper's ``band`` (low, high);
    ``runs_ok``: a claim about runs has them predictably inside the band (True otherwise);
    ``robust_*``: the skew-robust interval (default: the t-interval)."""
    lo, hi, elo, ehi, st = _arrays(ci_low, ci_high, eq_low, eq_high, start)
    rlo, rhi = _robust_or_t(lo, hi, robust_low, robust_high)
    low, high = band
    towards = np.where(st < low, 1.0, -1.0)  # which way the band lies from the start
    excl, rexcl = (lo > st) | (hi < st), (rlo > st) | (rhi < st)
    moved = np.where(rlo > st, 1.0, -1.0)
    below, above = rhi < low, rlo > high  # the robust 95 % interval wholly outside the band
    short, beyond = np.where(towards > 0, below, above), np.where(towards > 0, above, below)
    eq_inside = (elo >= low) & (ehi <= high)
    moved_kind = np.select(
        [~rexcl, moved != towards, eq_inside & np.asarray(runs_ok, dtype=bool), short, beyond],
        ["inconclusive", "reversed", "replicated", "smaller", "larger"],
        "inconclusive",
    )
    within_start = (elo >= st - margin) & (ehi <= st + margin)
    unresolvable = (ehi - elo) > 2.0 * margin
    outside = np.select([excl, within_start, unresolvable], [moved_kind, "absent", "not resolvable"], "inconclusive")
    inside = np.where(rexcl & ((rhi < low) | (rlo > high)), "larger", "inconclusive")  # started in the band
    return np.where((st >= low) & (st <= high), inside, outside).astype(str)


def trend_kinds(
    ci_low: Any,
    ci_high: Any,
    eq_low: Any,
    eq_high: Any,
    *,
    sign: str,
    margin: float,
    levels: int,
    robust_low: Any = None,
    robust_high: Any = None,
) -> np.ndarray:
    """The kind of a slope per doubling from ``levels`` values of its factor: ``difference``
    from two levels (never flat), else grows / shrinks / flat / not resolvable / inconclusive;
    ``margin`` is the bound per doubling (the claim's margin over the doublings to the papers'
    level), ``robust_*`` the skew-robust interval (default: the t-interval)."""
    lo, hi, elo, ehi = _arrays(ci_low, ci_high, eq_low, eq_high)
    rlo, rhi = _robust_or_t(lo, hi, robust_low, robust_high)
    if levels == 2:
        return np.full(lo.shape, "difference").astype(str)
    s = -1.0 if sign == "-" else 1.0
    excl, rexcl = (lo > 0) | (hi < 0), (rlo > 0) | (rhi < 0)
    direction = np.where(~rexcl, "inconclusive", np.where(np.where(rlo > 0, 1.0, -1.0) == s, "grows", "shrinks"))
    within = (elo >= -margin) & (ehi <= margin)
    unresolvable = (ehi - elo) > 2.0 * margin
    return np.select([excl, within, unresolvable], [direction, "flat", "not resolvable"], "inconclusive").astype(str)


def _kind(rule_output: np.ndarray) -> str:
    return str(np.asarray(rule_output).reshape(-1)[0])


# ----------------------------------------------------------------------------- words
def _num(x: float | None, digits: int = 3) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:+.{digits}f}"


def _few(iv: Intervals) -> str:
    if iv.unit != "seeds":
        return ""
    words = few_seeds_words(iv.n_seeds, alpha=1 - iv.confidence)
    return f" — {words}" if words else ""


def _untestable(iv: Intervals) -> ClaimVerdict:
    reason = iv.reason or "no test possible"
    return ClaimVerdict("inconclusive", f"inconclusive: {reason}", "no interval", settled=NOT_TESTABLE)


def _shape_note(iv: Intervals) -> str:
    """The report's words where the per-seed values fail the shape check, beside the verdict (empty
    where it is quiet): the sign-flip p beside the t p. The check withholds nothing: a sign rests on
    the skew-robust interval, which holds at the skew the card's seeds allow; withholding on the
    check too cost power at every number of seeds simulated and bought no calibration
    (docs/calibration.md, "The shape check's level")."""
    if iv.shape is None or not iv.shape.fires or iv.ci is None:
        return ""
    return "; " + shape_words(iv.shape, iv.pvalue, iv.permutation_pvalue, claims=False)


def not_resolvable_words(iv: Intervals, margin: float, what: str = "", shown: ConfidenceInterval | None = None) -> str:
    """Why a row is ``not resolvable`` and what would resolve it: "at this precision, [a, b]
    (90 % interval) is wider than +-delta allows; about N seeds needed", from the analysis
    layer's planning (:func:`~harness.analysis.planning.seeds_needed`) at the observed seed sd,
    80 % power, two-sided at the row's level. ``shown``: the interval the row was read on when it
    is not the TOST's (a trend's skew-robust 95 % one; ``what`` then names it)."""
    from harness.analysis.planning import seeds_needed

    named = what if shown is not None else f"{what}90 % "
    head = (
        f"at this precision, {format_interval(shown or iv.equivalence)} ({named}interval) is wider than "
        f"±{margin:.3g} allows"
    )
    if iv.sd is None or not iv.sd > 0:
        return head
    plan = seeds_needed(effect=margin, sd=iv.sd, sd_df=iv.n_seeds - 1, alpha=1 - iv.confidence)
    return (
        f"{head}; about {plan.range_text()} seeds needed (80 % power to detect ±{margin:.3g} at the observed seed "
        f"sd {iv.sd:.3g}; the range spans the sd's own interval)"
    )


def _negligible(iv: Intervals, margin: float) -> str:
    eq = iv.equivalence
    if eq is not None and eq.inside(-margin, margin):
        return f"; nonzero but within ±{margin:g}: negligible by this claim's margin ({format_interval(eq)})"
    return ""


def _verdict(kind: str, words: str, iv: Intervals, *, on_eq: bool = False, signed: bool = False) -> ClaimVerdict:
    settled = NOT_DISTINGUISHABLE if kind in ("inconclusive", "not resolvable") else SETTLED
    rests = iv.equivalence_words if on_eq else iv.ci_words + (f" ({iv.robust_words})" if signed else "")
    return ClaimVerdict(kind, f"{kind}: {words}" + _shape_note(iv) + _few(iv), rests, signed=signed, settled=settled)


def _robust_shown(iv: Intervals) -> str:
    return f"the skew-robust interval {format_interval(iv.robust)} ({iv.robust_words}: docs/calibration.md)"


def _sign_withheld(iv: Intervals, null: float = 0.0) -> ClaimVerdict | None:
    """``inconclusive`` where the t-interval excludes ``null`` but its skew-robust widening does
    not (None otherwise): at this many seeds a skewed seed distribution gives such an interval
    too often for its sign to be read."""
    if iv.ci is None or not iv.ci.excludes(null) or (iv.robust is not None and iv.robust.excludes(null)):
        return None
    where = _robust_shown(iv) if iv.robust is not None else "no skew-robust critical value was simulated"
    words = (
        f"{format_interval(iv.ci)} excludes {null:g}, but {where} covers it: at {iv.n_seeds} seeds strongly skewed "
        "per-seed values give such a t-interval too often, so the sign is withheld"
    )
    return _verdict("inconclusive", words, iv)


def figure_verdict(iv: Intervals, what: str) -> ClaimVerdict:
    """A row read as a number, not a verdict (``what`` says why): the estimate and its interval."""
    if iv.ci is None:
        return ClaimVerdict(
            FIGURE, f"figure: {iv.reason or 'no interval'}; {what}", "no interval", settled=NOT_TESTABLE
        )
    body = f"{iv.estimate:+.3f} {format_interval(iv.ci)}; {what}"
    return ClaimVerdict(FIGURE, f"figure: {body}" + _few(iv), iv.ci_words, settled=NOT_TESTABLE)


def _effect_text(kind: str, iv: Intervals, sign: str, paper_value: float | None, margin: float) -> str:
    """The words of a signed kind of an effect (both intervals exclude 0)."""
    shown, robust = format_interval(iv.ci), format_interval(iv.robust)
    if paper_value is None and sign in ("+", "-"):  # an ordering, read against its margin
        bound = f"{'+' if sign == '+' else '-'}{margin:g}"
        return {
            "reversed": f"{shown} excludes 0 with the sign opposite to the claim's ({sign})",
            "replicated": f"{shown} excludes 0 and the robust {robust} lies beyond {bound}, the claim's margin",
            "smaller": f"{shown} excludes 0 in the claim's direction, but the robust {robust} lies within ±{margin:g}: "
            "negligible by this claim's margin",
        }[kind]
    paper = _num(paper_value)
    return {
        "reversed": f"{shown} excludes 0 with the sign opposite to the paper's {paper}",
        "replicated": f"{shown} excludes 0 and the robust {robust} covers the paper's {paper}"
        + _paper_note(iv, paper_value),
        "smaller": f"{shown} excludes 0 with the paper's sign and the robust {robust} lies between 0 and the "
        f"paper's {paper}, which it excludes{_against_paper(iv, paper_value)}{_times(iv, paper_value)}",
        "larger": f"{shown} excludes 0 with the paper's sign and the robust {robust} lies beyond the paper's {paper}, "
        f"which it excludes{_against_paper(iv, paper_value)}{_times(iv, paper_value)}",
    }[kind] + _negligible(iv, margin)


def type_m(iv: Intervals, paper_value: float) -> tuple[float, float, float] | None:
    """The exaggeration ratio a single-seed paper invites (Gelman & Carlin 2014's type M): the
    paper's value over the estimate, with the interval that the robust interval maps to (None
    unless the robust interval excludes 0 on the paper's side)."""
    rob = iv.robust or iv.ci
    if rob is None or not iv.estimate or paper_value == 0 or not rob.excludes(0.0):
        return None
    if (rob.low > 0) != (paper_value > 0):
        return None
    ends = sorted((paper_value / rob.low, paper_value / rob.high))
    return paper_value / iv.estimate, ends[0], ends[1]


def _times(iv: Intervals, paper_value: float) -> str:
    """ ", x7.4 below the paper's value (x4.2 to x26)" (empty without a type M ratio)."""
    ratio = type_m(iv, paper_value)
    if ratio is None:
        return ""
    m, lo, hi = ratio
    way = "below" if m > 1 else "above"
    shown = m if m > 1 else 1.0 / m
    ends = (lo, hi) if m > 1 else (1.0 / hi, 1.0 / lo)
    return f", ×{shown:.2g} {way} the paper's value (×{ends[0]:.2g} to ×{ends[1]:.2g})"


def _against_paper(iv: Intervals, paper_value: float) -> str:
    p = iv.against(paper_value)
    return "" if p is None else f" (t p={format_pvalue(p)} against it)"


def _paper_note(iv: Intervals, paper_value: float | None) -> str:
    """Where the 95 % t-interval excludes the paper's value but the skew-robust one does not: so."""
    if paper_value is None or iv.ci is None or not iv.ci.excludes(paper_value):
        return ""
    return (
        f"; the 95 % interval excludes the paper's {_num(paper_value)}{_against_paper(iv, paper_value)}, the "
        f"skew-robust {format_interval(iv.robust)} does not"
    )


def _paper_excluded(kind: str, iv: Intervals, paper_value: float) -> str:
    """The words of ``below`` / ``above``: the paper's value excluded, the sign not shown."""
    rob = iv.robust or iv.ci
    why = (
        f"{format_interval(iv.ci)} covers 0"
        if not iv.ci.excludes(0.0)
        else f"the skew-robust {format_interval(rob)} covers 0"
    )
    return (
        f"the paper's {_num(paper_value)} excluded: the robust {format_interval(rob)} lies {kind} it"
        f"{_against_paper(iv, paper_value)}; sign not shown: {why}"
    )


def classify_effect(iv: Intervals, *, sign: str, paper_value: float | None, margin: float) -> ClaimVerdict:
    """The verdict of a paired effect (a contrast or the interaction) against the paper's
    ``sign`` ("+", "-", "0" no difference, "±" a difference either way) and ``paper_value``
    (None with "+" / "-": an ordering, read against ``margin``)."""
    if not iv.testable:
        return _untestable(iv)
    ci, eq, rob = iv.ci, iv.equivalence, iv.robust
    bounds = {} if rob is None else {"robust_low": rob.low, "robust_high": rob.high}
    kind = _kind(
        effect_kinds(ci.low, ci.high, eq.low, eq.high, sign=sign, paper_value=paper_value, margin=margin, **bounds)
    )
    shown, excl = format_interval(ci), ci.excludes(0.0)
    if kind == "not resolvable":
        return _verdict(kind, not_resolvable_words(iv, margin) + _paper_note(iv, paper_value), iv, on_eq=True)
    if kind == "absent":
        words = f"{format_interval(eq)} lies within ±{margin:g} and {shown} covers 0"
        if paper_value is not None and rob is not None and rob.excludes(paper_value):
            words += f"; the paper's {_num(paper_value)} is excluded{_against_paper(iv, paper_value)}"
        return _verdict(kind, words, iv, on_eq=True)
    if kind in ("below", "above"):
        return _verdict(kind, _paper_excluded(kind, iv, float(paper_value)), iv)  # type: ignore[arg-type]
    if sign == "0" and kind == "replicated":
        extra = f" ({shown} excludes 0, but by less than the margin)" if excl else ""
        return _verdict(kind, f"no difference beyond ±{margin:g}: {format_interval(eq)}{extra}", iv, on_eq=True)
    if kind == "inconclusive":
        lost = _sign_withheld(iv) if rob is None or not rob.excludes(0.0) else None
        if lost is not None or not excl:
            if lost is not None:
                return replace(lost, words=lost.words + _paper_note(iv, paper_value))
            return _verdict(kind, f"{shown} covers 0 and values beyond ±{margin:g}{_paper_note(iv, paper_value)}", iv)
        words = f"the robust {format_interval(rob)} excludes 0 in the claim's direction but reaches within ±{margin:g}"
        return _verdict(kind, f"{words}: not shown beyond the margin the claim's ordering needs", iv)
    if sign == "0":
        return _verdict(kind, f"an effect the paper does not report: {shown} excludes 0", iv, signed=True)
    if sign == "±":
        return _verdict(kind, f"a difference, as the paper says: {shown} excludes 0", iv, signed=True)
    return _verdict(kind, _effect_text(kind, iv, sign, paper_value, margin), iv, signed=True)


def classify_level(
    iv: Intervals,
    *,
    paper_value: float,
    band: float,
    start: float,
    margin: float,
    start_words: str = "",
    runs: bool = False,
) -> ClaimVerdict:
    """The verdict of a level (tau, the open fraction) against the paper's
    ``paper_value +- band``, starting at ``start`` (``start_words`` says what that is);
    ``runs``: a claim about new runs, which also needs ``iv.stable`` (the prediction
    interval(s) inside the band)."""
    if not iv.testable:
        return _untestable(iv)
    withheld = _sign_withheld(iv, null=start)
    if withheld is not None:
        return withheld
    ci, eq, rob = iv.ci, iv.equivalence, iv.robust
    low, high = paper_value - band, paper_value + band
    runs_ok = bool(iv.stable) if runs else True
    bounds = {} if rob is None else {"robust_low": rob.low, "robust_high": rob.high}
    kind = _kind(
        level_kinds(
            ci.low, ci.high, eq.low, eq.high, start=start, band=(low, high), margin=margin, runs_ok=runs_ok, **bounds
        )
    )
    where = (
        f"started at {start:.3g}{f' ({start_words})' if start_words else ''}, ended at {iv.estimate:.3f} "
        f"{format_interval(ci)}; the paper's band {low:.3g} to {high:.3g}"
    )
    pi = (
        ""
        if iv.prediction is None
        else f"a new seed's run falls in {format_interval(iv.prediction)} (95 % prediction interval)"
    )
    in_band = low <= start <= high
    text = {
        "replicated": f"moved into the band: {format_interval(eq)} (90 %) lies inside it"
        + (f", and {pi}, inside the band too" if runs else ""),
        "smaller": "moved towards the band and stopped short of it",
        "larger": "left the band it started in" if in_band else "moved beyond the band",
        "reversed": "moved away from the band",
        "absent": f"did not move: {format_interval(eq)} (90 %) lies within ±{margin:g} of the start",
        "inconclusive": _level_inconclusive(iv, start, (low, high), margin, runs, pi, in_band),
    }.get(kind)
    if kind == "not resolvable":
        text = not_resolvable_words(iv, margin, "the level's ")
    if kind in ("smaller", "larger", "reversed") and eq.inside(start - margin, start + margin):
        text += f" (nonzero but within ±{margin:g} of the start: negligible by this claim's margin)"
    signed = kind in ("replicated", "smaller", "larger", "reversed") and rob is not None and rob.excludes(start)
    return _verdict(
        kind, f"{text}; {where}", iv, on_eq=kind in ("replicated", "absent", "not resolvable"), signed=signed
    )


def _level_inconclusive(
    iv: Intervals, start: float, band: tuple[float, float], margin: float, runs: bool, pi: str, in_band: bool
) -> str:
    ci, eq = iv.ci, iv.equivalence
    if in_band:
        return "started inside the paper's band, so ending in it cannot show that it moved there"
    if runs and ci.excludes(start) and eq.inside(*band):
        runs_text = pi or "no prediction interval"
        return f"the mean moved into the band ({format_interval(eq)}, 90 %) but not a new seed's run: {runs_text}"
    if ci.excludes(start):
        return "moved from its start, and its interval overlaps the band without lying inside it"
    return f"{format_interval(ci)} covers the start and values beyond ±{margin:g} of it"


def classify_exact(value: float, *, sign: str, paper_value: float, what: str, paper_words: str = "") -> ClaimVerdict:
    """The verdict of an exact number (a parameter count or fraction, a cluster count)
    against the paper's bound (``sign`` "<") or count ("="); ``paper_words`` says how the
    paper states it ("d + 2 with d = 64")."""
    rests = f"{what} (exact: no seeds, no interval)"
    paper = f"{paper_value:.6g}" + (f" ({paper_words})" if paper_words else "")
    if sign == "<":  # a bound on a fraction, in per cent
        shown, bound = f"{100 * value:.3g} %", f"{100 * paper_value:.3g} %"
        if value < paper_value:
            return ClaimVerdict(
                "replicated", f"replicated: {shown} is below the paper's bound {bound}", rests, settled=SETTLED
            )
        return ClaimVerdict("larger", f"larger: {shown} is not below the paper's bound {bound}", rests, settled=SETTLED)
    if math.isclose(value, paper_value, rel_tol=0.0, abs_tol=0.5):
        return ClaimVerdict("replicated", f"replicated: {value:.6g}, as the paper's {paper}", rests, settled=SETTLED)
    kind = "smaller" if value < paper_value else "larger"
    return ClaimVerdict(kind, f"{kind}: {value:.6g} against the paper's {paper}", rests, settled=SETTLED)


def _difference(iv: Intervals, sign: str, what: str, rests: str) -> ClaimVerdict:
    """Two levels: a difference, whose words say grows or shrinks only where both intervals
    exclude 0."""
    shown, rob = format_interval(iv.ci), iv.robust
    excl = rob is not None and iv.ci.excludes(0.0) and rob.excludes(0.0)
    if excl:
        s = -1.0 if sign == "-" else 1.0
        way = "grows" if (1.0 if iv.ci.low > 0 else -1.0) == s else "shrinks"
        words = f"difference: {way} with {what} between the 2 {what}s: {shown} per doubling excludes 0"
    elif iv.ci.excludes(0.0):
        words = f"difference: {shown} per doubling excludes 0 but {_robust_shown(iv)} does not: sign withheld"
    else:
        words = f"difference: not distinguishable between the 2 {what}s: {shown} per doubling covers 0"
    words += "; 2 levels: a difference, not a slope"
    settled = SETTLED if excl else NOT_DISTINGUISHABLE
    return ClaimVerdict("difference", words + _few(iv), rests, signed=excl, settled=settled)


def classify_trend(
    iv: Intervals, *, sign: str, margin: float, factor: str, levels: int, span: float = 1.0, span_words: str = ""
) -> ClaimVerdict:
    """The verdict of a slope per doubling of ``factor`` measured at ``levels`` values of it
    (:func:`trend_kinds`). ``margin`` is the claim's (in the effect's units) and ``span`` the
    doublings it is spread over (``span_words`` says which: to the papers' level from the largest
    measured, or the measured span; at least 1): the bound per doubling is ``margin / span``.
    From two levels a ``difference`` whose words say grows or shrinks only when its interval
    excludes 0; never ``flat`` from two levels."""
    what = "size" if factor == "params" else "context"
    if not iv.testable:
        return ClaimVerdict(
            "inconclusive", f"inconclusive: {iv.reason or 'no test possible'}", "no interval", settled=NOT_TESTABLE
        )
    rests = f"{iv.confidence:.0%} t-interval of the per-seed slopes per doubling over {iv.n_seeds} seeds"
    if levels == 2:
        return _difference(iv, sign, what, rests)
    lost = _sign_withheld(iv)
    if lost is not None:
        return ClaimVerdict(lost.kind, lost.words, rests, lost.signed, lost.settled)
    span = max(1.0, float(span))
    bound = margin / span
    ci, rob = iv.ci, iv.robust
    eq = rob or ConfidenceInterval(-math.inf, math.inf)  # flat is carried to the papers' level: the sign's interval
    bounds = {} if rob is None else {"robust_low": rob.low, "robust_high": rob.high}
    kind = _kind(trend_kinds(ci.low, ci.high, eq.low, eq.high, sign=sign, margin=bound, levels=levels, **bounds))
    over = f"±{bound:.3g} per doubling: the claim's ±{margin:g} over {span:.3g} doubling{'s' if span != 1 else ''}"
    over += f" ({span_words})" if span_words else ""
    if kind == "not resolvable":
        body = not_resolvable_words(iv, bound, "the slope's skew-robust 95 % ", shown=eq)
        return _verdict(kind, f"slope per doubling {body} ({over}; {levels} levels)", iv, on_eq=True)
    shown = format_interval(ci)
    text = {
        "grows": f"with {what}: slope per doubling {shown} excludes 0",
        "shrinks": f"with {what}: slope per doubling {shown} excludes 0",
        "flat": f"slope per doubling {format_interval(eq)} (95 %, skew-robust) lies within {over}",
        "inconclusive": f"slope per doubling {shown} covers 0 and values beyond {over}",
    }[kind]
    signed = kind in ("grows", "shrinks")
    verdict = _verdict(kind, f"{text} ({levels} levels)", iv, on_eq=kind == "flat", signed=signed)
    return ClaimVerdict(verdict.kind, verdict.words, rests, verdict.signed, verdict.settled)


__all__ = [
    "CLAIM_KINDS",
    "FIGURE",
    "KIND_MEANINGS",
    "SIGNED_KINDS",
    "TREND_KINDS",
    "ClaimKind",
    "ClaimVerdict",
    "Intervals",
    "TrendKind",
    "classify_effect",
    "classify_exact",
    "classify_level",
    "classify_trend",
    "effect_kinds",
    "figure_verdict",
    "level_kinds",
    "not_resolvable_words",
    "trend_kinds",
]
