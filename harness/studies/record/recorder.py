"""The MLflow record of a study, written from the Ray Tune driver only.

One writer (the driver) is what lets a study record into SQLite while dozens of trials
run: trials report to Tune, and :class:`~harness.studies.record.tune_callback.MlflowStudyCallback`
turns Tune's events into calls of :class:`StudyRecorder`:

====================  ===============================================================
Tune event            MLflow
====================  ===============================================================
(before the study)    parent run: tags ``harness.role=study``, ``harness.study``,
                      ``harness.spec_sha256``, ``harness.git_commit``,
                      ``harness.study_dir``; params: spec hash, grid size and factors;
                      artifact ``spec.yaml``; dataset inputs: every corpus of the study
on_trial_start        child run (``parent_run_id``) named by the trial id: factor tags,
                      ``harness.trial_id``, ``status=running``, params = TrainConfig,
                      its corpus as dataset inputs (:mod:`harness.datasets.mlflow_datasets`)
on_trial_result       each evaluation's metrics at its ``step`` (in ``log_batch`` calls;
                      the trial's last report adds no point, see on_trial_complete)
on_trial_complete     final metrics, ``window_losses.parquet`` (and gate/MOPE parameter
                      tables), ``status`` finished|diverged, the run description
                      (``mlflow.note.content``: slots, seed, shape, final numbers), run FINISHED
on_trial_error        ``status=failed``, the run description, run FAILED
(after the study)     ``results.parquet``, the report, parent run FINISHED
====================  ===============================================================

The record has three parts, each in a module of its own: the store, made safe
(:class:`~harness.studies.record.store.RecordStore`: an unreachable tracking server does not
stop a study; the first failure is reported once, clearly, and the study goes on with its
results kept in the Tune storage directory), the parent run's lifecycle
(:class:`~harness.studies.record.parent_run.ParentRun`) and the child runs' lifecycle
(:class:`~harness.studies.record.child_runs.ChildRuns`, one
:class:`~harness.studies.record.child_runs.TrialRecord` per trial). :class:`StudyRecorder` puts
them together and says where the record can be seen (:func:`run_ui_url`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.mlflow_client import RunStatus, TrackingClient, resolve_tracking_uri, run_ui_url
from harness.studies.record.child_runs import ChildRuns
from harness.studies.record.parent_run import ParentRun
from harness.studies.record.store import RecordStore

if TYPE_CHECKING:  # MLflow's entity, for annotations: MLflow loads with the first client (harness.mlflow_client)
    from mlflow.entities import Run


class StudyRecorder:
    """The MLflow record of one study: its parent run and a child run per trial, in a store
    whose first failure is warned about once, after which every call is a no-op (the study
    itself goes on)."""

    def __init__(self, tracking_uri: str, experiment: str, *, warn: Callable[[str], None] | None = None) -> None:
        self.store = RecordStore(tracking_uri, experiment, warn=warn)
        self.parent = ParentRun(self.store)
        self.children = ChildRuns(self.store)

    # -- the store ---------------------------------------------------------------------------
    @property
    def tracking_uri(self) -> str:
        return self.store.tracking_uri

    @property
    def experiment(self) -> str:
        return self.store.experiment

    @property
    def experiment_id(self) -> str | None:
        return self.store.experiment_id

    @property
    def broken(self) -> str | None:
        """Why MLflow calls stopped (None: they did not)."""
        return self.store.broken

    @property
    def active(self) -> bool:
        return self.store.active

    @property
    def client(self) -> TrackingClient:
        return self.store.client

    def connect(self) -> None:
        """Check the URI and get or create the experiment (no run is created): see
        :meth:`~harness.studies.record.store.RecordStore.connect`."""
        self.store.connect()

    def fail(self, what: str, exc: BaseException) -> None:
        """Record that the store failed while doing ``what`` (warned about once)."""
        self.store.fail(what, exc)

    # -- the parent run ----------------------------------------------------------------------
    @property
    def parent_run_id(self) -> str | None:
        return self.parent.run_id

    @property
    def created_parent(self) -> bool:
        """The parent run was created (not continued) here."""
        return self.parent.created

    def start_parent(
        self,
        *,
        study: str,
        study_run: str,
        spec_text: str,
        spec_sha256: str,
        params: Mapping[str, Any],
        tags: Mapping[str, str],
        previous_run_id: str | None = None,
        datasets: Sequence[str] = (),
        data_dir: str | None = None,
    ) -> str | None:
        """Create the study's parent run, or continue ``previous_run_id`` / the run tagged
        ``harness.study_run=study_run`` (a resumed study, whose child runs are read then), and
        declare the study's corpora (``datasets``) as its dataset inputs. Returns the run id."""
        return self.parent.start(
            study=study,
            study_run=study_run,
            spec_text=spec_text,
            spec_sha256=spec_sha256,
            params=params,
            tags=tags,
            previous_run_id=previous_run_id,
            datasets=datasets,
            data_dir=data_dir,
            on_continue=self.children.load,
        )

    def end_parent(
        self,
        status: RunStatus,
        *,
        results: Any = None,
        files: Sequence[Path] = (),
        metrics: Mapping[str, float] | None = None,
    ) -> None:
        """Log the results table and ``files``, tag ``status`` and end the parent run."""
        self.parent.end(status, results=results, files=files, metrics=metrics)

    def set_parent_tags(self, tags: Mapping[str, Any]) -> None:
        self.parent.set_tags(tags)

    # -- child runs --------------------------------------------------------------------------
    def child(
        self,
        trial_id: str,
        *,
        study: str,
        tags: Mapping[str, str],
        params: Mapping[str, Any],
        datasets: Sequence[str] = (),
        data_dir: str | None = None,
    ) -> str | None:
        """The trial's child run: the existing one (a retried or resumed trial) set back to
        RUNNING, or a new one with its tags and params; either way with its corpus
        (``datasets``) declared as dataset inputs (MLflow keeps each input once)."""
        if self.parent.run_id is None:
            return None
        return self.children.start(
            trial_id,
            parent_run_id=self.parent.run_id,
            study=study,
            tags=tags,
            params=params,
            datasets=datasets,
            data_dir=data_dir,
        )

    def child_run_id(self, trial_id: str) -> str | None:
        """The MLflow run id of trial ``trial_id``'s child run (created here, or found under a
        continued parent run); None when it has none."""
        return self.children.run_id(trial_id)

    def child_run(self, trial_id: str) -> Run | None:
        """Trial ``trial_id``'s child run as the store holds it now; None when the trial has
        none or the store failed (:attr:`broken` then says why)."""
        return self.children.run(trial_id)

    def set_child_tags(self, trial_id: str, tags: Mapping[str, Any]) -> None:
        self.children.set_tags(trial_id, tags)

    def trial_metrics(self, trial_id: str, metrics: Mapping[str, Any], *, step: int) -> None:
        """Metrics of one report (a replayed step is skipped): see
        :meth:`~harness.studies.record.child_runs.ChildRuns.metrics`."""
        self.children.metrics(trial_id, metrics, step=step)

    def backfill(self, trial_id: str, reports: Sequence[Mapping[str, Any]]) -> int:
        """Log the stored reports whose step the child run lacks; returns how many were logged:
        see :meth:`~harness.studies.record.child_runs.ChildRuns.backfill`."""
        return self.children.backfill(trial_id, reports)

    def end_trial(
        self,
        trial_id: str,
        status: RunStatus,
        *,
        metrics: Mapping[str, Any] | None = None,
        step: int = 0,
        files: Sequence[Path] = (),
        tags: Mapping[str, Any] | None = None,
        description: str | None = None,
    ) -> None:
        """Final metrics, artifacts, the ``status`` tag, the run's description and its end state."""
        self.children.end(trial_id, status, metrics=metrics, step=step, files=files, tags=tags, description=description)

    # -- where to see it ---------------------------------------------------------------------
    def ui_url(self, host: str = "127.0.0.1", port: int = 5000) -> str | None:
        """Where the MLflow UI (``harness ui``, or the tracking server itself) shows the
        parent run, in MLflow 3's "Model training" view (``workflowType``; its default is
        the GenAI view). Never with the URI's credentials: the browser asks for them."""
        if self.parent.run_id is None or self.store.experiment_id is None:
            return None
        return run_ui_url(self.tracking_uri, self.store.experiment_id, self.parent.run_id, host=host, port=port)


def default_tracking_uri(flag: str | None, spec_uri: str | None) -> str:
    """Precedence: ``--tracking-uri`` > the spec's ``tracking.uri`` > ``$MLFLOW_TRACKING_URI``
    > ``sqlite:///<cwd>/mlflow.db``."""
    return resolve_tracking_uri(flag or spec_uri)
