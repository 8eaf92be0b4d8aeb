"""The driver killed: `harness run` dies by SIGKILL (an OOM kill, a lost login node) after
some trials finished; `harness run --resume` finishes the rest without running the
finished ones again, MLflow ends with exactly one parent run and one child run per trial,
and the results table and the report's headline numbers equal those of a study that was
never interrupted (same seeds, CPU: the same losses).

What the kill leaves behind: only the driver process is killed, as the OOM killer would.
Ray's trial workers, raylet and GCS die with it (checked: no trial keeps training into the
storage directory the resume will use); Ray's DashboardAgent and RuntimeEnvAgent notice
the dead raylet but take about a minute to exit (they first try to report to the dead
GCS), so the test ends exactly those processes of the killed driver's session before it
resumes (`ray stop` would end every Ray on the machine)."""

from __future__ import annotations

import io
import json
import os
import signal
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from harness_support import (
    all_runs,
    end_session,
    result_reports,
    run_harness,
    session_processes,
    start_driver,
    tune_trial_states,
    wait_until,
    warning_lines,
    write_spec,
)
from mlflow import MlflowClient

from harness.studies.runner import run_study

#: Processes that carry the study's work: none may outlive the killed driver.
RAY_CORE = ("ray::ImplicitFunc", "ray::IDLE", "raylet", "gcs_server", "harness.cli")


def _parent_metrics(uri: str) -> dict[str, float]:
    (parent,) = [r for r in all_runs(uri) if r.data.tags.get("harness.role") == "study"]
    return dict(parent.data.metrics)


@pytest.mark.slow
def test_killed_driver_resumes_to_the_uninterrupted_result(
    tmp_path: Path, shared_data_dir: Path, local_ray: None
) -> None:
    # baseline, ega x 2 seeds: 4 trials of 10 steps, one at a time, so that the kill after the
    # first lands with one trial mid-run and two not started.
    spec = write_spec(tmp_path / "spec.yaml", max_concurrent_trials=1)

    # The reference: the same study, never interrupted.
    ref_uri = f"sqlite:///{tmp_path / 'reference.db'}"
    reference = run_study(
        spec, tracking_uri=ref_uri, storage_path=str(tmp_path / "reference"), stream=io.StringIO(), live=False
    )
    assert reference.status == "finished" and reference.counts["finished"] == 4

    # The study again, its driver killed once a trial has finished.
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    storage = tmp_path / "results"
    args = ["run", str(spec), "--tracking-uri", uri, "--storage-path", str(storage)]
    log = tmp_path / "killed.log"
    driver = start_driver(*args, cwd=tmp_path, log=log)
    try:
        wait_until(lambda: "TERMINATED" in tune_trial_states(storage).values(), timeout=300, what="a finished trial")
        os.kill(driver.pid, signal.SIGKILL)
        assert driver.wait(timeout=30) == -signal.SIGKILL
        # Nothing keeps training: workers, raylet and GCS go with the driver.
        wait_until(
            lambda: not [c for c in session_processes(driver.pid).values() if any(k in c for k in RAY_CORE)],
            timeout=60,
            what="Ray's workers to exit after the driver was killed",
        )
    finally:
        left = end_session(driver.pid)
    assert all("Agent" in cmd for cmd in left.values()), left  # only Ray's slow-to-exit agents

    (study_dir,) = [p.parent for p in storage.glob("tiny/*/harness_study.json")]
    at_kill = tune_trial_states(storage)
    done_before = sorted(t for t, s in at_kill.items() if s == "TERMINATED")
    assert 1 <= len(done_before) < 4, at_kill
    assert not (study_dir / "results.parquet").exists()  # the study really did not end
    reports_before = result_reports(study_dir)
    meta = json.loads((study_dir / "harness_study.json").read_text())
    parent_id, trial_ids = meta["parent_run_id"], sorted(meta["trial_ids"])
    assert len(trial_ids) == 4

    resumed = run_harness(*args, "--resume", cwd=tmp_path, timeout=300)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert (
        "- resuming" in resumed.stdout and "Study tiny finished" in resumed.stdout and ": 4 finished" in resumed.stdout
    )
    assert not warning_lines(resumed.stdout + resumed.stderr), resumed.stderr

    # The finished trials did not run again: Tune's record of them is unchanged.
    reports_after = result_reports(study_dir)
    assert {t: reports_after[t] for t in done_before} == {t: reports_before[t] for t in done_before}
    assert sorted(reports_after) == trial_ids

    # MLflow: the same parent run, continued; exactly one child run per trial, each with
    # every evaluation once (the trial killed mid-run replayed from its checkpoint).
    client = MlflowClient(uri)
    runs = all_runs(uri)
    parents = [r for r in runs if r.data.tags.get("harness.role") == "study"]
    children = [r for r in runs if r.data.tags.get("harness.role") == "trial"]
    assert [p.info.run_id for p in parents] == [parent_id] and len(runs) == 5
    assert parents[0].info.status == "FINISHED"
    assert sorted(c.data.tags["harness.trial_id"] for c in children) == trial_ids
    for child in children:
        assert child.info.status == "FINISHED" and child.data.tags["status"] == "finished"
        assert sorted(m.step for m in client.get_metric_history(child.info.run_id, "val/loss")) == [5, 10]

    # The report equals the uninterrupted study's: the results table (all but the timing
    # column), every headline number of the analysis, the verdicts and the written report.
    table = pl.read_parquet(study_dir / "results.parquet").sort("trial_id")
    expected = reference.results.sort("trial_id")
    timing = ["tokens_per_s"]
    floats = [c for c, dtype in table.schema.items() if dtype == pl.Float64 and c not in timing]
    assert table.drop(*timing, *floats).equals(expected.drop(*timing, *floats))  # ids, factors, steps, status
    for column in floats:  # losses, tau, open fraction: the same numbers
        got, want = table[column].to_numpy().astype(float), expected[column].to_numpy().astype(float)
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=0, equal_nan=True, err_msg=column)
    got, want = _parent_metrics(uri), _parent_metrics(ref_uri)
    assert sorted(got) == sorted(want) and "ega/gain/estimate" in got
    for key in want:
        np.testing.assert_allclose(got[key], want[key], rtol=1e-9, atol=1e-12, err_msg=key)
    assert reference.report.verdict_table in resumed.stdout
    # ... and the whole written report (markdown: every table and verdict, to 4 decimals).
    assert (
        study_dir / "report" / reference.report.markdown_path.name
    ).read_text() == reference.report.markdown_path.read_text()
