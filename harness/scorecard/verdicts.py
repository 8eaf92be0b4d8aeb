"""A claim's verdict from the report's own intervals: the scorecard adds no inference.

Each classifier takes the intervals the analysis layer computed for one row (:class:`Intervals`:
the ``confidence`` t-interval over seeds, the ``1 - 2 alpha`` t-interval that the TOST
equivalence test reads, the shape check of the per-seed values, and for a claim about runs the
prediction interval) and the paper's number, and returns a :class:`ClaimVerdict`: one of
:data:`CLAIM_KINDS` (or :data:`TREND_KINDS`), the words, and the interval it rests on. The
kind itself comes from one vectorised rule per quantity (:func:`effect_kinds`,
:func:`level_kinds`, :func:`trend_kinds`), so that the calibration simulates exactly what a
scorecard does (:mod:`harness.scorecard.simulate`).

A signed effect (the paper's sign s, value v, the claim's smallest effect delta):

- the 95 % interval excludes 0: its sign and v decide, whatever delta says: ``reversed``
  (opposite sign), ``replicated`` (sign s, covers v; without v: sign s), ``smaller`` /
  ``larger`` (sign s, wholly between 0 and v / beyond v); an effect whose 90 % interval also lies
  within +-delta says "nonzero but within +-delta: negligible by this claim's margin";
- it covers 0: ``absent`` when the 90 % interval lies within +-delta (equivalence to 0);
  ``not resolvable`` when the 90 % interval is wider than 2 delta (no outcome could show
  equivalence at this precision: the words give the seeds needed); else ``inconclusive``.

A claim of no difference (sign "0") is ``replicated`` when equivalence within +-delta is shown
and ``larger`` when the interval excludes 0 otherwise. A level (tau, the open fraction, the
energy direction's cosine) is judged by the paper's band ``v +- band`` and where it starts
(:func:`level_kinds`): ``replicated`` only when its 90 % interval lies inside the band having
moved from the start (and, for a claim about runs, a new seed's run predictably inside the
band); overlap alone is ``inconclusive``; a start inside the band cannot show convergence.
A trend from three or more levels is ``grows`` / ``shrinks`` / ``flat`` (equivalence per
doubling) / ``not resolvable`` / ``inconclusive``; from two levels it is a ``difference``, never
flat. Per-seed values that fail the shape check make any row ``inconclusive`` with the report's
words and the sign-flip p, and below 20 seeds the measured false-positive rate of a t claim on
such values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal, get_args

import numpy as np

from harness.analysis.results_types import (
    NOT_DISTINGUISHABLE,
    NOT_TESTABLE,
    SETTLED,
    ConfidenceInterval,
    VerdictKind,
    format_interval,
)
from harness.analysis.verdict_words import few_seeds_words, shape_words
from harness.scorecard.calibration import skewed_false_positive

ClaimKind = Literal[
    "replicated", "smaller", "larger", "reversed", "absent", "not resolvable", "inconclusive", "not measured"
]
#: The verdicts a claim can get at one cell (:data:`KIND_MEANINGS` says what each means).
CLAIM_KINDS: tuple[str, ...] = get_args(ClaimKind)
TrendKind = Literal["grows", "shrinks", "flat", "difference", "not resolvable", "inconclusive"]
#: The verdicts a claim's trend can get along size or context.
TREND_KINDS: tuple[str, ...] = get_args(TrendKind)

#: What each kind means, in one line (the page's legend and docs/scorecard.md). The intervals:
#: "95 %" is the t-interval over seeds, "90 %" the 1 - 2 alpha one of the TOST.
KIND_MEANINGS: dict[str, str] = {
    "replicated": "the 95 % interval excludes 0 with the paper's sign and covers its value; a level: its 90 % "
    "interval lies inside the paper's band, having moved there (and, for runs, a new run predictably in it); "
    "a claim of no difference: its 90 % interval lies within ± the claim's margin",
    "smaller": "the 95 % interval excludes 0 with the paper's sign and lies between 0 and the paper's value "
    "(a level: moved towards the band, stopped short of it)",
    "larger": "the 95 % interval excludes 0 with the paper's sign and lies beyond the paper's value "
    "(a level: beyond the band; a claim of no difference: an effect it does not report)",
    "reversed": "the 95 % interval excludes 0 with the opposite sign (a level: moved away from the band)",
    "absent": "the 95 % interval covers 0 and the 90 % interval lies within ± the claim's margin "
    "(equivalence to 0; a level: did not move from its start)",
    "not resolvable": "the 95 % interval covers 0 and the 90 % interval is wider than twice the claim's margin: "
    "no outcome at this precision could show equivalence; the row says how many seeds would",
    "inconclusive": "none of these: the interval covers 0 and values beyond the margin, overlaps the band "
    "only, the per-seed values fail the shape check, a claim lost to Holm's adjustment, or no interval",
    "not measured": "no study read can measure it (the row names the study that would)",
    "grows": "three or more levels: the slope per doubling excludes 0 in the paper's direction",
    "shrinks": "three or more levels: the slope per doubling excludes 0 against the paper's direction",
    "flat": "three or more levels: the 90 % interval of the slope per doubling lies within ± the margin",
    "difference": "two levels only: a difference between them, not a trend (its words say grows or shrinks "
    "only when the interval excludes 0)",
}

#: Below this many seeds a shape-flagged row states the measured false-positive rate.
SKEW_RATE_BELOW = 20


@dataclass(frozen=True)
class ClaimVerdict:
    """A verdict: its kind, its words, the interval it rests on (in words), whether it rests
    on the interval excluding the null (``signed``: Holm's adjustment within the claim can take
    it away) and what its test settled (:data:`~harness.analysis.results_types.VerdictKind`)."""

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
    about runs, ``prediction`` (where a new seed's run lands) and ``stable`` (inside the band)."""

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

    @property
    def testable(self) -> bool:
        return self.ci is not None and self.equivalence is not None

    @property
    def ci_words(self) -> str:
        return f"{self.confidence:.0%} t-interval over {self.n_seeds} seeds"

    @property
    def equivalence_words(self) -> str:
        return f"{1 - 2 * (1 - self.confidence):.0%} t-interval over {self.n_seeds} seeds (TOST)"


# ----------------------------------------------------------------------------- the rules
def effect_kinds(
    ci_low: Any, ci_high: Any, eq_low: Any, eq_high: Any, *, sign: str, paper_value: float | None, margin: float
) -> np.ndarray:
    """The kind of a paired effect from its intervals (arrays for a batch of studies; see the
    module docstring): the one rule the scorecard and its calibration share."""
    lo, hi, elo, ehi = (np.asarray(x, dtype=float) for x in (ci_low, ci_high, eq_low, eq_high))
    excl, up = (lo > 0) | (hi < 0), lo > 0
    within = (elo >= -margin) & (ehi <= margin)
    unresolvable = (ehi - elo) > 2.0 * margin
    if sign == "0":
        return np.select([within, excl, unresolvable], ["replicated", "larger", "not resolvable"], "inconclusive")
    if sign == "±":
        return np.select([excl, within, unresolvable], ["replicated", "absent", "not resolvable"], "inconclusive")
    s = 1.0 if sign == "+" else -1.0
    if paper_value is None:
        towards = np.full(lo.shape, "replicated", dtype=object)
    else:
        v = float(paper_value)
        short = hi < v if s > 0 else lo > v
        towards = np.select([(lo <= v) & (v <= hi), short], ["replicated", "smaller"], "larger")
    signed = np.where(np.where(up, 1.0, -1.0) != s, "reversed", towards)
    return np.select([excl, within, unresolvable], [signed, "absent", "not resolvable"], "inconclusive").astype(str)


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
) -> np.ndarray:
    """The kind of a level that starts at ``start`` against the paper's ``band`` (low, high);
    ``runs_ok``: a claim about runs has them predictably inside the band (True otherwise)."""
    lo, hi, elo, ehi, st = (np.asarray(x, dtype=float) for x in (ci_low, ci_high, eq_low, eq_high, start))
    low, high = band
    towards = np.where(st < low, 1.0, -1.0)  # which way the band lies from the start
    excl = (lo > st) | (hi < st)
    moved = np.where(lo > st, 1.0, -1.0)
    below, above = hi < low, lo > high  # the 95 % interval wholly outside the band
    short, beyond = np.where(towards > 0, below, above), np.where(towards > 0, above, below)
    eq_inside = (elo >= low) & (ehi <= high)
    moved_kind = np.select(
        [moved != towards, eq_inside & np.asarray(runs_ok, dtype=bool), short, beyond],
        ["reversed", "replicated", "smaller", "larger"],
        "inconclusive",
    )
    within_start = (elo >= st - margin) & (ehi <= st + margin)
    unresolvable = (ehi - elo) > 2.0 * margin
    outside = np.select([excl, within_start, unresolvable], [moved_kind, "absent", "not resolvable"], "inconclusive")
    inside = np.where(below | above, "larger", "inconclusive")  # started in the band: only leaving it shows
    return np.where((st >= low) & (st <= high), inside, outside).astype(str)


def trend_kinds(
    ci_low: Any, ci_high: Any, eq_low: Any, eq_high: Any, *, sign: str, margin: float, levels: int
) -> np.ndarray:
    """The kind of a slope per doubling from ``levels`` values of its factor: ``difference``
    from two levels (never flat), else grows / shrinks / flat / not resolvable / inconclusive."""
    lo, hi, elo, ehi = (np.asarray(x, dtype=float) for x in (ci_low, ci_high, eq_low, eq_high))
    if levels == 2:
        return np.full(lo.shape, "difference").astype(str)
    s = -1.0 if sign == "-" else 1.0
    excl = (lo > 0) | (hi < 0)
    direction = np.where(np.where(lo > 0, 1.0, -1.0) == s, "grows", "shrinks")
    within = (elo >= -margin) & (ehi <= margin)
    unresolvable = (ehi - elo) > 2.0 * margin
    return np.select([excl, within, unresolvable], [direction, "flat", "not resolvable"], "inconclusive").astype(str)


def _kind(rule_output: np.ndarray) -> str:
    return str(np.asarray(rule_output).reshape(-1)[0])


# ----------------------------------------------------------------------------- words
def _num(x: float | None, digits: int = 3) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:+.{digits}f}"


def _few(iv: Intervals) -> str:
    words = few_seeds_words(iv.n_seeds, alpha=1 - iv.confidence)
    return f" — {words}" if words else ""


def _untestable(iv: Intervals) -> ClaimVerdict:
    reason = iv.reason or "no test possible"
    return ClaimVerdict("inconclusive", f"inconclusive: {reason}", "no interval", settled=NOT_TESTABLE)


def _shape_withheld(iv: Intervals, null: float = 0.0) -> ClaimVerdict | None:
    """The report's words where the per-seed values fail the shape check: no kind but
    ``inconclusive``, the sign-flip p beside the t p, and below 20 seeds the measured
    false-positive rate of a t claim on such values (None: the check is quiet)."""
    if iv.shape is None or not iv.shape.fires or iv.ci is None:
        return None
    excludes = iv.ci.excludes(null)
    words = f"inconclusive: {format_interval(iv.ci)}; " + shape_words(
        iv.shape, iv.pvalue, iv.permutation_pvalue, claims=excludes
    )
    rate = skewed_false_positive(iv.n_seeds) if iv.n_seeds < SKEW_RATE_BELOW else None
    if rate is not None:
        words += (
            f"; on strongly skewed seeds the check flags, a t claim at {iv.n_seeds} seeds is false in "
            f"{rate:.0%} of studies (simulated: docs/calibration.md)"
        )
    return ClaimVerdict("inconclusive", words + _few(iv), iv.ci_words, settled=NOT_DISTINGUISHABLE)


def not_resolvable_words(iv: Intervals, margin: float, what: str = "") -> str:
    """Why a row is ``not resolvable`` and what would resolve it: "at this precision, [a, b]
    (90 % interval) is wider than +-delta allows; about N seeds needed", from the analysis
    layer's planning (:func:`~harness.analysis.planning.seeds_needed`) at the observed seed sd,
    80 % power, two-sided at the row's level."""
    from harness.analysis.planning import seeds_needed

    head = (
        f"at this precision, {format_interval(iv.equivalence)} ({what}90 % interval) is wider than ±{margin:g} allows"
    )
    if iv.sd is None or not iv.sd > 0:
        return head
    plan = seeds_needed(effect=margin, sd=iv.sd, sd_df=iv.n_seeds - 1, alpha=1 - iv.confidence)
    return (
        f"{head}; about {plan.range_text()} seeds needed (80 % power to detect ±{margin:g} at the observed seed "
        f"sd {iv.sd:.3g}; the range spans the sd's own interval)"
    )


def _negligible(iv: Intervals, margin: float) -> str:
    eq = iv.equivalence
    if eq is not None and eq.inside(-margin, margin):
        return f"; nonzero but within ±{margin:g}: negligible by this claim's margin ({format_interval(eq)})"
    return ""


def _verdict(kind: str, words: str, iv: Intervals, *, on_eq: bool = False, signed: bool = False) -> ClaimVerdict:
    settled = NOT_DISTINGUISHABLE if kind in ("inconclusive", "not resolvable") else SETTLED
    rests = iv.equivalence_words if on_eq else iv.ci_words
    return ClaimVerdict(kind, f"{kind}: {words}" + _few(iv), rests, signed=signed, settled=settled)


def classify_effect(iv: Intervals, *, sign: str, paper_value: float | None, margin: float) -> ClaimVerdict:
    """The verdict of a paired effect (a contrast or the interaction) against the paper's
    ``sign`` ("+", "-", "0" no difference, "±" a difference either way) and ``paper_value``."""
    if not iv.testable:
        return _untestable(iv)
    withheld = _shape_withheld(iv)
    if withheld is not None:
        return withheld
    ci, eq = iv.ci, iv.equivalence
    kind = _kind(effect_kinds(ci.low, ci.high, eq.low, eq.high, sign=sign, paper_value=paper_value, margin=margin))
    shown, excl = format_interval(ci), ci.excludes(0.0)
    paper = _num(paper_value) if paper_value is not None else f"sign {sign}"
    if kind == "not resolvable":
        return _verdict(kind, not_resolvable_words(iv, margin), iv, on_eq=True)
    if kind == "inconclusive":
        return _verdict(kind, f"{shown} covers 0 and values beyond ±{margin:g}", iv)
    if kind == "absent":
        return _verdict(kind, f"{format_interval(eq)} lies within ±{margin:g} and {shown} covers 0", iv, on_eq=True)
    if sign == "0":
        if kind == "replicated":
            extra = f" ({shown} excludes 0, but by less than the margin)" if excl else ""
            return _verdict(kind, f"no difference beyond ±{margin:g}: {format_interval(eq)}{extra}", iv, on_eq=True)
        return _verdict(kind, f"an effect the paper does not report: {shown} excludes 0", iv, signed=True)
    if sign == "±":
        return _verdict(kind, f"a difference, as the paper says: {shown} excludes 0", iv, signed=True)
    text = {
        "reversed": f"{shown} excludes 0 with the sign opposite to the paper's {paper}",
        "replicated": f"{shown} excludes 0 and "
        + ("has the paper's sign" if paper_value is None else f"covers the paper's {paper}"),
        "smaller": f"{shown} excludes 0 with the paper's sign and lies between 0 and the paper's {paper}",
        "larger": f"{shown} excludes 0 with the paper's sign and lies beyond the paper's {paper}",
    }[kind]
    return _verdict(kind, text + _negligible(iv, margin), iv, signed=True)


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
    """The verdict of a level (tau, the open fraction, a cosine) against the paper's
    ``paper_value +- band``, starting at ``start`` (``start_words`` says what that is);
    ``runs``: a claim about new runs, which also needs ``iv.stable`` (the prediction
    interval(s) inside the band)."""
    if not iv.testable:
        return _untestable(iv)
    withheld = _shape_withheld(iv, null=start)
    if withheld is not None:
        return withheld
    ci, eq = iv.ci, iv.equivalence
    low, high = paper_value - band, paper_value + band
    runs_ok = bool(iv.stable) if runs else True
    kind = _kind(
        level_kinds(ci.low, ci.high, eq.low, eq.high, start=start, band=(low, high), margin=margin, runs_ok=runs_ok)
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
    return _verdict(
        kind,
        f"{text}; {where}",
        iv,
        on_eq=kind in ("replicated", "absent", "not resolvable"),
        signed=kind in ("replicated", "smaller", "larger", "reversed") and ci.excludes(start),
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


def classify_trend(iv: Intervals, *, sign: str, margin: float, factor: str, levels: int) -> ClaimVerdict:
    """The verdict of a slope per doubling of ``factor`` measured at ``levels`` values of it
    (:func:`trend_kinds`): from two levels a ``difference`` whose words say grows or shrinks
    only when its interval excludes 0; never ``flat`` from two levels."""
    what = "size" if factor == "params" else "context"
    if not iv.testable:
        return ClaimVerdict(
            "inconclusive", f"inconclusive: {iv.reason or 'no test possible'}", "no interval", settled=NOT_TESTABLE
        )
    withheld = _shape_withheld(iv)
    if withheld is not None:
        return withheld
    ci, eq = iv.ci, iv.equivalence
    kind = _kind(trend_kinds(ci.low, ci.high, eq.low, eq.high, sign=sign, margin=margin, levels=levels))
    rests = f"{iv.confidence:.0%} t-interval of the per-seed slopes per doubling over {iv.n_seeds} seeds"
    shown, excl = format_interval(ci), ci.excludes(0.0)
    if kind == "difference":
        if excl:
            s = -1.0 if sign == "-" else 1.0
            way = "grows" if (1.0 if ci.low > 0 else -1.0) == s else "shrinks"
            words = f"difference: {way} with {what} between the 2 {what}s: {shown} per doubling excludes 0"
        else:
            words = f"difference: not distinguishable between the 2 {what}s: {shown} per doubling covers 0"
        words += "; 2 levels: a difference, not a slope"
        settled = SETTLED if excl else NOT_DISTINGUISHABLE
        return ClaimVerdict(kind, words + _few(iv), rests, signed=excl, settled=settled)
    if kind == "not resolvable":
        body = not_resolvable_words(iv, margin, "the slope's ")
        return _verdict(kind, f"slope per doubling {body} ({levels} levels)", iv, on_eq=True)
    text = {
        "grows": f"with {what}: slope per doubling {shown} excludes 0",
        "shrinks": f"with {what}: slope per doubling {shown} excludes 0",
        "flat": f"slope per doubling {format_interval(eq)} (90 %) lies within ±{margin:g}",
        "inconclusive": f"slope per doubling {shown} covers 0 and values beyond ±{margin:g}",
    }[kind]
    verdict = _verdict(kind, f"{text} ({levels} levels)", iv, on_eq=kind == "flat", signed=excl)
    return ClaimVerdict(verdict.kind, verdict.words, rests, verdict.signed, verdict.settled)


__all__ = [
    "CLAIM_KINDS",
    "KIND_MEANINGS",
    "SKEW_RATE_BELOW",
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
    "level_kinds",
    "not_resolvable_words",
    "trend_kinds",
]
