"""The device runner's tables, written with pyarrow alone (a GPU lease's image has no polars):
the study's results, curves and window losses in the study schema (:mod:`harness.results_schema`),
from the trials' outcomes (:class:`harness.studies.device.runner.TrialOutcome`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from harness.results_schema import CURVE_TYPES, CURVES_FILE, RESULT_TYPES, arrow_schema
from harness.studies.tune.curves_table import curve_rows
from harness.studies.tune.results_table import result_row
from harness.training.run import window_loss_columns

RESULTS_FILE = "results.parquet"
WINDOWS_FILE = "window_losses.parquet"
#: The factors each row of the window-loss table carries (what the multi-bootstrap pairs by).
_FACTORS = ("trial_id", "variant", "seed", "dataset", "size", "context_length", "tau_init")
WINDOW_FACTORS: dict[str, str] = {name: RESULT_TYPES[name] for name in _FACTORS}
WINDOW_TYPES: dict[str, str] = {**WINDOW_FACTORS, "split": "string", "window": "int64", "loss": "float64"}


def study_rows(study: str, outcomes: Iterable[Any]) -> tuple[list[dict], list[dict], list[dict]]:
    """The rows of the results, curves and window-loss tables of ``outcomes`` (in order): a
    trial's row from its final summary (or, for a trial cut short, its last evaluation), its
    curve from its evaluations, its window losses from its final evaluation."""
    results, curves, windows = [], [], []
    for outcome in outcomes:
        trial = outcome.trial
        metrics = outcome.final or (outcome.reports[-1] if outcome.reports else None)
        row = result_row(study, trial, metrics, outcome.error)
        results.append(row)
        curves.extend(curve_rows(row, trial, outcome.reports))
        columns = window_loss_columns(outcome.window_losses) if outcome.final is not None else None
        if columns is not None:
            factors = {name: row[name] for name in WINDOW_FACTORS}
            windows.extend(
                {**factors, "split": s, "window": int(w), "loss": float(x)}
                for s, w, x in zip(columns["split"], columns["window"], columns["loss"], strict=True)
            )
    return results, curves, windows


def write_study_tables(out: Path, study: str, outcomes: Iterable[Any]) -> list[Path]:
    """``results.parquet``, ``curves.parquet`` and ``window_losses.parquet`` of ``outcomes`` in
    ``out``, each written beside its place and renamed into it; returns their paths."""
    results, curves, windows = study_rows(study, outcomes)
    tables = {
        RESULTS_FILE: (results, RESULT_TYPES),
        CURVES_FILE: (curves, CURVE_TYPES),
        WINDOWS_FILE: (windows, WINDOW_TYPES),
    }
    return [write_rows(out / name, rows, types) for name, (rows, types) in tables.items()]


def write_rows(path: Path, rows: list[Mapping[str, Any]], types: Mapping[str, str]) -> Path:
    """``rows`` as a parquet file of the columns and types ``types`` (names of
    :data:`~harness.results_schema.RESULT_TYPES`), replaced atomically."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist([{c: row.get(c) for c in types} for row in rows], schema=arrow_schema(types))
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(table, tmp)
    tmp.replace(path)
    return path
