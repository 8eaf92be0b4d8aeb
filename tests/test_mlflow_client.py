"""The harness's one MLflow client (harness.mlflow_client): one HTTP policy for `harness train`
and for a study, carried by the client and never put into the environment; batches within the
API's limits; one rule for values and statuses. Against real servers: a real local HTTP server answering 503,
and a real SQLite store."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
from harness_support import FlakyProxy
from mlflow.exceptions import MlflowException

from harness.errors import InputError
from harness.mlflow_client import (
    HTTP_POLICY,
    HTTP_POLICY_VARIABLES,
    MAX_METRICS_PER_BATCH,
    MAX_PARAMS_PER_BATCH,
    MAX_TAGS_PER_BATCH,
    MLFLOW_RUN_STATUS,
    QUIET_PROCESS,
    RUN_STATUSES,
    TrackingClient,
    ensure_experiment,
    quiet_mlflow,
    run_page_link,
    ui_link,
)
from harness.mlflow_transport import PolicyRestStore, artifact_repository
from harness.studies.record.recorder import StudyRecorder
from harness.training.tracking import prepare_tracking

POLICY_VARIABLES = tuple(HTTP_POLICY_VARIABLES.values())
GET_BY_NAME = "/experiments/get-by-name"


@pytest.fixture(autouse=True)
def _no_user_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    """The policy's own values, whatever the environment running the tests sets."""
    for key in POLICY_VARIABLES:
        monkeypatch.delenv(key, raising=False)


def test_a_failing_request_is_tried_once_plus_the_policys_retries_and_the_environment_is_left_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The policy goes to MLflow's ``http_request`` as its arguments; the environment, read at
    each request, is the one the test started with."""
    import harness.mlflow_transport as transport

    before = dict(os.environ)
    seen: list[tuple[dict[str, str], dict[str, object]]] = []
    send = transport.http_request

    def recording(*args: object, **kwargs: object) -> object:
        seen.append((dict(os.environ), {k: kwargs.get(k) for k in HTTP_POLICY_VARIABLES}))
        return send(*args, **kwargs)

    monkeypatch.setattr(transport, "http_request", recording)
    with FlakyProxy() as server:  # answers 503 to everything
        client = TrackingClient(server.uri)
        with pytest.raises(MlflowException):
            client.get_experiment_by_name("x")
        assert [status for *_, status in server.requests(GET_BY_NAME)] == [503] * (1 + HTTP_POLICY.max_retries)
    assert seen and all(env == before for env, _ in seen)
    policy = {"max_retries": 2, "backoff_factor": 0, "backoff_jitter": 0.2, "timeout": 10}
    assert all(arguments == policy for _, arguments in seen)
    assert dict(os.environ) == before
    # The policy is this client's: MLflow's registry still makes its own store for the URI.
    from mlflow.tracking._tracking_service.utils import _get_store

    assert isinstance(client._mlflow._tracking_client.store, PolicyRestStore)
    assert not isinstance(_get_store(server.uri), PolicyRestStore)


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


def test_artifact_transfers_with_a_server_follow_the_policy(tmp_path: Path) -> None:
    """An upload, a listing and a download of the server's artifact service (``mlflow-artifacts:``
    resolved against the tracking URI) are each tried once plus the policy's retries."""
    local = tmp_path / "report.html"
    local.write_text("<p>report</p>")
    with FlakyProxy() as server:
        repository = artifact_repository("mlflow-artifacts:/1/abc/artifacts", server.uri, HTTP_POLICY)
        with pytest.raises(Exception, match="503"):
            repository.log_artifact(str(local), "report")
        with pytest.raises(Exception, match="503"):
            repository.list_artifacts()
        with pytest.raises(Exception, match="503"):
            repository._download_file("report/report.html", str(tmp_path / "copy.html"))
        artifacts = [(method, path) for method, path, _ in server.requests() if "/mlflow-artifacts/" in path]
    tries = 1 + HTTP_POLICY.max_retries
    put = ("PUT", "/api/2.0/mlflow-artifacts/artifacts/1/abc/artifacts/report/report.html")
    listing = ("GET", "/api/2.0/mlflow-artifacts/artifacts")
    get = ("GET", put[1])
    assert artifacts == [put] * tries + [listing] * tries + [get] * tries


def test_the_artifact_progress_bar_is_off_unless_the_user_asks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Set once for the process by ``harness``'s entry point (MLflow reads it from the
    environment only); a value the user set is kept."""
    for key in QUIET_PROCESS:
        monkeypatch.delenv(key, raising=False)
    quiet_mlflow()
    assert {key: os.environ[key] for key in QUIET_PROCESS} == {"MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"}
    monkeypatch.setenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "true")
    quiet_mlflow()
    assert os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] == "true"


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


def test_no_module_but_the_client_calls_log_batch_or_names_the_http_policy() -> None:
    package = Path(__file__).resolve().parents[1] / "harness"
    writers = sorted(
        path.relative_to(package).as_posix()
        for path in package.rglob("*.py")
        if any(text in path.read_text() for text in ("log_batch(", "MLFLOW_HTTP_REQUEST", "MlflowClient("))
    )
    assert writers == ["mlflow_client.py", "mlflow_transport.py"]  # the client and its transport


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
