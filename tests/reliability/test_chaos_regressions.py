"""What the fault campaign (harness/bench/chaos/) found, replayed deterministically.

Schedule 144272504 (``python benchmarks/chaos.py --replay 144272504``: a trial's process
killed, the driver stopped by SIGTERM and resumed, the tracking server stopped during the
report) ended with every child run holding its end-of-run summary twice at the last step,
the unfaulted twin too:

* the trial's last evaluation reports ``final/val_loss`` ... (through Lightning's logging,
  rounded to float32) and the driver logged it with the curve, then again, as float64,
  when the trial ended; ``best/val_loss`` likewise;
* a trial whose end the driver recorded just before it died (Tune's snapshot did not show
  it ended yet) ran again from its final checkpoint under the resumed driver, which logged
  its summary a third time.

These tests replay both sequences of recorder calls against a real MLflow store.

The same schedule's SIGTERM made the driver abort (exit -6, a stack dump from Ray's core
worker): Tune did not save its experiment one last time and the parent run stayed RUNNING.
SIGTERM now stops a study as Ctrl-C does (harness/studies/signals.py); the slow test sends
it to a driver mid-trial."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from harness_support import TINY, all_runs, end_session, run_harness, start_driver, wait_until, write_spec
from mlflow import MlflowClient

from harness.studies.record.recorder import StudyRecorder

PARAMS = {"grid_size": 1, "max_steps": 10}
#: The last evaluation's report (float32-rounded through Lightning) and the trial's final
#: report (TrainResult: float64), both at step 10, as a live trial sends them.
LAST_EVAL = {"val/loss": 3.0992486476898193, "best/val_loss": 3.0992486476898193, "final/val_loss": 3.0992486476898193}
FINAL = {"final/val_loss": 3.0992487370967865, "best/val_loss": 3.0992487370967865, "num_parameters": 1234.0}


def _driver(uri: str) -> StudyRecorder:
    recorder = StudyRecorder(uri, "chaos")
    recorder.store.connect()
    recorder.start_parent(
        study="chaos", study_run="chaos/1", spec_text="name: chaos\n", spec_sha256="0" * 64, params=PARAMS, tags={}
    )
    recorder.child("t0", study="chaos", tags={"harness.trial_id": "t0"}, params=PARAMS)
    return recorder


def _trial_reports(recorder: StudyRecorder) -> None:
    recorder.children.metrics("t0", {"val/loss": 3.5, "best/val_loss": 3.5}, step=5)
    recorder.children.metrics("t0", LAST_EVAL, step=10)
    recorder.children.metrics("t0", {**FINAL, "status": "finished"}, step=10)  # the final report
    recorder.children.end("t0", "finished", metrics=FINAL, step=10)


def _history(uri: str, recorder: StudyRecorder) -> dict[str, list[tuple[int, float]]]:
    client = MlflowClient(uri)
    run_id = recorder.children.run_id("t0")
    keys = ("val/loss", "best/val_loss", "final_val_loss", "num_parameters")
    return {k: sorted((m.step, m.value) for m in client.get_metric_history(run_id, k)) for k in keys}


EXPECTED = {
    "val/loss": [(5, 3.5), (10, LAST_EVAL["val/loss"])],
    "best/val_loss": [(5, 3.5), (10, LAST_EVAL["best/val_loss"])],  # the curve's, once
    "final_val_loss": [(10, FINAL["final/val_loss"])],  # the summary, once, as the results table holds it
    "num_parameters": [(10, 1234.0)],
}


def test_the_end_of_run_summary_is_logged_once(sqlite_tracking_uri: str) -> None:
    recorder = _driver(sqlite_tracking_uri)
    _trial_reports(recorder)
    assert _history(sqlite_tracking_uri, recorder) == EXPECTED
    assert recorder.store.broken is None


def test_a_resumed_driver_does_not_record_an_ended_trial_again(sqlite_tracking_uri: str) -> None:
    first = _driver(sqlite_tracking_uri)
    _trial_reports(first)
    # The driver died before Tune's snapshot showed the trial ended: the resumed driver runs
    # it again from its final checkpoint, which reports the stored result once more.
    resumed = _driver(sqlite_tracking_uri)
    assert resumed.children.run_id("t0") == first.children.run_id("t0")
    resumed.children.metrics("t0", {**FINAL, "status": "finished"}, step=10)
    resumed.children.end("t0", "finished", metrics=FINAL, step=10)
    assert _history(sqlite_tracking_uri, resumed) == EXPECTED
    run = MlflowClient(sqlite_tracking_uri).get_run(first.children.run_id("t0"))
    assert run.info.status == "FINISHED" and run.data.tags["status"] == "finished"


def test_a_summary_logged_before_the_driver_died_is_not_logged_again(sqlite_tracking_uri: str) -> None:
    """The driver died inside the child run's end (children.end), after the summary and before the run's end."""
    first = _driver(sqlite_tracking_uri)
    first.children.metrics("t0", {"val/loss": 3.5, "best/val_loss": 3.5}, step=5)
    first.children.metrics("t0", LAST_EVAL, step=10)
    summary = {k: v for k, v in FINAL.items() if k != "best/val_loss"}
    first.store.client.log_metrics(first.children.run_id("t0"), summary, step=10)  # children.end's first call only
    resumed = _driver(sqlite_tracking_uri)
    resumed.children.end("t0", "finished", metrics=FINAL, step=10)
    assert _history(sqlite_tracking_uri, resumed) == EXPECTED


# -- schedule 6682: reports made during an outage under a driver later SIGKILLed ---------------
#
# ``python benchmarks/chaos.py --replay 6682``: the tracking server was down while a trial
# reported steps 15 and 20 (the driver's recorder stopped logging), then the driver was
# SIGKILLed. The resumed driver continued the child run and logged from the trial's
# checkpoint on (25, 30): steps 15 and 20 were in Tune's result.json only, and nothing asked
# for `harness report --from`. A resumed study now completes every child run from storage
# (harness.studies.record.trial_records.complete_child_run) before it ends its record.

STEPS = (5, 10, 15, 20, 25, 30)


def _report(step: int) -> dict[str, float | int]:
    """A trial's evaluation report at ``step``, as Tune's result.json keeps it."""
    return {"step": step, "val/loss": 4.0 - step / 100, "train/loss": 4.1 - step / 100, "throughput/tokens_per_s": 1e4}


FINAL_REPORT = {**_report(30), "final/val_loss": 3.7, "num_parameters": 1234.0, "status": "finished"}


@pytest.fixture
def stored_trial(tmp_path: Path):
    """A real grid trial of the tiny spec, its folder on storage holding the reports of a trial
    that a second driver resumed from its checkpoint at step 20, and its results-table row."""
    import json

    import pyarrow.fs
    import yaml

    from harness.studies.spec.grid import expand_grid
    from harness.studies.spec.study_spec import parse_spec

    trial = expand_grid(parse_spec(yaml.safe_dump(TINY), source="tiny.yaml"))[0]
    trial_dir = tmp_path / trial.trial_id
    trial_dir.mkdir()
    lines = [_report(s) for s in STEPS[:4]] + [_report(25), _report(30), FINAL_REPORT]  # 25, 30 after the resume
    (trial_dir / "result.json").write_text("".join(json.dumps(line) + "\n" for line in lines))
    row = {"trial_id": trial.trial_id, "study": "chaos", "variant": trial.config.variant, "status": "finished"}
    return trial, row, pyarrow.fs.LocalFileSystem(), str(trial_dir)


def _study_driver(uri: str, trial) -> StudyRecorder:
    recorder = StudyRecorder(uri, "chaos")
    recorder.store.connect()
    recorder.start_parent(
        study="chaos", study_run="chaos/1", spec_text="name: chaos\n", spec_sha256="0" * 64, params=PARAMS, tags={}
    )
    recorder.child(trial.trial_id, study="chaos", tags=trial.tags(), params=trial.config.model_dump())
    return recorder


def _steps(uri: str, run_id: str, key: str = "val/loss") -> list[int]:
    return sorted(m.step for m in MlflowClient(uri).get_metric_history(run_id, key))


def test_a_resumed_study_fills_the_gap_an_outage_left_under_a_killed_driver(
    sqlite_tracking_uri: str, stored_trial
) -> None:
    from harness.studies.record.trial_records import complete_child_run

    trial, row, fs, trial_dir = stored_trial
    tid = trial.trial_id
    first = _study_driver(sqlite_tracking_uri, trial)
    for step in (5, 10):
        first.children.metrics(tid, _report(step), step=step)
    # the server is down for steps 15 and 20; the driver is SIGKILLed after them
    resumed = _study_driver(sqlite_tracking_uri, trial)
    for step in (25, 30):  # the trial resumed from its checkpoint at step 20
        resumed.children.metrics(tid, _report(step), step=step)
    resumed.children.metrics(tid, FINAL_REPORT, step=30)
    resumed.children.end(tid, "finished", metrics=FINAL_REPORT, step=30)
    run_id = resumed.children.run_id(tid)
    assert _steps(sqlite_tracking_uri, run_id) == [5, 10, 25, 30]  # the bug, before the study ends

    kwargs = {"study": "chaos", "trial": trial, "row": row, "fs": fs, "trial_dir": trial_dir}
    assert complete_child_run(resumed, **kwargs) == "completed"
    client = MlflowClient(sqlite_tracking_uri)
    for key in ("val/loss", "train/loss", "throughput/tokens_per_s"):
        assert _steps(sqlite_tracking_uri, run_id, key) == list(STEPS), key  # each step once
    assert sorted((m.step, m.value) for m in client.get_metric_history(run_id, "val/loss"))[2:4] == [
        (15, _report(15)["val/loss"]),
        (20, _report(20)["val/loss"]),
    ]
    assert [m.step for m in client.get_metric_history(run_id, "final_val_loss")] == [30]
    assert complete_child_run(resumed, **kwargs) == "unchanged"  # idempotent
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.data.tags["status"] == "finished"


def test_a_resumed_study_ends_the_run_of_a_trial_that_finished_during_an_outage(
    sqlite_tracking_uri: str, stored_trial
) -> None:
    """The trial finished while the server was down; its driver was killed; the resumed
    driver's Tune knows the trial ended and never reports it again."""
    from harness.studies.record.trial_records import complete_child_run

    trial, row, fs, trial_dir = stored_trial
    tid = trial.trial_id
    first = _study_driver(sqlite_tracking_uri, trial)
    first.children.metrics(tid, _report(5), step=5)
    resumed = StudyRecorder(sqlite_tracking_uri, "chaos")
    resumed.store.connect()
    resumed.start_parent(
        study="chaos", study_run="chaos/1", spec_text="name: chaos\n", spec_sha256="0" * 64, params=PARAMS, tags={}
    )
    kwargs = {"study": "chaos", "trial": trial, "row": row, "fs": fs, "trial_dir": trial_dir}
    assert complete_child_run(resumed, **kwargs) == "completed"
    run_id = resumed.children.run_id(tid)
    assert run_id == first.children.run_id(tid)
    assert _steps(sqlite_tracking_uri, run_id) == list(STEPS)
    client = MlflowClient(sqlite_tracking_uri)
    assert [(m.step, m.value) for m in client.get_metric_history(run_id, "final_val_loss")] == [(30, 3.7)]
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.data.tags["status"] == "finished"


@pytest.mark.slow
def test_sigterm_stops_the_study_as_ctrl_c_does(tmp_path: Path, shared_data_dir: Path) -> None:
    spec = write_spec(tmp_path / "spec.yaml", max_concurrent_trials=1, train={**TINY["train"], "max_steps": 40})
    uri, storage = f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "results"
    args = ["run", str(spec), "--tracking-uri", uri, "--storage-path", str(storage)]
    log = tmp_path / "driver.log"
    driver = start_driver(*args, cwd=tmp_path, log=log)
    try:
        wait_until(lambda: list(storage.glob("tiny/*/*/checkpoint_*")), timeout=600, what="a trial's first checkpoint")
        os.kill(driver.pid, signal.SIGTERM)
        code = driver.wait(timeout=180)
    finally:
        end_session(driver.pid)
    text = log.read_text()
    assert code == 130, text[-3000:]  # was -6: SIGABRT from Ray's failure handler
    assert "SIGTERM received" not in text and "Study tiny interrupted" in text and "Resume it with" in text
    (parent,) = [r for r in all_runs(uri) if r.data.tags.get("harness.role") == "study"]
    assert parent.info.status == "KILLED" and parent.data.tags["status"] == "interrupted"

    resumed = run_harness(*args, "--resume", cwd=tmp_path, timeout=600)
    assert resumed.returncode == 0 and ": 4 finished" in resumed.stdout, resumed.stdout[-3000:]
