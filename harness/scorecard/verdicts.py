"""A claim's verdict from the report's own intervals: the scorecard adds no inference.

Each function takes the intervals the analysis layer computed for one cell (the
``confidence`` t-interval over seeds, and the ``1 - 2 alpha`` t-interval that the TOST
equivalence test reads) and the paper's number, and returns a :class:`ClaimVerdict`: one
of :data:`CLAIM_KINDS`, the words, and the interval the verdict rests on.

For a signed effect (the paper's sign s, value v, the study's smallest effect delta):

- ``absent``: the ``1 - 2 alpha`` interval lies within ``+-delta`` (equivalence to 0 shown);
- ``reversed``: the interval excludes 0 with the sign opposite to s;
- ``replicated``: it excludes 0 with sign s and covers v (with no v, an ordering: excludes 0 with sign s);
- ``smaller`` / ``larger``: it excludes 0 with sign s and lies wholly between 0 and v / beyond v;
- ``inconclusive``: none of these (it covers 0 and values beyond ``+-delta``), or no interval.

``absent`` is checked first: an effect shown negligible is reported as such even where
its interval also excludes 0. A level (tau, the open fraction) reads the same way with 0
replaced by where the level starts (``null``: tau's initial value; one half, the open
fraction at tau = 0) and the paper's value by its band ``v +- band``. A claim of no
difference (``sign`` "0") is ``replicated`` when equivalence is shown and ``larger`` when the
interval excludes 0. Trends read the slope per doubling of x the same way: ``grows`` (in the
paper's direction), ``shrinks``, ``flat`` (equivalence within ``+-delta`` per doubling),
``inconclusive``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, get_args

from harness.analysis.results_types import ConfidenceInterval, format_interval

ClaimKind = Literal["replicated", "smaller", "larger", "reversed", "absent", "inconclusive", "not measured"]
#: The verdicts a claim can get at one cell (:data:`KIND_MEANINGS` says what each means).
CLAIM_KINDS: tuple[str, ...] = get_args(ClaimKind)
TrendKind = Literal["grows", "shrinks", "flat", "inconclusive"]
#: The verdicts a claim's trend can get along size or context.
TREND_KINDS: tuple[str, ...] = get_args(TrendKind)

#: What each kind means, in one line (the page's legend and docs/scorecard.md).
KIND_MEANINGS: dict[str, str] = {
    "replicated": "the interval excludes 0 with the paper's sign and covers the paper's value",
    "smaller": "the paper's sign, the interval excludes 0, and it lies wholly below the paper's value",
    "larger": "the paper's sign, the interval excludes 0, and it lies wholly above the paper's value",
    "reversed": "the interval excludes 0 with the opposite sign",
    "absent": "equivalence to 0 shown: the 1 - 2 alpha interval lies within +- the smallest effect",
    "inconclusive": "none of these: the interval covers 0 and values beyond the smallest effect",
    "not measured": "no study read can measure it (the row names the study that would)",
    "grows": "the slope per doubling excludes 0 in the paper's direction",
    "shrinks": "the slope per doubling excludes 0 against the paper's direction",
    "flat": "the slope per doubling lies within +- the smallest effect (equivalence)",
}

#: Below this many seeds a verdict says so in its own words (STATISTICS.md).
FEW_SEEDS = 6


@dataclass(frozen=True)
class ClaimVerdict:
    """A verdict: its kind, its words, and the interval it rests on (in words)."""

    kind: str
    words: str
    rests_on: str


@dataclass(frozen=True)
class Intervals:
    """The intervals of one cell, from the analysis layer: ``ci`` the ``confidence``
    t-interval over seeds, ``equivalence`` the ``1 - 2 alpha`` one (None: no test possible,
    ``reason`` says why)."""

    estimate: float
    ci: ConfidenceInterval | None
    equivalence: ConfidenceInterval | None
    n_seeds: int
    confidence: float = 0.95
    reason: str = ""

    @property
    def ci_words(self) -> str:
        return f"{self.confidence:.0%} t-interval over {self.n_seeds} seeds"

    @property
    def equivalence_words(self) -> str:
        return f"{1 - 2 * (1 - self.confidence):.0%} t-interval over {self.n_seeds} seeds (TOST)"


def _num(x: float | None, digits: int = 3) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:+.{digits}f}"


def _few(iv: Intervals) -> str:
    return f"; {iv.n_seeds} seeds (below {FEW_SEEDS}: wide intervals)" if iv.n_seeds < FEW_SEEDS else ""


def _within(ci: ConfidenceInterval | None, low: float, high: float) -> bool:
    return ci is not None and ci.inside(low, high)


def _untestable(iv: Intervals) -> ClaimVerdict:
    reason = iv.reason or "no test possible"
    return ClaimVerdict("inconclusive", f"inconclusive: {reason}", "no interval")


def classify_effect(iv: Intervals, *, sign: str, paper_value: float | None, margin: float) -> ClaimVerdict:
    """The verdict of a paired effect (a contrast or the interaction) against the paper's
    ``sign`` ("+", "-", "0" no difference, "±" a difference either way) and ``paper_value``."""
    if iv.ci is None or iv.equivalence is None:
        return _untestable(iv)
    ci, eq = iv.ci, iv.equivalence
    shown = format_interval(ci)
    if _within(eq, -margin, margin):
        kind = "replicated" if sign == "0" else "absent"
        what = "no difference, as the paper says" if sign == "0" else "negligible"
        words = f"{kind}: {what}: {format_interval(eq)} lies within ±{margin:g} (equivalence)"
        return ClaimVerdict(kind, words + _few(iv), iv.equivalence_words)
    if not ci.excludes(0.0):
        return ClaimVerdict(
            "inconclusive", f"inconclusive: {shown} covers 0 and values beyond ±{margin:g}" + _few(iv), iv.ci_words
        )
    found = 1.0 if ci.low > 0 else -1.0
    if sign in ("0", "±"):
        kind = "larger" if sign == "0" else "replicated"
        what = "an effect the paper does not report" if sign == "0" else "a difference, as the paper says"
        return ClaimVerdict(kind, f"{kind}: {what}: {shown} excludes 0" + _few(iv), iv.ci_words)
    s = 1.0 if sign == "+" else -1.0
    if found != s:
        paper = _num(paper_value) if paper_value is not None else f"sign {sign}"
        return ClaimVerdict(
            "reversed",
            f"reversed: {shown} excludes 0 with the sign opposite to the paper's {paper}" + _few(iv),
            iv.ci_words,
        )
    if paper_value is None or not ci.excludes(paper_value):
        what = "the paper's sign" if paper_value is None else f"covers the paper's {_num(paper_value)}"
        return ClaimVerdict("replicated", f"replicated: {shown} excludes 0 and {what}" + _few(iv), iv.ci_words)
    closer = (ci.high < paper_value) if s > 0 else (ci.low > paper_value)
    kind = "smaller" if closer else "larger"
    where = "between 0 and" if closer else "beyond"
    words = f"{kind}: {shown} excludes 0 with the paper's sign and lies {where} the paper's {_num(paper_value)}"
    return ClaimVerdict(kind, words + _few(iv), iv.ci_words)


def classify_level(iv: Intervals, *, paper_value: float, band: float, null: float) -> ClaimVerdict:
    """The verdict of a level (tau, the open fraction) against the paper's ``paper_value``
    ``+- band``, the level moving away from where it starts (``null``)."""
    if iv.ci is None or iv.equivalence is None:
        return _untestable(iv)
    ci, eq = iv.ci, iv.equivalence
    shown, target = format_interval(ci, digits=3), f"{paper_value:g} ± {band:g}"
    if abs(paper_value - null) <= band:  # the claim is that the level stays in the band
        if _within(eq, paper_value - band, paper_value + band):
            return ClaimVerdict(
                "replicated", f"replicated: {format_interval(eq)} within {target}", iv.equivalence_words
            )
        if ci.low > paper_value + band or ci.high < paper_value - band:
            kind = "larger" if ci.low > paper_value + band else "smaller"
            return ClaimVerdict(kind, f"{kind}: {shown} lies outside {target}" + _few(iv), iv.ci_words)
        return ClaimVerdict("inconclusive", f"inconclusive: {shown} overlaps {target} and beyond", iv.ci_words)
    if _within(eq, null - band, null + band):
        words = f"absent: {format_interval(eq)} lies within ±{band:g} of the start {null:g} (equivalence)"
        return ClaimVerdict("absent", words + _few(iv), iv.equivalence_words)
    if not ci.excludes(null):
        return ClaimVerdict("inconclusive", f"inconclusive: {shown} covers the start {null:g}" + _few(iv), iv.ci_words)
    s = 1.0 if paper_value > null else -1.0
    if (1.0 if ci.low > null else -1.0) != s:
        words = f"reversed: {shown} moved from the start {null:g} away from the paper's {paper_value:g}"
        return ClaimVerdict("reversed", words + _few(iv), iv.ci_words)
    low, high = paper_value - band, paper_value + band
    if ci.high >= low and ci.low <= high:
        return ClaimVerdict("replicated", f"replicated: {shown} reaches {target}" + _few(iv), iv.ci_words)
    closer = ci.high < low if s > 0 else ci.low > high
    kind = "smaller" if closer else "larger"
    where = "short of" if closer else "beyond"
    words = f"{kind}: {shown} moved from {null:g} towards the paper's value but stops {where} {target}"
    return ClaimVerdict(kind, words + _few(iv), iv.ci_words)


def classify_exact(value: float, *, sign: str, paper_value: float, what: str) -> ClaimVerdict:
    """The verdict of an exact number (a parameter count, a cluster count) against the
    paper's bound (``sign`` "<") or count ("=")."""
    rests = f"{what} (exact: no seeds, no interval)"
    if sign == "<":
        if value < paper_value:
            return ClaimVerdict(
                "replicated", f"replicated: {value:.4g} is below the paper's bound {paper_value:.4g}", rests
            )
        return ClaimVerdict("larger", f"larger: {value:.4g} is not below the paper's bound {paper_value:.4g}", rests)
    if math.isclose(value, paper_value, rel_tol=0.0, abs_tol=0.5):
        return ClaimVerdict("replicated", f"replicated: {value:.6g}, as the paper says", rests)
    kind = "smaller" if value < paper_value else "larger"
    return ClaimVerdict(kind, f"{kind}: {value:.6g} against the paper's {paper_value:.6g}", rests)


def _two_levels(levels: int) -> str:
    return "; 2 levels: a difference, not a slope" if levels == 2 else ""


def classify_trend(iv: Intervals, *, sign: str, margin: float, factor: str, levels: int = 0) -> ClaimVerdict:
    """The verdict of a slope per doubling of ``factor`` measured at ``levels`` values of it:
    grows (in the paper's direction; upwards for a claim without one), shrinks, flat
    (equivalence within ``+-margin``), inconclusive. From two levels the words say it is a
    difference, not a slope."""
    what = "size" if factor == "params" else "context"
    if iv.ci is None or iv.equivalence is None:
        return ClaimVerdict("inconclusive", f"inconclusive: {iv.reason or 'no test possible'}", "no interval")
    words_ci = f"{iv.confidence:.0%} t-interval of the per-seed slopes over {iv.n_seeds} seeds"
    if _within(iv.equivalence, -margin, margin):
        words = f"flat: slope per doubling {format_interval(iv.equivalence)} within ±{margin:g}"
        level = f"{1 - 2 * (1 - iv.confidence):.0%}"
        return ClaimVerdict(
            "flat", words + _two_levels(levels) + _few(iv), f"{level} t-interval of the per-seed slopes (TOST)"
        )
    if not iv.ci.excludes(0.0):
        return ClaimVerdict(
            "inconclusive",
            f"inconclusive: slope per doubling {format_interval(iv.ci)} covers 0" + _two_levels(levels) + _few(iv),
            words_ci,
        )
    s = -1.0 if sign == "-" else 1.0
    kind = "grows" if (1.0 if iv.ci.low > 0 else -1.0) == s else "shrinks"
    words = f"{kind} with {what}: slope per doubling {format_interval(iv.ci)} excludes 0"
    return ClaimVerdict(kind, words + _two_levels(levels) + _few(iv), words_ci)


__all__ = [
    "CLAIM_KINDS",
    "FEW_SEEDS",
    "KIND_MEANINGS",
    "TREND_KINDS",
    "ClaimKind",
    "ClaimVerdict",
    "Intervals",
    "TrendKind",
    "classify_effect",
    "classify_exact",
    "classify_level",
    "classify_trend",
]
