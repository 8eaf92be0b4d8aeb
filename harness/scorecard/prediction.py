"""A claim predicted at the papers' size from three or more sizes of one study, or refused.

For a claim read as a contrast or the interaction, each group of a study's cells that differ
only in size (one corpus, one context length) gives one ``predicted`` row:
:func:`~harness.analysis.extrapolation.effect_prediction` fits each seed's effect against
log2(parameters) and reads each seed's line at the papers' parameter count, the t-interval
over seeds of those predictions is judged by the claim's own rules
(:func:`~harness.scorecard.verdicts.classify_effect`), and the words say "extrapolated, not
measured", how far (``extrapolation``: the papers' parameters / the largest measured), from
how many sizes at how many training steps, and how the backtest went. The papers' parameter
count is that of the claim's reference variant (its control, or the 2x2's base) built at the
claim setting's size and context length with the study's own vocabulary
(:func:`papers_parameters`: on the meta device, as ``harness zoo`` builds it).

The row is ``not predictable``, with the reason, when the study has fewer than three sizes, the
papers' size lies more than 16x beyond the largest measured, or the backtest fails
(:func:`~harness.analysis.extrapolation.refusal`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from harness.analysis.contrasts import sign_flip_pvalue
from harness.analysis.extrapolation import MIN_SIZES, PredictionResult, effect_prediction, refusal
from harness.analysis.results import at_reference_tau_init
from harness.analysis.results_types import NOT_TESTABLE, no_test_reason
from harness.errors import InputError
from harness.scorecard.calibration import prediction_coverage
from harness.scorecard.cells import StudyResults, claim_fields, keyed, mean_of, numbers
from harness.scorecard.claims import Claim, ClaimSet, Measure, Setting
from harness.scorecard.readers import READERS, equivalence_interval, seed_sd, size_shape
from harness.scorecard.rows import ScorecardRow
from harness.scorecard.verdicts import ClaimVerdict, Intervals, classify_effect


def papers_parameters(variant: str, size: Any, params: float, context_length: int, setting: Setting) -> tuple[int, int]:
    """(the parameter count of ``variant`` at ``setting``'s size and context length, the
    vocabulary it is built with): the study's vocabulary, read off ``params``, the variant's
    count at the study's ``size`` and ``context_length`` (a count is linear in the vocabulary:
    ``params = c(1) + (V - 1) (c(2) - c(1))``). :class:`InputError` when the size's shape is
    unknown or no whole vocabulary gives ``params``."""
    import torch

    from harness.models.sizes import SIZES, custom_size
    from harness.models.transformer import build_model

    shape = size_shape(size)
    if shape is None:
        raise InputError(f"the shape of size {size!r} is unknown: no parameter count at the papers' size")
    if str(size) not in SIZES:
        shape = custom_size(shape.n_layer, shape.n_head, shape.d_model)

    def count(at: Any, vocab: int, block: int) -> int:
        with torch.device("meta"):
            return int(build_model(variant, size=at, vocab_size=vocab, block_size=block).num_parameters())

    one, two = count(shape, 1, context_length), count(shape, 2, context_length)
    vocab = 1.0 + (float(params) - one) / (two - one)
    if not (vocab >= 1.0 and abs(vocab - round(vocab)) < 1e-6):
        raise InputError(f"no vocabulary gives {variant}'s {params:,.0f} parameters at size {size}")
    return count(setting.size, int(round(vocab)), setting.context_length), int(round(vocab))


def _group_frame(claim: Claim, measure: Measure, study: StudyResults, group: Mapping[str, Any]) -> pl.DataFrame:
    """The study's rows of the measure's variants in one group (corpus, context length), at
    tau's reference initial value."""
    df = study.frame.filter(pl.col("variant").is_in(list(measure.names())))
    for column, value in group.items():
        df = df.filter(pl.col(column) == value)
    return at_reference_tau_init(df)[0] if df.height else df


def _groups(cells: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The (corpus, context length) groups of the cells a claim was read in, in order."""
    keys = [{k: c[k] for k in ("dataset", "context_length") if k in c} for c in cells]
    unique = {tuple(sorted(k.items())): k for k in keys}
    return [unique[key] for key in sorted(unique, key=str)]


def _predict(claim: Claim, measure: Measure, df: pl.DataFrame, study: StudyResults) -> tuple[PredictionResult, int]:
    """The prediction at the papers' size, and that size's parameter count."""
    reference = str(measure.control or measure.base)
    ref = df.filter(pl.col("variant") == reference)
    by_size = ref.group_by("size").agg(pl.col("params").cast(pl.Float64).mean()).sort("params")
    largest = by_size.row(by_size.height - 1, named=True)
    context = int(df.get_column("context_length").max()) if "context_length" in df.columns else 0
    paper, _ = papers_parameters(reference, largest["size"], largest["params"], context, claim.setting)
    keys: dict[str, Any] = dict(metric=claim.metric, confidence=study.settings.confidence, at=float(paper))
    if claim.kind == "interaction":
        keys.update(base=measure.base, a=measure.a, b=measure.b, ab=measure.ab)
    else:
        keys.update(treatment=measure.treatment, control=measure.control)
    return effect_prediction(df, **keys), paper


def _intervals(res: PredictionResult, study: StudyResults) -> Intervals:
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
        permutation_pvalue=sign_flip_pvalue(res.per_seed, rng=s.seed) if tested else None,
    )


def _where(res: PredictionResult, paper: int, steps: int | None, setting: Setting) -> str:
    """How far and from what the prediction reaches, in words."""
    sizes = ", ".join(f"{n} ({x / 1e6:.2f}M)" for n, x in zip(res.size_names, res.x_values, strict=True))
    trained = f"{steps:,} steps" if steps is not None else "the study's steps"
    return (
        f"at {paper / 1e6:.2f}M parameters (the papers' size, {setting.size}, with this study's vocabulary), "
        f"{res.extrapolation:.1f}x the largest size measured, from {res.n_sizes} sizes [{sizes}] trained "
        f"{trained} (the papers: {setting.steps:,})"
    )


def _extrapolated(verdict: ClaimVerdict, res: PredictionResult, where: str) -> ClaimVerdict:
    """The verdict worded "extrapolated, not measured", with where, the backtest and the
    simulated coverage of such intervals."""
    head = f"{verdict.kind}: "
    body = verdict.words[len(head) :] if verdict.words.startswith(head) else verdict.words
    coverage = prediction_coverage(res.n_seeds)
    cover = (
        ""
        if coverage is None
        else f"; such intervals covered a log-linear truth in {coverage.rate:.0%} of simulated studies at "
        f"{coverage.seeds} seeds (docs/calibration.md)"
    )
    words = f"{verdict.kind}, extrapolated, not measured: {body}; predicted {where}; backtest: {res.backtest.words}"
    rests = verdict.rests_on + " of the per-seed predictions"
    return ClaimVerdict(verdict.kind, words + cover, rests, signed=verdict.signed, settled=verdict.settled)


def _fields(claim: Claim, measure: Measure, study: StudyResults, group: Mapping[str, Any], df: pl.DataFrame):
    """The fields every predicted row of one group has: the claim, the group (corpus, context
    length), the papers' size and the study's steps and seeds."""
    steps = mean_of(df, "steps")
    return {
        **claim_fields(claim, measure, study.name),
        "kind": "predicted",
        **group,
        "size": claim.setting.size,
        "steps": None if steps is None else int(round(steps)),
        "factor": "params",
        "at_paper_setting": False,
        "parent_run_id": study.parent_run_id,
        "n_seeds": df.get_column("seed").n_unique() if "seed" in df.columns else 0,
    }


def _refused(claim, measure, study, group, df: pl.DataFrame, why: str, **fields: Any) -> ScorecardRow:
    """A ``not predictable`` row saying why (``fields``: what is known, e.g. the sizes' count)."""
    verdict = ClaimVerdict("not predictable", f"not predictable: {why}", "none", settled=NOT_TESTABLE)
    values = numbers(Intervals(math.nan, None, None, 0), verdict)
    values.pop("n_seeds")
    return keyed(ScorecardRow(**_fields(claim, measure, study, group, df), **fields, **values), measure)


def _row(claim, measure, study, group, df: pl.DataFrame, res: PredictionResult, paper: int, claims) -> ScorecardRow:
    """The predicted row of one group: its verdict by the claim's rules, or refused."""
    margin = claims.margin_for(claim, study.settings.smallest_effect)
    fields: dict[str, Any] = {
        "params": paper,
        "levels": res.n_sizes,
        "margin": margin,
        "extrapolation": res.extrapolation,
        "slope": res.slope if math.isfinite(res.slope) else None,
    }
    bt = res.backtest
    if bt is not None and bt.interval is not None:
        fields.update(backtest_low=float(bt.interval.low), backtest_high=float(bt.interval.high))
    if res.refused is not None:
        return _refused(claim, measure, study, group, df, res.refused, **fields)
    iv = _intervals(res, study)
    verdict = classify_effect(iv, sign=claim.sign, paper_value=claim.paper_value, margin=margin)
    base = _fields(claim, measure, study, group, df)
    verdict = _extrapolated(verdict, res, _where(res, paper, base["steps"], claim.setting))
    return keyed(ScorecardRow(**{**base, **fields, **numbers(iv, verdict)}), measure)


def predicted_rows(
    claim: Claim, measure: Measure, study: StudyResults, cells: Sequence[Mapping[str, Any]], claims: ClaimSet
) -> list[ScorecardRow]:
    """One ``predicted`` row per group of the study's ``cells`` (those the claim was read in)
    that differ only in size; none for a claim that is not an effect or is about a trend."""
    if not READERS[claim.kind].trends or claim.trend is not None or not cells:
        return []
    out = []
    for group in _groups(cells):
        df = _group_frame(claim, measure, study, group)
        sizes = sorted({str(s) for s in df.get_column("size").drop_nulls().to_list()})
        if len(sizes) < MIN_SIZES:
            why = f"{refusal(len(sizes), math.nan, None)} ({', '.join(sizes)})"
            if claim.setting.size in sizes:  # the papers' size was trained: its cells are the measurement
                why = f"nothing to extrapolate: the papers' size ({claim.setting.size}) was measured (read its cells)"
            out.append(_refused(claim, measure, study, group, df, why, levels=len(sizes)))
            continue
        try:
            res, paper = _predict(claim, measure, df, study)
        except InputError as exc:
            out.append(_refused(claim, measure, study, group, df, str(exc), levels=len(sizes)))
            continue
        out.append(_row(claim, measure, study, group, df, res, paper, claims))
    return out


__all__ = ["papers_parameters", "predicted_rows"]
