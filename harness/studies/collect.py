"""Collecting a study's outcomes once Tune has run: the sequential design's decisions read back
(the plan narrowed to the trials its batches scheduled), Tune's results as the results table
(``results.parquet``), every evaluation of every trial (``curves.parquet``), the per-window
losses (``window_losses.parquet``) and the MOPE scales of the finished trials
(:class:`~harness.studies.plan.CollectedOutcomes`).
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl

from harness.results_schema import CURVES_FILE
from harness.studies.plan import CollectedOutcomes, StudyLayout, StudyPlan
from harness.studies.spec.grid import Trial
from harness.studies.storage import parquet_bytes, write_bytes
from harness.studies.tune.curves_table import study_curves
from harness.studies.tune.results_table import results_table, trial_status
from harness.studies.tune.sequential import DecisionLog, summary_from_log, trials_scheduled


def sequential_outcome(plan: StudyPlan, layout: StudyLayout) -> tuple[StudyPlan, Any]:
    """After Tune: a sequential study's plan narrowed to the trials its batches scheduled
    (its results table holds those), and the summary of its decisions for the report and
    the record; a fixed grid is returned as it is, with no summary."""
    design = plan.sequential
    if design is None:
        return plan, None
    decisions = DecisionLog(layout.study_dir).decisions()  # read once: the trials and the summary agree
    narrowed = dataclasses.replace(plan, trials=trials_scheduled(design, decisions, plan.trials))
    return narrowed, summary_from_log(design, decisions)


def collect_outcomes(plan: StudyPlan, layout: StudyLayout, grid: Any) -> CollectedOutcomes:
    """Collect the outcomes: Tune's results -> the results table (``results.parquet``), every
    evaluation of every trial (``curves.parquet``, from each trial's reports on storage:
    :func:`~harness.studies.tune.curves_table.study_curves`) and the per-window losses of the
    finished trials (``window_losses.parquet``), all in the study's folder."""
    outcomes: dict[str, tuple[dict[str, Any] | None, Any]] = {}
    checkpoints: dict[str, Any] = {}
    for result in grid:
        if not result.config:  # never started (the study was stopped first): its row says incomplete
            continue
        tid = str(result.config["trial"])
        outcomes[tid] = (dict(result.metrics or {}), result.error)
        if trial_status(result.metrics, result.error) == "finished":
            checkpoints[tid] = result.checkpoint
    table = results_table(plan.spec.name, plan.trials, outcomes)
    counts = {s: int((table.get_column("status") == s).sum()) for s in ("finished", "diverged", "failed", "incomplete")}
    status = "interrupted" if counts["incomplete"] else "finished"

    write_bytes(layout.fs, f"{layout.study_root}/results.parquet", parquet_bytes(table))
    curves = study_curves(layout.fs, layout.study_root, table, plan.trials)
    write_bytes(layout.fs, f"{layout.study_root}/{CURVES_FILE}", parquet_bytes(curves))
    windows = _window_losses(plan.trials, checkpoints)
    if windows is not None:
        write_bytes(layout.fs, f"{layout.study_root}/window_losses.parquet", parquet_bytes(windows))
    return CollectedOutcomes(
        table=table,
        counts=counts,
        status=status,
        windows=windows,
        sigmas=_mope_sigmas(plan.trials, outcomes),
        curves=curves,
    )


def _window_losses(trials: Sequence[Trial], checkpoints: dict[str, Any]) -> Any:
    """Per-window losses of every finished trial with its factors (for the multi-bootstrap)."""
    frames = []
    with tempfile.TemporaryDirectory() as tmp:
        for trial in trials:
            ckpt = checkpoints.get(trial.trial_id)
            if ckpt is None:
                continue
            try:
                local = Path(ckpt.to_directory(str(Path(tmp) / trial.trial_id)))
            except Exception:  # noqa: BLE001
                continue
            path = local / "window_losses.parquet"
            if not path.is_file():
                continue
            c = trial.config
            frames.append(
                pl.read_parquet(path).with_columns(
                    pl.lit(trial.trial_id).alias("trial_id"),
                    pl.lit(c.variant).alias("variant"),
                    pl.lit(c.seed, dtype=pl.Int64).alias("seed"),
                    pl.lit(c.dataset).alias("dataset"),
                    pl.lit(c.size).alias("size"),
                    pl.lit(c.context_length, dtype=pl.Int64).alias("context_length"),
                    pl.lit(c.tau_init, dtype=pl.Float64).alias("tau_init"),
                )
            )
    return pl.concat(frames, how="diagonal_relaxed") if frames else None


def _mope_sigmas(trials: Sequence[Trial], outcomes: dict[str, tuple[dict[str, Any] | None, Any]]) -> Any:
    rows = []
    for trial in trials:
        metrics = (outcomes.get(trial.trial_id) or (None, None))[0] or {}
        if metrics.get("status") != "finished":
            continue
        for key, value in metrics.items():
            if key.startswith("mope/sigma") and isinstance(value, (int, float)):
                c = trial.config
                rows.append(
                    {
                        "variant": c.variant,
                        "seed": c.seed,
                        "dataset": c.dataset,
                        "size": c.size,
                        "context_length": c.context_length,
                        "key": key,
                        "sigma": float(value),
                    }
                )
    return pl.DataFrame(rows) if rows else None
