"""The card's procedure: one family per claim, and the card as a whole held to alpha.

A claim read in many cells, readings, studies and trends makes many tests of one statement:
its rows form one family. A card of many claims makes many families, and a reader who sees one
signed verdict among forty rows must be able to tell whether it is chance. So every signed
verdict (one that asserts a direction: replicated, smaller, larger, reversed, grows, shrinks, a
difference excluding 0) passes one procedure over the whole card (:func:`card_procedure`), on
each row's skew-robust p (:func:`~harness.scorecard.calibration.skew_robust_pvalue`: the t-test
against the row's null, made valid for strongly skewed seeds too):

1. each claim with a tested row is a family; its p as a whole is Simes' combination of its
   rows' p-values, ``min_i k p_(i) / i`` (the smallest Benjamini-Hochberg-adjusted p within it);
2. the families' p-values are adjusted across the card with Benjamini-Hochberg
   (:func:`~harness.analysis.multiplicity.bh_adjusted`,
   as ``statsmodels``' ``multipletests(method="fdr_bh")``); a claim whose adjusted p is below
   alpha is *selected*: R of the card's F claims;
3. within a selected claim, its rows' p-values are adjusted with Holm's step-down method
   (:func:`~harness.analysis.multiplicity.holm_adjusted`) and held to ``alpha R / F``
   (Benjamini & Bogomolov 2014, "Selective
   inference on multiple families of hypotheses").

A signed verdict that fails a step loses its kind: it becomes ``inconclusive`` with words that
say which step and the numbers, and its ``signed`` is False. Where no claim is true anywhere,
a signed verdict needs a selected claim, which Benjamini-Hochberg allows in at most alpha of
cards; the card states the procedure and the rate simulated for a card of its size
(:func:`card_family_wise`). Verdicts of equivalence (absent, flat, a replicated claim of no
difference), exact counts and figures are not adjusted and are in no family.

The evaluation steps of one cell are one curve, not many tests: a ``training`` row is not a
member of any family. Each is adjusted as if it stood in its cell's final row's place among the
claim's rows (:func:`adjust_training_rows`), under its claim's selection and level, so that its
last step reads as the verdict of record; nothing is adjusted across steps.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from harness.analysis.multiplicity import bh_adjusted, holm_adjusted
from harness.analysis.results_types import NOT_DISTINGUISHABLE
from harness.analysis.verdict_words import format_interval, format_pvalue, not_after_holm
from harness.scorecard.calibration import FamilyWiseRate, family_wise_rate, skew_robust_pvalue
from harness.scorecard.prediction_words import predicted_quantity
from harness.scorecard.rows import ScorecardRow

#: The card's procedure, in the words the card states.
PROCEDURE = (
    "each claim one family (Holm within it, Simes for the claim as a whole), Benjamini-Hochberg across the "
    "card's claims, a selected claim's rows held to alpha x selected / claims (Benjamini & Bogomolov 2014), on "
    "skew-robust p-values"
)


def robust_pvalue(row: ScorecardRow) -> float | None:
    """The row's skew-robust p (its column, else from its t p and seeds); None without a test."""
    if row.pvalue_robust is not None and np.isfinite(row.pvalue_robust):
        return float(row.pvalue_robust)
    if row.pvalue is None or not np.isfinite(row.pvalue) or not row.n_seeds:
        return None
    return float(skew_robust_pvalue(row.pvalue, int(row.n_seeds)))


def _member(row: ScorecardRow) -> bool:
    """A row in its claim's family: a verdict row (not a training step) with a test, not a figure."""
    return row.kind != "training" and row.verdict_kind != "figure" and robust_pvalue(row) is not None


@dataclass(frozen=True)
class CardProcedure:
    """The card's procedure, as run: ``alpha``, each claim's Simes p (``claim_p``) and its
    Benjamini-Hochberg-adjusted p across the card (``card_p``), the claims selected, and the
    level a selected claim's Holm-adjusted rows are held to (``level`` = alpha R / F)."""

    alpha: float
    claim_p: Mapping[str, float]
    card_p: Mapping[str, float]
    selected: frozenset[str]
    level: float

    @property
    def families(self) -> int:
        return len(self.claim_p)


def card_procedure(rows: Sequence[ScorecardRow], alpha: float = 0.05) -> CardProcedure:
    """Steps 1 and 2 of the module docstring over the card's family members."""
    by_claim: dict[str, list[float]] = {}
    for row in rows:
        if _member(row):
            by_claim.setdefault(row.claim, []).append(robust_pvalue(row))  # type: ignore[arg-type]
    claims = list(by_claim)
    simes = {c: float(np.min(bh_adjusted(np.array(by_claim[c])))) for c in claims}
    adjusted = bh_adjusted(np.array([simes[c] for c in claims])) if claims else np.zeros(0)
    card_p = {c: float(p) for c, p in zip(claims, adjusted, strict=True)}
    selected = frozenset(c for c in claims if card_p[c] < alpha)
    level = alpha * len(selected) / len(claims) if claims else alpha
    return CardProcedure(alpha, simes, card_p, selected, level)


def _lost(row: ScorecardRow, proc: CardProcedure, p_holm: float, k: int) -> ScorecardRow:
    """The row without its sign, saying which step took it."""
    quantity = {"trend": "slope per doubling", "predicted": predicted_quantity(row)}.get(row.kind, "estimate")
    ci = (row.ci_low, row.ci_high)
    if row.claim in proc.selected:
        words = not_after_holm(quantity, row.estimate, ci, p_holm) + f", held to {proc.level:.3g}"
    else:
        est = "n/a" if row.estimate is None else f"{row.estimate:+.3g}"
        words = (
            f"not significant across the card (p={format_pvalue(proc.card_p.get(row.claim))}: the claim's Simes p "
            f"{format_pvalue(proc.claim_p.get(row.claim))}, Benjamini-Hochberg over the card's {proc.families} "
            f"claims): {quantity} {est} {format_interval(ci)} before adjustment"
        )
    return dataclasses.replace(
        row,
        verdict_kind="inconclusive",
        verdict=f"inconclusive: {words} (the card's procedure; Holm across the claim's {k} rows; was "
        f"{row.verdict_kind})",
        settled=NOT_DISTINGUISHABLE,
        signed=False,
    )


def _keeps(row: ScorecardRow, proc: CardProcedure, p_holm: float) -> bool:
    return row.claim in proc.selected and p_holm < proc.level


def adjust_card(rows: Sequence[ScorecardRow], alpha: float = 0.05) -> tuple[list[ScorecardRow], CardProcedure]:
    """Every non-training row after the card's procedure (step 3 of the module docstring): each
    member with its Holm-adjusted p within its claim and its claim's adjusted p across the card;
    a signed verdict that fails either becomes ``inconclusive`` and says why."""
    out = list(rows)
    proc = card_procedure(out, alpha)
    families: dict[str, list[int]] = {}
    for i, row in enumerate(out):
        if _member(row):
            families.setdefault(row.claim, []).append(i)
    for claim, members in families.items():
        adjusted = holm_adjusted(np.array([robust_pvalue(out[i]) for i in members]))
        for i, p in zip(members, adjusted, strict=True):
            row = dataclasses.replace(out[i], pvalue_holm=float(p), pvalue_card=proc.card_p[claim])
            out[i] = row if not row.signed or _keeps(row, proc, float(p)) else _lost(row, proc, float(p), len(members))
    return [r if _member(r) or not r.signed else dataclasses.replace(r, signed=False) for r in out], proc


#: What separates a training row's measurement key from its cell's: ``<cell key>|step=<S>``.
STEP_MARK = "|step="


def adjust_training_rows(
    training: Sequence[ScorecardRow], adjusted: Sequence[ScorecardRow], proc: CardProcedure
) -> list[ScorecardRow]:
    """Each training row with its Holm-adjusted p as if its p stood in the place of its cell's
    final row among the claim's ``adjusted`` rows (appended when that row is not there), under
    its claim's selection and level in ``proc``; a signed verdict that fails becomes
    ``inconclusive``, as :func:`adjust_card` does."""
    families: dict[str, list[ScorecardRow]] = {}
    for row in adjusted:
        if _member(row):
            families.setdefault(row.claim, []).append(row)
    out = []
    for row in training:
        p_row = robust_pvalue(row)
        if p_row is None or row.verdict_kind == "figure":
            out.append(dataclasses.replace(row, signed=False) if row.signed else row)
            continue
        members = families.get(row.claim, [])
        cell_key = (row.measurement or "").split(STEP_MARK)[0]
        keys = [m.measurement for m in members]
        at = keys.index(cell_key) if cell_key in keys else len(members)
        pvalues = [robust_pvalue(m) for m in members] + ([] if at < len(members) else [p_row])
        pvalues[at] = p_row
        p = float(holm_adjusted(np.array(pvalues, dtype=float))[at])
        row = dataclasses.replace(row, pvalue_holm=p, pvalue_card=proc.card_p.get(row.claim))
        out.append(row if not row.signed or _keeps(row, proc, p) else _lost(row, proc, p, len(pvalues)))
    return out


def measurement_key(row: ScorecardRow, variants: Sequence[str]) -> str:
    """What a row measured: study, cell, group, the variants compared (in the measure's
    roles), the metric, and for a trend its factor. Two claims with the same key read one
    measurement."""
    cell = f"{row.dataset}/{row.size}/{row.context_length}"
    return "|".join(str(x) for x in (row.study, row.kind, row.factor, cell, row.group, ",".join(variants), row.metric))


@dataclass(frozen=True)
class CardFamilies:
    """The card as families of tests: ``families`` claims with at least one row in a family
    (a verdict row with a test), ``rows_per_family`` the most such rows one claim has,
    ``seeds`` the fewest seeds of any such row."""

    families: int
    rows_per_family: int
    seeds: int


def card_families(rows: Sequence[ScorecardRow]) -> CardFamilies | None:
    """The card's families (None: no row has a test); training rows and figures are not members."""
    tested = [r for r in rows if _member(r)]
    if not tested:
        return None
    sizes: dict[str, int] = {}
    for row in tested:
        sizes[row.claim] = sizes.get(row.claim, 0) + 1
    seeds = min(int(r.n_seeds or 0) for r in tested)
    return CardFamilies(len(sizes), max(sizes.values()), seeds)


def card_family_wise(rows: Sequence[ScorecardRow]) -> tuple[CardFamilies | None, FamilyWiseRate | None]:
    """The card's families and its simulated rate of cards with any signed verdict under a
    global null, after the card's procedure."""
    card = card_families(rows)
    if card is None:
        return None, None
    return card, family_wise_rate(card.families, card.rows_per_family, card.seeds)


__all__ = [
    "PROCEDURE",
    "STEP_MARK",
    "CardFamilies",
    "CardProcedure",
    "adjust_card",
    "adjust_training_rows",
    "card_families",
    "card_family_wise",
    "card_procedure",
    "measurement_key",
    "robust_pvalue",
]
