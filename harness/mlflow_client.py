"""The harness's one MLflow client: every call the harness makes to MLflow goes through here.

``harness train`` (:mod:`harness.training.tracking`), the study recorder
(:mod:`harness.studies.record.recorder`), the record of a study from its storage directory
(:mod:`harness.studies.replay`), the report (:func:`harness.report.study.log_report`), the
analysis reading a study back (:mod:`harness.analysis.results`) and ``harness submit`` all hold a
:class:`TrackingClient`, so they share one set of rules:

- **where**: :func:`resolve_tracking_uri` (flag > ``$MLFLOW_TRACKING_URI`` >
  ``sqlite:///<cwd>/mlflow.db``), :func:`check_tracking_uri` (no file store; a SQLite database in
  an existing, writable directory) and :func:`ensure_experiment` (a new experiment keeps its
  artifacts beside a SQLite database and opens in MLflow's "model training" view);
- **the HTTP policy** (:data:`HTTP_POLICY`): how often a failed request is tried again, the pause
  between tries and how long one request may take, the same for a study and for a single run,
  carried by each client (:mod:`harness.mlflow_transport`), never put into the environment;
- **batches**: params, tags and metrics go out with ``log_batch`` in chunks of the REST API's
  limits (:data:`MAX_PARAMS_PER_BATCH`, :data:`MAX_TAGS_PER_BATCH`, :data:`MAX_METRICS_PER_BATCH`);
- **values**: a param or tag is text (``None`` -> ``"None"``) without the password of any URI in
  it (:func:`redact_uri`); a metric is a float, and +-inf is written as NaN
  (:func:`metric_value`);
- **statuses**: the ``status`` tag of a run (:data:`RunStatus`) and the MLflow run status it
  ends with (:data:`MLFLOW_RUN_STATUS`);
- **links**: every link into the MLflow UI the harness prints or writes (:func:`ui_link`,
  :func:`run_page_link`) opens MLflow 3's "Model training" view (:data:`UI_VIEW`), never its
  default GenAI view.

MLflow is imported by the first :class:`TrackingClient`, not by this module: ``import mlflow``
costs about 5 s on the shared 2-CPU machine (``python -X importtime -c "import mlflow"``: 5.5 s
cumulative), which ``harness --help``, ``harness run --dry-run``, a bad spec and a bad URI
(all of which import this module for the URI rules) do not pay.
"""

from __future__ import annotations

import math
import os
import random
import re
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar, get_args
from urllib.parse import urlparse

from harness.errors import InputError

if TYPE_CHECKING:  # MLflow's types, for annotations only: see the module docstring
    from mlflow.entities import DatasetInput, Experiment, FileInfo, Metric, Run
    from mlflow.store.entities.paged_list import PagedList

# -- where ----------------------------------------------------------------------------------------


def resolve_tracking_uri(uri: str | None = None) -> str:
    """The tracking URI to use: ``uri``, else ``$MLFLOW_TRACKING_URI``, else a SQLite
    database ``mlflow.db`` in the working directory (absolute, so that a later ``chdir``
    changes nothing)."""
    if uri:
        return uri
    env = os.environ.get("MLFLOW_TRACKING_URI")
    if env:
        return env
    return f"sqlite:///{Path.cwd() / 'mlflow.db'}"


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///path`` URI (``None`` for an in-memory database)."""
    rest = uri[len("sqlite://") :]
    if rest in ("", "/", "/:memory:"):
        return None
    # sqlite:///relative.db -> "/relative.db" after the scheme's two slashes; SQLAlchemy reads
    # three slashes as relative, four as absolute.
    path = rest[1:] if rest.startswith("/") else rest
    return Path(path.split("?", 1)[0])


def check_tracking_uri(uri: str) -> None:
    """Raise :class:`InputError` for URIs that cannot work, without touching the store.

    The file store is refused (MLflow 3 deprecates it and raises unless
    ``MLFLOW_ALLOW_FILE_STORE`` is set); a SQLite database must lie in an existing,
    writable directory and, if it exists, be a writable file.
    """
    scheme = urlparse(uri).scheme.lower()
    if scheme in ("", "file") or (len(scheme) == 1 and uri[1:3] in (":\\", ":/")):  # plain path or C:\...
        raise InputError(
            f"tracking URI {uri!r} is a file store, which MLflow no longer supports; "
            "use a database such as sqlite:///path/to/mlflow.db or an http(s):// server"
        )
    if scheme == "sqlite":
        path = sqlite_path(uri)
        if path is None:
            return
        directory = path.parent.resolve()
        if not directory.is_dir():
            raise InputError(
                f"tracking URI {uri!r}: directory {directory} does not exist; create it or pass another --tracking-uri"
            )
        if not os.access(directory, os.W_OK | os.X_OK):
            raise InputError(
                f"tracking URI {uri!r}: directory {directory} is not writable; pass another --tracking-uri"
            )
        if path.exists() and (not path.is_file() or not os.access(path, os.R_OK | os.W_OK)):
            raise InputError(f"tracking URI {uri!r}: {path} is not a writable database file")


def is_server_uri(uri: str) -> bool:
    """Whether ``uri`` names a tracking server (reached over HTTP) rather than a database."""
    return urlparse(uri).scheme in ("http", "https", "databricks")


# -- links into the UI -----------------------------------------------------------------------------

#: The query that opens a page of the MLflow UI in MLflow 3's "Model training" view (the UI's
#: default is the GenAI view, whose run page hides metrics behind an assistant panel).
UI_VIEW = "workflowType=machine_learning"


def ui_link(route: str) -> str:
    """The UI's page ``route`` (``experiments``, ``experiments/1/runs/<id>``) as a link relative to
    the UI's root (its routes live in the URL's fragment), in the model-training view: prefix the
    UI's address (``http://127.0.0.1:5000/``), or use it as it is in a run's description."""
    return f"#/{route.strip('/')}?{UI_VIEW}"


def run_page_link(experiment_id: str, run_id: str, tab: str = "") -> str:
    """:func:`ui_link` of a run's page, or of one of its tabs (``artifacts/report/report.html``)."""
    return ui_link(f"experiments/{experiment_id}/runs/{run_id}" + (f"/{tab.strip('/')}" if tab else ""))


# -- metric names ---------------------------------------------------------------------------------

#: The end-of-run numbers of a training run (``final/val_loss`` in its reports and results).
SUMMARY_PREFIX = "final/"


def mlflow_metric_key(key: str) -> str:
    """The name a metric is stored under in MLflow: an end-of-run number without its slash
    (``final/val_loss`` -> ``final_val_loss``), every other name as it is (``val/loss``).

    MLflow's run page groups its charts by the part of a name before the last ``/`` and sorts
    the groups by name, slash-less names in its last group ("Model metrics"): a single-point
    ``final/*`` chart came before every curve (``gate/``, ``train/``, ``val/``). The results
    rebuild (:mod:`harness.analysis.results`) reads both spellings.

    >>> mlflow_metric_key("final/val_loss"), mlflow_metric_key("val/loss")
    ('final_val_loss', 'val/loss')
    """
    return key.replace("/", "_", 1) if key.startswith(SUMMARY_PREFIX) else key


def run_ui_url(tracking_uri: str, experiment_id: str, run_id: str, *, host: str = "127.0.0.1", port: int = 5000) -> str:
    """The page of a run in MLflow 3's "Model training" view: on the tracking server itself
    for an http(s) URI (without its credentials), else on ``harness ui`` at ``host:port``."""
    parsed = urlparse(tracking_uri)
    if parsed.scheme in ("http", "https"):
        base = parsed._replace(netloc=parsed.netloc.rsplit("@", 1)[-1], query="", fragment="").geturl()
    else:
        base = f"http://{host}:{port}"
    return f"{base.rstrip('/')}/{run_page_link(experiment_id, run_id)}"


# -- values ---------------------------------------------------------------------------------------

# scheme://user:password@  (the password is everything up to the last '@' of the authority)
_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)([^:/@\s]*):[^/\s]*@")


def redact_uri(text: str) -> str:
    """``text`` without the password of a URI in it (``http://user:secret@host`` ->
    ``http://user:***@host``): params, tags and printed lines never carry credentials."""
    if "@" not in text or "://" not in text:
        return text
    return _USERINFO.sub(lambda m: f"{m.group(1)}{m.group(2)}:***@", text)


def text_value(value: Any) -> str:
    """A param or tag value as MLflow stores it: text, ``None`` as ``"None"``, without the
    password of any URI in it."""
    return "None" if value is None else redact_uri(str(value))


def metric_value(value: float) -> float:
    """A metric as MLflow stores it: a float, with +-inf as NaN (the SQL store and the REST
    API disagree on infinities; NaN is stored alike by both)."""
    value = float(value)
    return value if math.isfinite(value) or math.isnan(value) else math.nan


# -- statuses -------------------------------------------------------------------------------------

#: The ``status`` tag of a run (a trial's, a study's parent's or a ``harness train`` run's).
RunStatus = Literal["running", "finished", "diverged", "failed", "killed", "interrupted"]
RUN_STATUSES: tuple[str, ...] = get_args(RunStatus)

#: MLflow's own run status for each ended ``status`` tag: a diverged run finished (divergence
#: is a finding), an interrupted one was stopped and continues on resume. Anything else: FAILED.
MLFLOW_RUN_STATUS: dict[str, str] = {
    "finished": "FINISHED",
    "diverged": "FINISHED",
    "failed": "FAILED",
    "killed": "KILLED",
    "interrupted": "KILLED",
}

#: MLflow run statuses that mean "ended".
ENDED_MLFLOW_STATUSES = ("FINISHED", "FAILED", "KILLED")


# -- the HTTP policy ------------------------------------------------------------------------------

#: MLflow's environment variable for each argument of its ``rest_utils.http_request`` that the
#: policy sets: MLflow reads the variable when a call leaves the argument out.
HTTP_POLICY_VARIABLES = {
    "max_retries": "MLFLOW_HTTP_REQUEST_MAX_RETRIES",
    "backoff_factor": "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR",
    "backoff_jitter": "MLFLOW_HTTP_REQUEST_BACKOFF_JITTER",
    "timeout": "MLFLOW_HTTP_REQUEST_TIMEOUT",
}


@dataclass(frozen=True)
class HttpPolicy:
    """How an MLflow request over HTTP is retried and timed out (a SQLite store makes none).

    A failed request (connection refused or reset, HTTP 408, 429 or 5xx) is sent again up to
    ``max_retries`` times: the first retry at once, the next after a random pause of up to
    ``backoff_jitter`` seconds (urllib3's ``backoff_factor * 2**(n - 1)`` is 0 here). One
    request waits at most ``timeout_s`` seconds to connect and as long again for its answer.

    So a flaky server (a request in a few failing) is ridden out, and a server that is down
    costs about 0.2 s before the caller knows: the study recorder's first failing call inside
    Tune's driver loop stays under Tune's 0.5 s slow-callback warning, and ``harness train``
    reports an unreachable server at once instead of after MLflow's minutes of retries.
    """

    max_retries: int = 2
    backoff_factor: int = 0
    backoff_jitter: float = 0.2
    timeout_s: int = 10

    def request_kwargs(self) -> dict[str, float]:
        """The policy as arguments of MLflow's ``http_request``, less each one whose variable
        (:data:`HTTP_POLICY_VARIABLES`) the user set: MLflow reads that one itself, so the
        user's own setting wins. Read at every request, never written."""
        values = {
            "max_retries": self.max_retries,
            "backoff_factor": self.backoff_factor,
            "backoff_jitter": self.backoff_jitter,
            "timeout": self.timeout_s,
        }
        return {arg: value for arg, value in values.items() if HTTP_POLICY_VARIABLES[arg] not in os.environ}


#: The one HTTP policy of the harness, carried by each :class:`TrackingClient` of a server
#: (:mod:`harness.mlflow_transport`).
HTTP_POLICY = HttpPolicy()

#: MLflow's settings the harness makes once, when its command starts (:func:`quiet_mlflow`).
QUIET_PROCESS = {"MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"}


def quiet_mlflow() -> None:
    """No progress bar per downloaded artifact (one per trial would bury a report's verdicts),
    unless the user's environment asks for one: set once for the process by ``harness``'s entry
    point, before any MLflow call. Why the environment: MLflow 3.18 reads it in
    ``file_utils.ArtifactProgressBar.set_pbar`` at each download and takes no argument for it.
    (MLflow's other print, "View run <name> at: <URL>" with the URL's password, is off per
    client: :class:`harness.mlflow_transport.PolicyTrackingService`.)"""
    for key, value in QUIET_PROCESS.items():
        os.environ.setdefault(key, value)


# -- the client -----------------------------------------------------------------------------------

#: The tag holding a run's creation token on a tracking server (see ``TrackingClient.create_run``).
CREATE_TOKEN_TAG = "harness.create_token"

_Made = TypeVar("_Made")

#: ``log_batch`` limits of the MLflow REST API (the SQL store enforces them too).
MAX_METRICS_PER_BATCH = 1000
MAX_PARAMS_PER_BATCH = 100
MAX_TAGS_PER_BATCH = 100


def _chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class TrackingClient:
    """``mlflow.MlflowClient`` under the harness's rules: on a server every request follows
    :data:`HTTP_POLICY` (this client's own store and artifact transfers,
    :func:`harness.mlflow_transport.install_http_policy`); params, tags and metrics are written
    in batches of the API's limits with the harness's value rules; a run ends with the MLflow
    status of its ``status`` tag. Methods take and return MLflow's own entities (``Run``, ``Experiment``, ...)."""

    def __init__(self, tracking_uri: str) -> None:
        from mlflow import MlflowClient  # MLflow loads with the first client: see the module docstring

        self.tracking_uri = tracking_uri
        self.remote = urlparse(tracking_uri).scheme in ("http", "https")
        self._mlflow = MlflowClient(tracking_uri=tracking_uri)
        if self.remote:
            from harness.mlflow_transport import install_http_policy

            install_http_policy(self._mlflow, HTTP_POLICY)

    # -- experiments ------------------------------------------------------------------------------
    def get_experiment_by_name(self, name: str) -> Experiment | None:
        return self._mlflow.get_experiment_by_name(name)

    def get_experiment(self, experiment_id: str) -> Experiment:
        return self._mlflow.get_experiment(experiment_id)

    def create_experiment(
        self, name: str, *, artifact_location: str | None = None, tags: Mapping[str, str] | None = None
    ) -> str:
        """A new experiment's id; a creation the server failed after making it is found by name
        (see :meth:`_resent`)."""

        def create() -> str:
            return self._mlflow.create_experiment(name, artifact_location=artifact_location, tags=tags)

        def made() -> str | None:
            found = self.get_experiment_by_name(name)
            return None if found is None else str(found.experiment_id)

        return self._resent(create, made)

    def search_experiments(self, *, max_results: int = 1000, page_token: str | None = None) -> PagedList[Experiment]:
        return self._mlflow.search_experiments(max_results=max_results, page_token=page_token)

    # -- runs -------------------------------------------------------------------------------------
    def create_run(
        self, experiment_id: str, *, run_name: str | None = None, tags: Mapping[str, Any] | None = None
    ) -> Run:
        """A new run (MLflow status RUNNING) holding ``tags`` (as :func:`text_value`). On a
        server, the run also carries a random :data:`CREATE_TOKEN_TAG`, by which a creation the
        server failed after making the run is found instead of made twice (:meth:`_resent`)."""
        texts = {k: text_value(v) for k, v in (tags or {}).items()}
        token = uuid.uuid4().hex
        if self.remote:
            texts[CREATE_TOKEN_TAG] = token

        def create() -> Run:
            return self._mlflow.create_run(experiment_id, run_name=run_name, tags=texts)

        def made() -> Run | None:
            found = self.search_runs([experiment_id], f"tags.`{CREATE_TOKEN_TAG}` = '{token}'", max_results=1)
            return found[0] if found else None

        return self._resent(create, made)

    def _resent(self, send: Callable[[], _Made], made: Callable[[], _Made | None] = lambda: None) -> _Made:
        """``send()``, sent again after a transient failure (HTTP 408, 429, 5xx or no answer)
        unless ``made()`` finds that the failed request took effect after all, at most
        ``HTTP_POLICY.max_retries`` times. Why here: MLflow resends a failed request only when
        repeating it is harmless, and a creation (a second run) or ``log_inputs`` is not on its
        list, so a flaky server would end a study at the first unlucky one; the harness can tell
        whether a creation was made, and ``log_inputs`` is deduplicated by the server."""
        from mlflow.exceptions import MlflowException

        for attempt in range(HTTP_POLICY.max_retries + 1):
            try:
                return send()
            except MlflowException as error:
                status = error.get_http_status_code()
                if not (self.remote and (status in (408, 429) or status >= 500)) or attempt == HTTP_POLICY.max_retries:
                    raise
            found = made()
            if found is not None:
                return found
            time.sleep(random.uniform(0, HTTP_POLICY.backoff_jitter))
        raise AssertionError("unreachable: the last attempt returns or raises")

    def get_run(self, run_id: str) -> Run:
        return self._mlflow.get_run(run_id)

    def find_run(self, run_id: str) -> Run | None:
        """The run ``run_id``, or None when the store does not hold it (or cannot be asked:
        MLflow raises the same ``MlflowException`` for both)."""
        from mlflow.exceptions import MlflowException

        try:
            return self.get_run(run_id)
        except MlflowException:
            return None

    def search_runs(
        self,
        experiment_ids: list[str],
        filter_string: str = "",
        *,
        max_results: int = 1000,
        order_by: list[str] | None = None,
        page_token: str | None = None,
    ) -> PagedList[Run]:
        return self._mlflow.search_runs(
            experiment_ids, filter_string, max_results=max_results, order_by=order_by, page_token=page_token
        )

    def get_metric_history(self, run_id: str, key: str) -> list[Metric]:
        return self._mlflow.get_metric_history(run_id, key)

    def reopen_run(self, run_id: str) -> None:
        """Set an earlier run back to RUNNING (tag ``status=running``): a resumed run continues it."""
        self._mlflow.update_run(run_id, status="RUNNING")
        self._mlflow.set_tag(run_id, "status", "running")

    def set_tag(self, run_id: str, key: str, value: Any) -> None:
        self._mlflow.set_tag(run_id, key, text_value(value))

    def set_terminated(self, run_id: str, status: str) -> None:
        """End the run with the MLflow status of the harness status ``status``
        (:data:`MLFLOW_RUN_STATUS`; FAILED for any other)."""
        self._mlflow.set_terminated(run_id, status=MLFLOW_RUN_STATUS.get(status, "FAILED"))

    # -- batches ----------------------------------------------------------------------------------
    def log_params(self, run_id: str, params: Mapping[str, Any]) -> None:
        """``params`` as text (:func:`text_value`), in batches of :data:`MAX_PARAMS_PER_BATCH`."""
        from mlflow.entities import Param

        self._log_batch(run_id, "params", [Param(k, text_value(v)) for k, v in params.items()], MAX_PARAMS_PER_BATCH)

    def log_tags(self, run_id: str, tags: Mapping[str, Any]) -> None:
        """``tags`` as text (:func:`text_value`), in batches of :data:`MAX_TAGS_PER_BATCH`."""
        from mlflow.entities import RunTag

        self._log_batch(run_id, "tags", [RunTag(k, text_value(v)) for k, v in tags.items()], MAX_TAGS_PER_BATCH)

    def log_metrics(self, run_id: str, metrics: Mapping[str, float], *, step: int) -> None:
        """``metrics`` at ``step`` (one timestamp; :func:`metric_value`), in as few batches
        as :data:`MAX_METRICS_PER_BATCH` allows."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(k, metric_value(v), now, int(step)) for k, v in metrics.items()]
        self._log_batch(run_id, "metrics", items, MAX_METRICS_PER_BATCH)

    def _log_batch(self, run_id: str, kind: str, items: Sequence[Any], size: int) -> None:
        """The harness's only ``log_batch``: ``items`` of one ``kind`` in chunks of ``size``."""
        for chunk in _chunks(items, size):
            self._mlflow.log_batch(run_id, **{kind: list(chunk)})

    # -- artifacts and inputs ---------------------------------------------------------------------
    def log_artifact(self, run_id: str, path: str | os.PathLike[str], artifact_path: str | None = None) -> None:
        self._mlflow.log_artifact(run_id, str(path), artifact_path)

    def list_artifacts(self, run_id: str, path: str | None = None) -> list[FileInfo]:
        return self._mlflow.list_artifacts(run_id, path)

    def download_artifacts(self, run_id: str, path: str, dst_path: str | None = None) -> str:
        return self._mlflow.download_artifacts(run_id, path, dst_path)

    def log_inputs(self, run_id: str, datasets: Sequence[DatasetInput]) -> None:
        """Record ``datasets`` as the run's inputs (sent again after a transient failure: the
        server keeps one input per dataset and run)."""

        def send() -> None:
            self._mlflow.log_inputs(run_id, datasets=list(datasets))

        self._resent(send)


# -- experiments ----------------------------------------------------------------------------------

#: Tags of every experiment the harness creates. ``mlflow.experimentKind`` makes MLflow 3's
#: UI open it as model training (runs table, metric charts), not as a GenAI app (traces).
EXPERIMENT_TAGS = {"mlflow.experimentKind": "custom_model_development"}


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-") or "experiment"


def ensure_experiment(client: TrackingClient, tracking_uri: str, name: str, *, deleted_hint: str) -> str:
    """The id of the active experiment ``name``, created (with :data:`EXPERIMENT_TAGS`) if
    missing. A new experiment in a SQLite store keeps its artifacts beside the database
    (``<db dir>/mlartifacts/<name>``) instead of MLflow's default ``./mlruns`` in whatever
    the working directory is. A deleted one is an :class:`InputError` ending in
    ``deleted_hint`` (what the user does instead)."""
    found = client.get_experiment_by_name(name)
    if found is not None and found.lifecycle_stage != "active":
        raise InputError(f"MLflow experiment {name!r} at {redact_uri(tracking_uri)} is deleted; {deleted_hint}")
    if found is not None:
        return str(found.experiment_id)
    location = None
    db = sqlite_path(tracking_uri) if urlparse(tracking_uri).scheme == "sqlite" else None
    if db is not None:
        location = (db.parent.resolve() / "mlartifacts" / _slug(name)).as_uri()
    return str(client.create_experiment(name, artifact_location=location, tags=EXPERIMENT_TAGS))


# -- provenance -----------------------------------------------------------------------------------


def harness_git_commit() -> str:
    """``git rev-parse HEAD`` of the repository holding this harness (the tag
    ``harness.git_commit`` of every run it records), or ``unknown`` when it is not a git
    checkout (e.g. an installed wheel) or git is missing."""
    root = Path(__file__).resolve().parents[1]
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() or "unknown"
