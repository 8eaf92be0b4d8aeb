"""How each measure kind of a claim is read in one cell: the one place the scorecard
dispatches on ``claim.kind`` (:data:`READERS`).

A :class:`Reader` says which columns its kind needs, whether every variant needs a value (a
level or a count) or seed blocks do (a contrast), whether it is read per initial value of
tau, whether it gets trend rows, and how it turns a cell's rows into intervals and a verdict
(:class:`CellRead`), with the report's own statistics: :func:`~harness.analysis.main_effect`
and :func:`~harness.analysis.interaction_contrast` for effects (at tau's reference initial
value in a study that sweeps it), :func:`~harness.analysis.tau_stability` for levels (its
t-interval, TOST interval and prediction interval), :func:`~harness.analysis.open_fraction_analysis`
for the open fraction against the Gaussian tail; parameter and cluster counts are exact.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import polars as pl
from scipy import stats

from harness.analysis.contrasts import interaction_contrast, main_effect
from harness.analysis.mope import mope_scales
from harness.analysis.paired_tests import SignFlip, TTest
from harness.analysis.results import at_reference_tau_init
from harness.analysis.results_types import (
    AnalysisSettings,
    ConfidenceInterval,
    ContrastResult,
    has_spread,
    no_test_reason,
)
from harness.analysis.shape import shape_check
from harness.analysis.tau import open_fraction_analysis, tau_stability
from harness.errors import InputError
from harness.models.variants import DEFAULT_TAU_INIT
from harness.scorecard.claims import Claim, ClaimSet, Measure, Setting
from harness.scorecard.model_shape import cell_shape, vocabulary
from harness.scorecard.verdicts import (
    ClaimVerdict,
    Intervals,
    classify_effect,
    classify_exact,
    classify_level,
    figure_verdict,
)


@dataclass(frozen=True)
class ReadContext:
    """What a reader needs besides the cell's rows: the study's analysis settings, the
    claims (their default margins), the cell's values and the study's learned MOPE widths."""

    settings: AnalysisSettings
    claims: ClaimSet
    cell: Mapping[str, Any]
    sigmas: pl.DataFrame | None = None
    skew_sigma: float | None = None  # the skew the card's seeds allow (its robust intervals' shape)


@dataclass(frozen=True)
class CellRead:
    """A claim read in one cell: its intervals, its verdict, the margin, a level's band and
    start, and the paper's number where it depends on the cell (a count per head: d + k)."""

    intervals: Intervals
    verdict: ClaimVerdict
    margin: float | None = None
    band: float | None = None
    start: float | None = None
    paper_value: float | None = None


@dataclass(frozen=True)
class Reader:
    """How one measure kind is read (see the module docstring); ``trends``: also read as a
    slope across sizes or contexts and predicted at the papers' size; ``over_training``: also
    read at every evaluation step of the curves (a quantity with seeds, not a count)."""

    read: Callable[[Claim, Measure, pl.DataFrame, ReadContext], CellRead]
    columns: Callable[[Claim], tuple[str, ...]]
    every_variant: bool = False
    by_tau_init: bool = False
    trends: bool = False
    over_training: bool = False
    metric: Callable[[Claim], str] = lambda claim: claim.metric
    needs_sigmas: bool = False  # read only from a study with its learned MOPE widths (MLflow)


# ----------------------------------------------------------------------------- intervals
def equivalence_interval(per_seed: np.ndarray, confidence: float) -> ConfidenceInterval | None:
    """The ``1 - 2 alpha`` t-interval over seeds (the TOST's), or None without spread."""
    per_seed = np.asarray(per_seed, dtype=float)
    if len(per_seed) < 2 or not has_spread(per_seed):
        return None
    return TTest(1.0 - 2.0 * (1.0 - confidence)).run(per_seed).interval


def seed_sd(per_seed: np.ndarray) -> float | None:
    per_seed = np.asarray(per_seed, dtype=float)
    return float(np.std(per_seed, ddof=1)) if len(per_seed) >= 2 else None


def contrast_intervals(res: ContrastResult, skew_sigma: float | None = None) -> Intervals:
    """The intervals of a paired contrast as the report computed them, with the shape check
    and the sign-flip p that travel with them."""
    reason = no_test_reason(res.per_seed) or ("" if res.confidence_interval is not None else res.message)
    return Intervals(
        estimate=res.estimate,
        ci=res.confidence_interval,
        equivalence=equivalence_interval(res.per_seed, res.confidence),
        n_seeds=res.n_seeds,
        confidence=res.confidence,
        reason=reason,
        pvalue=res.pvalue,
        sd=res.sd,
        shape=res.shape,
        permutation_pvalue=res.permutation_pvalue,
        skew_sigma=skew_sigma,
    )


def _per_seed_intervals(
    estimate: float, ci: ConfidenceInterval | None, per_seed: np.ndarray, null: float, confidence: float, reason: str
) -> dict[str, Any]:
    """The fields of :class:`Intervals` common to a level and a tail: the TOST interval, the
    t-test against ``null``, the sd and the shape check of the per-seed values."""
    per_seed = np.asarray(per_seed, dtype=float)
    testable = len(per_seed) >= 2 and has_spread(per_seed)
    flip = SignFlip().run(per_seed - null, rng=0).p_value if testable else None
    return dict(
        estimate=estimate,
        ci=ci if testable else None,
        equivalence=equivalence_interval(per_seed, confidence),
        n_seeds=len(per_seed),
        confidence=confidence,
        reason="" if testable else (reason or "no test possible (zero spread or one seed)"),
        pvalue=TTest(popmean=null).run(per_seed).p_value if testable else None,
        sd=seed_sd(per_seed),
        shape=shape_check(per_seed) if testable else None,
        permutation_pvalue=flip,
    )


# ----------------------------------------------------------------------------- effects
def _effect_read(claim: Claim, res: ContrastResult, ctx: ReadContext) -> CellRead:
    iv = contrast_intervals(res, ctx.skew_sigma)
    margin = ctx.claims.margin_for(claim, ctx.settings.smallest_effect)
    return CellRead(iv, classify_effect(iv, sign=claim.sign, paper_value=claim.paper_value, margin=margin), margin)


def _common(claim: Claim, s: AnalysisSettings) -> dict[str, Any]:
    return dict(metric=claim.metric, confidence=s.confidence, rng=s.seed, n_resamples=s.n_resamples)


THROUGHPUT_METRIC = "log_tokens_per_s"


def measured_under_load(claim: Claim, measure: Measure, rows: pl.DataFrame, margin: float) -> str | None:
    """Why a cell's throughput cannot be read (None: it can). A seed changes no step's work,
    so one variant's tokens/s should agree across its seeds to within noise; where they spread
    by more than twice the claim's margin (max - min of log tokens/s > 2 delta) the trials'
    speed followed what else the machine ran, and the contrast would measure that load."""
    if claim.metric != THROUGHPUT_METRIC:
        return None
    rows, _ = at_reference_tau_init(rows)
    finished = rows.filter(pl.col("status") == "finished") if "status" in rows.columns else rows
    for variant in measure.names():
        values = finished.filter(pl.col("variant") == variant).get_column(THROUGHPUT_METRIC).drop_nulls()
        if values.len() >= 2 and float(values.max() - values.min()) > 2.0 * margin:
            ratio = float(np.exp(values.max() - values.min()))
            return (
                f"the tokens/s of {variant} varied {ratio:.2f}x between its seeds, more than 2 x the {margin:g} "
                "margin allows, though a seed changes no step's work: the trials shared the machine and "
                "throughput measured its load; `harness bench train` measures a variant alone"
            )
    return None


def read_contrast(claim: Claim, measure: Measure, rows: pl.DataFrame, ctx: ReadContext) -> CellRead:
    """``metric(control) - metric(treatment)`` paired by seed, at tau's reference initial value;
    a throughput contrast is refused where it was :func:`measured_under_load`."""
    load = measured_under_load(claim, measure, rows, ctx.claims.margin_for(claim, ctx.settings.smallest_effect))
    if load is not None:
        raise InputError(load)
    rows, _ = at_reference_tau_init(rows)
    res = main_effect(rows, str(measure.treatment), str(measure.control), **_common(claim, ctx.settings))
    return _effect_read(claim, res, ctx)


def read_interaction(claim: Claim, measure: Measure, rows: pl.DataFrame, ctx: ReadContext) -> CellRead:
    """The 2x2 interaction ``L_a + L_b - L_base - L_ab`` paired by seed."""
    rows, _ = at_reference_tau_init(rows)
    m = measure
    res = interaction_contrast(rows, base=m.base, a=m.a, b=m.b, ab=m.ab, **_common(claim, ctx.settings))
    return _effect_read(claim, res, ctx)


# ----------------------------------------------------------------------------- levels
@lru_cache(maxsize=256)
def papers_parameters(variant: str, vocab_size: int, setting: Setting) -> int:
    """The parameter count of ``variant`` at ``setting``'s size and context length with the
    study's vocabulary ``vocab_size`` (its results table's, :func:`~harness.scorecard.model_shape.vocabulary`):
    built on the meta device, as ``harness zoo`` builds it."""
    import torch

    from harness.models.transformer import build_model

    with torch.device("meta"):
        model = build_model(variant, size=setting.size, vocab_size=int(vocab_size), block_size=setting.context_length)
        return int(model.num_parameters())


def _tau_init(rows: pl.DataFrame) -> float:
    if "tau_init" not in rows.columns:
        return DEFAULT_TAU_INIT
    values = rows.get_column("tau_init").cast(pl.Float64).fill_null(DEFAULT_TAU_INIT)
    return float(values.mean())


def level_start(claim: Claim, rows: pl.DataFrame, cell: Mapping[str, Any]) -> tuple[float, str]:
    """Where a level starts, and what that is in words: a number; tau's initial value; the
    open fraction z-normalised energies give there, 1 - Phi(tau_init); or a random direction's
    mean |cos| with the first principal component at the cell's width."""
    if claim.start is None or isinstance(claim.start, (int, float)):
        return float(claim.start or 0.0), ""
    tau0 = _tau_init(rows)
    if claim.start == "tau_init":
        return tau0, "tau's initial value"
    if claim.start == "gaussian_tail":
        return float(stats.norm.sf(tau0)), f"1 - Φ({tau0:g}), what z-normalised energies open at tau's start"
    shape = cell_shape(rows, cell.get("size"))
    from harness.training.energy_probe import chance_cosine  # torch: loaded only for this claim

    return chance_cosine(shape.d_model), f"a random direction in d = {shape.d_model}"


def _band(claim: Claim, settings: AnalysisSettings) -> float:
    """The claim's own band, as the card prints it; a level claim without one takes the study's
    (``analysis.tau.margin``). Never overridden: a card that prints "± 0.3" judges ± 0.3."""
    return float(claim.band if claim.band is not None else settings.tau_margin)


def read_level(claim: Claim, measure: Measure, rows: pl.DataFrame, ctx: ReadContext) -> CellRead:
    """A level (``tau_mean``, ``open_fraction``, ``pc1_cosine``) of the gated runs, per seed, with
    the report's tau-stability statistics: the t-interval, the TOST interval and, for a claim
    about runs, the prediction interval(s) of where a new seed's run lands. A claim read as a
    ``figure`` gets its numbers and where it started, no verdict."""
    s = ctx.settings
    start, start_words = level_start(claim, rows, ctx.cell)
    margin = ctx.claims.margin_for(claim, s.smallest_effect)
    band = _band(claim, s) if not claim.figure else margin
    res = tau_stability(
        rows,
        reference=float(claim.paper_value) if claim.paper_value is not None else start,
        margin=band,
        confidence=s.confidence,
        variants=list(measure.variants),
        column=claim.metric,
        factors=(),
    )
    fields = _per_seed_intervals(res.estimate, res.confidence_interval, res.per_seed, start, s.confidence, res.message)
    iv = Intervals(**fields, prediction=res.prediction_interval, stable=res.stable, skew_sigma=ctx.skew_sigma)
    if claim.figure:
        started = f"started at {start:.3g}{f' ({start_words})' if start_words else ''}"
        return CellRead(iv, figure_verdict(iv, f"{started}; {claim.figure}"), margin, start=start)
    verdict = classify_level(
        iv,
        paper_value=float(claim.paper_value),
        band=band,
        start=start,
        margin=margin,
        start_words=start_words,
        runs=claim.runs,
    )
    return CellRead(iv, verdict, margin, band=band, start=start)


def read_tail(claim: Claim, measure: Measure, rows: pl.DataFrame, ctx: ReadContext) -> CellRead:
    """The open fraction minus its Gaussian tail, per seed (:func:`open_fraction_analysis`)."""
    s = ctx.settings
    res = open_fraction_analysis(rows, variants=list(measure.variants), confidence=s.confidence)
    per_seed = res.difference_per_seed
    iv = Intervals(
        **_per_seed_intervals(res.difference, res.difference_interval, per_seed, 0.0, s.confidence, res.message),
        skew_sigma=ctx.skew_sigma,
    )
    margin = ctx.claims.margin_for(claim, s.smallest_effect)
    if claim.figure:
        return CellRead(iv, figure_verdict(iv, f"open fraction minus 1 - Φ(tau), per seed; {claim.figure}"), margin)
    return CellRead(iv, classify_effect(iv, sign=claim.sign, paper_value=None, margin=margin), margin)


# ----------------------------------------------------------------------------- counts
def _mean_params(rows: pl.DataFrame, variant: str | None) -> float:
    values = rows.filter(pl.col("variant") == variant).get_column("params").cast(pl.Float64).drop_nulls()
    if not values.len():
        raise InputError(f"no parameter count for {variant!r} in this cell")
    return float(values.mean())


def _n_seeds(rows: pl.DataFrame) -> int:
    return rows.get_column("seed").n_unique() if "seed" in rows.columns else 0


def _at_papers_shape(claim: Claim, variant: str, rows: pl.DataFrame, cell: Mapping[str, Any]) -> int:
    """``variant``'s parameter count at the claim setting's shape and context length, with the
    cell's vocabulary (built on the meta device, as a prediction's papers' size is)."""
    return papers_parameters(variant, vocabulary(rows.filter(pl.col("variant") == variant)), claim.setting)


def _overhead_at_papers_shape(claim: Claim, measure: Measure, rows: pl.DataFrame, ctx: ReadContext) -> CellRead:
    """A bound on the gate's overhead, read at the papers' shape only (the fraction varies with
    the shape, so a cell's own would meet or miss the bound by its shape's coincidence); the
    cell's own fraction is in the words."""
    base = str(measure.base or measure.control)
    counts = {
        v: _at_papers_shape(claim, v, rows, ctx.cell) for v in {str(measure.treatment), str(measure.control), base}
    }
    value = (counts[str(measure.treatment)] - counts[str(measure.control)]) / counts[base]
    own = (_mean_params(rows, measure.treatment) - _mean_params(rows, measure.control)) / _mean_params(rows, base)
    s = claim.setting
    what = (
        f"parameter counts at the papers' shape ({s.size}, T = {s.context_length}: {counts[base]:,} parameters, "
        f"built, not trained; at this cell's own shape {100 * own:.3g} %)"
    )
    verdict = classify_exact(value, sign="<", paper_value=float(claim.paper_value), what=what)
    return CellRead(Intervals(value, None, None, _n_seeds(rows)), verdict)


def read_parameters(claim: Claim, measure: Measure, rows: pl.DataFrame, ctx: ReadContext) -> CellRead:
    """The gate's extra parameters: a fraction of ``base`` against a bound ("<") at the papers'
    shape, per head against the paper's ``d + k`` at the cell's own width (a ``paper_count``),
    or a total."""
    extra = _mean_params(rows, measure.treatment) - _mean_params(rows, measure.control)
    n = _n_seeds(rows)
    if claim.sign == "<":
        return _overhead_at_papers_shape(claim, measure, rows, ctx)
    k = claim.per_head_constant
    if k is None:
        verdict = classify_exact(extra, sign=claim.sign, paper_value=float(claim.paper_value), what="parameter counts")
        return CellRead(Intervals(extra, None, None, n), verdict)
    shape = cell_shape(rows.filter(pl.col("variant").is_in(list(measure.names()))), ctx.cell.get("size"))
    per_head = extra / (shape.n_layer * shape.n_head)
    paper = float(shape.d_model + k)
    words = f"d + {k} with d = {shape.d_model}, {shape.n_layer} layers x {shape.n_head} heads"
    verdict = classify_exact(per_head, sign="=", paper_value=paper, what="parameters per head", paper_words=words)
    return CellRead(Intervals(per_head, None, None, n), verdict, paper_value=paper)


def read_clusters(claim: Claim, measure: Measure, rows: pl.DataFrame, ctx: ReadContext) -> CellRead:
    """The number of clusters of the learned MOPE widths (log sigma) in this cell."""
    if ctx.sigmas is None:
        raise InputError("no learned MOPE widths (read from MLflow only)")
    sigmas = ctx.sigmas.filter(pl.col("variant").is_in(list(measure.variants)))
    for column, value in ctx.cell.items():
        if column in sigmas.columns:
            sigmas = sigmas.filter(pl.col(column).cast(pl.String) == str(value))
    res = mope_scales(sigmas, rng=ctx.settings.seed)
    what = f"clusters of log sigma over {res.n} learned widths ({res.criterion.upper()})"
    verdict = classify_exact(float(res.k), sign=claim.sign, paper_value=float(claim.paper_value), what=what)
    return CellRead(Intervals(float(res.k), None, None, _n_seeds(rows)), verdict)


#: The reader of each measure kind: the one place the scorecard dispatches on ``claim.kind``.
READERS: dict[str, Reader] = {
    "contrast": Reader(read_contrast, lambda c: (c.metric,), trends=True, over_training=True),
    "interaction": Reader(read_interaction, lambda c: (c.metric,), trends=True, over_training=True),
    "level": Reader(read_level, lambda c: (c.metric,), every_variant=True, by_tau_init=True, over_training=True),
    "tail": Reader(
        read_tail,
        lambda c: ("tau_mean", "open_fraction"),
        every_variant=True,
        by_tau_init=True,
        metric=lambda c: "tail",
        over_training=True,
    ),
    "parameters": Reader(read_parameters, lambda c: ("params",), every_variant=True, metric=lambda c: "parameters"),
    "clusters": Reader(read_clusters, lambda c: (), metric=lambda c: "clusters", needs_sigmas=True),
}


__all__ = [
    "READERS",
    "CellRead",
    "ReadContext",
    "Reader",
    "contrast_intervals",
    "equivalence_interval",
    "level_start",
    "papers_parameters",
]
