"""The curves table: a study writes ``curves.parquet`` with every evaluation of every trial
(from the reports Tune kept), and the MLflow record rebuilds the same table
(:func:`harness.analysis.curves_frame`), a resumed study's included."""

from __future__ import annotations

import math
import os
import signal
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow.fs
import pytest
import yaml
from harness_support import TINY
from polars.testing import assert_frame_equal
from ray.tune import Callback
from typer.testing import CliRunner

from harness.analysis import curves_frame
from harness.bench.chaos.trial_faults import TrialFaults
from harness.cli import app
from harness.results_schema import CURVE_COLUMNS, CURVE_METRICS, CURVE_SCHEMA, CURVES_FILE
from harness.studies.runner import run_study
from harness.studies.spec.grid import expand_grid
from harness.studies.spec.study_spec import parse_spec
from harness.studies.storage import trial_reports
from harness.studies.tune.curves_table import curves_table
from harness.studies.tune.results_table import results_table


def _evaluation(step: int, loss: float, **gate: float) -> dict[str, Any]:
    """An evaluation report as a trial sends it (Tune adds its bookkeeping)."""
    return {"step": step, "val/loss": loss, "train/loss": loss - 0.25, "gen_gap": 0.25, "training_iteration": 1, **gate}


def test_the_rows_are_the_evaluations_first_report_of_a_step_wins(tiny: dict) -> None:
    """Oracle: the rows written out by hand from the trials' reports. A step reported again (a
    restart from scratch) keeps its first report; the last report (a diverged trial's, off the
    evaluation steps) and a report without a validation loss are no rows; +inf is stored as
    MLflow stores it (NaN); an ungated variant has no gate readings; status is the trial's."""
    ega, baseline = sorted(expand_grid(parse_spec(yaml.safe_dump(tiny))), key=lambda t: t.config.variant != "ega")
    gate = {"gate/tau_mean": 0.125, "gate/open_fraction": 0.5, "gate/pc1_cosine": 0.75}
    reports = {
        ega.trial_id: [
            _evaluation(5, 3.5, **gate),
            _evaluation(10, math.inf, **gate),
            _evaluation(5, 9.0, **gate),
            {"step": 7, "train/batch_loss": 3.0},
            {**_evaluation(12, 3.25, **gate), "status": "diverged", "steps": 12, "num_parameters": 1234.0},
        ],
        baseline.trial_id: [_evaluation(5, 3.75)],
    }
    outcomes = {ega.trial_id: (reports[ega.trial_id][-1], None), baseline.trial_id: (None, "killed")}
    results = results_table("tiny", [ega, baseline], outcomes)
    table = curves_table(results, [ega, baseline], reports)
    assert table.columns == list(CURVE_COLUMNS) and dict(table.schema) == CURVE_SCHEMA

    per_step = tiny["train"]["batch_size"] * tiny["context_lengths"][0]
    expected = pl.DataFrame(
        {
            "trial_id": [baseline.trial_id, ega.trial_id, ega.trial_id],
            "params": [None, 1234, 1234],
            "step": [5, 5, 10],
            "tokens": [5 * per_step, 5 * per_step, 10 * per_step],
            "val_loss": [3.75, 3.5, math.nan],
            "train_loss": [3.5, 3.25, math.nan],
            "tau_mean": [None, 0.125, 0.125],
            "open_fraction": [None, 0.5, 0.5],
            "pc1_cosine": [None, 0.75, 0.75],
            "status": ["failed", "diverged", "diverged"],
        },
        schema={
            c: CURVE_SCHEMA[c]
            for c in (
                "trial_id",
                "params",
                "step",
                "tokens",
                "val_loss",
                "train_loss",
                "tau_mean",
                "open_fraction",
                "pc1_cosine",
                "status",
            )
        },
    )
    assert_frame_equal(table.select(expected.columns), expected)
    assert table.get_column("variant").to_list() == ["baseline", "ega", "ega"]


def _curves_file(outcome) -> pl.DataFrame:
    return pl.read_parquet(Path(outcome.study_dir) / CURVES_FILE)


def _assert_same_table(a: pl.DataFrame, b: pl.DataFrame) -> None:
    assert_frame_equal(a.sort("trial_id", "step"), b.sort("trial_id", "step"))


@pytest.mark.slow  # a real study, then its rebuild from MLflow (~25 s on 2 cores)
def test_a_study_writes_every_evaluation_and_mlflow_rebuilds_the_same_table(
    write_spec, study_env: dict, tmp_path: Path
) -> None:
    """2 variants x 2 seeds, 20 steps, an evaluation every 5; one trial diverges at step 12
    (after its evaluations at 5 and 10). The study's curves.parquet holds every evaluation of
    every trial, the same table MLflow gives back, and `harness report --from` rebuilds it.

    The NaN is the chaos campaign's trial fault (harness.bench.chaos.trial_faults), called in
    the trials' processes."""
    diverging = "ega_s1_nano_T32_tinyshakespeare"
    # The final evaluation reads the curves' 8 windows (by default it reads the whole split), so the
    # last point of each curve is the trial's final val_loss.
    train = {**TINY["train"], "max_steps": 20, "eval_every": 5, "final_eval_windows": TINY["train"]["eval_windows"]}
    spec = write_spec(seeds=2, train=train)
    done = run_study(spec, trial_callbacks=TrialFaults(nan_from_step={diverging: 12}), **study_env)
    log = study_env["stream"].getvalue()
    assert done.status == "finished" and not done.counts.get("failed") and "Study tiny finished" in log, log[-3000:]
    (study_dir,) = [p.parent for p in Path(study_env["storage_path"]).glob("tiny/*/harness_study.json")]
    results = pl.read_parquet(study_dir / "results.parquet")
    assert dict(zip(results["trial_id"], results["status"], strict=True)) == {
        tid: "diverged" if tid == diverging else "finished" for tid in results["trial_id"]
    }

    curves = pl.read_parquet(study_dir / CURVES_FILE)
    assert curves.columns == list(CURVE_COLUMNS) and dict(curves.schema) == CURVE_SCHEMA
    steps = {tid: frame["step"].to_list() for (tid,), frame in curves.group_by("trial_id", maintain_order=True)}
    evaluations = list(range(5, 21, 5))
    assert steps == {tid: [5, 10] if tid == diverging else evaluations for tid in results["trial_id"]}
    assert curves.height == 3 * len(evaluations) + 2  # every evaluation of every trial, each once
    tokens_per_step = TINY["train"]["batch_size"] * 32
    assert (curves["tokens"] == curves["step"] * tokens_per_step).all()
    factors = [c for c in CURVE_COLUMNS if c not in CURVE_METRICS and c not in ("step", "tokens")]
    assert_frame_equal(curves.select(factors).unique(), results.select(factors), check_row_order=False)
    gated = curves["gate"] == "ega"
    for column in ("tau_mean", "open_fraction", "pc1_cosine"):
        assert curves.filter(gated)[column].is_not_null().all() and curves.filter(~gated)[column].is_null().all()
    last = curves.filter(pl.col("step") == 20).join(results.select("trial_id", final="val_loss"), on="trial_id")
    assert last["val_loss"].to_numpy() == pytest.approx(last["final"].to_numpy(), rel=1e-6)  # float32 in the curve

    _assert_same_table(curves_frame(study_env["tracking_uri"], "tiny"), curves)

    # A study folder written before the table existed: `harness report --from` rebuilds it there.
    (study_dir / CURVES_FILE).unlink()
    out = tmp_path / "report"
    args = ["report", "tiny", "--from", str(study_dir), "--tracking-uri", study_env["tracking_uri"], "--out", str(out)]
    result = CliRunner().invoke(app, [*args, "--no-windows", "--no-log"])
    assert result.exit_code == 0, result.output
    assert f"Curves: {out / CURVES_FILE} ({curves.height} evaluations of 4 trials)" in result.output
    _assert_same_table(pl.read_parquet(study_dir / CURVES_FILE), curves)
    _assert_same_table(pl.read_parquet(out / CURVES_FILE), curves)


class InterruptAtSecondTrial(Callback):
    """Ctrl-C (SIGINT to this process) at the first evaluation of the second trial to report."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def on_trial_result(self, iteration, trials, trial, result, **info) -> None:
        tid = str(trial.config["trial"])
        if tid not in self.seen:
            self.seen.append(tid)
            if len(self.seen) == 2:
                os.kill(os.getpid(), signal.SIGINT)


@pytest.mark.slow
def test_a_resumed_study_has_each_evaluation_once(write_spec, study_env: dict) -> None:
    """The second trial is stopped after its first evaluation, before any checkpoint
    (checkpoint_every > eval_every); resumed, it trains again from the start and reports that
    step again. The interrupted study's curves hold that evaluation (status incomplete), the
    resumed study's every evaluation once; MLflow gives back the same table both times."""
    train = {**TINY["train"], "max_steps": 20, "eval_every": 5, "checkpoint_every": 20}
    spec = write_spec(train=train, max_concurrent_trials=1)
    first = run_study(spec, callbacks=[InterruptAtSecondTrial()], report=False, **study_env)
    assert first.status == "interrupted", study_env["stream"].getvalue()
    curves = _curves_file(first)
    stopped = curves.filter(pl.col("status") == "incomplete")
    assert stopped["step"].to_list() == [5] and curves.filter(pl.col("status") == "finished").height == 4
    _assert_same_table(curves_frame(study_env["tracking_uri"], "tiny"), curves)

    second = run_study(spec, resume=True, report=False, **study_env)
    assert second.status == "finished" and second.study_dir == first.study_dir
    (tid,) = stopped["trial_id"].to_list()
    reports = trial_reports(pyarrow.fs.LocalFileSystem(), str(Path(second.study_dir) / tid))
    assert [r["step"] for r in reports if "val/loss" in r and "status" not in r].count(5) == 2  # reported twice
    curves = _curves_file(second)
    assert_frame_equal(curves, second.curves)  # the outcome carries the table it wrote
    assert curves.height == 8 and curves.select("trial_id", "step").is_unique().all()
    assert set(curves["status"]) == {"finished"}
    _assert_same_table(curves_frame(study_env["tracking_uri"], "tiny"), curves)
