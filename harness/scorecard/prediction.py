"""A claim predicted at the papers' setting, size x training steps, from the studies read, or refused.

For a claim read as a contrast or the interaction, each group of cells (one corpus, one context
length) of the studies that share a recipe (:mod:`harness.scorecard.pooling`: one study, or
several that differ only in sizes and run length) gives one ``predicted`` row:
:func:`~harness.analysis.extrapolation.effect_surface` fits each seed's effect as a surface in
log2(parameters) and log2(steps) over every evaluation of the curves (the steps axis is the
evaluation step, with a run's end as a covariate: the learning rate's cosine ends there) and reads
it at the claim setting's size and steps (the papers': 4.76 M parameters, 5,000 steps); the
t-interval over seeds of those predictions is judged by the claim's own rules
(:func:`~harness.scorecard.verdicts.classify_effect`). The words say "extrapolated, not measured",
how far on each axis (``extrapolation``: the papers' parameters / the largest measured;
``steps_extrapolation``: the papers' steps / the last evaluation), from what, and how each check
went. The papers' parameter count is that of the claim's reference variant (its control, or the
2x2's base) built at the claim setting's size and context length with the vocabulary the
study's runs were built with (its results table's ``vocab_size``; :func:`papers_parameters`: on
the meta device, as ``harness zoo`` builds it). The sizes measured are names and parameter
counts only: a ladder's sizes may be called anything (``small``, ``l3``).

The row is ``not predictable``, with the reason, by :mod:`harness.analysis.surface`'s rules
(reach on either axis, a backtest on either axis, a curvature). Each row that has a surface also
carries its **calibration at the study's own noise** (``calibration``): studies of its own design
simulated from the noise measured in it under log-linear, curved, saturating and emergent truths
through the same rules (:mod:`harness.analysis.surface_calibration`), with the coverage, refusal
and wrong-signed rates it measured.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from harness.analysis.extrapolation import SurfacePrediction, effect_surface
from harness.analysis.paired_tests import SignFlip
from harness.analysis.results import at_reference_tau_init
from harness.analysis.results_types import NOT_TESTABLE, no_test_reason
from harness.analysis.surface_calibration import calibrate, calibration_words
from harness.errors import InputError
from harness.results_schema import SHAPE_COLUMNS
from harness.scorecard.cells import StudyResults, claim_fields, keyed, numbers
from harness.scorecard.claims import Claim, ClaimSet, Measure
from harness.scorecard.model_shape import vocabulary
from harness.scorecard.pooling import prediction_pools
from harness.scorecard.prediction_words import refused_words, where_words
from harness.scorecard.readers import READERS, equivalence_interval, papers_parameters, seed_sd
from harness.scorecard.rows import ScorecardRow
from harness.scorecard.verdicts import ClaimVerdict, Intervals, classify_effect

#: Simulated studies per truth in a card's own calibration (Monte-Carlo se about 0.5 % at 95 %).
CARD_REPS = 2000


# ----------------------------------------------------------------------------- the tables read
def _in_group(df: pl.DataFrame, measure: Measure, group: Mapping[str, Any]) -> pl.DataFrame:
    df = df.filter(pl.col("variant").is_in(list(measure.names())))
    for column, value in group.items():
        if column in df.columns:
            df = df.filter(pl.col(column) == value)
    return at_reference_tau_init(df)[0] if df.height else df


def _table(claim: Claim, measure: Measure, study: StudyResults, group: Mapping[str, Any]) -> pl.DataFrame:
    """What the surface reads of one study in one group: its curves (every evaluation) when they
    hold the claim's metric, else its final results (one point per run)."""
    metric = READERS[claim.kind].metric(claim)
    curves = study.curves
    if curves is not None and metric in curves.columns and curves.get_column(metric).drop_nulls().len():
        return _in_group(curves, measure, group)
    return _in_group(study.frame, measure, group)


def _groups(cells: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The (corpus, context length) groups of the cells a claim was read in, in order."""
    keys = [{k: c[k] for k in ("dataset", "context_length") if k in c} for c in cells]
    unique = {tuple(sorted(k.items())): k for k in keys}
    return [unique[key] for key in sorted(unique, key=str)]


def _papers_count(claim: Claim, measure: Measure, pool: Sequence[StudyResults], group: Mapping[str, Any]) -> int:
    """The papers' parameter count for the claim's reference variant (see the module docstring),
    with the vocabulary the pool's runs of it in ``group`` were built with (their results tables')."""
    reference = str(measure.control or measure.base)
    frames = [_in_group(s.frame, measure, group) for s in pool]
    columns = ("dataset", *SHAPE_COLUMNS)
    parts = [f.filter(pl.col("variant") == reference).select(c for c in columns if c in f.columns) for f in frames]
    runs = pl.concat(parts, how="diagonal") if parts else pl.DataFrame()
    return papers_parameters(reference, vocabulary(runs), claim.setting)


def _surface(claim: Claim, measure: Measure, tables: Sequence[tuple[str, pl.DataFrame]], pool, group):
    """The prediction at the claim setting's size and steps, and the papers' count."""
    study = pool[0]
    paper = _papers_count(claim, measure, pool, group)
    keys: dict[str, Any] = dict(metric=READERS[claim.kind].metric(claim), confidence=study.settings.confidence)
    if claim.kind == "interaction":
        keys.update(base=measure.base, a=measure.a, b=measure.b, ab=measure.ab)
    else:
        keys.update(treatment=measure.treatment, control=measure.control)
    return effect_surface(tables, params=float(paper), steps=float(claim.setting.steps), **keys), paper


# ----------------------------------------------------------------------------- the rows
def _intervals(res: SurfacePrediction, study: StudyResults) -> Intervals:
    s = study.settings
    tested = res.shape is not None
    return Intervals(
        res.estimate,
        res.confidence_interval,
        equivalence_interval(res.per_seed, s.confidence) if res.confidence_interval is not None else None,
        res.n_seeds,
        s.confidence,
        no_test_reason(res.per_seed) or ("" if res.confidence_interval is not None else "no interval"),
        pvalue=res.pvalue,
        sd=seed_sd(res.per_seed),
        shape=res.shape,
        permutation_pvalue=SignFlip().run(res.per_seed, rng=s.seed).p_value if tested else None,
        skew_sigma=study.skew_sigma,
    )


def _fields(claim: Claim, measure: Measure, name: str, parent: str | None, group: Mapping[str, Any]) -> dict:
    """The fields every predicted row of one group has: the claim, the studies read, the group
    (corpus, context length) and the papers' size and steps it predicts at."""
    return {
        **claim_fields(claim, measure, name),
        "kind": "predicted",
        **group,
        "size": claim.setting.size,
        "steps": claim.setting.steps,
        "factor": "params x steps",
        "at_paper_setting": False,
        "parent_run_id": parent,
    }


def _calibration(res: SurfacePrediction, study: StudyResults) -> str | None:
    """The card's own calibration of this prediction in words (None: nothing to simulate)."""
    if res.plan.predict is None or res.plan.refused is not None or len(res.effects.y) < 2:
        return None
    cal = calibrate(
        res.plan, res.effects.y, reps=CARD_REPS, confidence=study.settings.confidence, rng=study.settings.seed
    )
    return calibration_words(cal)


def _numbers_of(res: SurfacePrediction, paper: int, margin: float) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "params": paper,
        "levels": len(res.design.size_names),
        "margin": margin,
        "extrapolation": res.size_extrapolation,
        "steps_extrapolation": res.steps_extrapolation,
        "slope": res.slope if res.slope is not None and math.isfinite(res.slope) else None,
        "n_seeds": len(res.effects.y),
    }
    if "size backtest" in res.checks:
        fields.update(dict(zip(("backtest_low", "backtest_high"), res.checks["size backtest"], strict=True)))
    return fields


def _row(claim, measure, pool, group, res: SurfacePrediction, paper: int, claims: ClaimSet) -> ScorecardRow:
    """The predicted row of one group of one pool: its verdict by the claim's rules, or refused."""
    study = pool[0]
    name, parent = " + ".join(s.name for s in pool), study.parent_run_id if len(pool) == 1 else None
    margin = claims.margin_for(claim, study.settings.smallest_effect)
    fields = {**_fields(claim, measure, name, parent, group), **_numbers_of(res, paper, margin)}
    fields["calibration"] = _calibration(res, study)
    where = where_words(res, paper, claim.setting, group, pool)
    fields["where"] = where  # kept whole when Holm's adjustment rewrites the verdict
    if res.refused is not None:
        verdict = ClaimVerdict("not predictable", refused_words(res, where), "none", settled=NOT_TESTABLE)
        values = numbers(Intervals(math.nan, None, None, 0), verdict)
        values.pop("n_seeds")
        return keyed(ScorecardRow(**fields, **values), measure)
    iv = _intervals(res, study)
    verdict = classify_effect(iv, sign=claim.sign, paper_value=claim.paper_value, margin=margin)
    head = f"{verdict.kind}: "
    body = verdict.words[len(head) :] if verdict.words.startswith(head) else verdict.words
    words = f"{verdict.kind}, extrapolated, not measured: {body}; {where}"
    verdict = ClaimVerdict(
        verdict.kind,
        words,
        verdict.rests_on + " of the per-seed predictions",
        signed=verdict.signed,
        settled=verdict.settled,
    )
    fields.pop("n_seeds")
    return keyed(ScorecardRow(**fields, **numbers(iv, verdict)), measure)


def _refused_row(claim, measure, pool, group, why: str, **known: Any) -> ScorecardRow:
    """A ``not predictable`` row whose surface could not even be built (``known``: what is)."""
    verdict = ClaimVerdict("not predictable", f"not predictable: {why}", "none", settled=NOT_TESTABLE)
    values = numbers(Intervals(math.nan, None, None, 0), verdict)
    values.pop("n_seeds")
    parent = pool[0].parent_run_id if len(pool) == 1 else None
    fields = _fields(claim, measure, " + ".join(s.name for s in pool), parent, group)
    return keyed(ScorecardRow(**fields, **known, **values), measure)


def _pool_rows(claim, measure, pool: Sequence[StudyResults], group, claims) -> ScorecardRow:
    tables = [(s.name, _table(claim, measure, s, group)) for s in pool]
    tables = [(n, t) for n, t in tables if t.height]
    sizes = sorted({str(s) for _, t in tables if "size" in t.columns for s in t.get_column("size").drop_nulls()})
    if not tables:
        return _refused_row(claim, measure, pool, group, "no evaluation holds the claim's variants", levels=0)
    try:
        res, paper = _surface(claim, measure, tables, pool, group)
    except InputError as exc:
        return _refused_row(claim, measure, pool, group, str(exc), levels=len(sizes))
    return _row(claim, measure, pool, group, res, paper, claims)


def predicted_rows(
    claim: Claim,
    measure: Measure,
    readable: Sequence[tuple[StudyResults, Sequence[Mapping[str, Any]]]],
    claims: ClaimSet,
) -> list[ScorecardRow]:
    """One ``predicted`` row per group (corpus, context length) and pool of studies of one
    recipe among ``readable`` (each study with the cells the claim was read in); none for a
    claim that is not an effect or is about a trend."""
    if not READERS[claim.kind].trends or claim.trend is not None:
        return []
    groups = _groups([c for _, cells in readable for c in cells])
    out = []
    for group in groups:
        members = [
            (s, cells) for s, cells in readable if any(all(c.get(k) == v for k, v in group.items()) for c in cells)
        ]
        for pool in prediction_pools(members, group.get("context_length")):
            out.append(_pool_rows(claim, measure, [s for s, _ in pool], group, claims))
    return out


__all__ = ["CARD_REPS", "papers_parameters", "predicted_rows"]
