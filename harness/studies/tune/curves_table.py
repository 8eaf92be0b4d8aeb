"""A study's curves table: one row per trial and evaluation
(:data:`~harness.results_schema.CURVE_SCHEMA`), from the reports Tune kept.

Every evaluation of a trial is a Tune report, and Tune appends each report to the trial's
``result.json`` in the study's storage, across retries, restarts and resumes, whatever
happens to the tracking server: that file is the source (:func:`study_curves`), read by
:func:`harness.studies.storage.trial_reports`. The runner writes the table as
``curves.parquet`` beside ``results.parquet``; ``harness report --from`` rebuilds it from a
study directory; :func:`harness.analysis.results.curves_frame` rebuilds the same table from
the MLflow record.

Which reports are rows: those with a ``step`` and a ``val/loss`` that are not the trial's
last report (:func:`~harness.studies.tune.trainable.is_final_report`). A trial restarted from
a checkpoint (or from scratch) reports some steps again: the first report of a step wins, as
in the MLflow record (:meth:`~harness.studies.record.child_runs.ChildRuns.metrics`).
A value is read as MLflow stores it (:func:`~harness.mlflow_client.metric_value`: +-inf as NaN).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow.fs

from harness.mlflow_client import metric_value
from harness.results_schema import CURVE_COLUMNS, CURVE_METRICS
from harness.studies.spec.grid import Trial
from harness.studies.storage import trial_dir, trial_reports
from harness.studies.tune.trainable import is_final_report

if TYPE_CHECKING:  # polars loads in curves_table: the device runner uses curve_rows without it
    import polars as pl

#: The metric every evaluation reports: a report with it at a step is an evaluation.
EVALUATION_MARKER = CURVE_METRICS["val_loss"]
#: The curves table's columns that repeat the trial's row of the results table.
_TRIAL_COLUMNS = tuple(c for c in CURVE_COLUMNS if c not in CURVE_METRICS and c not in ("step", "tokens"))


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return metric_value(value)


def evaluation_reports(reports: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The evaluations among a trial's reports (in the order Tune kept them), one per step
    (the first), by step."""
    by_step: dict[int, Mapping[str, Any]] = {}
    for report in reports:
        step = _number(report.get("step"))
        if step is None or is_final_report(report) or _number(report.get(EVALUATION_MARKER)) is None:
            continue
        by_step.setdefault(int(step), report)
    return [by_step[step] for step in sorted(by_step)]


def curve_rows(row: Mapping[str, Any], trial: Trial, reports: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One trial's rows of the curves table: its factors and status from its row of the results
    table (``row``), one row per evaluation in ``reports`` (all of its reports, in order);
    ``tokens`` = step x batch size x context length."""
    c = trial.config
    factors = {name: row[name] for name in _TRIAL_COLUMNS}
    out = []
    for report in evaluation_reports(reports):
        step = int(report["step"])
        metrics = {column: _number(report.get(key)) for column, key in CURVE_METRICS.items()}
        out.append({**factors, "step": step, "tokens": step * c.batch_size * c.context_length, **metrics})
    return out


def curves_table(
    results: pl.DataFrame, trials: Sequence[Trial], reports: Mapping[str, Sequence[Mapping[str, Any]]]
) -> pl.DataFrame:
    """The curves table (:data:`~harness.results_schema.CURVE_SCHEMA`) of the trials in
    ``results`` (the study's results table), from each trial's reports (``reports``: trial id
    -> its reports, in order), by trial id and step."""
    import polars as pl

    from harness.results_schema import CURVE_SCHEMA

    rows_of = {row["trial_id"]: row for row in results.iter_rows(named=True)}
    rows = [
        curve
        for trial in trials
        if trial.trial_id in rows_of
        for curve in curve_rows(rows_of[trial.trial_id], trial, reports.get(trial.trial_id, ()))
    ]
    return pl.DataFrame(rows, schema=CURVE_SCHEMA).sort("trial_id", "step")


def study_curves(
    fs: pyarrow.fs.FileSystem, study_root: str, results: pl.DataFrame, trials: Sequence[Trial]
) -> pl.DataFrame:
    """The curves table of the study in ``study_root`` of ``fs`` (its results table
    ``results``, its grid ``trials``), from each trial's ``result.json``."""
    reports = {t.trial_id: trial_reports(fs, trial_dir(study_root, t.trial_id)) for t in trials}
    return curves_table(results, trials, reports)
