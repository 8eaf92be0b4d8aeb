"""The card's procedure: claims first, then the rows of a selected claim, the card as a whole held
to :data:`CARD_RATE`.

A claim read in many cells, readings, studies and trends makes many tests of one statement; a card
of many claims makes many such families, and a reader who sees one signed verdict among many rows
must be able to tell whether it is chance. So every signed verdict (one that asserts a direction
against 0: replicated, smaller, larger, reversed, grows, shrinks, a difference excluding 0) passes
one hierarchical procedure over the whole card (:func:`card_procedure`):

1. each reading of a claim is read as a whole first: its family's p is its claim row's (the t over
   its independent cells: :mod:`harness.scorecard.claim_level`); claim rows that read the same cells
   (the two papers' EGA gains) are one family, counted once. The rows of a claim without a claim row
   (a level, a trend alone) are one family whose p is Simes' combination of their skew-robust
   p-values, ``min_i k p_(i) / i``;
2. the families' p-values are adjusted across the card with Benjamini-Hochberg at
   :data:`CARD_RATE` (:func:`~harness.analysis.multiplicity.bh_adjusted`, as ``statsmodels``'
   ``multipletests(method="fdr_bh")``); a family whose adjusted p is below it is *selected*: R of
   the card's F families;
3. within a selected family, each claim's other rows of that reading are adjusted with Holm's
   step-down method (:func:`~harness.analysis.multiplicity.holm_adjusted`) and held to
   ``CARD_RATE R / F`` (Benjamini & Bogomolov 2014, "Selective inference on multiple families of
   hypotheses"); its claim row keeps its sign when its family is selected.

A signed verdict that fails a step loses its kind: it becomes ``inconclusive`` with words that
say which step and the numbers, and its ``signed`` is False. Where no claim is true anywhere, a
signed verdict needs a selected family, which Benjamini-Hochberg allows in at most CARD_RATE of
cards whatever the number of rows; the card states it with the rates simulated for the published
combined design (:func:`card_family_wise`). Verdicts of equivalence (absent, flat, a replicated
claim of no difference), a paper's value excluded without the sign (below, above), exact counts and
figures are not adjusted and are in no family.

The evaluation steps of one cell are one curve, not many tests: a ``training`` row is not a
member of any family. Each is adjusted as if it stood in its cell's final row's place among the
claim's rows (:func:`adjust_training_rows`), under its claim's selection and level, so that its
last step reads as the verdict of record; nothing is adjusted across steps.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.analysis.multiplicity import bh_adjusted, holm_adjusted
from harness.analysis.results_types import NOT_DISTINGUISHABLE
from harness.analysis.verdict_words import format_interval, format_pvalue, not_after_holm
from harness.scorecard.calibration import null_card_rates, skew_robust_pvalue
from harness.scorecard.prediction_words import predicted_quantity
from harness.scorecard.rows import ScorecardRow

#: The rate of null cards (no claim true anywhere) that may show a direction asserted against 0.
CARD_RATE = 0.10

#: The card's procedure, in the words the card states.
PROCEDURE = (
    "each claim read as a whole first (its row over its independent cells; claims reading the same cells one "
    "family), Benjamini-Hochberg at 10 % across the card's claim families, then a selected claim's other rows "
    "by Holm, held to 10 % x selected / families (Benjamini & Bogomolov 2014), on skew-robust p-values"
)


def robust_pvalue(row: ScorecardRow) -> float | None:
    """The row's skew-robust p (its column, else from its t p and seeds); None without a test."""
    if row.pvalue_robust is not None and np.isfinite(row.pvalue_robust):
        return float(row.pvalue_robust)
    if row.pvalue is None or not np.isfinite(row.pvalue) or not row.n_seeds:
        return None
    return float(skew_robust_pvalue(row.pvalue, int(row.n_seeds), sigma=row.skew_sigma))


def _member(row: ScorecardRow) -> bool:
    """A row in its claim's family: a verdict row (not a training step, not the claim row) with a
    test, not a figure."""
    return row.kind not in ("training", "claim") and row.verdict_kind != "figure" and robust_pvalue(row) is not None


def _head(row: ScorecardRow) -> bool:
    return row.kind == "claim" and robust_pvalue(row) is not None


@dataclass(frozen=True)
class CardProcedure:
    """The card's procedure, as run: ``alpha`` (:data:`CARD_RATE`); ``family_of`` each (claim,
    reading)'s family (its claim row's measurement, else the claim); each family's p as a whole
    (``family_p``) and Benjamini-Hochberg-adjusted across the card (``card_p``); the families
    selected; the level a selected family's Holm-adjusted rows are held to (``level`` = alpha R / F)."""

    alpha: float
    family_of: Mapping[tuple[str, str], str]
    family_p: Mapping[str, float]
    card_p: Mapping[str, float]
    selected: frozenset[str]
    level: float

    @property
    def families(self) -> int:
        return len(self.family_p)

    def family(self, row: ScorecardRow) -> str:
        return self.family_of.get((row.claim, row.reading), f"claim {row.claim}")


def _families(rows: Sequence[ScorecardRow]) -> tuple[dict[tuple[str, str], str], dict[str, float]]:
    """Each (claim, reading)'s family and each family's p as a whole: a reading with a claim row is
    the family of that row's measurement (two claims reading the same cells share it) and its p is
    the claim row's; the rows of a claim without one are one family, by Simes."""
    family_of: dict[tuple[str, str], str] = {}
    family_p: dict[str, float] = {}
    for row in rows:
        if _head(row):
            key = f"cells {row.measurement}"
            family_of[(row.claim, row.reading)] = key
            family_p[key] = robust_pvalue(row)  # type: ignore[assignment]
    loose: dict[str, list[float]] = {}
    headed = set(family_of)
    for row in rows:
        if _member(row) and (row.claim, row.reading) not in headed:
            family_of[(row.claim, row.reading)] = f"claim {row.claim}"
            loose.setdefault(f"claim {row.claim}", []).append(robust_pvalue(row))  # type: ignore[arg-type]
    for key, ps in loose.items():
        family_p[key] = float(np.min(bh_adjusted(np.array(ps, dtype=float))))
    return family_of, family_p


def card_procedure(rows: Sequence[ScorecardRow], alpha: float = CARD_RATE) -> CardProcedure:
    """Steps 1 and 2 of the module docstring over the card's claim rows and family members."""
    family_of, family_p = _families(rows)
    keys = list(family_p)
    adjusted = bh_adjusted(np.array([family_p[k] for k in keys])) if keys else np.zeros(0)
    card_p = {k: float(p) for k, p in zip(keys, adjusted, strict=True)}
    selected = frozenset(k for k in keys if card_p[k] < alpha)
    level = alpha * len(selected) / len(keys) if keys else alpha
    return CardProcedure(alpha, family_of, family_p, card_p, selected, level)


def _lost(row: ScorecardRow, proc: CardProcedure, p_holm: float | None, k: int) -> ScorecardRow:
    """The row without its sign, saying which step took it."""
    quantity = {"trend": "slope per doubling", "predicted": predicted_quantity(row)}.get(row.kind, "estimate")
    ci, family = (row.ci_low, row.ci_high), proc.family(row)
    if family in proc.selected and p_holm is not None:
        words = not_after_holm(quantity, row.estimate, ci, p_holm) + f", held to {proc.level:.3g}"
        words += f" (the card's procedure; Holm across the claim's {k} rows"
    else:
        est = "n/a" if row.estimate is None else f"{row.estimate:+.3g}"
        words = (
            f"not significant across the card (p={format_pvalue(proc.card_p.get(family))}: the claim's p as a "
            f"whole {format_pvalue(proc.family_p.get(family))}, Benjamini-Hochberg over the card's "
            f"{proc.families} claim families at {proc.alpha:g}): {quantity} {est} {format_interval(ci)} before "
            "adjustment (the card's procedure"
        )
    lo, hi, v = row.ci_low, row.ci_high, row.paper_value
    if v is not None and lo is not None and hi is not None and not lo <= v <= hi:
        words += f"; its interval excludes the paper's {v:+.3f}"
    return dataclasses.replace(
        row,
        verdict_kind="inconclusive",
        verdict=f"inconclusive: {words}; was {row.verdict_kind})"
        + (f"; before the adjustment: {row.verdict}" if row.kind == "predicted" else ""),
        settled=NOT_DISTINGUISHABLE,
        signed=False,
    )


def _keeps(row: ScorecardRow, proc: CardProcedure, p_holm: float) -> bool:
    return proc.family(row) in proc.selected and p_holm < proc.level


def adjust_card(rows: Sequence[ScorecardRow], alpha: float = CARD_RATE) -> tuple[list[ScorecardRow], CardProcedure]:
    """Every non-training row after the card's procedure (step 3 of the module docstring): a claim
    row keeps its sign when its family is selected; each member with its Holm-adjusted p among its
    claim's rows of its reading and its family's adjusted p across the card; a signed verdict that
    fails becomes ``inconclusive`` and says why."""
    out = list(rows)
    proc = card_procedure(out, alpha)
    groups: dict[tuple[str, str], list[int]] = {}
    for i, row in enumerate(out):
        if _member(row):
            groups.setdefault((row.claim, row.reading), []).append(i)
        elif _head(row):
            row = dataclasses.replace(row, pvalue_card=proc.card_p.get(proc.family(row)))
            out[i] = row if not row.signed or proc.family(row) in proc.selected else _lost(row, proc, None, 0)
    for members in groups.values():
        adjusted = holm_adjusted(np.array([robust_pvalue(out[i]) for i in members]))
        for i, p in zip(members, adjusted, strict=True):
            row = dataclasses.replace(out[i], pvalue_holm=float(p), pvalue_card=proc.card_p[proc.family(out[i])])
            out[i] = row if not row.signed or _keeps(row, proc, float(p)) else _lost(row, proc, float(p), len(members))
    keep = [r if _member(r) or _head(r) or not r.signed else dataclasses.replace(r, signed=False) for r in out]
    return keep, proc


#: What separates a training row's measurement key from its cell's: ``<cell key>|step=<S>``.
STEP_MARK = "|step="


def adjust_training_rows(
    training: Sequence[ScorecardRow], adjusted: Sequence[ScorecardRow], proc: CardProcedure
) -> list[ScorecardRow]:
    """Each training row with its Holm-adjusted p as if its p stood in the place of its cell's
    final row among the claim's ``adjusted`` rows (appended when that row is not there), under
    its claim's selection and level in ``proc``; a signed verdict that fails becomes
    ``inconclusive``, as :func:`adjust_card` does."""
    families: dict[tuple[str, str], list[ScorecardRow]] = {}
    for row in adjusted:
        if _member(row):
            families.setdefault((row.claim, row.reading), []).append(row)
    out = []
    for row in training:
        p_row = robust_pvalue(row)
        if p_row is None or row.verdict_kind == "figure":
            out.append(dataclasses.replace(row, signed=False) if row.signed else row)
            continue
        members = families.get((row.claim, row.reading), [])
        cell_key = (row.measurement or "").split(STEP_MARK)[0]
        keys = [m.measurement for m in members]
        at = keys.index(cell_key) if cell_key in keys else len(members)
        pvalues = [robust_pvalue(m) for m in members] + ([] if at < len(members) else [p_row])
        pvalues[at] = p_row
        p = float(holm_adjusted(np.array(pvalues, dtype=float))[at])
        row = dataclasses.replace(row, pvalue_holm=p, pvalue_card=proc.card_p.get(proc.family(row)))
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
    """The card as families of tests: ``families`` claim families (claims that read the same cells
    counted once), ``seeds`` the fewest seeds of any tested row."""

    families: int
    seeds: int


def card_families(rows: Sequence[ScorecardRow]) -> CardFamilies | None:
    """The card's families (None: no row has a test); training rows and figures are not members."""
    tested = [r for r in rows if _member(r) or _head(r)]
    if not tested:
        return None
    seeds = min(int(r.n_seeds or 0) for r in tested)
    return CardFamilies(card_procedure(rows).families, seeds)


def card_family_wise(rows: Sequence[ScorecardRow]) -> tuple[CardFamilies | None, dict[str, Any] | None]:
    """The card's families and the simulated rates of null cards of the published combined design
    showing a direction against 0 after the card's procedure (``calibration.json``'s ``null_cards``;
    None without them)."""
    card = card_families(rows)
    if card is None:
        return None, None
    return card, null_card_rates()


__all__ = [
    "CARD_RATE",
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
