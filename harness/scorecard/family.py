"""One family per claim, and the card's family-wise rate, stated.

A claim read in many cells, readings, studies and trends makes many tests of one statement.
Its rows form one family: their p-values (each row's t-test against its null: 0 for an
effect or a slope, the start for a level) are adjusted together with Holm's step-down method
(:func:`holm_adjusted`, the same arithmetic as ``statsmodels``' ``multipletests(method="holm")``,
vectorised so that the calibration adjusts thousands of simulated cards at once). A signed
verdict (one that rests on an interval excluding the null) whose adjusted p is not below
alpha loses its kind: it becomes ``inconclusive`` with the report's words for a claim lost to
Holm. Verdicts of equivalence (absent, flat, a replicated claim of no difference) and exact
counts are not adjusted.

Across claims nothing is adjusted; instead the card states its family-wise rate under a
global null, measured by simulation (:func:`card_family_wise`). Two claims that read the same
measurement (the same contrast in the same cell of the same study) count it once
(:func:`measurement_key`).

The evaluation steps of one cell are one curve, not many tests: a ``training`` row is not a
member of the family. Each is adjusted as if it stood in its cell's final row's place among the
claim's rows (:func:`adjust_training_rows`), so that its verdict follows the same rules as the
final numbers and its last step reads as the verdict of record; nothing is adjusted across steps.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from harness.analysis.results_types import NOT_DISTINGUISHABLE
from harness.analysis.verdict_words import not_after_holm
from harness.scorecard.calibration import FamilyWiseRate, family_wise_rate
from harness.scorecard.prediction_words import predicted_quantity
from harness.scorecard.rows import ScorecardRow


def holm_adjusted(pvalues: np.ndarray) -> np.ndarray:
    """Holm's adjusted p-values along the last axis (a batch of families at once):
    ``p_(i) -> max_{j <= i} min(1, (k - j + 1) p_(j))`` in ascending order of p."""
    p = np.asarray(pvalues, dtype=float)
    k = p.shape[-1]
    order = np.argsort(p, axis=-1, kind="stable")
    ranked = np.take_along_axis(p, order, axis=-1) * (k - np.arange(k))
    adjusted = np.minimum(np.maximum.accumulate(ranked, axis=-1), 1.0)
    out = np.empty_like(adjusted)
    np.put_along_axis(out, order, adjusted, axis=-1)
    return out


def _lost_to_holm(row: ScorecardRow, p_holm: float, k: int) -> ScorecardRow:
    quantity = {"trend": "slope per doubling", "predicted": predicted_quantity(row)}.get(row.kind, "estimate")
    ci = (row.ci_low, row.ci_high)
    words = not_after_holm(quantity, row.estimate, ci, p_holm)
    return dataclasses.replace(
        row,
        verdict_kind="inconclusive",
        verdict=f"inconclusive: {words} (Holm across the claim's {k} rows; was {row.verdict_kind})",
        settled=NOT_DISTINGUISHABLE,
    )


def adjust_within_claims(rows: Sequence[ScorecardRow], alpha: float = 0.05) -> list[ScorecardRow]:
    """Every claim's rows with a p-value adjusted together (Holm); a signed verdict whose
    adjusted p is not below ``alpha`` becomes ``inconclusive`` and says why."""
    out = list(rows)
    families: dict[str, list[int]] = {}
    for i, row in enumerate(out):
        if row.pvalue is not None and np.isfinite(row.pvalue):
            families.setdefault(row.claim, []).append(i)
    for members in families.values():
        adjusted = holm_adjusted(np.array([out[i].pvalue for i in members]))
        for i, p in zip(members, adjusted, strict=True):
            row = dataclasses.replace(out[i], pvalue_holm=float(p))
            out[i] = _lost_to_holm(row, float(p), len(members)) if row.signed and p >= alpha else row
    return out


#: What separates a training row's measurement key from its cell's: ``<cell key>|step=<S>``.
STEP_MARK = "|step="


def adjust_training_rows(
    training: Sequence[ScorecardRow], adjusted: Sequence[ScorecardRow], alpha: float = 0.05
) -> list[ScorecardRow]:
    """Each training row with its Holm-adjusted p as if its p stood in the place of its cell's
    final row among the claim's ``adjusted`` rows (appended when that row is not there); a
    signed verdict whose adjusted p is not below ``alpha`` becomes ``inconclusive``, as
    :func:`adjust_within_claims` does."""
    families: dict[str, list[ScorecardRow]] = {}
    for row in adjusted:
        if row.pvalue is not None and np.isfinite(row.pvalue):
            families.setdefault(row.claim, []).append(row)
    out = []
    for row in training:
        if row.pvalue is None or not np.isfinite(row.pvalue):
            out.append(row)
            continue
        members = families.get(row.claim, [])
        cell_key = (row.measurement or "").split(STEP_MARK)[0]
        keys = [m.measurement for m in members]
        at = keys.index(cell_key) if cell_key in keys else len(members)
        pvalues = [m.pvalue for m in members] + ([] if at < len(members) else [row.pvalue])
        pvalues[at] = row.pvalue
        p = float(holm_adjusted(np.array(pvalues, dtype=float))[at])
        row = dataclasses.replace(row, pvalue_holm=p)
        out.append(_lost_to_holm(row, p, len(pvalues)) if row.signed and p >= alpha else row)
    return out


def measurement_key(row: ScorecardRow, variants: Sequence[str]) -> str:
    """What a row measured: study, cell, group, the variants compared (in the measure's
    roles), the metric, and for a trend its factor. Two claims with the same key read one
    measurement."""
    cell = f"{row.dataset}/{row.size}/{row.context_length}"
    return "|".join(str(x) for x in (row.study, row.kind, row.factor, cell, row.group, ",".join(variants), row.metric))


@dataclass(frozen=True)
class CardFamilies:
    """The card as families of tests: ``families`` claims with at least one row that has a
    test and whose measurements are not all read by an earlier claim, ``rows_per_family``
    the most such rows one claim has, ``seeds`` the fewest seeds of any such row."""

    families: int
    rows_per_family: int
    seeds: int


def card_families(rows: Sequence[ScorecardRow]) -> CardFamilies | None:
    """The card's families (None: no row has a test); training rows are not members."""
    tested = [r for r in rows if r.pvalue is not None and np.isfinite(r.pvalue) and r.kind != "training"]
    if not tested:
        return None
    seen: set[str | None] = set()
    sizes: dict[str, int] = {}
    for row in tested:
        sizes[row.claim] = sizes.get(row.claim, 0) + 1
    families = 0
    for claim in dict.fromkeys(r.claim for r in tested):
        keys = {r.measurement for r in tested if r.claim == claim}
        if not keys <= seen:
            families += 1
        seen |= keys
    seeds = min(int(r.n_seeds or 0) for r in tested)
    return CardFamilies(families, max(sizes.values()), seeds)


def card_family_wise(rows: Sequence[ScorecardRow]) -> tuple[CardFamilies | None, FamilyWiseRate | None]:
    """The card's families and its simulated family-wise rate under a global null."""
    card = card_families(rows)
    if card is None:
        return None, None
    return card, family_wise_rate(card.families, card.rows_per_family, card.seeds)


__all__ = [
    "STEP_MARK",
    "CardFamilies",
    "adjust_training_rows",
    "adjust_within_claims",
    "card_families",
    "card_family_wise",
    "holm_adjusted",
    "measurement_key",
]
