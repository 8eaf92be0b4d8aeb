"""A tracking server that goes away does not stop a study: against a real `mlflow server`
on 127.0.0.1 that is stopped mid-study, or that is unreachable from the start, the study
completes with every result kept in its Tune storage directory; the user is warned once
(not per metric or per trial) and told the command that records the study later; with
the server back, that command (`harness report STUDY --from STUDY_DIR --tracking-uri URI`)
records everything: the parent run, one child run per trial with its curves, final
metrics and tables, results.parquet and the report. Running it again adds nothing."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import polars as pl
import pytest
from harness_support import (
    all_runs,
    cli_env,
    end_session,
    free_port,
    harness_cmd,
    run_harness,
    tune_trial_states,
    wait_until,
    warning_lines,
    write_spec,
)
from mlflow import MlflowClient

pytestmark = pytest.mark.slow


def _record_command(stdout: str) -> list[str]:
    """The `harness report ...` command the study printed at its end."""
    lines = [line.strip() for line in stdout.splitlines() if line.strip().startswith("harness report ")]
    assert len(lines) == 1, stdout
    return shlex.split(lines[0])[1:]


def _assert_warned_once(output: str, what: str) -> None:
    warnings = warning_lines(output)
    assert len(warnings) == 1, "\n".join(warnings)  # once: not per metric, not per trial
    assert what in warnings[0] and "without MLflow" in warnings[0]
    assert "Traceback" not in output and "View run" not in output


def _assert_recorded(uri: str, study_dir: Path, *, parent_run_id: str | None = None) -> str:
    """The study's MLflow record is complete and matches its storage directory."""
    table = pl.read_parquet(study_dir / "results.parquet")
    client = MlflowClient(uri)
    runs = all_runs(uri)
    parents = [r for r in runs if r.data.tags.get("harness.role") == "study"]
    children = [r for r in runs if r.data.tags.get("harness.role") == "trial"]
    assert len(parents) == 1 and len(runs) == 1 + table.height
    parent = parents[0]
    if parent_run_id is not None:
        assert parent.info.run_id == parent_run_id  # continued, not duplicated
    assert parent.info.status == "FINISHED" and parent.data.tags["status"] == "finished"
    files = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"spec.yaml", "results.parquet", "report"} <= files
    assert "report/report.html" in {a.path for a in client.list_artifacts(parent.info.run_id, "report")}
    assert parent.data.metrics["trials/finished"] == table.height
    assert "ega/gain/estimate" in parent.data.metrics  # the report's headline numbers
    note = parent.data.tags["mlflow.note.content"]  # the page opens on the verdict table
    assert note.startswith("| effect ([full report](") and "\n| ega gain | " in note, note[:500]
    assert f"runs/{parent.info.run_id}/artifacts/report/report.html?workflowType=machine_learning)" in note
    assert parent.data.params["grid_size"] == str(table.height)
    by_trial = {row["trial_id"]: row for row in table.iter_rows(named=True)}
    assert sorted(c.data.tags["harness.trial_id"] for c in children) == sorted(by_trial)
    for child in children:
        row = by_trial[child.data.tags["harness.trial_id"]]
        assert child.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert child.info.status == "FINISHED" and child.data.tags["status"] == "finished"
        final = child.data.metrics["final_val_loss"]  # final/val_loss, as MLflow stores it (mlflow_metric_key)
        assert final == pytest.approx(row["val_loss"], rel=1e-12)
        assert child.data.params["max_steps"] == "10" and child.data.tags["seed"] == str(row["seed"])
        steps = sorted(m.step for m in client.get_metric_history(child.info.run_id, "val/loss"))
        assert steps == [5, 10]  # every evaluation once: no gap, no duplicate
        assert "window_losses.parquet" in {a.path for a in client.list_artifacts(child.info.run_id)}
    return parent.info.run_id


def test_server_stopped_mid_study(tmp_path: Path, shared_data_dir: Path, mlflow_server) -> None:
    server = mlflow_server()
    spec = write_spec(tmp_path / "spec.yaml")  # baseline, ega x 2 seeds: 4 trials
    storage = tmp_path / "results"
    out_path, err_path = tmp_path / "study.out", tmp_path / "study.err"
    with open(out_path, "w") as out, open(err_path, "w") as err:
        proc = subprocess.Popen(
            harness_cmd("run", str(spec), "--tracking-uri", server.uri, "--storage-path", str(storage)),
            cwd=tmp_path,
            env=cli_env(),
            stdout=out,
            stderr=err,
            text=True,
            start_new_session=True,
        )
    try:
        # Stop the server once the first trial has ended (the others still to run).
        states = wait_until(
            lambda: (s := tune_trial_states(storage)) and "TERMINATED" in s.values() and s,
            timeout=300,
            what="a finished trial",
        )
        assert list(states.values()).count("TERMINATED") < 4, states
        server.stop()
        assert proc.wait(timeout=300) == 0, out_path.read_text()[-3000:] + err_path.read_text()[-3000:]
    finally:
        end_session(proc.pid)
    stdout, stderr = out_path.read_text(), err_path.read_text()
    _assert_warned_once(stdout + stderr, f"MLflow at {server.uri} failed while")
    assert "Study tiny finished" in stdout and ": 4 finished" in stdout
    assert "MLflow: not recorded completely" in stdout

    # Everything is in the Tune storage directory.
    (study_dir,) = [p.parent for p in storage.glob("tiny/*/harness_study.json")]
    meta = json.loads((study_dir / "harness_study.json").read_text())
    assert meta["parent_run_id"]  # the parent run was created before the outage
    table = pl.read_parquet(study_dir / "results.parquet")
    assert table.height == 4 and set(table["status"]) == {"finished"}
    assert all((study_dir / tid / "result.json").is_file() for tid in table["trial_id"])

    # With the server back (same store), the printed command records the rest.
    mlflow_server(port=server.port)
    argv = _record_command(stdout)
    assert argv[:5] == ["report", "tiny", "--from", str(study_dir), "--tracking-uri"]
    record = run_harness(*argv, cwd=tmp_path, timeout=180)
    assert record.returncode == 0, record.stdout[-3000:] + record.stderr[-3000:]
    assert "(continued; child runs:" in record.stdout and "MLflow: logged report/" in record.stdout
    parent = _assert_recorded(server.uri, study_dir, parent_run_id=meta["parent_run_id"])

    again = run_harness(*argv, cwd=tmp_path, timeout=180)
    assert again.returncode == 0 and "0 created, 0 completed, 4 already complete" in again.stdout, again.stdout
    assert _assert_recorded(server.uri, study_dir) == parent


def test_server_unreachable_from_the_start(tmp_path: Path, shared_data_dir: Path, mlflow_server) -> None:
    port = free_port()  # nothing listens there yet
    uri = f"http://127.0.0.1:{port}"
    spec = write_spec(tmp_path / "spec.yaml", seeds=1)  # baseline, ega: 2 trials
    study = run_harness(
        "run", str(spec), "--tracking-uri", uri, "--storage-path", str(tmp_path / "results"), cwd=tmp_path
    )
    assert study.returncode == 0, study.stdout[-3000:] + study.stderr[-3000:]
    _assert_warned_once(study.stdout + study.stderr, f"cannot reach the MLflow tracking server {uri}")
    assert "Study tiny finished" in study.stdout and ": 2 finished" in study.stdout
    (study_dir,) = [p.parent for p in (tmp_path / "results").glob("tiny/*/harness_study.json")]
    assert json.loads((study_dir / "harness_study.json").read_text())["parent_run_id"] is None

    # Still down: the command says so (exit 2) and records nothing; nothing is lost either.
    early = run_harness(*_record_command(study.stdout), cwd=tmp_path, timeout=180)
    assert early.returncode == 2, early.stderr[-3000:]
    assert f"cannot record study tiny in MLflow at {uri}" in early.stderr and "Traceback" not in early.stderr

    mlflow_server(port=port)
    record = run_harness(*_record_command(study.stdout), cwd=tmp_path, timeout=180)
    assert record.returncode == 0, record.stdout[-3000:] + record.stderr[-3000:]
    assert "(created; child runs: 2 created, 0 completed, 0 already complete)" in record.stdout
    _assert_recorded(uri, study_dir)
