"""MLflow bookkeeping of one training run: where to write, what the run holds, how it ends.

Where: the tracking URI from the flag, else ``$MLFLOW_TRACKING_URI``, else
``sqlite:///<cwd>/mlflow.db``; never the deprecated file store (``file:`` URIs and plain
paths are refused). Everything that can be wrong with the target (missing or read-only
directory, unreachable server) is found by :func:`prepare_tracking` *before* a run is
created, so that bad input never leaves a run behind in ``RUNNING`` state.

The store is reached through :class:`harness.mlflow_client.TrackingClient` (its HTTP
policy, batches, value rules and statuses are those of every MLflow call of the harness).

What: params are the full resolved :class:`~harness.training.config.TrainConfig`
(flattened, ``None`` written as ``"None"``); tags name the variant and its components,
the dataset, size, context length, seed, the harness git commit and the run ``status``
(``running`` -> ``finished`` | ``diverged`` | ``failed``); metrics are logged in batches
(``log_batch``) at evaluation time only, so that logging costs nothing per
training step; the corpus is declared as dataset inputs and the run's description
(``mlflow.note.content``) holds its slots, seed, shape and final numbers.

Nothing here runs at import time, and importing this module does not import MLflow: the
client loads it with the first call (:mod:`harness.mlflow_client`), and the corpus's dataset
entities (:mod:`harness.datasets.mlflow_datasets`) when a run declares its corpus. So the
training core imports on a machine without MLflow (a GPU lease's image: ``harness device``),
where runs train with ``mlflow_logging=False``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harness.errors import InputError
from harness.mlflow_client import (
    RunStatus,
    TrackingClient,
    check_tracking_uri,
    ensure_experiment,
    mlflow_metric_key,
    resolve_tracking_uri,
)
from harness.training.description import NOTE_TAG


@dataclass(frozen=True)
class TrackingTarget:
    """A checked tracking store and experiment, ready for :meth:`start_run`."""

    tracking_uri: str
    experiment_name: str
    experiment_id: str

    def client(self) -> TrackingClient:
        return TrackingClient(self.tracking_uri)

    def start_run(
        self,
        *,
        run_name: str,
        params: Mapping[str, Any],
        tags: Mapping[str, Any],
    ) -> TrackedRun:
        """Create a run (status ``RUNNING``, tag ``status=running``) holding ``params`` and ``tags``."""
        client = self.client()
        run = client.create_run(self.experiment_id, run_name=run_name)
        tracked = TrackedRun(client=client, run_id=run.info.run_id)
        try:
            client.log_params(run.info.run_id, params)
            client.log_tags(run.info.run_id, {**tags, "status": "running"})
        except BaseException:
            tracked.end("failed")
            raise
        return tracked

    def resume_run(self, run_id: str) -> TrackedRun | None:
        """Reopen an earlier run of this experiment (a resumed training run continues its
        MLflow run); ``None`` when the store does not hold it."""
        client = self.client()
        run = client.find_run(run_id)
        if run is None or run.info.experiment_id != self.experiment_id or run.info.lifecycle_stage != "active":
            return None
        client.reopen_run(run_id)
        return TrackedRun(client=client, run_id=run_id)


@dataclass
class TrackedRun:
    """An open MLflow run: batch metric logging, artifacts, and a guaranteed end state."""

    client: TrackingClient
    run_id: str
    ended: bool = False

    def log_metrics(self, metrics: Mapping[str, float], *, step: int) -> None:
        """Log ``metrics`` at ``step`` in as few ``log_batch`` calls as the API allows, an
        end-of-run number under its MLflow name (``final_val_loss``: after the curves on the
        run's page, :func:`~harness.mlflow_client.mlflow_metric_key`)."""
        self.client.log_metrics(self.run_id, {mlflow_metric_key(k): v for k, v in metrics.items()}, step=step)

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        if tags:
            self.client.log_tags(self.run_id, tags)

    def log_artifact(self, path: str | os.PathLike[str], artifact_path: str | None = None) -> None:
        self.client.log_artifact(self.run_id, path, artifact_path)

    def declare_corpus(self, name: str, *, data_dir: str | None = None) -> None:
        """The run's corpus as MLflow dataset inputs (name, sha256 digest, source, split as
        context: :mod:`harness.datasets.mlflow_datasets`, imported here: it imports MLflow)."""
        from harness.datasets.mlflow_datasets import corpus_inputs

        self.client.log_inputs(self.run_id, corpus_inputs([name], data_dir=data_dir))

    def set_description(self, markdown: str) -> None:
        """The run's description (tag ``mlflow.note.content``), shown first on its page."""
        self.client.set_tag(self.run_id, NOTE_TAG, markdown)

    def end(self, status: RunStatus) -> None:
        """End the run: ``finished``/``diverged`` -> FINISHED, ``killed`` -> KILLED, else FAILED.

        Idempotent; never raises over an exception that is already propagating (an
        unreachable store at this point is reported, not raised)."""
        if self.ended:
            return
        self.ended = True
        try:
            self.client.set_tag(self.run_id, "status", status)
        finally:
            self.client.set_terminated(self.run_id, status)


def prepare_tracking(uri: str | None, experiment: str) -> TrackingTarget:
    """Resolve and check the tracking store, and get or create ``experiment`` in it.

    Any failure (bad URI, unwritable database, unreachable server: after the retries of
    :data:`harness.mlflow_client.HTTP_POLICY`) is an :class:`InputError` naming the URI.
    Creates no run. A new experiment in a SQLite store keeps its artifacts beside the
    database (``<db dir>/mlartifacts/<experiment>``) instead of MLflow's default ``./mlruns``
    in whatever the working directory is.
    """
    resolved = resolve_tracking_uri(uri)
    check_tracking_uri(resolved)
    if not experiment or not experiment.strip():
        raise InputError("experiment name must not be empty (--experiment)")
    try:
        experiment_id = ensure_experiment(
            TrackingClient(resolved),
            resolved,
            experiment,
            deleted_hint="restore it (mlflow experiments restore) or pass another --experiment",
        )
    except InputError:
        raise
    except Exception as exc:  # any store failure here is a bad URI for the user
        raise InputError(f"cannot use tracking URI {resolved!r}: {type(exc).__name__}: {exc}") from exc
    return TrackingTarget(tracking_uri=resolved, experiment_name=experiment, experiment_id=experiment_id)
