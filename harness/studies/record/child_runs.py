"""The lifecycle of a study's child runs, one per trial: started (or continued, on a retry or a
resume), given its reports' metrics, filled in from storage, ended with its summary.

What the record knows of each trial's run is one :class:`TrialRecord`. Resuming never
duplicates: child runs are found again by ``harness.trial_id`` under the continued parent, and
metrics a restarted trial reports again (it replays from its last checkpoint) are skipped up to
the last step already logged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.mlflow_client import ENDED_MLFLOW_STATUSES, SUMMARY_PREFIX, RunStatus, mlflow_metric_key
from harness.studies.record.store import RecordStore
from harness.studies.tune.trainable import is_final_report
from harness.training.description import NOTE_TAG

if TYPE_CHECKING:  # MLflow's entity, for annotations: MLflow loads with the first client (harness.mlflow_client)
    from mlflow.entities import Run

#: Metrics every evaluation report holds: a step with one of them in MLflow was logged (one batch a report).
_STEP_MARKERS = ("val/loss", "train/loss", "train/batch_loss")
#: Result keys that are bookkeeping, not metrics (Tune's own and the trainable's).
_NOT_METRICS = {"step", "steps", "status", "wall_time_s", "resumed_from_step", "done"}
#: Summary metrics that are params of the run too (as built: MLflow plots and filters by params):
#: the parameter count and the vocabulary of the trial's model.
SUMMARY_PARAMS = ("num_parameters", "vocab_size")


def is_metric(key: str, value: Any) -> bool:
    """Metrics use the shared naming scheme (``val/loss``, ``gate/tau/l0h1``, ``gen_gap``);
    Tune's bookkeeping fields (``time_total_s``, ``training_iteration`` ...) are not logged."""
    if key in _NOT_METRICS or isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return "/" in key or key == "gen_gap" or key in SUMMARY_PARAMS


def is_summary(key: str) -> bool:
    """The end-of-run summary (``final/val_loss`` ..., ``num_parameters``, ``vocab_size``; in
    MLflow ``final_val_loss``: :func:`~harness.mlflow_client.mlflow_metric_key`): logged once,
    when the trial ends (:meth:`ChildRuns.end`), never with a report's curve points, although the
    trial's last evaluation reports it too (at the same step)."""
    return key.startswith((SUMMARY_PREFIX, mlflow_metric_key(SUMMARY_PREFIX))) or key in SUMMARY_PARAMS


@dataclass
class TrialRecord:
    """What the record knows of one trial's child run."""

    run_id: str
    #: The last metric step MLflow holds; None: not read yet (a run found under a continued
    #: parent is read when the trial starts again).
    logged_step: int | None = None
    params: set[str] = field(default_factory=set)  # the params the run holds
    #: The run ended finished or diverged before this driver: nothing is logged to it again.
    ended_before: bool = False
    summary_logged: set[str] = field(default_factory=set)  # summary metrics a continued run holds

    @property
    def top_step(self) -> int:
        """The last step logged, -1 when none (or not read yet)."""
        return -1 if self.logged_step is None else self.logged_step


def end_of_run_metrics(record: TrialRecord, metrics: Mapping[str, Any] | None) -> dict[str, float]:
    """The summary metrics of a trial's last report that its run lacks (MLflow's names): the
    evaluation metrics of the last step (best/val_loss too) are logged already by the live
    reports, and a driver that died between the two calls may have logged some of these."""
    return {
        mlflow_metric_key(k): float(v)
        for k, v in (metrics or {}).items()
        if is_metric(k, v) and is_summary(k) and mlflow_metric_key(k) not in record.summary_logged
    }


def log_missing_reports(client: Any, record: TrialRecord, reports: Sequence[Mapping[str, Any]]) -> int:
    """Log the ``reports`` whose step ``record``'s run lacks (the rule of
    :meth:`ChildRuns.backfill`); returns how many, and moves ``record.logged_step`` to the
    highest step MLflow holds."""
    histories: dict[str, set[int]] = {}

    def logged(key: str) -> set[int]:
        if key not in histories:
            histories[key] = {m.step for m in client.get_metric_history(record.run_id, key)}
        return histories[key]

    count, top = 0, record.top_step
    for report in reports:
        step = report.get("step")
        if not isinstance(step, (int, float)) or isinstance(step, bool) or is_final_report(report):
            continue
        values = {k: float(v) for k, v in report.items() if is_metric(k, v) and not is_summary(k)}
        markers = [k for k in _STEP_MARKERS if k in values] or sorted(values)
        if not values or any(int(step) in logged(k) for k in markers):
            continue
        client.log_metrics(record.run_id, values, step=int(step))
        for key in values:
            logged(key).add(int(step))
        count, top = count + 1, max(top, int(step))
    if record.logged_step is not None:  # live reports go on after the highest step MLflow holds
        record.logged_step = top
    return count


class ChildRuns:
    """The child runs of one parent run in ``store``, by trial id."""

    def __init__(self, store: RecordStore) -> None:
        self.store = store
        self.trials: dict[str, TrialRecord] = {}

    def load(self, parent_run_id: str) -> None:
        """The child runs a continued parent holds, with what each holds."""
        runs = self.store.client.search_runs(
            [self.store.experiment_id],
            filter_string=f"tags.`mlflow.parentRunId` = '{parent_run_id}'",
            max_results=50000,
        )
        for run in runs:
            trial_id = run.data.tags.get("harness.trial_id")
            if trial_id and trial_id not in self.trials:
                ended = run.info.status in ENDED_MLFLOW_STATUSES and run.data.tags.get("status") in (
                    "finished",
                    "diverged",
                )
                self.trials[trial_id] = TrialRecord(
                    run_id=run.info.run_id,
                    params=set(run.data.params),
                    ended_before=ended,
                    summary_logged={key for key in run.data.metrics if is_summary(key)},
                )

    def run_id(self, trial_id: str) -> str | None:
        record = self.trials.get(trial_id)
        return record.run_id if record is not None else None

    def run(self, trial_id: str) -> Run | None:
        """Trial ``trial_id``'s run as the store holds it now; None when it has none or the store failed."""
        run_id = self.run_id(trial_id)
        if run_id is None:
            return None
        return self.store.safely(f"reading the run of trial {trial_id}", lambda: self.store.client.get_run(run_id))

    def set_tags(self, trial_id: str, tags: Mapping[str, Any]) -> None:
        run_id = self.run_id(trial_id)
        if run_id is not None and tags:
            self.store.safely(f"tagging the run of trial {trial_id}", lambda: self.store.client.log_tags(run_id, tags))

    def start(
        self,
        trial_id: str,
        *,
        parent_run_id: str,
        study: str,
        tags: Mapping[str, str],
        params: Mapping[str, Any],
        datasets: Sequence[str] = (),
        data_dir: str | None = None,
    ) -> str | None:
        """The trial's run: the existing one (a retried or resumed trial) set back to RUNNING, or
        a new one with its tags and params; either way with its corpus (``datasets``) declared."""
        run_id = self.store.safely(
            f"starting the run of trial {trial_id}", lambda: self._start(trial_id, parent_run_id, study, tags, params)
        )
        if run_id is not None:
            self.store.declare_corpora(run_id, datasets, data_dir, f"declaring the corpus of trial {trial_id}")
        return run_id

    def _start(self, trial_id: str, parent_run_id: str, study: str, tags: Mapping[str, str], params: Mapping) -> str:
        client = self.store.client
        record = self.trials.get(trial_id)
        if record is not None and record.ended_before:
            # Its end is recorded: a resumed study whose driver died before Tune noted the
            # trial's end runs it again from its final checkpoint; nothing is logged twice.
            return record.run_id
        if record is not None:
            if record.logged_step is None:
                record.logged_step = self._last_step(record.run_id)
            client.reopen_run(record.run_id)
            record.params = self.store.complete_params(record.run_id, record.params, params)
            return record.run_id
        all_tags = {
            "mlflow.parentRunId": parent_run_id,
            "harness.role": "trial",
            "harness.study": study,
            **tags,
            "status": "running",
        }
        run = client.create_run(self.store.experiment_id, run_name=trial_id, tags=all_tags)
        record = self.trials[trial_id] = TrialRecord(run_id=run.info.run_id, logged_step=-1)
        client.log_params(record.run_id, params)
        record.params = set(params)
        return record.run_id

    def _last_step(self, run_id: str) -> int:
        client = self.store.client
        steps = [m.step for key in ("val/loss", "train/loss") for m in client.get_metric_history(run_id, key)]
        return max(steps, default=-1)

    def metrics(self, trial_id: str, metrics: Mapping[str, Any], *, step: int) -> None:
        """Metrics of one evaluation report; a step at or below the last logged one is a replay
        after a restart from a checkpoint and is skipped (no duplicated points). The trial's
        last report (:func:`~harness.studies.tune.trainable.is_final_report`) adds no curve
        point: its evaluation metrics are the last evaluation's, and a diverged trial stops
        off the evaluation steps; its summary is :meth:`end`'s."""
        record = self.trials.get(trial_id)
        if record is None or record.ended_before or step <= record.top_step:
            return
        if is_final_report(metrics):
            return
        values = {k: float(v) for k, v in metrics.items() if is_metric(k, v) and not is_summary(k)}
        if not values:
            return

        def log() -> bool:
            self.store.client.log_metrics(record.run_id, values, step=step)
            return True

        if self.store.safely(f"logging metrics of trial {trial_id}", log):
            record.logged_step = step

    def backfill(self, trial_id: str, reports: Sequence[Mapping[str, Any]]) -> int:
        """Log the reports of trial ``trial_id`` (Tune's ``result.json``, in order) whose step its
        run lacks; returns how many were logged.

        A report reaches MLflow live through :meth:`metrics`, which never logs a step at or
        below the last one logged. Reports made while the store was down under a driver that
        then died fall in a gap *below* the steps the resumed driver logs, so only the trial's
        stored reports can fill it. The rule is :meth:`metrics`'s: the first report of a
        step wins (a trial restarted from a checkpoint reports its steps again, with the same
        values on CPU), a step MLflow holds is left alone, the trial's last report adds no point
        and its summary is :meth:`end`'s.
        Works on ended runs too (MLflow logs to any run that is not deleted)."""
        record = self.trials.get(trial_id)
        if record is None:
            return 0
        filled = self.store.safely(
            f"filling in the metrics of trial {trial_id}",
            lambda: log_missing_reports(self.store.client, record, reports),
        )
        return filled or 0

    def end(
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
        """Final metrics, artifacts, the ``status`` tag, the run's description (markdown,
        :func:`~harness.training.description.trial_description`) and its end state."""
        record = self.trials.get(trial_id)
        if record is None or record.ended_before:
            return

        def _end() -> None:
            client = self.store.client
            values = end_of_run_metrics(record, metrics)
            if values:
                client.log_metrics(record.run_id, values, step=step)
            as_params = {k: int(values[k]) for k in SUMMARY_PARAMS if k in values}
            if as_params:
                record.params = self.store.complete_params(record.run_id, record.params, as_params)
            for f in files:
                client.log_artifact(record.run_id, f)
            all_tags = {**(tags or {}), "status": status}
            if description is not None:
                all_tags[NOTE_TAG] = description
            client.log_tags(record.run_id, all_tags)
            client.set_terminated(record.run_id, status)

        self.store.safely(f"finishing the run of trial {trial_id}", _end)
