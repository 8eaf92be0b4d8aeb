"""Each claim read as a whole: one row over its independent cells (kind ``claim``).

A claim about an effect is read in every cell of every study that can measure it. The cells of
two studies can be one measurement: the same seeds at the same size, run length, context length,
corpus and recipe (a study that re-runs another's cells), or bit-identical numbers. Such cells are
counted once (their estimates averaged). Over the K independent cells left, the claim's row is the
pooled effect of :func:`harness.analysis.claim_pool.pool_cells` (the t over the K cell means; with
one cell, that cell's own row), judged by the same rule as a cell
(:func:`~harness.scorecard.verdicts.classify_effect`), with the spread across cells and the cells'
means by size, steps and context in ``where``, and its power at its own noise: the chance of
showing the sign at its estimate and of excluding the paper's value (``power_sign``,
``power_paper``). This row's p is the claim's p in the card's procedure
(:mod:`harness.scorecard.family`); two claims whose rows read the same cells are one family there.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from scipy import stats

from harness.analysis.claim_pool import PooledEffect, pool_cells, t_power
from harness.scorecard.claims import Claim, ClaimSet
from harness.scorecard.pooling import recipe_at
from harness.scorecard.rows import ScorecardRow
from harness.scorecard.verdicts import Intervals, classify_effect

#: The measure kinds read as a whole (paired effects).
POOLED_KINDS = ("contrast", "interaction")


def _cell_key(row: ScorecardRow, recipes: Mapping[str, Any]) -> tuple:
    """What identifies a cell's measurement across studies: corpus, size, context, steps, seeds,
    the recipe (unknown: the study itself) and the tau group."""
    recipe = recipes.get(row.study or "")
    recipe_key = recipe_at(recipe, row.context_length) if recipe is not None else f"study {row.study}"
    return (row.dataset, row.size, row.context_length, row.steps, row.n_seeds, recipe_key, row.group)


def _se(row: ScorecardRow) -> float:
    half = 0.5 * (float(row.ci_high) - float(row.ci_low))  # type: ignore[arg-type]
    return half / float(stats.t.isf(0.025, max(int(row.n_seeds or 2) - 1, 1)))


def independent_cells(rows: Sequence[ScorecardRow], recipes: Mapping[str, Any]) -> list[list[ScorecardRow]]:
    """The claim's tested cell rows grouped into independent measurements (see the module docstring)."""
    groups: dict[Any, list[ScorecardRow]] = {}
    by_value: dict[float, Any] = {}
    for row in rows:
        key = _cell_key(row, recipes)
        key = by_value.get(float(row.estimate), key)  # type: ignore[arg-type]  # bit-identical: the same
        by_value.setdefault(float(row.estimate), key)  # type: ignore[arg-type]
        groups.setdefault(key, []).append(row)
    return list(groups.values())


def _label(row: ScorecardRow) -> str:
    return (
        f"{row.size}/T={row.context_length}/{row.steps:,} steps" if row.steps else f"{row.size}/T={row.context_length}"
    )


def _by_factor(cells: Sequence[tuple[ScorecardRow, float]]) -> str:
    """The cells' mean effect at each level of each factor that varies: "by size: nano +0.012, ..."."""
    parts = []
    for name, get in (
        ("size", lambda r: r.size),
        ("steps", lambda r: r.steps),
        ("context", lambda r: r.context_length),
    ):
        levels: dict[Any, list[float]] = {}
        for row, y in cells:
            levels.setdefault(get(row), []).append(y)
        if len(levels) >= 2:
            shown = ", ".join(f"{k} {sum(v) / len(v):+.4f}" for k, v in levels.items())
            parts.append(f"by {name}: {shown}")
    return "; ".join(parts)


def _where(cells: Sequence[tuple[ScorecardRow, float]], pooled: PooledEffect, merged: int) -> str:
    head = f"{pooled.k} independent cells"
    if merged:
        head += f" ({merged} cell{'s' if merged != 1 else ''} another study re-ran, counted once)"
    spread = ""
    if pooled.sd is not None:
        spread = f"; spread across cells sd {pooled.sd:.4f}"
        if pooled.q_pvalue is not None:
            spread += f", I² {pooled.i_squared:.0%}, Cochran's Q p={pooled.q_pvalue:.2g}"
    factors = _by_factor(cells)
    return head + spread + (f"; {factors}" if factors else "")


def _power(iv: Intervals, paper_value: float | None) -> tuple[float | None, float | None]:
    """The chance of showing the sign at the estimate and of excluding the paper's value, at the
    row's own noise and its critical value (before the card's adjustment)."""
    c, se = iv.robust_critical, iv.standard_error
    if c is None or se is None:
        return None, None
    sign = t_power(iv.estimate, se, iv.n_seeds - 1, c)
    paper = None if paper_value is None else t_power(iv.estimate - paper_value, se, iv.n_seeds - 1, c)
    return sign, paper


def _from_cell(row: ScorecardRow, claim: Claim) -> ScorecardRow:
    """A claim measured in one cell: its row is that cell's."""
    from harness.analysis.results_types import ConfidenceInterval

    iv = Intervals(
        float(row.estimate),  # type: ignore[arg-type]
        ConfidenceInterval(float(row.ci_low), float(row.ci_high)),  # type: ignore[arg-type]
        None,
        int(row.n_seeds or 0),
        skew_sigma=row.skew_sigma,
    )
    power_sign, power_paper = _power(iv, claim.paper_value)
    return replace(
        row, kind="claim", levels=1, where=f"1 cell: {_label(row)}", power_sign=power_sign, power_paper=power_paper,
        measurement=f"claim|{row.measurement}", step=None, stable_from=None,
    )  # fmt: skip


def claim_level_row(
    claim: Claim, rows: Sequence[ScorecardRow], recipes: Mapping[str, Any], margin: float
) -> ScorecardRow | None:
    """The claim row of one reading of ``claim`` over its tested cell ``rows`` (None without one)."""
    tested = [r for r in rows if r.ci_low is not None and r.estimate is not None and math.isfinite(r.estimate)]
    if not tested:
        return None
    groups = independent_cells(tested, recipes)
    if len(groups) == 1 and len(groups[0]) == 1:
        return _from_cell(groups[0][0], claim)
    cells = [(g[0], sum(float(r.estimate) for r in g) / len(g)) for g in groups]  # type: ignore[arg-type]
    ses = [sum(_se(r) for r in g) / len(g) for g in groups]
    pooled = pool_cells([y for _, y in cells], ses)
    iv = Intervals(
        pooled.estimate, pooled.confidence_interval, pooled.equivalence, pooled.k, pvalue=pooled.pvalue,
        sd=pooled.sd, skew_sigma=0.0, unit="cells",
        reason="" if pooled.confidence_interval else "no spread across cells",
    )  # fmt: skip
    margin = tested[0].margin if tested[0].margin is not None else margin
    verdict = classify_effect(iv, sign=claim.sign, paper_value=claim.paper_value, margin=margin)
    power_sign, power_paper = _power(iv, claim.paper_value)
    ci, eq = pooled.confidence_interval, pooled.equivalence
    first = tested[0]
    return replace(
        first,
        study=" + ".join(dict.fromkeys(r.study or "" for r in tested)),
        kind="claim", size=None, params=None, context_length=None, steps=None, step=None, stable_from=None,
        group=None, dataset=first.dataset if len({r.dataset for r in tested}) == 1 else None,
        levels=pooled.k, n_seeds=min(int(r.n_seeds or 0) for r in tested), estimate=pooled.estimate,
        ci_low=None if ci is None else ci.low, ci_high=None if ci is None else ci.high,
        robust_low=None if ci is None else ci.low, robust_high=None if ci is None else ci.high,
        equivalence_low=None if eq is None else eq.low, equivalence_high=None if eq is None else eq.high,
        prediction_low=None, prediction_high=None, pvalue=pooled.pvalue, pvalue_robust=pooled.pvalue,
        pvalue_holm=None, pvalue_card=None, interval=verdict.rests_on + " (the cells' means)", verdict=verdict.words,
        verdict_kind=verdict.kind, settled=verdict.settled, signed=verdict.signed, skew_sigma=None,
        where=_where(cells, pooled, len(tested) - pooled.k), power_sign=power_sign, power_paper=power_paper,
        measurement="claim|" + " & ".join(sorted(str(g[0].measurement) for g in groups)),
    )  # fmt: skip


def claim_level_rows(
    rows: Sequence[ScorecardRow], claims: ClaimSet, recipes: Mapping[str, Any], smallest_effect: float | None
) -> list[ScorecardRow]:
    """One claim row per reading of each effect claim with a tested cell (rows of kind ``cell``)."""
    out = []
    for claim in claims:
        if claim.kind not in POOLED_KINDS or claim.figure:
            continue
        for reading in dict.fromkeys(r.reading for r in rows if r.claim == claim.id):
            cells = [r for r in rows if r.claim == claim.id and r.reading == reading and r.kind == "cell"]
            row = claim_level_row(claim, cells, recipes, claims.margin_for(claim, smallest_effect))
            if row is not None:
                out.append(row)
    return out


__all__ = ["POOLED_KINDS", "claim_level_row", "claim_level_rows", "independent_cells"]
