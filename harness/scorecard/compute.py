"""The scorecard: every claim matched to every cell of the studies read that can measure it.

A cell is (dataset, size, context length) of one study. A claim's measure can be read in a
cell when the cell holds every variant it names and the cell's corpus is one of the claim's.
Each such (claim, reading, study, cell) gives one :class:`~harness.scorecard.rows.ScorecardRow`,
read by the reader of the claim's kind (:data:`~harness.scorecard.readers.READERS`: the
report's own statistics, the seed as the unit) and judged by
:mod:`harness.scorecard.verdicts` (:mod:`harness.scorecard.cells`). The same reading at every
evaluation step of the study's curves gives its ``training`` rows
(:mod:`harness.scorecard.training`), and the studies of one recipe together (one, or several
that differ in sizes and run length: :mod:`harness.scorecard.pooling`) a ``predicted`` row at
the papers' size and training steps, or ``not predictable`` with the reason
(:mod:`harness.scorecard.prediction`). A claim read at two or more sizes or context lengths of one
study also gets a ``trend`` row per factor: the slope of the per-seed effect per doubling of x
(:func:`harness.analysis.effect_trend`), with words saying where the claim holds. A claim
*about* a trend (``trend:`` in claims.yaml) is read only as that trend, from two or more
levels of its factor; a study with one level does not measure it. A claim no study read can
measure gets one ``not measured`` row naming the study that would. Finally the card's
procedure holds every signed verdict to the card as a whole
(:func:`~harness.scorecard.family.adjust_card`), a training row in its cell row's place
(:func:`~harness.scorecard.family.adjust_training_rows`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import polars as pl

from harness.analysis.paired_tests import SignFlip
from harness.analysis.results import at_reference_tau_init, cell_label
from harness.analysis.results_types import NOT_TESTABLE, no_test_reason
from harness.analysis.trends import effect_trend
from harness.errors import InputError
from harness.scorecard.cells import (
    StudyResults,
    claim_fields,
    keyed,
    measure_cell,
    numbers,
    readable_cells,
    with_derived,
)
from harness.scorecard.claim_level import claim_level_rows
from harness.scorecard.claims import Claim, ClaimSet, Measure, load_claims
from harness.scorecard.family import adjust_card, adjust_training_rows
from harness.scorecard.model_shape import vocabulary
from harness.scorecard.prediction import papers_parameters, predicted_rows
from harness.scorecard.readers import READERS, equivalence_interval, measured_under_load, seed_sd
from harness.scorecard.rows import SCORECARD_COLUMNS, SCORECARD_SCHEMA, ScorecardRow, rows_frame
from harness.scorecard.skew import CardSkew, card_skew
from harness.scorecard.training import training_rows, with_stability
from harness.scorecard.verdicts import Intervals, classify_trend


# ----------------------------------------------------------------------------- trends
def _trend_frame(claim: Claim, measure: Measure, study: StudyResults) -> pl.DataFrame:
    """The study's rows a trend of the claim reads: its corpora, its variants, at tau's
    reference initial value."""
    df = study.frame
    if "dataset" in df.columns:
        df = df.filter(pl.col("dataset").is_in(list(claim.datasets)))
    df = df.filter(pl.col("variant").is_in(list(measure.names())))
    return at_reference_tau_init(df)[0] if df.height else df


def _trend_intervals(claim: Claim, measure: Measure, study: StudyResults, factor: str) -> tuple[Intervals, int]:
    """The slope per doubling of ``factor`` (:func:`effect_trend`, per-seed slopes) as
    intervals, and the number of levels it was fitted across."""
    s = study.settings
    keys: dict[str, Any] = dict(metric=claim.metric, confidence=s.confidence, against=factor)
    if claim.kind == "interaction":
        keys.update(base=measure.base, a=measure.a, b=measure.b, ab=measure.ab)
    else:
        keys.update(treatment=measure.treatment, control=measure.control)
    try:
        res = effect_trend(_trend_frame(claim, measure, study), **keys)
    except InputError as exc:
        return Intervals(math.nan, None, None, 0, s.confidence, str(exc)), 0
    iv = Intervals(
        res.estimate,
        res.confidence_interval,
        equivalence_interval(res.per_seed, s.confidence),
        res.n_seeds,
        s.confidence,
        no_test_reason(res.per_seed) or ("" if res.confidence_interval is not None else res.message),
        pvalue=res.pvalue,
        sd=seed_sd(res.per_seed),
        shape=res.shape,
        permutation_pvalue=SignFlip().run(res.per_seed, rng=s.seed).p_value if res.shape is not None else None,
        skew_sigma=study.skew_sigma,
    )
    return iv, len(res.x_values)


def _level_values(claim: Claim, measure: Measure, study: StudyResults, factor: str) -> list[tuple[Any, float]]:
    """(level, its value on the factor's axis) of the study's cells a trend reads: a size and its
    reference variant's mean parameter count, or a context length and itself; in order."""
    df = _trend_frame(claim, measure, study)
    if not df.height or factor not in df.columns:
        return []
    if factor == "context_length":
        return [(t, float(t)) for t in sorted(set(df.get_column("context_length").drop_nulls().to_list()))]
    reference = str(measure.control or measure.base or measure.names()[0])
    ref = df.filter(pl.col("variant") == reference)
    by_size = ref.group_by("size").agg(pl.col("params").cast(pl.Float64).mean()).drop_nulls().sort("params")
    return list(by_size.iter_rows())


def trend_span(claim: Claim, measure: Measure, study: StudyResults, factor: str) -> tuple[float, str, float | None]:
    """The doublings a trend's margin is spread over, in words, and the papers' level over the
    largest measured: from the largest level measured to the papers' (a size: the claim's
    reference variant built at the papers' shape with the study's vocabulary, as a prediction
    is), from the papers' level up to the smallest when it lies below them, or the measured
    span when it lies within it (or is unknown); at least 1."""
    levels = _level_values(claim, measure, study, factor)
    if len(levels) < 2:
        return 1.0, "", None
    (_, small), (_, large) = levels[0], levels[-1]
    noun = "size" if factor == "params" else "context length"
    paper, paper_name = float(claim.setting.context_length), f"T={claim.setting.context_length}"
    if factor == "params":
        reference = str(measure.control or measure.base or measure.names()[0])
        runs = _trend_frame(claim, measure, study).filter(pl.col("variant") == reference)
        try:
            paper = float(papers_parameters(reference, vocabulary(runs), claim.setting))
        except InputError:
            return max(1.0, math.log2(large / small)), f"the measured span; the papers' {noun} is unknown", None
        paper_name = f"{paper / 1e6:.2f}M ({claim.setting.size})"
    if paper > large:
        span, words = math.log2(paper / large), f"from the largest {noun} measured to the papers' {paper_name}"
    elif paper < small:
        span, words = math.log2(small / paper), f"from the papers' {paper_name} to the smallest {noun} measured"
    else:
        span, words = math.log2(large / small), f"the measured span, which holds the papers' {paper_name}"
    return max(1.0, span), words, paper / large


def _trend_row(
    claim: Claim, measure: Measure, study: StudyResults, factor: str, cell_rows: Sequence[ScorecardRow], claims
) -> ScorecardRow:
    iv, levels = _trend_intervals(claim, measure, study, factor)
    margin = claims.margin_for(claim, study.settings.smallest_effect)
    span, span_words, ratio = trend_span(claim, measure, study, factor)
    verdict = classify_trend(
        iv, sign=claim.sign, margin=margin, factor=factor, levels=levels, span=span, span_words=span_words
    )
    row = ScorecardRow(
        **claim_fields(claim, measure, study.name),
        kind="trend",
        factor=factor,
        levels=levels or None,
        parent_run_id=study.parent_run_id,
        **numbers(iv, verdict),
        margin=margin / span,
        extrapolation=ratio,
        where=where_it_holds(cell_rows, factor) if cell_rows else None,
    )
    return keyed(row, measure)


def _levels(cells: Sequence[Mapping[str, Any]], factor: str) -> list[Any]:
    """The distinct levels of ``factor`` among cells (a size counts once, whatever its corpora)."""
    key = "size" if factor == "params" else factor
    return sorted({c.get(key) for c in cells if c.get(key) is not None}, key=str)


def _trend_rows(claim, measure, study, cells, cell_rows, claims) -> list[ScorecardRow]:
    """A trend row per factor along which a claim was read at >= 2 levels in this study."""
    if not READERS[claim.kind].trends:
        return []
    return [
        _trend_row(claim, measure, study, factor, cell_rows, claims)
        for factor in ("params", "context_length")
        if len(_levels(cells, factor)) >= 2
    ]


def where_it_holds(cell_rows: Sequence[Any], factor: str) -> str:
    """Where a claim holds along ``factor``, in words: "replicated at 3 of 4 sizes; smaller
    at the largest". Along ``params`` a size is its preset (``size``), ordered by parameter
    count: the same preset on two corpora has two counts (the vocabulary's embedding) and is
    still one size. A value whose cells (other corpora, other values of the other factor)
    disagree counts as "mixed". ``cell_rows``: scorecard rows or mappings with their fields."""
    noun = "sizes" if factor == "params" else "context lengths"
    by_x: dict[Any, set[str]] = {}
    order: dict[Any, float] = {}  # x -> where it sorts (a size: its smallest parameter count)
    for r in cell_rows:
        get = r.get if isinstance(r, Mapping) else lambda k, r=r: getattr(r, k)
        if get(factor) is None:
            continue
        x = (get("size") or get(factor)) if factor == "params" else get(factor)
        by_x.setdefault(x, set()).add(str(get("verdict_kind")))
        order[x] = min(order.get(x, math.inf), float(get(factor)))
    if not by_x:
        return ""
    xs = sorted(by_x, key=order.__getitem__)
    kind_at = {x: next(iter(k)) if len(k) == 1 else "mixed" for x, k in by_x.items()}
    counts = Counter(kind_at[x] for x in xs)
    head, n_head = counts.most_common(1)[0]
    parts = [f"{head} at {n_head} of {len(xs)} {noun}"]
    for kind in (k for k in counts if k != head):
        named = [
            "the largest" if x == xs[-1] else "the smallest" if x == xs[0] else _x_label(x, factor)
            for x in xs
            if kind_at[x] == kind
        ]
        parts.append(f"{kind} at {', '.join(named)}")
    return "; ".join(parts)


def _x_label(x: Any, factor: str) -> str:
    if factor == "params":
        return f"size {x}" if isinstance(x, str) else f"{x / 1e6:.3g}M parameters"
    return f"T={x}"


# ----------------------------------------------------------------------------- the table
def _not_measured(claim: Claim, measure: Measure, why: str = "") -> ScorecardRow:
    needed = ", ".join(measure.names())
    corpora = ", ".join(claim.datasets)
    what = f"no study read holds {needed} on {corpora}"
    if claim.trend is not None:
        noun = "sizes" if claim.trend == "params" else "context lengths"
        what += f" at two or more {noun}"
    if READERS[claim.kind].needs_sigmas:
        what += " with their learned MOPE widths (read from MLflow only)"
    studies = " or ".join(f"studies/{s}.yaml" for s in measure.studies)
    verb = "measures" if len(measure.studies) == 1 else "measure"
    return ScorecardRow(
        **claim_fields(claim, measure, measure.study),
        kind="not measured",
        verdict_kind="not measured",
        verdict=f"not measured: {what}{f' ({why})' if why else ''}; {studies} {verb} it",
        interval="none",
        settled=NOT_TESTABLE,
    )


def _trend_claim_rows(claim: Claim, measure: Measure, studies, claims) -> list[ScorecardRow]:
    """A claim about a trend: read only across two or more levels of its factor in one study;
    else ``not measured``, saying which study held one level only."""
    found, single = [], []
    for study in studies:
        cells = [cell for cell, _ in readable_cells(claim, measure, study)]
        levels = _levels(cells, claim.trend)
        if len(levels) >= 2:
            found.append(_trend_row(claim, measure, study, claim.trend, [], claims))
        elif levels:
            label = f"T={levels[0]}" if claim.trend == "context_length" else f"size {levels[0]}"
            single.append(f"{study.name} has one level only, {label}")
    return found or [_not_measured(claim, measure, "; ".join(single))]


def claim_rows(claim: Claim, studies: Sequence[StudyResults], claims: ClaimSet) -> list[ScorecardRow]:
    """Every row of one claim: its cells and trends in every study read (a claim about a
    trend: its trend only), or ``not measured``."""
    rows: list[ScorecardRow] = []
    for measure in claim.measures:
        if claim.trend is not None:
            rows += _trend_claim_rows(claim, measure, studies, claims)
            continue
        found: list[ScorecardRow] = []
        readable: list[tuple[StudyResults, list[dict[str, Any]]]] = []
        for study in studies:
            cells = readable_cells(claim, measure, study)
            cell_rows = [r for cell, part in cells for r in measure_cell(claim, measure, study, cell, part, claims)]
            found += cell_rows
            if _under_load(claim, measure, study, cells, claims):
                continue  # its cells say why: no trend or prediction from throughput measured under load
            found += _trend_rows(claim, measure, study, [c for c, _ in cells], cell_rows, claims)
            if cell_rows:
                readable.append((study, [c for c, _ in cells]))
                found += training_rows(claim, measure, study, claims)
        found += predicted_rows(claim, measure, readable, claims)  # studies of one recipe pooled
        rows += found or [_not_measured(claim, measure)]
    return rows


def _under_load(claim: Claim, measure: Measure, study: StudyResults, cells, claims: ClaimSet) -> bool:
    margin = claims.margin_for(claim, study.settings.smallest_effect)
    return any(measured_under_load(claim, measure, part, margin) for _, part in cells)


def scorecard_rows(
    studies: Iterable[StudyResults], claims: ClaimSet | None = None, skew: CardSkew | None = None
) -> list[ScorecardRow]:
    """Every row of the scorecard after the card's procedure (:mod:`harness.scorecard.family`):
    each effect claim's row over its independent cells first (:mod:`harness.scorecard.claim_level`),
    then its cells, trends and predictions; every skew-robust interval at the skew the card's seeds
    allow (``skew``: :func:`~harness.scorecard.skew.card_skew`, computed when not given). A training
    row is adjusted as its cell's final row is, in that row's place (the steps of one curve are not
    adjusted against each other)."""
    claims = claims or load_claims()
    studies = list(studies)
    skew = skew or card_skew([s.frame for s in studies])
    prepared = [replace(s, frame=with_derived(s.frame), skew_sigma=skew.sigma) for s in studies]
    rows = [row for claim in claims for row in claim_rows(claim, prepared, claims)]
    training = [r for r in rows if r.kind == "training"]
    recipes = {s.name: s.recipe for s in prepared if s.recipe is not None}
    smallest = next((s.settings.smallest_effect for s in prepared if s.settings.smallest_effect is not None), None)
    verdict_rows = [r for r in rows if r.kind != "training"]
    whole = claim_level_rows(verdict_rows, claims, recipes, smallest)
    adjusted, procedure = adjust_card(whole + verdict_rows)
    return adjusted + with_stability(adjust_training_rows(training, adjusted, procedure))


def scorecard_table(
    studies: Iterable[StudyResults], claims: ClaimSet | None = None, skew: CardSkew | None = None
) -> pl.DataFrame:
    """The scorecard (:data:`~harness.scorecard.rows.SCORECARD_SCHEMA`): one row per claim,
    reading, study and cell, a trend row per claim and factor where it varies, one ``not
    measured`` row per reading no study read can measure."""
    return rows_frame(scorecard_rows(studies, claims, skew))


def cell_of(row: Mapping[str, Any]) -> str:
    """``tinyshakespeare/nano/T=128`` for a scorecard row (``trend`` rows: the factor; a
    training row: ``at step S``; a predicted row: the papers' size it predicts at)."""
    if row.get("kind") == "claim":
        k = row.get("levels") or 1
        return f"the claim as a whole ({k} cell{'s' if k != 1 else ''})"
    if row.get("kind") == "trend":
        return f"trend vs {'size' if row.get('factor') == 'params' else 'context'}"
    if row.get("kind") == "not measured":
        return "—"
    label = cell_label(
        ("dataset", "size", "context_length"), [row.get("dataset"), row.get("size"), row.get("context_length")]
    )
    if row.get("kind") == "predicted":
        label += " (predicted)"
    if row.get("kind") == "training" and row.get("step") is not None:
        label += f" at step {row['step']:,}"
    return f"{label} ({row['group']})" if row.get("group") else label


__all__ = [
    "SCORECARD_COLUMNS",
    "SCORECARD_SCHEMA",
    "StudyResults",
    "cell_of",
    "claim_rows",
    "measure_cell",
    "scorecard_rows",
    "scorecard_table",
    "where_it_holds",
]
