"""The cells of a study and one claim's reading in one cell: the scorecard's unit of measurement.

A cell is (dataset, size, context length) of one study (:class:`StudyResults`). A claim's
measure can be read in a cell when the cell holds every variant it names and the cell's corpus
is one of the claim's (:func:`can_measure`); :func:`measure_cell` reads it there with the
reader of the claim's kind (:data:`~harness.scorecard.readers.READERS`: the report's own
statistics, the seed as the unit) and gives its rows. The final numbers (``cell`` rows) and
every evaluation step (``training`` rows, :mod:`harness.scorecard.training`) are read by this
same function, on the results table and on each step's table of the curves.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import polars as pl

from harness.analysis.results import CELL_COLUMNS
from harness.analysis.results_types import NOT_TESTABLE, AnalysisSettings
from harness.errors import InputError
from harness.models.sizes import ModelSize
from harness.models.variants import DEFAULT_TAU_INIT
from harness.scorecard.claims import Claim, ClaimSet, Measure
from harness.scorecard.family import measurement_key
from harness.scorecard.model_shape import with_curves_shape, with_model_shape
from harness.scorecard.readers import READERS, CellRead, ReadContext
from harness.scorecard.rows import ScorecardRow
from harness.scorecard.verdicts import ClaimVerdict, Intervals


@dataclass(frozen=True)
class StudyResults:
    """One finished study as the scorecard reads it: its results table, its analysis
    settings (confidence, smallest effect, tau's band), where it came from, its MLflow
    parent run (when read from MLflow), the learned MOPE widths (from MLflow only), its
    curves table (every evaluation of every trial: ``curves.parquet``, or rebuilt from
    MLflow; None without one) and its training recipe but for the run length (None: not
    recorded; studies of one recipe are pooled for a prediction, :mod:`harness.scorecard.pooling`).

    Its tables carry the shape of its models (:data:`~harness.results_schema.SHAPE_COLUMNS`),
    resolved once here for a table written before they were kept (``shapes``: the custom shapes
    its spec names; :mod:`harness.scorecard.model_shape`)."""

    name: str
    frame: pl.DataFrame
    settings: AnalysisSettings = AnalysisSettings()
    source: str = ""
    parent_run_id: str | None = None
    sigmas: pl.DataFrame | None = None
    curves: pl.DataFrame | None = None
    recipe: Mapping[str, Any] | None = None
    shapes: tuple[ModelSize, ...] = ()
    skew_sigma: float | None = None  # the skew its card's seeds allow (set by the card: scorecard_rows)

    def __post_init__(self) -> None:
        # Frozen: the resolved tables replace the given ones once, as the study is loaded.
        frame = with_model_shape(self.frame, self.shapes)
        object.__setattr__(self, "frame", frame)
        if self.curves is not None:
            object.__setattr__(self, "curves", with_curves_shape(self.curves, frame, self.shapes))


# ----------------------------------------------------------------------------- cells
#: The variant a relative generalisation gap is read against.
GAP_REFERENCE = "baseline"
#: The smallest baseline gap (nats) a relative gap is read against: below it the ratio is noise over
#: noise (the published baselines' gaps run from 0.007 to 0.18; the papers' was 0.331).
GAP_FLOOR = 0.05
#: The columns :func:`with_derived` adds, and the column each is derived from.
DERIVED_FROM: dict[str, str] = {"log_tokens_per_s": "tokens_per_s", "gen_gap_rel": "gen_gap"}


def with_derived(df: pl.DataFrame) -> pl.DataFrame:
    """The table with ``log_tokens_per_s`` (a throughput contrast is a ratio) and ``gen_gap_rel``:
    each run's generalisation gap over the baseline's mean gap in the same cell (and step, in a
    curves table) across its seeds, so that a contrast of it reads a narrowing relative to the
    baseline's gap as the papers' 0.331 to 0.289 does. One divisor per cell, so a seed's own
    baseline gap near 0 never inflates it and every seed keeps its value; null in a cell whose
    baseline gap is below :data:`GAP_FLOOR` (no relative reading there) or absent."""
    if "tokens_per_s" in df.columns and "log_tokens_per_s" not in df.columns:
        tps = pl.col("tokens_per_s").cast(pl.Float64)
        df = df.with_columns(pl.when(tps > 0).then(tps.log()).otherwise(None).alias("log_tokens_per_s"))
    if {"gen_gap", "variant", "seed"} <= set(df.columns) and "gen_gap_rel" not in df.columns:
        keys = [c for c in (*CELL_COLUMNS, "step") if c in df.columns]
        base = df.filter(pl.col("variant") == GAP_REFERENCE)
        base = base.group_by(keys).agg(pl.col("gen_gap").cast(pl.Float64).mean().alias("__gap_ref"))
        base = base.filter(pl.col("__gap_ref") >= GAP_FLOOR)
        df = df.join(base, on=keys, how="left", nulls_equal=True).with_columns(
            (pl.col("gen_gap").cast(pl.Float64) / pl.col("__gap_ref")).alias("gen_gap_rel")
        )
        df = df.drop("__gap_ref")
    return df


def study_cells(df: pl.DataFrame) -> list[tuple[dict[str, Any], pl.DataFrame]]:
    """(cell values, its rows) for every cell of a study, in order."""
    cols = [c for c in CELL_COLUMNS if c in df.columns]
    if not cols:
        return [({}, df)]
    groups = df.partition_by(cols, as_dict=True, maintain_order=True)
    out = [(dict(zip(cols, key, strict=True)), part) for key, part in groups.items()]
    return sorted(out, key=lambda kv: tuple(_level_key(kv[0].get(c)) for c in cols))


def _level_key(value: Any) -> tuple[int, float, str]:
    """Where a cell's level sorts: numbers by value (T = 64 before T = 128), then names."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return (0, float(value), "")
    return (1, 0.0, str(value))


def can_measure(claim: Claim, measure: Measure, cell: Mapping[str, Any], rows: pl.DataFrame) -> bool:
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


def mean_of(rows: pl.DataFrame, column: str, variant: str | None = None) -> float | None:
    """The mean of ``column`` over ``rows`` (of ``variant`` only, when given); None without values."""
    if column not in rows.columns:
        return None
    if variant is not None and "variant" in rows.columns:
        rows = rows.filter(pl.col("variant") == variant)
    values = rows.get_column(column).cast(pl.Float64).drop_nulls()
    return float(values.mean()) if values.len() else None


def claim_fields(claim: Claim, measure: Measure, study: str | None) -> dict[str, Any]:
    """The fields of a row that say which claim, reading and study it is."""
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


def cell_fields(claim: Claim, measure: Measure, study: StudyResults, cell: Mapping[str, Any], rows: pl.DataFrame):
    """The fields of a cell row: the claim's, the cell, its reference parameter count, the
    steps trained and whether it is the paper's setting."""
    reference = measure.control or measure.base or (measure.variants[0] if measure.variants else None)
    params, steps = mean_of(rows, "params", reference), mean_of(rows, "steps")
    setting = claim.setting
    at_paper = (
        cell.get("dataset") == setting.dataset
        and cell.get("size") == setting.size
        and cell.get("context_length") == setting.context_length
        and steps is not None
        and int(round(steps)) == setting.steps
    )
    return {
        **claim_fields(claim, measure, study.name),
        "kind": "cell",
        "dataset": cell.get("dataset"),
        "size": None if cell.get("size") is None else str(cell.get("size")),
        "params": None if params is None else int(round(params)),
        "context_length": cell.get("context_length"),
        "steps": None if steps is None else int(round(steps)),
        "at_paper_setting": bool(at_paper),
        "parent_run_id": study.parent_run_id,
    }


def finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(float(x)) else float(x)


def numbers(iv: Intervals, verdict: ClaimVerdict, read: CellRead | None = None) -> dict[str, Any]:
    """The row's numbers from its intervals and verdict."""
    ci, eq, pi, rob = iv.ci, iv.equivalence, iv.prediction, iv.robust
    return {
        "n_seeds": iv.n_seeds,
        "estimate": finite(iv.estimate),
        "ci_low": None if ci is None else float(ci.low),
        "ci_high": None if ci is None else float(ci.high),
        "robust_low": None if rob is None else finite(rob.low),
        "robust_high": None if rob is None else finite(rob.high),
        "equivalence_low": None if eq is None else float(eq.low),
        "equivalence_high": None if eq is None else float(eq.high),
        "prediction_low": None if pi is None else float(pi.low),
        "prediction_high": None if pi is None else float(pi.high),
        "pvalue": finite(iv.pvalue),
        "pvalue_robust": None if iv.pvalue is None else finite(iv.robust_pvalue),
        "skew_sigma": iv.skew_sigma if iv.robust is not None else None,
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


def tau_groups(
    claim: Claim, rows: pl.DataFrame, measure: Measure | None = None
) -> list[tuple[str | None, pl.DataFrame]]:
    """A level read per initial value of tau when the measure's runs in the cell start at
    several; else the whole cell."""
    if not READERS[claim.kind].by_tau_init or "tau_init" not in rows.columns:
        return [(None, rows)]
    if measure is not None and "variant" in rows.columns:
        rows = rows.filter(pl.col("variant").is_in(list(measure.names())))
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
    base = cell_fields(claim, measure, study, cell, rows)
    ctx = ReadContext(study.settings, claims, cell, study.sigmas, study.skew_sigma)
    out = []
    for group, part in tau_groups(claim, rows, measure):
        try:
            read = READERS[claim.kind].read(claim, measure, part, ctx)
            values = numbers(read.intervals, read.verdict, read)
        except InputError as exc:
            refused = ClaimVerdict(
                "inconclusive", f"inconclusive: no test possible ({exc})", "no interval", settled=NOT_TESTABLE
            )
            n = part.get_column("seed").n_unique() if "seed" in part.columns else 0
            values = numbers(Intervals(math.nan, None, None, n), refused)
        row = ScorecardRow(**{**base, **values, "group": group})
        out.append(keyed(row, measure))
    return out


def keyed(row: ScorecardRow, measure: Measure) -> ScorecardRow:
    return replace(row, measurement=measurement_key(row, measure.names()))


def readable_cells(
    claim: Claim, measure: Measure, study: StudyResults, frame: pl.DataFrame | None = None
) -> list[tuple[dict[str, Any], pl.DataFrame]]:
    """The cells of ``frame`` (default: the study's results table) where the claim's measure
    can be read (none for a claim that needs learned MOPE widths the study lacks)."""
    if READERS[claim.kind].needs_sigmas and study.sigmas is None:
        return []
    frame = study.frame if frame is None else frame
    return [(cell, part) for cell, part in study_cells(frame) if can_measure(claim, measure, cell, part)]


__all__ = [
    "DERIVED_FROM",
    "GAP_REFERENCE",
    "StudyResults",
    "can_measure",
    "cell_fields",
    "claim_fields",
    "keyed",
    "measure_cell",
    "mean_of",
    "numbers",
    "readable_cells",
    "study_cells",
    "with_derived",
]
