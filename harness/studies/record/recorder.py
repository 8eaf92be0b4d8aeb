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
from typing import Any

from harness.mlflow_client import resolve_tracking_uri, run_ui_url
from harness.studies.record.child_runs import ChildRuns
from harness.studies.record.parent_run import ParentRun
from harness.studies.record.store import RecordStore


class StudyRecorder:
    """The MLflow record of one study: its parent run and a child run per trial, in a store
    whose first failure is warned about once, after which every call is a no-op (the study
    itself goes on).

    Its parts are used directly: :attr:`store` (connect, fail, broken, active, the client and
    the experiment), :attr:`parent` (its run id, tags, end) and :attr:`children` (each trial's
    run id, metrics, tags, end). The recorder itself holds only what joins them: a parent run
    started or continued with its child runs read (:meth:`start_parent`), a child run under the
    parent (:meth:`child`) and where the record can be seen (:meth:`ui_url`)."""

    def __init__(self, tracking_uri: str, experiment: str, *, warn: Callable[[str], None] | None = None) -> None:
        self.store = RecordStore(tracking_uri, experiment, warn=warn)
        self.parent = ParentRun(self.store)
        self.children = ChildRuns(self.store)

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

    def ui_url(self, host: str = "127.0.0.1", port: int = 5000) -> str | None:
        """Where the MLflow UI (``harness ui``, or the tracking server itself) shows the
        parent run, in MLflow 3's "Model training" view (``workflowType``; its default is
        the GenAI view). Never with the URI's credentials: the browser asks for them."""
        if self.parent.run_id is None or self.store.experiment_id is None:
            return None
        return run_ui_url(self.store.tracking_uri, self.store.experiment_id, self.parent.run_id, host=host, port=port)


def default_tracking_uri(flag: str | None, spec_uri: str | None) -> str:
    """Precedence: ``--tracking-uri`` > the spec's ``tracking.uri`` > ``$MLFLOW_TRACKING_URI``
    > ``sqlite:///<cwd>/mlflow.db``."""
    return resolve_tracking_uri(flag or spec_uri)
