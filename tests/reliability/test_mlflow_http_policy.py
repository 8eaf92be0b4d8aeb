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

pytestmark = pytest.mark.slow


def _assert_every_failure_was_retried(proxy: FlakyProxy) -> int:
    """Each 503 is followed, among the requests that came after it, by a successful request
    of the same method and path: the client tried again. Returns how many requests failed."""
    log = proxy.requests()
    failed = [i for i, (*_, status) in enumerate(log) if status == 503]
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
