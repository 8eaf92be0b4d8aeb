"""The scorecard: every claim matched to every cell of the studies read that can measure it.

A cell is (dataset, size, context length) of one study. A claim's measure can be read in a
cell when the cell holds every variant it names and the cell's corpus is one of the claim's.
Each such (claim, reading, study, cell) gives one :class:`~harness.scorecard.rows.ScorecardRow`,
read by the reader of the claim's kind (:data:`~harness.scorecard.readers.READERS`: the
report's own statistics, the seed as the unit) and judged by
:mod:`harness.scorecard.verdicts`. A claim read at two or more sizes or context lengths of one
study also gets a ``trend`` row per factor: the slope of the per-seed effect per doubling of x
(:func:`harness.analysis.effect_trend`), with words saying where the claim holds. A claim
*about* a trend (``trend:`` in claims.yaml) is read only as that trend, from two or more
levels of its factor; a study with one level does not measure it. A claim no study read can
measure gets one ``not measured`` row naming the study that would. Finally every claim's
rows are adjusted together (:func:`~harness.scorecard.family.adjust_within_claims`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import polars as pl

from harness.analysis.contrasts import sign_flip_pvalue
from harness.analysis.results import CELL_COLUMNS, at_reference_tau_init, cell_label
from harness.analysis.results_types import NOT_TESTABLE, AnalysisSettings, no_test_reason
from harness.analysis.trends import effect_trend
from harness.errors import InputError
from harness.models.variants import DEFAULT_TAU_INIT
from harness.scorecard.claims import Claim, ClaimSet, Measure, load_claims
from harness.scorecard.family import adjust_within_claims, measurement_key
from harness.scorecard.readers import READERS, CellRead, ReadContext, equivalence_interval, seed_sd
from harness.scorecard.rows import SCORECARD_COLUMNS, SCORECARD_SCHEMA, ScorecardRow, rows_frame
from harness.scorecard.verdicts import ClaimVerdict, Intervals, classify_trend


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


def _can_measure(claim: Claim, measure: Measure, cell: Mapping[str, Any], rows: pl.DataFrame) -> bool:
    """The cell is on one of the claim's corpora, holds every variant the measure names, and
    has a value of every column the measure reads for them."""
    if not claim.applies_to(cell.get("dataset")) or "variant" not in rows.columns:
        return False
    if not set(measure.names()) <= set(rows.get_column("variant").drop_nulls().to_list()):
        return False
    reader = READERS[claim.kind]
    # every variant a level or a count reads must have a value (a contrast's missing runs are
    # dropped seed blocks, which its verdict reports)
    each = measure.names() if reader.every_variant else (None,)
    for variant in each:
        mine = rows.filter(pl.col("variant").is_in([variant] if variant else list(measure.names())))
        columns = reader.columns(claim)
        if not all(c in mine.columns and mine.get_column(c).drop_nulls().len() > 0 for c in columns):
            return False
    return True


def _mean_of(rows: pl.DataFrame, column: str, variant: str | None = None) -> float | None:
    if column not in rows.columns:
        return None
    if variant is not None and "variant" in rows.columns:
        rows = rows.filter(pl.col("variant") == variant)
    values = rows.get_column(column).cast(pl.Float64).drop_nulls()
    return float(values.mean()) if values.len() else None


def _claim_fields(claim: Claim, measure: Measure, study: str | None) -> dict[str, Any]:
    return {
        "claim": claim.id,
        "paper": claim.paper,
        "reading": measure.reading,
        "study": study,
        "statement": claim.claim,
        "paper_value": claim.paper_value,
        "sign": claim.sign,
        "metric": READERS[claim.kind].metric(claim),
    }


def _cell_fields(claim: Claim, measure: Measure, study: StudyResults, cell: Mapping[str, Any], rows: pl.DataFrame):
    reference = measure.control or measure.base or (measure.variants[0] if measure.variants else None)
    params, steps = _mean_of(rows, "params", reference), _mean_of(rows, "steps")
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


def _finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(float(x)) else float(x)


def _numbers(iv: Intervals, verdict: ClaimVerdict, read: CellRead | None = None) -> dict[str, Any]:
    """The row's numbers from its intervals and verdict."""
    ci, eq, pi = iv.ci, iv.equivalence, iv.prediction
    return {
        "n_seeds": iv.n_seeds,
        "estimate": _finite(iv.estimate),
        "ci_low": None if ci is None else float(ci.low),
        "ci_high": None if ci is None else float(ci.high),
        "equivalence_low": None if eq is None else float(eq.low),
        "equivalence_high": None if eq is None else float(eq.high),
        "prediction_low": None if pi is None else float(pi.low),
        "prediction_high": None if pi is None else float(pi.high),
        "pvalue": _finite(iv.pvalue),
        "interval": verdict.rests_on,
        "verdict": verdict.words,
        "verdict_kind": verdict.kind,
        "settled": verdict.settled,
        "signed": verdict.signed,
        **(
            {}
            if read is None
            else {"margin": read.margin, "band": read.band, "start": read.start}
            | ({"paper_value": read.paper_value} if read.paper_value is not None else {})
        ),
    }


def _groups(claim: Claim, rows: pl.DataFrame) -> list[tuple[str | None, pl.DataFrame]]:
    """A level read per initial value of tau when the cell holds several; else the whole cell."""
    if not READERS[claim.kind].by_tau_init or "tau_init" not in rows.columns:
        return [(None, rows)]
    rows = rows.with_columns(pl.col("tau_init").cast(pl.Float64).fill_null(DEFAULT_TAU_INIT))
    if rows.get_column("tau_init").n_unique() < 2:
        return [(None, rows)]
    parts = rows.partition_by("tau_init", as_dict=True, maintain_order=True)
    return [(f"tau_init={key[0]:g}", part) for key, part in sorted(parts.items(), key=lambda kv: kv[0][0])]


def measure_cell(
    claim: Claim, measure: Measure, study: StudyResults, cell: Mapping[str, Any], rows: pl.DataFrame, claims: ClaimSet
) -> list[ScorecardRow]:
    """The rows of one claim's reading in one cell of a study (one per tau_init group for a
    level). A cell the analysis refuses (no finished gated run, no learned widths there...)
    gives an ``inconclusive`` row saying why, not a failed scorecard."""
    base = _cell_fields(claim, measure, study, cell, rows)
    ctx = ReadContext(study.settings, claims, cell, study.sigmas)
    out = []
    for group, part in _groups(claim, rows):
        try:
            read = READERS[claim.kind].read(claim, measure, part, ctx)
            numbers = _numbers(read.intervals, read.verdict, read)
        except InputError as exc:
            refused = ClaimVerdict(
                "inconclusive", f"inconclusive: no test possible ({exc})", "no interval", settled=NOT_TESTABLE
            )
            n = part.get_column("seed").n_unique() if "seed" in part.columns else 0
            numbers = _numbers(Intervals(math.nan, None, None, n), refused)
        row = ScorecardRow(**{**base, **numbers, "group": group})
        out.append(_keyed(row, measure))
    return out


def _keyed(row: ScorecardRow, measure: Measure) -> ScorecardRow:
    return replace(row, measurement=measurement_key(row, measure.names()))


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
        permutation_pvalue=sign_flip_pvalue(res.per_seed, rng=s.seed) if res.shape is not None else None,
    )
    return iv, len(res.x_values)


def _trend_row(
    claim: Claim, measure: Measure, study: StudyResults, factor: str, cell_rows: Sequence[ScorecardRow], claims
) -> ScorecardRow:
    iv, levels = _trend_intervals(claim, measure, study, factor)
    margin = claims.margin_for(claim, study.settings.smallest_effect)
    verdict = classify_trend(iv, sign=claim.sign, margin=margin, factor=factor, levels=levels)
    row = ScorecardRow(
        **_claim_fields(claim, measure, study.name),
        kind="trend",
        factor=factor,
        levels=levels or None,
        parent_run_id=study.parent_run_id,
        **_numbers(iv, verdict),
        margin=margin,
        where=where_it_holds(cell_rows, factor) if cell_rows else None,
    )
    return _keyed(row, measure)


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
        **_claim_fields(claim, measure, measure.study),
        kind="not measured",
        verdict_kind="not measured",
        verdict=f"not measured: {what}{f' ({why})' if why else ''}; {studies} {verb} it",
        interval="none",
        settled=NOT_TESTABLE,
    )


def _study_cells(claim: Claim, measure: Measure, study: StudyResults) -> list[tuple[dict, pl.DataFrame]]:
    if READERS[claim.kind].needs_sigmas and study.sigmas is None:
        return []
    return [(cell, part) for cell, part in _cells(study.frame) if _can_measure(claim, measure, cell, part)]


def _trend_claim_rows(claim: Claim, measure: Measure, studies, claims) -> list[ScorecardRow]:
    """A claim about a trend: read only across two or more levels of its factor in one study;
    else ``not measured``, saying which study held one level only."""
    found, single = [], []
    for study in studies:
        cells = [cell for cell, _ in _study_cells(claim, measure, study)]
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
        for study in studies:
            cells = _study_cells(claim, measure, study)
            cell_rows = [r for cell, part in cells for r in measure_cell(claim, measure, study, cell, part, claims)]
            found += cell_rows + _trend_rows(claim, measure, study, [c for c, _ in cells], cell_rows, claims)
        rows += found or [_not_measured(claim, measure)]
    return rows


def scorecard_rows(studies: Iterable[StudyResults], claims: ClaimSet | None = None) -> list[ScorecardRow]:
    """Every row of the scorecard, each claim's rows adjusted together (Holm)."""
    claims = claims or load_claims()
    prepared = [
        StudyResults(s.name, _with_derived(s.frame), s.settings, s.source, s.parent_run_id, s.sigmas) for s in studies
    ]
    alpha = min((1.0 - s.settings.confidence for s in prepared), default=0.05)
    return adjust_within_claims([row for claim in claims for row in claim_rows(claim, prepared, claims)], alpha)


def scorecard_table(studies: Iterable[StudyResults], claims: ClaimSet | None = None) -> pl.DataFrame:
    """The scorecard (:data:`~harness.scorecard.rows.SCORECARD_SCHEMA`): one row per claim,
    reading, study and cell, a trend row per claim and factor where it varies, one ``not
    measured`` row per reading no study read can measure."""
    return rows_frame(scorecard_rows(studies, claims))


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
    "scorecard_rows",
    "scorecard_table",
    "where_it_holds",
]
