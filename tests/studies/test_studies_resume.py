"""An interrupted study (Ctrl-C after some trials finished) completes with --resume: it
trains only the trials that had not finished, and MLflow keeps exactly one parent run and
one child run per trial."""

from __future__ import annotations

import io
import json
import os
import signal
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from mlflow import MlflowClient
from ray.tune import Callback

from harness.bench.chaos.trial_faults import TrialFaults
from harness.errors import InputError
from harness.studies.runner import run_study


class InterruptAfter(Callback):
    """Ctrl-C (SIGINT to this process) once ``n`` trials have completed."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.done = 0

    def on_trial_complete(self, iteration, trials, trial, **info) -> None:
        self.done += 1
        if self.done == self.n:
            os.kill(os.getpid(), signal.SIGINT)


def _reports(study_dir: Path) -> dict[str, int]:
    """Tune's own record of every result each trial reported (result.json, appended)."""
    out = {}
    for trial_dir in study_dir.iterdir():
        path = trial_dir / "result.json"
        if path.is_file():
            out[trial_dir.name] = sum(1 for line in path.read_text().splitlines() if line.strip())
    return out


# Slow (25-38 s: a study interrupted and resumed); the fast suite keeps resume's parts: a stale
# checkpoint reference repaired (test_studies_tune_state), a trial that finished during the
# interruption (tests/reliability/test_chaos_regressions).
@pytest.mark.slow
def test_interrupted_study_resumes_without_repeating_finished_trials(write_spec, study_env: dict) -> None:
    spec = write_spec(variants=["baseline", "ega", "mope", "ega-mope"], max_concurrent_trials=1)
    first = run_study(spec, callbacks=[InterruptAfter(2)], report=False, **study_env)
    assert first.status == "interrupted"
    assert first.counts["finished"] == 2 and first.counts["incomplete"] == 2
    assert "--resume" in study_env["stream"].getvalue()
    study_dir = Path(first.study_dir)
    finished_before = set(first.results.filter(first.results["status"] == "finished")["trial_id"])
    reports_before = _reports(study_dir)

    client = MlflowClient(study_env["tracking_uri"])
    parent = client.get_run(first.parent_run_id)
    assert parent.info.status == "KILLED" and parent.data.tags["status"] == "interrupted"

    second = run_study(spec, resume=True, report=False, **study_env)
    assert second.status == "finished"
    assert second.counts["finished"] == 4
    assert second.study_dir == first.study_dir and second.parent_run_id == first.parent_run_id
    reports_after = _reports(study_dir)
    for tid in finished_before:  # not one more report: they did not train again
        assert reports_after[tid] == reports_before[tid]
    assert set(reports_after) == {f"{v}_s0_nano_T32_tinyshakespeare" for v in ("baseline", "ega", "mope", "ega-mope")}

    runs = client.search_runs([parent.info.experiment_id])
    parents = [r for r in runs if r.data.tags.get("harness.role") == "study"]
    children = [r for r in runs if r.data.tags.get("harness.role") == "trial"]
    assert [p.info.run_id for p in parents] == [first.parent_run_id]
    assert client.get_run(first.parent_run_id).info.status == "FINISHED"
    assert sorted(c.data.tags["harness.trial_id"] for c in children) == sorted(reports_after)
    for child in children:
        assert child.info.status == "FINISHED" and child.data.tags["status"] == "finished"
        steps = [m.step for m in client.get_metric_history(child.info.run_id, "val/loss")]
        assert sorted(steps) == [5, 10], "no duplicated points after the resume"
    meta = json.loads((study_dir / "harness_study.json").read_text())
    assert meta["parent_run_id"] == first.parent_run_id

    # A resume must not mix two designs: a changed grid or training setting is refused.
    changed = write_spec(variants=["baseline", "ega", "mope", "ega-mope"], max_concurrent_trials=1, seeds=2)
    with pytest.raises(InputError, match="changed since it started"):
        run_study(changed, resume=True, **study_env)


def _faulted_study(spec: Path, tmp_path: Path, faults: TrialFaults) -> tuple[Any, str, Path, str]:
    """``run_study(SPEC)`` with the trial faults ``faults`` (called in the trials' processes:
    harness.bench.chaos.trial_faults); returns the outcome, what the study printed, the study's
    folder and the tracking URI."""
    uri = f"sqlite:///{tmp_path / 'faulted.db'}"
    stream = io.StringIO()
    done = run_study(
        spec,
        tracking_uri=uri,
        storage_path=str(tmp_path / "faulted"),
        trial_callbacks=faults,
        stream=stream,
        live=False,
    )
    found = [p.parent for p in (tmp_path / "faulted").glob("*/*/harness_study.json")]
    assert len(found) == 1, stream.getvalue()[-3000:]
    return done, stream.getvalue(), found[0], uri


@pytest.mark.slow
def test_killed_trial_is_retried_from_its_checkpoint(
    write_spec, tmp_path: Path, shared_data_dir: Path, local_ray: None
) -> None:
    """A trial process killed at step 7 (after the step-5 checkpoint) is restarted by Tune
    from that checkpoint and ends exactly where an uninterrupted run ends."""
    from harness.studies.spec.grid import expand_grid
    from harness.studies.spec.study_spec import load_spec
    from harness.training import train

    spec = write_spec(variants=["ega-mope"], seeds=[3], retries=1)
    faults = tmp_path / "faults"
    done, log, study_dir, uri = _faulted_study(spec, tmp_path, TrialFaults(kill_at_step=7, marker_dir=faults))
    assert done.status == "finished" and not done.counts.get("failed") and "Study tiny finished" in log, log[-3000:]
    assert "RETRY" in log
    assert (faults / "ega-mope_s3_nano_T32_tinyshakespeare.killed").is_file()
    (trial,) = expand_grid(load_spec(spec))
    plain = train(
        trial.config.model_copy(update={"checkpoint_dir": str(tmp_path / "plain")}),
        mlflow_logging=False,
        progress_bar=False,
    )
    row = pl.read_parquet(study_dir / "results.parquet").row(0, named=True)
    assert row["val_loss"] == pytest.approx(plain.final_val_loss, rel=1e-6)

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("tiny").experiment_id
    (child,) = [r for r in client.search_runs([experiment]) if r.data.tags.get("harness.role") == "trial"]
    assert child.info.status == "FINISHED" and child.data.tags["harness.retries"] == "1"
    assert sorted(m.step for m in client.get_metric_history(child.info.run_id, "val/loss")) == [5, 10]


@pytest.mark.slow
def test_trial_that_keeps_failing_is_recorded_as_failed(
    write_spec, tmp_path: Path, shared_data_dir: Path, local_ray: None
) -> None:
    """Without retries, a killed trial ends the study as failed: status tag, MLflow FAILED,
    a results row with status failed and no losses; the other trial is unaffected."""
    spec = write_spec(variants=["baseline", "ega"], retries=0, max_concurrent_trials=1)
    faults = TrialFaults(kill_at_step=7, marker_dir=tmp_path / "faults")
    done, log, study_dir, uri = _faulted_study(spec, tmp_path, faults)
    # The fault marker makes the kill happen once per trial: both die once, neither retries
    # (`harness run` exits 1 on such an outcome: "2 trial(s) failed after their retries").
    assert done.counts["failed"] == 2, log[-3000:]
    assert "Study tiny finished" in log and "2 failed" in log and "ERROR" in log
    table = pl.read_parquet(study_dir / "results.parquet")
    assert set(table["status"]) == {"failed"} and table["val_loss"].null_count() == 2
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("tiny").experiment_id
    runs = client.search_runs([experiment])
    children = [r for r in runs if r.data.tags.get("harness.role") == "trial"]
    assert len(children) == 2
    assert all(c.info.status == "FAILED" and c.data.tags["status"] == "failed" for c in children)
    (parent,) = [r for r in runs if r.data.tags.get("harness.role") == "study"]
    assert parent.info.status == "FINISHED"
