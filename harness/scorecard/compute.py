"""The scorecard: every claim matched to every cell of the studies read that can measure it.

A cell is (dataset, size, context length) of one study. A claim's measure can be read in a
cell when the cell holds every variant it names and the cell's corpus is one of the claim's.
Each such (claim, reading, study, cell) gives one row, computed with the report's own
statistics (:mod:`harness.analysis`: paired over seeds, the t-interval over seeds, the seed as
the unit) and read by :mod:`harness.scorecard.verdicts`. A claim measured at two or more
parameter counts or context lengths of one study also gets a ``trend`` row per factor: the
slope of the per-seed effect against log x (:func:`harness.analysis.effect_trend`), per
doubling of x, with words saying where the claim holds. A claim no study read can measure
gets one ``not measured`` row naming the study that would.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from harness.analysis.contrasts import interaction_contrast, main_effect, t_interval
from harness.analysis.mope import mope_scales
from harness.analysis.results import CELL_COLUMNS, cell_label
from harness.analysis.results_types import AnalysisSettings, ConfidenceInterval, has_spread, no_test_reason
from harness.analysis.tau import open_fraction_analysis, tau_stability
from harness.analysis.trends import effect_trend
from harness.errors import InputError
from harness.scorecard.claims import Claim, ClaimSet, Measure, load_claims
from harness.scorecard.verdicts import (
    ClaimVerdict,
    Intervals,
    classify_effect,
    classify_exact,
    classify_level,
    classify_trend,
)

#: Columns of the scorecard table, in order.
SCORECARD_SCHEMA: dict[str, pl.DataType] = {
    "claim": pl.String(),
    "paper": pl.String(),
    "reading": pl.String(),
    "study": pl.String(),
    "kind": pl.String(),  # "cell", "trend" or "not measured"
    "factor": pl.String(),  # trend rows: params or context_length
    "paper_value": pl.Float64(),
    "sign": pl.String(),
    "metric": pl.String(),
    "dataset": pl.String(),
    "size": pl.String(),
    "params": pl.Int64(),
    "context_length": pl.Int64(),
    "steps": pl.Int64(),
    "group": pl.String(),
    "at_paper_setting": pl.Boolean(),
    "n_seeds": pl.Int64(),
    "estimate": pl.Float64(),
    "ci_low": pl.Float64(),
    "ci_high": pl.Float64(),
    "equivalence_low": pl.Float64(),
    "equivalence_high": pl.Float64(),
    "margin": pl.Float64(),
    "interval": pl.String(),
    "verdict": pl.String(),
    "verdict_kind": pl.String(),
    "where": pl.String(),
    "statement": pl.String(),
    "parent_run_id": pl.String(),
}
#: The scorecard table's columns, in order (the keys of :data:`SCORECARD_SCHEMA`).
SCORECARD_COLUMNS: tuple[str, ...] = tuple(SCORECARD_SCHEMA)


@dataclass(frozen=True)
class StudyResults:
    """One finished study as the scorecard reads it: its results table, its analysis
    settings (confidence, smallest effect, tau's band), where it came from, its MLflow
    parent run (when read from MLflow) and the learned MOPE widths (from MLflow only)."""

    name: str
    frame: pl.DataFrame
    settings: AnalysisSettings = AnalysisSettings()
    source: str = ""
    parent_run_id: str | None = None
    sigmas: pl.DataFrame | None = None


# ----------------------------------------------------------------------------- cells
def _with_derived(df: pl.DataFrame) -> pl.DataFrame:
    """The table with ``log_tokens_per_s`` (a throughput contrast is a ratio)."""
    if "tokens_per_s" in df.columns and "log_tokens_per_s" not in df.columns:
        tps = pl.col("tokens_per_s").cast(pl.Float64)
        df = df.with_columns(pl.when(tps > 0).then(tps.log()).otherwise(None).alias("log_tokens_per_s"))
    return df


def _cells(df: pl.DataFrame) -> list[tuple[dict[str, Any], pl.DataFrame]]:
    """(cell values, its rows) for every cell of a study, in order."""
    cols = [c for c in CELL_COLUMNS if c in df.columns]
    if not cols:
        return [({}, df)]
    groups = df.partition_by(cols, as_dict=True, maintain_order=True)
    out = [(dict(zip(cols, key, strict=True)), part) for key, part in groups.items()]
    return sorted(out, key=lambda kv: tuple(str(kv[0].get(c)) for c in cols))


def _columns_needed(claim: Claim) -> tuple[str, ...]:
    if claim.kind in ("contrast", "interaction"):
        return (claim.metric,)
    if claim.kind == "level":
        return tuple(dict.fromkeys((claim.metric, "tau_mean")))
    if claim.kind == "tail":
        return ("tau_mean", "open_fraction")
    return ("params",) if claim.kind == "parameters" else ()


def _can_measure(claim: Claim, measure: Measure, cell: Mapping[str, Any], rows: pl.DataFrame) -> bool:
    """The cell is on one of the claim's corpora, holds every variant the measure names, and
    has a value of every column the measure reads for them."""
    if not claim.applies_to(cell.get("dataset")) or "variant" not in rows.columns:
        return False
    if not set(measure.names()) <= set(rows.get_column("variant").drop_nulls().to_list()):
        return False
    # every variant a level or a count reads must have a value (a contrast's missing runs are
    # dropped seed blocks, which its verdict reports)
    each = measure.names() if claim.kind in ("level", "tail", "parameters") else (None,)
    for variant in each:
        mine = rows.filter(pl.col("variant").is_in([variant] if variant else list(measure.names())))
        if not all(c in mine.columns and mine.get_column(c).drop_nulls().len() > 0 for c in _columns_needed(claim)):
            return False
    return True


def _reference_variant(measure: Measure) -> str | None:
    return measure.control or measure.base or (measure.variants[0] if measure.variants else None)


def _mean_of(rows: pl.DataFrame, column: str, variant: str | None = None) -> float | None:
    if column not in rows.columns:
        return None
    if variant is not None and "variant" in rows.columns:
        rows = rows.filter(pl.col("variant") == variant)
    values = rows.get_column(column).cast(pl.Float64).drop_nulls()
    return float(values.mean()) if values.len() else None


def _cell_fields(claim: Claim, measure: Measure, study: StudyResults, cell: Mapping[str, Any], rows: pl.DataFrame):
    params = _mean_of(rows, "params", _reference_variant(measure))
    steps = _mean_of(rows, "steps")
    setting = claim.setting
    at_paper = (
        cell.get("dataset") == setting.dataset
        and cell.get("size") == setting.size
        and cell.get("context_length") == setting.context_length
        and steps is not None
        and int(round(steps)) == setting.steps
    )
    return {
        **_claim_fields(claim, measure, study.name),
        "kind": "cell",
        "dataset": cell.get("dataset"),
        "size": None if cell.get("size") is None else str(cell.get("size")),
        "params": None if params is None else int(round(params)),
        "context_length": cell.get("context_length"),
        "steps": None if steps is None else int(round(steps)),
        "at_paper_setting": bool(at_paper),
        "parent_run_id": study.parent_run_id,
    }


def _claim_fields(claim: Claim, measure: Measure, study: str | None) -> dict[str, Any]:
    return {
        "claim": claim.id,
        "paper": claim.paper,
        "reading": measure.reading,
        "study": study,
        "paper_value": claim.paper_value,
        "sign": claim.sign,
        "metric": claim.metric if claim.kind in ("contrast", "interaction", "level") else claim.kind,
        "statement": claim.claim,
    }


# ----------------------------------------------------------------------------- intervals
def _equivalence(per_seed: np.ndarray, confidence: float) -> ConfidenceInterval | None:
    """The ``1 - 2 alpha`` t-interval over seeds (the TOST's), or None without spread."""
    if len(per_seed) < 2 or not has_spread(per_seed):
        return None
    ci, _ = t_interval(np.asarray(per_seed, dtype=float), confidence=1.0 - 2.0 * (1.0 - confidence))
    return ci


def _contrast_intervals(claim: Claim, measure: Measure, rows: pl.DataFrame, settings: AnalysisSettings) -> Intervals:
    common = dict(
        metric=claim.metric, confidence=settings.confidence, rng=settings.seed, n_resamples=settings.n_resamples
    )
    if claim.kind == "interaction":
        res = interaction_contrast(rows, base=measure.base, a=measure.a, b=measure.b, ab=measure.ab, **common)
    else:
        res = main_effect(rows, str(measure.treatment), str(measure.control), **common)
    reason = no_test_reason(res.per_seed) or ("" if res.confidence_interval is not None else res.message)
    return Intervals(
        estimate=res.estimate,
        ci=res.confidence_interval,
        equivalence=_equivalence(res.per_seed, settings.confidence),
        n_seeds=res.n_seeds,
        confidence=settings.confidence,
        reason=reason,
    )


def _margin(claim: Claim, settings: AnalysisSettings, claims: ClaimSet) -> float:
    """The smallest effect of interest in the claim's metric: the study's, else the claims' default."""
    if claim.metric == "log_tokens_per_s":
        return claims.throughput_margin
    return settings.smallest_effect if settings.smallest_effect is not None else claims.smallest_effect


# ----------------------------------------------------------------------------- one cell
def _contrast_row(claim: Claim, measure: Measure, rows: pl.DataFrame, study: StudyResults, claims: ClaimSet) -> dict:
    iv = _contrast_intervals(claim, measure, rows, study.settings)
    margin = _margin(claim, study.settings, claims)
    verdict = classify_effect(iv, sign=claim.sign, paper_value=claim.paper_value, margin=margin)
    return _numbers(iv, verdict, margin)


def _numbers(iv: Intervals, verdict: ClaimVerdict, margin: float | None) -> dict[str, Any]:
    return {
        "n_seeds": iv.n_seeds,
        "estimate": None if not math.isfinite(iv.estimate) else float(iv.estimate),
        "ci_low": None if iv.ci is None else float(iv.ci.low),
        "ci_high": None if iv.ci is None else float(iv.ci.high),
        "equivalence_low": None if iv.equivalence is None else float(iv.equivalence.low),
        "equivalence_high": None if iv.equivalence is None else float(iv.equivalence.high),
        "margin": margin,
        "interval": verdict.rests_on,
        "verdict": verdict.words,
        "verdict_kind": verdict.kind,
    }


def _level_intervals(claim: Claim, measure: Measure, rows: pl.DataFrame, settings: AnalysisSettings) -> Intervals:
    """Tau (``tau_stability``) or the open fraction (``open_fraction_analysis``, at the
    confidence level and at ``1 - 2 alpha``), or the open fraction minus its Gaussian tail."""
    conf, variants = settings.confidence, list(measure.variants)
    if claim.kind == "level" and claim.metric == "tau_mean":
        res = tau_stability(
            rows,
            reference=float(claim.paper_value),
            margin=_band(claim, settings),
            confidence=conf,
            variants=variants,
            factors=(),
        )
        return Intervals(
            res.estimate,
            res.confidence_interval,
            res.equivalence_interval,
            res.n_seeds,
            conf,
            no_test_reason(res.per_seed) or res.message,
        )
    wide = open_fraction_analysis(rows, variants=variants, confidence=conf)
    narrow = open_fraction_analysis(rows, variants=variants, confidence=1.0 - 2.0 * (1.0 - conf))
    if claim.kind == "tail":
        return Intervals(
            wide.difference, wide.difference_interval, narrow.difference_interval, wide.n_seeds, conf, wide.message
        )
    return Intervals(
        wide.estimate,
        wide.confidence_interval,
        narrow.confidence_interval,
        wide.n_seeds,
        conf,
        wide.message or ("" if wide.confidence_interval is not None else "no test possible"),
    )


def _band(claim: Claim, settings: AnalysisSettings) -> float:
    """Tau's band is the study's (``analysis.tau.margin``); other levels keep the claim's."""
    if claim.metric == "tau_mean":
        return settings.tau_margin
    return float(claim.band if claim.band is not None else settings.tau_margin)


def _null(claim: Claim, rows: pl.DataFrame) -> float:
    """Where the level starts: a number, or the mean of a column (tau's initial value, 0 by default)."""
    if isinstance(claim.start, str):
        value = _mean_of(rows, claim.start)
        return 0.0 if value is None else value
    return float(claim.start or 0.0)


def _level_row(claim: Claim, measure: Measure, rows: pl.DataFrame, study: StudyResults, claims: ClaimSet) -> dict:
    iv = _level_intervals(claim, measure, rows, study.settings)
    if claim.kind == "tail":
        margin = float(claim.band if claim.band is not None else 0.03)
        return _numbers(iv, classify_effect(iv, sign=claim.sign, paper_value=None, margin=margin), margin)
    band = _band(claim, study.settings)
    verdict = classify_level(iv, paper_value=float(claim.paper_value), band=band, null=_null(claim, rows))
    return _numbers(iv, verdict, band)


def _exact_row(claim: Claim, measure: Measure, rows: pl.DataFrame, study: StudyResults, cell: Mapping) -> dict:
    if claim.kind == "parameters":
        extra = _mean_of(rows, "params", measure.treatment) - _mean_of(rows, "params", measure.control)
        value = extra / _mean_of(rows, "params", measure.base or measure.control) if claim.sign == "<" else extra
        what = "parameter counts of the models"
    else:
        value, what = _cluster_count(measure, study, cell)
    verdict = classify_exact(value, sign=claim.sign, paper_value=float(claim.paper_value), what=what)
    iv = Intervals(float(value), None, None, _n_seeds(rows))
    return {**_numbers(iv, verdict, None), "interval": verdict.rests_on}


def _cluster_count(measure: Measure, study: StudyResults, cell: Mapping) -> tuple[float, str]:
    sigmas = study.sigmas.filter(pl.col("variant").is_in(list(measure.variants)))
    for column, value in cell.items():
        if column in sigmas.columns:
            sigmas = sigmas.filter(pl.col(column).cast(pl.String) == str(value))
    res = mope_scales(sigmas, rng=study.settings.seed)
    return float(res.k), f"clusters of log sigma over {res.n} learned widths ({res.criterion.upper()})"


def _n_seeds(rows: pl.DataFrame) -> int:
    return rows.get_column("seed").n_unique() if "seed" in rows.columns else 0


def _groups(claim: Claim, rows: pl.DataFrame) -> list[tuple[str | None, pl.DataFrame]]:
    """A level read per initial value of tau when the cell holds several; else the whole cell."""
    if claim.kind != "level" or "tau_init" not in rows.columns or rows.get_column("tau_init").n_unique() < 2:
        return [(None, rows)]
    parts = rows.partition_by("tau_init", as_dict=True, maintain_order=True)
    return [
        (f"tau_init={key[0]:g}" if key[0] is not None else None, part)
        for key, part in sorted(parts.items(), key=lambda kv: (kv[0][0] is None, kv[0][0] or 0.0))
    ]


def measure_cell(
    claim: Claim, measure: Measure, study: StudyResults, cell: Mapping[str, Any], rows: pl.DataFrame, claims: ClaimSet
) -> list[dict[str, Any]]:
    """The rows of one claim's reading in one cell of a study (one per tau_init group for a
    level). A cell the analysis refuses (no finished gated run, no learned widths there...)
    gives an ``inconclusive`` row saying why, not a failed scorecard."""
    base = _cell_fields(claim, measure, study, cell, rows)
    out = []
    for group, part in _groups(claim, rows):
        try:
            if claim.kind in ("contrast", "interaction"):
                numbers = _contrast_row(claim, measure, part, study, claims)
            elif claim.kind in ("level", "tail"):
                numbers = _level_row(claim, measure, part, study, claims)
            else:
                numbers = _exact_row(claim, measure, part, study, cell)
        except InputError as exc:
            refused = ClaimVerdict("inconclusive", f"inconclusive: no test possible ({exc})", "no interval")
            numbers = _numbers(Intervals(math.nan, None, None, _n_seeds(part)), refused, None)
        out.append({**base, **numbers, "group": group})
    return out


# ----------------------------------------------------------------------------- trends
def _trend_rows(claim: Claim, measure: Measure, study: StudyResults, cell_rows: list[dict], claims: ClaimSet):
    """A trend row per factor along which the claim was read at >= 2 values in this study."""
    if claim.kind not in ("contrast", "interaction"):
        return []
    df = (
        study.frame.filter(pl.col("dataset").is_in(list(claim.datasets)))
        if "dataset" in study.frame.columns
        else (study.frame)
    )
    out = []
    for factor in ("params", "context_length"):
        xs = {r[factor] for r in cell_rows if r.get(factor) is not None}
        if len(xs) < 2:
            continue
        out.append(_trend_row(claim, measure, study, df, factor, cell_rows, claims))
    return out


def _trend_row(claim, measure, study, df, factor, cell_rows, claims) -> dict[str, Any]:
    settings = study.settings
    keys = dict(metric=claim.metric, confidence=settings.confidence, against=factor)
    if claim.kind == "interaction":
        keys.update(base=measure.base, a=measure.a, b=measure.b, ab=measure.ab)
    else:
        keys.update(treatment=measure.treatment, control=measure.control)
    margin = _margin(claim, settings, claims)
    levels = 0
    try:
        res = effect_trend(df.filter(pl.col("variant").is_in(list(measure.names()))), **keys)
        per_doubling = np.asarray(res.per_seed, dtype=float) * math.log(2.0)
        ci = (
            None
            if res.confidence_interval is None
            else ConfidenceInterval(
                res.confidence_interval.low * math.log(2.0), res.confidence_interval.high * math.log(2.0)
            )
        )
        iv = Intervals(
            res.estimate * math.log(2.0),
            ci,
            _equivalence(per_doubling, settings.confidence),
            res.n_seeds,
            settings.confidence,
            no_test_reason(res.per_seed) or res.message,
        )
        levels = len(res.x_values)
    except InputError as exc:
        iv = Intervals(math.nan, None, None, 0, settings.confidence, str(exc))
    verdict = classify_trend(iv, sign=claim.sign, margin=margin, factor=factor, levels=levels)
    return {
        **_claim_fields(claim, measure, study.name),
        "kind": "trend",
        "factor": factor,
        "parent_run_id": study.parent_run_id,
        **_numbers(iv, verdict, margin),
        "where": where_it_holds(cell_rows, factor),
    }


def where_it_holds(cell_rows: Sequence[Mapping[str, Any]], factor: str) -> str:
    """Where a claim holds along ``factor``, in words: "replicated at 3 of 4 sizes; smaller
    at the largest". Along ``params`` a size is its preset (``size``), ordered by parameter
    count: the same preset on two corpora has two counts (the vocabulary's embedding) and is
    still one size. A value whose cells (other corpora, other values of the other factor)
    disagree counts as "mixed"."""
    noun = "sizes" if factor == "params" else "context lengths"
    by_x: dict[Any, set[str]] = {}
    order: dict[Any, float] = {}  # x -> where it sorts (a size: its smallest parameter count)
    for r in cell_rows:
        if r.get(factor) is None:
            continue
        x = (r.get("size") or r[factor]) if factor == "params" else r[factor]
        by_x.setdefault(x, set()).add(str(r["verdict_kind"]))
        order[x] = min(order.get(x, math.inf), float(r[factor]))
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
def _not_measured(claim: Claim, measure: Measure) -> dict[str, Any]:
    needed = ", ".join(measure.names())
    corpora = ", ".join(claim.datasets)
    why = f"no study read holds {needed} on {corpora}"
    if claim.kind == "clusters":
        why += " with their learned MOPE widths (read from MLflow only)"
    return {
        **_claim_fields(claim, measure, measure.study),
        "kind": "not measured",
        "verdict_kind": "not measured",
        "verdict": f"not measured: {why}; studies/{measure.study}.yaml measures it",
        "interval": "none",
    }


def claim_rows(claim: Claim, studies: Sequence[StudyResults], claims: ClaimSet) -> list[dict[str, Any]]:
    """Every row of one claim: its cells and trends in every study read, or ``not measured``."""
    rows: list[dict[str, Any]] = []
    for measure in claim.measures:
        found = []
        for study in studies:
            if claim.kind == "clusters" and study.sigmas is None:
                continue
            cells = [
                measure_cell(claim, measure, study, cell, part, claims)
                for cell, part in _cells(study.frame)
                if _can_measure(claim, measure, cell, part)
            ]
            cell_rows = [r for group in cells for r in group]
            found += cell_rows + _trend_rows(claim, measure, study, cell_rows, claims)
        rows += found or [_not_measured(claim, measure)]
    return rows


def scorecard_table(studies: Iterable[StudyResults], claims: ClaimSet | None = None) -> pl.DataFrame:
    """The scorecard (:data:`SCORECARD_SCHEMA`): one row per claim, reading, study and cell,
    a trend row per claim and factor where it varies, one ``not measured`` row per reading
    no study read can measure."""
    claims = claims or load_claims()
    prepared = [
        StudyResults(s.name, _with_derived(s.frame), s.settings, s.source, s.parent_run_id, s.sigmas) for s in studies
    ]
    rows = [row for claim in claims for row in claim_rows(claim, prepared, claims)]
    return pl.DataFrame([{c: r.get(c) for c in SCORECARD_COLUMNS} for r in rows], schema=SCORECARD_SCHEMA)


def cell_of(row: Mapping[str, Any]) -> str:
    """``tinyshakespeare/nano/T=128`` for a scorecard row (``trend`` rows: the factor)."""
    if row.get("kind") == "trend":
        return f"trend vs {'size' if row.get('factor') == 'params' else 'context'}"
    if row.get("kind") == "not measured":
        return "—"
    label = cell_label(
        ("dataset", "size", "context_length"), [row.get("dataset"), row.get("size"), row.get("context_length")]
    )
    return f"{label} ({row['group']})" if row.get("group") else label


__all__ = [
    "SCORECARD_COLUMNS",
    "SCORECARD_SCHEMA",
    "StudyResults",
    "cell_of",
    "claim_rows",
    "measure_cell",
    "scorecard_table",
    "where_it_holds",
]
