"""The harness's one MLflow client (harness.mlflow_client): one HTTP policy for `harness train`
and for a study, set for each call and gone afterwards; batches within the API's limits; one
rule for values and statuses. Against real servers: a real local HTTP server answering 503,
and a real SQLite store."""

from __future__ import annotations

import math
import os
import threading
from pathlib import Path

import pytest
from harness_support import FlakyProxy
from mlflow.exceptions import MlflowException

from harness.errors import InputError
from harness.mlflow_client import (
    HTTP_POLICY,
    MAX_METRICS_PER_BATCH,
    MAX_PARAMS_PER_BATCH,
    MAX_TAGS_PER_BATCH,
    MLFLOW_RUN_STATUS,
    RUN_STATUSES,
    TrackingClient,
    ensure_experiment,
    http_policy,
    run_page_link,
    ui_link,
)
from harness.studies.record.recorder import StudyRecorder
from harness.training.tracking import prepare_tracking

POLICY_VARIABLES = tuple(HTTP_POLICY.environ())
GET_BY_NAME = "/experiments/get-by-name"


@pytest.fixture(autouse=True)
def _no_user_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    """The policy's own values, whatever the environment running the tests sets."""
    for key in POLICY_VARIABLES:
        monkeypatch.delenv(key, raising=False)


def test_a_failing_request_is_tried_once_plus_the_policys_retries_and_the_environment_is_left_alone() -> None:
    with FlakyProxy() as server:  # answers 503 to everything
        with pytest.raises(MlflowException):
            TrackingClient(server.uri).get_experiment_by_name("x")
        assert [status for *_, status in server.requests(GET_BY_NAME)] == [503] * (1 + HTTP_POLICY.max_retries)
    assert not any(key in os.environ for key in POLICY_VARIABLES)  # set for the call only


def test_the_users_own_setting_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    with FlakyProxy() as server:
        with pytest.raises(MlflowException):
            TrackingClient(server.uri).get_experiment_by_name("x")
        assert len(server.requests(GET_BY_NAME)) == 1
    assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "0"


def test_harness_train_and_a_study_treat_a_failing_server_alike() -> None:
    """The same number of tries before giving up: `harness train` refuses the URI (exit 2),
    the study goes on without MLflow after one warning."""
    with FlakyProxy() as server:
        with pytest.raises(InputError, match="cannot use tracking URI"):
            prepare_tracking(server.uri, "x")
        train_tries = len(server.requests(GET_BY_NAME))
    warnings: list[str] = []
    with FlakyProxy() as server:
        recorder = StudyRecorder(server.uri, "x", warn=warnings.append)
        recorder.store.connect()
        study_tries = len(server.requests(GET_BY_NAME))
    assert train_tries == study_tries == 1 + HTTP_POLICY.max_retries
    assert recorder.store.broken is not None and len(warnings) == 1 and "cannot reach" in warnings[0]


def test_nested_and_concurrent_calls_keep_the_policy_until_the_last_one_ends() -> None:
    inside, release = threading.Event(), threading.Event()
    seen: list[str | None] = []

    def other_call() -> None:
        with http_policy():
            inside.set()
            release.wait(10)
            seen.append(os.environ.get("MLFLOW_HTTP_REQUEST_MAX_RETRIES"))

    with http_policy():
        with http_policy():
            assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == str(HTTP_POLICY.max_retries)
        assert os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == str(HTTP_POLICY.timeout_s)
        thread = threading.Thread(target=other_call)
        thread.start()
        assert inside.wait(10)
    # This call ended while the other thread's is still running: the policy stays for it.
    release.set()
    thread.join(10)
    assert seen == [str(HTTP_POLICY.max_retries)]
    assert not any(key in os.environ for key in POLICY_VARIABLES)


def test_batches_values_and_statuses_against_a_real_store(sqlite_tracking_uri: str) -> None:
    client = TrackingClient(sqlite_tracking_uri)
    experiment = ensure_experiment(client, sqlite_tracking_uri, "batches", deleted_hint="")
    run_id = client.create_run(experiment, run_name="r").info.run_id
    params = {f"p{i}": i for i in range(2 * MAX_PARAMS_PER_BATCH + 5)} | {"none": None, "uri": "http://u:pw@host"}
    tags = {f"t{i}": i for i in range(MAX_TAGS_PER_BATCH + 1)}
    metrics = {f"m/{i}": float(i) for i in range(MAX_METRICS_PER_BATCH + 1)} | {"up": math.inf, "down": -math.inf}
    client.log_params(run_id, params)  # more than one batch each: the store enforces the limits
    client.log_tags(run_id, tags)
    client.log_metrics(run_id, metrics, step=3)
    client.set_terminated(run_id, "diverged")
    run = client.get_run(run_id)
    assert len(run.data.params) == len(params) and run.data.params["none"] == "None"
    assert run.data.params["uri"] == "http://u:***@host"
    assert {k: run.data.tags[k] for k in tags} == {k: str(v) for k, v in tags.items()}
    assert run.data.metrics["m/1000"] == 1000.0 and len(client.get_metric_history(run_id, "m/7")) == 1
    assert math.isnan(run.data.metrics["up"]) and math.isnan(run.data.metrics["down"])
    assert run.info.status == "FINISHED"
    assert client.find_run("0" * 32) is None
    assert set(MLFLOW_RUN_STATUS) == set(RUN_STATUSES) - {"running"}


def test_no_module_but_the_client_calls_log_batch_or_sets_the_http_policy() -> None:
    package = Path(__file__).resolve().parents[1] / "harness"
    writers = sorted(
        path.relative_to(package).as_posix()
        for path in package.rglob("*.py")
        if any(text in path.read_text() for text in ("log_batch(", "MLFLOW_HTTP_REQUEST", "MlflowClient("))
    )
    assert writers == ["mlflow_client.py"]


def test_every_link_into_the_ui_opens_the_model_training_view() -> None:
    """The links the harness prints or writes into descriptions (the study's parent run, the
    report in its Artifacts tab, the scorecard run, `harness ui`'s experiments page) are made
    by one function that adds MLflow 3's ``workflowType=machine_learning`` (without it the UI
    opens its GenAI view); no other module spells a UI route itself."""
    assert run_page_link("1", "abc") == "#/experiments/1/runs/abc?workflowType=machine_learning"
    assert (
        run_page_link("1", "abc", "artifacts/report/report.html")
        == "#/experiments/1/runs/abc/artifacts/report/report.html?workflowType=machine_learning"
    )
    assert ui_link("experiments") == "#/experiments?workflowType=machine_learning"
    package = Path(__file__).resolve().parents[1] / "harness"
    spelled = sorted(
        path.relative_to(package).as_posix() for path in package.rglob("*.py") if "#/experiments" in path.read_text()
    )
    assert spelled == [], f"UI routes spelled outside harness.mlflow_client.ui_link: {spelled}"
