"""One HTTP policy for every MLflow call of the harness: a flaky tracking server gets the same
treatment from `harness train` and from a study. Against a real `mlflow server` on 127.0.0.1
reached through a real HTTP server in front of it that answers 503 to every third request
(without passing it on), both commands retry each failed request, finish, and leave the same
complete record they leave with a healthy server. (That a server which fails every request
costs both the same number of tries is tests/test_mlflow_client.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from harness_support import FlakyProxy, all_runs, run_harness, warning_lines, write_spec
from mlflow import MlflowClient

from harness.mlflow_client import CREATE_TOKEN_TAG, TrackingClient

pytestmark = pytest.mark.slow


#: MLflow's capability probe (MLflow >= 3.18): asked once a minute with no retry by design, its
#: failure read as "no optional capabilities"; not a call of the harness.
SERVER_INFO = "/api/3.0/mlflow/server-info"


def _assert_every_failure_was_retried(proxy: FlakyProxy) -> int:
    """Each 503 is followed, among the requests that came after it, by a successful request
    of the same method and path: the client tried again. Returns how many requests failed."""
    log = proxy.requests()
    failed = [i for i, (_, path, status) in enumerate(log) if status == 503 and path != SERVER_INFO]
    assert failed, "the proxy failed no request: the test tests nothing"
    for i in failed:
        method, path, _ = log[i]
        assert any(entry[:2] == (method, path) and entry[2] < 500 for entry in log[i + 1 :]), log[i]
    return len(failed)


def test_a_flaky_server_gets_the_same_treatment_from_train_and_from_a_study(
    tmp_path: Path, shared_data_dir: Path, mlflow_server
) -> None:
    server = mlflow_server()
    with FlakyProxy(server.uri, fail_every=3) as proxy:
        train = run_harness(
            "train",
            *("--variant", "ega", "--context-length", "32", "--batch-size", "4", "--max-steps", "4"),
            *("--eval-every", "2", "--eval-windows", "4", "--final-eval-windows", "4", "--experiment", "single"),
            *("--tracking-uri", proxy.uri, "--checkpoint-dir", str(tmp_path / "ckpt")),
            cwd=tmp_path,
        )
        assert train.returncode == 0, train.stdout[-3000:] + train.stderr[-3000:]
        train_failures = _assert_every_failure_was_retried(proxy)
        proxy.log.clear()

        spec = write_spec(tmp_path / "spec.yaml", seeds=1)  # baseline, ega: 2 trials
        study = run_harness(
            "run", str(spec), "--tracking-uri", proxy.uri, "--storage-path", str(tmp_path / "results"), cwd=tmp_path
        )
        assert study.returncode == 0, study.stdout[-3000:] + study.stderr[-3000:]
        study_failures = _assert_every_failure_was_retried(proxy)
    assert train_failures > 0 and study_failures > 0
    output = study.stdout + study.stderr + train.stdout + train.stderr
    assert not warning_lines(output) and "Traceback" not in output, output[-3000:]
    assert "Study tiny finished" in study.stdout and ": 2 finished" in study.stdout

    # The record, read from the server itself: complete, nothing duplicated.
    client = MlflowClient(server.uri)
    runs = all_runs(server.uri)
    single = [r for r in runs if r.data.tags.get("harness.role") is None]
    parents = [r for r in runs if r.data.tags.get("harness.role") == "study"]
    children = [r for r in runs if r.data.tags.get("harness.role") == "trial"]
    assert (len(single), len(parents), len(children)) == (1, 1, 2)
    for run in [*single, *parents, *children]:
        assert run.info.status == "FINISHED" and run.data.tags["status"] == "finished", run.data.tags
    assert sorted(m.step for m in client.get_metric_history(single[0].info.run_id, "val/loss")) == [2, 4]
    for child in children:
        assert child.data.tags["mlflow.parentRunId"] == parents[0].info.run_id
        assert sorted(m.step for m in client.get_metric_history(child.info.run_id, "val/loss")) == [5, 10]
        assert "window_losses.parquet" in {a.path for a in client.list_artifacts(child.info.run_id)}
    assert {"spec.yaml", "results.parquet"} <= {a.path for a in client.list_artifacts(parents[0].info.run_id)}


def test_a_creation_the_server_made_before_failing_is_not_made_twice(mlflow_server) -> None:
    """MLflow does not resend a failed ``create_run`` (it could make two runs); the harness asks
    the server whether the failed request made the run (its creation token) before sending it
    again. Through a proxy that passes every request on and fails every second answer."""
    server = mlflow_server()
    with FlakyProxy(server.uri, fail_every=2, fail_after_forward=True) as proxy:
        client = TrackingClient(proxy.uri)
        experiment = client.create_experiment("made-once")
        made = [client.create_run(experiment, run_name=f"r{i}").info.run_id for i in range(4)]
        creations = [entry for entry in proxy.requests() if entry[1].endswith("/runs/create")]
    assert 503 in {status for *_, status in creations}, "no creation failed: the test tests nothing"
    runs = all_runs(server.uri)
    assert sorted(r.info.run_id for r in runs) == sorted(made)  # each run once, the id handed back
    assert len({r.data.tags[CREATE_TOKEN_TAG] for r in runs}) == 4
