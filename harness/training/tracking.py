"""MLflow bookkeeping of one training run: where to write, what the run holds, how it ends.

Where: the tracking URI from the flag, else ``$MLFLOW_TRACKING_URI``, else
``sqlite:///<cwd>/mlflow.db``; never the deprecated file store (``file:`` URIs and plain
paths are refused). Everything that can be wrong with the target (missing or read-only
directory, unreachable server) is found by :func:`prepare_tracking` *before* a run is
created, so that bad input never leaves a run behind in ``RUNNING`` state.

What: params are the full resolved :class:`~harness.training.config.TrainConfig`
(flattened, ``None`` written as ``"None"``); tags name the variant and its components,
the dataset, size, context length, seed, the harness git commit and the run ``status``
(``running`` -> ``finished`` | ``diverged`` | ``failed``); metrics are logged in batches
(``MlflowClient.log_batch``) at evaluation time only, so that logging costs nothing per
training step; the corpus is declared as dataset inputs and the run's description
(``mlflow.note.content``) holds its slots, seed, shape and final numbers.

Nothing here runs at import time; ``mlflow`` is imported inside the functions.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from harness.errors import InputError
from harness.training.description import NOTE_TAG

# log_batch limits of the MLflow REST API (the SQL store enforces them too).
_MAX_METRICS_PER_BATCH = 1000
_MAX_PARAMS_PER_BATCH = 100
_MAX_TAGS_PER_BATCH = 100

#: Run states written to the ``status`` tag (MLflow's own run status says FINISHED/FAILED/KILLED).
RUN_STATUSES = ("running", "finished", "diverged", "failed", "killed")


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


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-") or "experiment"


#: Tags of every experiment the harness creates. ``mlflow.experimentKind`` makes MLflow 3's
#: UI open it as model training (runs table, metric charts), not as a GenAI app (traces).
EXPERIMENT_TAGS = {"mlflow.experimentKind": "custom_model_development"}


def ensure_experiment(client: Any, tracking_uri: str, name: str, *, deleted_hint: str) -> str:
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


@dataclass(frozen=True)
class TrackingTarget:
    """A checked tracking store and experiment, ready for :meth:`start_run`."""

    tracking_uri: str
    experiment_name: str
    experiment_id: str

    def client(self) -> Any:
        from mlflow import MlflowClient

        return MlflowClient(tracking_uri=self.tracking_uri)

    def start_run(
        self,
        *,
        run_name: str,
        params: Mapping[str, Any],
        tags: Mapping[str, Any],
    ) -> TrackedRun:
        """Create a run (status ``RUNNING``, tag ``status=running``) holding ``params`` and ``tags``."""
        from mlflow.entities import Param, RunTag

        client = self.client()
        all_tags = {**{k: redact_uri(str(v)) for k, v in tags.items()}, "status": "running"}
        run = client.create_run(self.experiment_id, run_name=run_name)
        tracked = TrackedRun(client=client, run_id=run.info.run_id)
        try:
            items = [Param(k, _param_value(v)) for k, v in params.items()]
            for i in range(0, len(items), _MAX_PARAMS_PER_BATCH):
                client.log_batch(run.info.run_id, params=items[i : i + _MAX_PARAMS_PER_BATCH])
            tag_items = [RunTag(k, v) for k, v in all_tags.items()]
            for i in range(0, len(tag_items), _MAX_TAGS_PER_BATCH):
                client.log_batch(run.info.run_id, tags=tag_items[i : i + _MAX_TAGS_PER_BATCH])
        except BaseException:
            tracked.end("failed")
            raise
        return tracked

    def resume_run(self, run_id: str) -> TrackedRun | None:
        """Reopen an earlier run of this experiment (a resumed training run continues its
        MLflow run); ``None`` when the store does not hold it."""
        from mlflow.exceptions import MlflowException

        client = self.client()
        try:
            run = client.get_run(run_id)
        except MlflowException:
            return None
        if run.info.experiment_id != self.experiment_id or run.info.lifecycle_stage != "active":
            return None
        client.update_run(run_id, status="RUNNING")
        client.set_tag(run_id, "status", "running")
        return TrackedRun(client=client, run_id=run_id)


def redact_uri(text: str) -> str:
    """``text`` without the password of a URI in it (``http://user:secret@host`` ->
    ``http://user:***@host``): params, tags and printed lines never carry credentials."""
    if "@" not in text or "://" not in text:
        return text
    return _USERINFO.sub(lambda m: f"{m.group(1)}{m.group(2)}:***@", text)


# scheme://user:password@  (the password is everything up to the last '@' of the authority)
_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)([^:/@\s]*):[^/\s]*@")


def _param_value(value: Any) -> str:
    return "None" if value is None else redact_uri(str(value))


@dataclass
class TrackedRun:
    """An open MLflow run: batch metric logging, artifacts, and a guaranteed end state."""

    client: Any
    run_id: str
    ended: bool = False

    def log_metrics(self, metrics: Mapping[str, float], *, step: int) -> None:
        """Log ``metrics`` at ``step`` in as few ``log_batch`` calls as the API allows."""
        from mlflow.entities import Metric

        timestamp = int(time.time() * 1000)
        items = [Metric(k, float(v), timestamp, int(step)) for k, v in metrics.items()]
        for i in range(0, len(items), _MAX_METRICS_PER_BATCH):
            self.client.log_batch(self.run_id, metrics=items[i : i + _MAX_METRICS_PER_BATCH])

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        from mlflow.entities import RunTag

        if tags:
            self.client.log_batch(self.run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])

    def log_artifact(self, path: str | os.PathLike[str], artifact_path: str | None = None) -> None:
        self.client.log_artifact(self.run_id, str(path), artifact_path)

    def declare_corpus(self, name: str, *, data_dir: str | None = None) -> None:
        """The run's corpus as MLflow dataset inputs (name, sha256 digest, source, split as
        context: :mod:`harness.datasets.mlflow_datasets`)."""
        from harness.datasets.mlflow_datasets import corpus_inputs  # imports MLflow: see the module docstring

        self.client.log_inputs(self.run_id, datasets=corpus_inputs([name], data_dir=data_dir))

    def set_description(self, markdown: str) -> None:
        """The run's description (tag ``mlflow.note.content``), shown first on its page."""
        self.client.set_tag(self.run_id, NOTE_TAG, markdown)

    def end(self, status: str) -> None:
        """End the run: ``finished``/``diverged`` -> FINISHED, ``killed`` -> KILLED, else FAILED.

        Idempotent; never raises over an exception that is already propagating (an
        unreachable store at this point is reported, not raised)."""
        if self.ended:
            return
        self.ended = True
        mlflow_status = {"finished": "FINISHED", "diverged": "FINISHED", "killed": "KILLED"}.get(status, "FAILED")
        try:
            self.client.set_tag(self.run_id, "status", status)
        finally:
            self.client.set_terminated(self.run_id, status=mlflow_status)


def prepare_tracking(uri: str | None, experiment: str) -> TrackingTarget:
    """Resolve and check the tracking store, and get or create ``experiment`` in it.

    Any failure (bad URI, unwritable database, unreachable server) is an
    :class:`InputError` naming the URI. Creates no run. A new experiment in a SQLite
    store keeps its artifacts beside the database (``<db dir>/mlartifacts/<experiment>``)
    instead of MLflow's default ``./mlruns`` in whatever the working directory is.
    """
    resolved = resolve_tracking_uri(uri)
    check_tracking_uri(resolved)
    if not experiment or not experiment.strip():
        raise InputError("experiment name must not be empty (--experiment)")

    from mlflow import MlflowClient

    # Fail fast on an unreachable server instead of MLflow's minutes of retries.
    saved = {k: os.environ.get(k) for k in ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_TIMEOUT")}
    os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] = "0"
    os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] = "10"
    try:
        client = MlflowClient(tracking_uri=resolved)
        experiment_id = ensure_experiment(
            client,
            resolved,
            experiment,
            deleted_hint="restore it (mlflow experiments restore) or pass another --experiment",
        )
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - any store failure here is a bad URI for the user
        raise InputError(f"cannot use tracking URI {resolved!r}: {type(exc).__name__}: {exc}") from exc
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return TrackingTarget(tracking_uri=resolved, experiment_name=experiment, experiment_id=experiment_id)


def harness_git_commit() -> str:
    """``git rev-parse HEAD`` of the repository holding this harness, or ``unknown`` when
    it is not a git checkout (e.g. an installed wheel) or git is missing."""
    root = Path(__file__).resolve().parents[2]
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() or "unknown"
