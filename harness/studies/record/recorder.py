"""The MLflow record of a study, written from the Ray Tune driver only.

One writer (the driver) is what lets a study record into SQLite while dozens of trials
run: trials report to Tune, and :class:`MlflowStudyCallback` turns Tune's events into
MLflow calls:

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

Resuming never duplicates: the parent is found again by its run id (kept in the study's
storage directory) or by the tag ``harness.study_run``; child runs by ``harness.trial_id``
under that parent. Metrics a restarted trial reports again (it replays from its last
checkpoint) are skipped up to the last step already logged.

An unreachable tracking server does not stop a study: the first failure is reported once,
clearly, and the study goes on with its results kept in the Tune storage directory. Every
call goes through :class:`harness.mlflow_client.TrackingClient`, whose HTTP policy (the one of
``harness train`` too) makes a dead server's first failure cost about 0.2 s, not a stall of
Tune's driver loop.
"""

from __future__ import annotations

import logging
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from ray.tune import Callback

from harness.datasets.mlflow_datasets import corpus_inputs
from harness.errors import InputError
from harness.mlflow_client import (
    ENDED_MLFLOW_STATUSES,
    RunStatus,
    TrackingClient,
    check_tracking_uri,
    ensure_experiment,
    is_server_uri,
    redact_uri,
    resolve_tracking_uri,
    run_page_link,
)
from harness.studies.tune.progress import trial_error_summary
from harness.studies.tune.results_table import results_table
from harness.studies.tune.trainable import FINAL_ARTIFACTS, is_final_report
from harness.training.description import NOTE_TAG, trial_description

if TYPE_CHECKING:  # MLflow's entity, for annotations: MLflow loads with the first client (harness.mlflow_client)
    from mlflow.entities import Run

#: Metrics every evaluation report holds: a step with one of them in MLflow was logged (one batch a report).
_STEP_MARKERS = ("val/loss", "train/loss", "train/batch_loss")
#: Result keys that are bookkeeping, not metrics (Tune's own and the trainable's).
_NOT_METRICS = {"step", "steps", "status", "wall_time_s", "resumed_from_step", "done"}


def is_metric(key: str, value: Any) -> bool:
    """Metrics use the shared naming scheme (``val/loss``, ``gate/tau/l0h1``, ``gen_gap``);
    Tune's bookkeeping fields (``time_total_s``, ``training_iteration`` ...) are not logged."""
    if key in _NOT_METRICS or isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return "/" in key or key in ("gen_gap", "num_parameters")


def is_summary(key: str) -> bool:
    """The end-of-run summary (``final/val_loss`` ..., ``num_parameters``): logged once, when
    the trial ends (:meth:`StudyRecorder.end_trial`), never with a report's curve points,
    although the trial's last evaluation reports it too (at the same step)."""
    return key.startswith("final/") or key == "num_parameters"


class StudyRecorder:
    """MLflow calls of one study, made safe: after the first store failure it warns once
    and turns every later call into a no-op (the study itself goes on)."""

    def __init__(self, tracking_uri: str, experiment: str, *, warn: Callable[[str], None] | None = None) -> None:
        self.tracking_uri = tracking_uri
        self.experiment = experiment
        self.experiment_id: str | None = None
        self.parent_run_id: str | None = None
        self.created_parent = False  # the parent run was created (not continued) here
        self.broken: str | None = None  # why MLflow calls stopped
        self._warn = warn or (lambda msg: print(f"warning: {msg}", file=sys.stderr))
        self._client: TrackingClient | None = None
        self._children: dict[str, str] = {}  # trial id -> child run id
        self._logged_step: dict[str, int] = {}  # trial id -> last metric step in MLflow
        self._param_keys: dict[str, set[str]] = {}  # trial id -> params its child run holds
        self._ended: set[str] = set()  # trials whose child run ended finished or diverged before this driver
        self._summary_logged: dict[str, set[str]] = {}  # trial id -> summary metrics its continued run holds
        self._inputs: dict[str, list[Any]] = {}  # corpus name -> its MLflow dataset inputs

    # pickling (Tune stores its callbacks): live clients stay behind
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_client"] = None
        state["_warn"] = None
        state["_inputs"] = {}
        # Tune pickles its callbacks into the study directory (tuner.pkl); a resumed study
        # replaces them with fresh ones, so the stored copy needs no credentials.
        state["tracking_uri"] = redact_uri(self.tracking_uri)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._warn = lambda msg: print(f"warning: {msg}", file=sys.stderr)

    @property
    def client(self) -> TrackingClient:
        if self._client is None:
            self._client = TrackingClient(self.tracking_uri)
        return self._client

    @property
    def active(self) -> bool:
        return self.broken is None and self.experiment_id is not None

    def fail(self, what: str, exc: BaseException) -> None:
        """Record that the store failed while doing ``what``: the first failure is warned
        about (once) and :attr:`broken` set, after which every MLflow call is a no-op."""

        if self.broken is None:
            self.broken = f"{type(exc).__name__}: {exc}"
            self._warn(
                f"MLflow at {redact_uri(self.tracking_uri)} failed while {what} ({self.broken}). The study "
                "goes on without "
                "MLflow; every result is kept in the study's storage directory (results.parquet, Tune's trial "
                "results). Record it in MLflow later with `harness report` once the store is back (the "
                "command is printed "
                "when the study ends)."
            )

    def _safely(self, what: str, fn: Callable[[], Any]) -> Any:
        if not self.active:
            return None
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - a tracking failure must not kill the study
            self.fail(what, exc)
            return None

    # -- set-up ---------------------------------------------------------------------------
    def connect(self) -> None:
        """Check the URI and get or create the experiment (no run is created).

        Raises :class:`InputError` for URIs that cannot work (a file store, a SQLite
        database in a missing or read-only directory); an unreachable server is warned
        about and the study runs without MLflow."""
        check_tracking_uri(self.tracking_uri)
        logging.getLogger("mlflow.store.db.utils").setLevel(logging.WARNING)  # "Creating initial tables..."
        try:
            self.experiment_id = ensure_experiment(
                self.client,
                self.tracking_uri,
                self.experiment,
                deleted_hint="restore it (mlflow experiments restore) or set tracking.experiment in the spec",
            )
        except InputError:
            raise
        except Exception as exc:  # an unreachable server: run without MLflow; anything else is a bad URI
            if is_server_uri(self.tracking_uri):
                self.experiment_id = None
                self.broken = f"{type(exc).__name__}: {exc}"

                self._warn(
                    f"cannot reach the MLflow tracking server {redact_uri(self.tracking_uri)} "
                    f"({self.broken}). The study runs "
                    "without MLflow; results are kept in its storage directory. Record them in MLflow later with "
                    "`harness report` once the server is up (the command is printed when the study ends)."
                )
                return
            raise InputError(f"cannot use tracking URI {self.tracking_uri!r}: {type(exc).__name__}: {exc}") from exc

    # -- the parent run ---------------------------------------------------------------------
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
        ``harness.study_run=study_run`` (a resumed study), and declare the study's corpora
        (``datasets``) as its dataset inputs. Returns the run id."""
        run_id = self._safely(
            "creating the study's parent run",
            lambda: self._start_parent(study, study_run, spec_text, spec_sha256, params, tags, previous_run_id),
        )
        inputs = self._corpus_inputs(datasets, data_dir) if run_id is not None else []
        if inputs:
            self._safely("declaring the study's corpora", lambda: self.client.log_inputs(run_id, datasets=inputs))
        return run_id

    def _start_parent(self, study, study_run, spec_text, spec_sha256, params, tags, previous_run_id) -> str:
        client = self.client
        run = client.find_run(previous_run_id) if previous_run_id else None
        if run is not None and (run.info.experiment_id != self.experiment_id or run.info.lifecycle_stage != "active"):
            run = None
        if run is None:
            found = client.search_runs(
                [self.experiment_id],
                filter_string=f"tags.`harness.study_run` = '{study_run}' and tags.`harness.role` = 'study'",
                max_results=1,
            )
            run = found[0] if found else None
        if run is not None:
            self.parent_run_id = run.info.run_id
            client.reopen_run(self.parent_run_id)
            self._complete_params(self.parent_run_id, set(run.data.params), params)
            self._load_children()
            return self.parent_run_id
        all_tags = {
            "harness.role": "study",
            "harness.study": study,
            "harness.study_run": study_run,
            "harness.spec_sha256": spec_sha256,
            "status": "running",
            **tags,
        }
        run = client.create_run(self.experiment_id, run_name=study_run.replace("/", "-"), tags=all_tags)
        self.parent_run_id = run.info.run_id
        self.created_parent = True
        client.log_params(self.parent_run_id, params)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "spec.yaml"
            path.write_text(spec_text)
            client.log_artifact(self.parent_run_id, path)
        return self.parent_run_id

    def child_run_id(self, trial_id: str) -> str | None:
        """The MLflow run id of trial ``trial_id``'s child run (created here, or found under a
        continued parent run); None when it has none."""
        return self._children.get(trial_id)

    def child_run(self, trial_id: str) -> Run | None:
        """Trial ``trial_id``'s child run as the store holds it now; None when the trial has
        none or the store failed (:attr:`broken` then says why)."""
        run_id = self._children.get(trial_id)
        if run_id is None:
            return None
        return self._safely(f"reading the run of trial {trial_id}", lambda: self.client.get_run(run_id))

    def _load_children(self) -> None:
        """Child runs of the parent by trial id, and the params each holds."""
        runs = self.client.search_runs(
            [self.experiment_id],
            filter_string=f"tags.`mlflow.parentRunId` = '{self.parent_run_id}'",
            max_results=50000,
        )
        for run in runs:
            trial_id = run.data.tags.get("harness.trial_id")
            if trial_id and trial_id not in self._children:
                self._children[trial_id] = run.info.run_id
                self._param_keys[trial_id] = set(run.data.params)
                if run.info.status in ENDED_MLFLOW_STATUSES and run.data.tags.get("status") in ("finished", "diverged"):
                    self._ended.add(trial_id)
                self._summary_logged[trial_id] = {key for key in run.data.metrics if is_summary(key)}

    def end_parent(
        self,
        status: RunStatus,
        *,
        results: Any = None,
        files: Sequence[Path] = (),
        metrics: Mapping[str, float] | None = None,
    ) -> None:
        """Log the results table and ``files``, tag ``status`` and end the parent run."""
        if self.parent_run_id is None:
            return

        def _end() -> None:
            client = self.client
            with tempfile.TemporaryDirectory() as tmp:
                if results is not None:
                    path = Path(tmp) / "results.parquet"
                    results.write_parquet(path)
                    client.log_artifact(self.parent_run_id, path)
                for f in files:
                    client.log_artifact(self.parent_run_id, f)
            if metrics:
                client.log_metrics(self.parent_run_id, metrics, step=0)
            client.set_tag(self.parent_run_id, "status", status)
            client.set_terminated(self.parent_run_id, status)

        self._safely("finishing the study's parent run", _end)

    def set_parent_tags(self, tags: Mapping[str, Any]) -> None:
        if self.parent_run_id is not None and tags:
            self._safely("tagging the parent run", lambda: self.client.log_tags(self.parent_run_id, tags))

    # -- child runs -------------------------------------------------------------------------
    def set_child_tags(self, trial_id: str, tags: Mapping[str, Any]) -> None:
        run_id = self._children.get(trial_id)
        if run_id is not None and tags:
            self._safely(f"tagging the run of trial {trial_id}", lambda: self.client.log_tags(run_id, tags))

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
        if self.parent_run_id is None:
            return None
        run_id = self._safely(
            f"starting the run of trial {trial_id}", lambda: self._child(trial_id, study, tags, params)
        )
        inputs = self._corpus_inputs(datasets, data_dir) if run_id is not None else []
        if inputs:
            self._safely(
                f"declaring the corpus of trial {trial_id}", lambda: self.client.log_inputs(run_id, datasets=inputs)
            )
        return run_id

    def _corpus_inputs(self, names: Sequence[str], data_dir: str | None) -> list[Any]:
        """The MLflow dataset inputs of the corpora ``names`` (built once per corpus: see
        :mod:`harness.datasets.mlflow_datasets`). A corpus that cannot be described is
        warned about and left out: a declaration is context, never a reason to stop recording."""
        inputs = []
        for name in dict.fromkeys(names):
            if name not in self._inputs:
                try:
                    self._inputs[name] = corpus_inputs([name], data_dir=data_dir)
                except Exception as exc:  # noqa: BLE001 - see the docstring
                    self._warn(f"corpus {name} is not declared as an MLflow dataset ({type(exc).__name__}: {exc})")
                    self._inputs[name] = []
            inputs.extend(self._inputs[name])
        return inputs

    def _child(self, trial_id: str, study: str, tags: Mapping[str, str], params: Mapping[str, Any]) -> str:
        client = self.client
        run_id = self._children.get(trial_id)
        if run_id is not None and trial_id in self._ended:
            # Its end is recorded: a resumed study whose driver died before Tune noted the
            # trial's end runs it again from its final checkpoint; nothing is logged twice.
            return run_id
        if run_id is not None:
            if trial_id not in self._logged_step:
                self._logged_step[trial_id] = self._last_step(run_id)
            client.reopen_run(run_id)
            self._param_keys[trial_id] = self._complete_params(run_id, self._param_keys.get(trial_id, set()), params)
            return run_id
        all_tags = {
            "mlflow.parentRunId": self.parent_run_id,
            "harness.role": "trial",
            "harness.study": study,
            **tags,
            "status": "running",
        }
        run = client.create_run(self.experiment_id, run_name=trial_id, tags=all_tags)
        run_id = run.info.run_id
        self._children[trial_id] = run_id
        self._logged_step[trial_id] = -1
        client.log_params(run_id, params)
        self._param_keys[trial_id] = set(params)
        return run_id

    def _complete_params(self, run_id: str, have: set[str], params: Mapping[str, Any]) -> set[str]:
        """Log the ``params`` a continued run lacks (``have``: the keys it holds); returns the
        keys it holds now. A run is created, then given its params: when the store goes away
        between the two calls, the run exists without them, and continuing it (a resume,
        ``harness report``) must finish its record, not skip it."""
        missing = {key: value for key, value in params.items() if key not in have}
        if missing:
            self.client.log_params(run_id, missing)
        return have | set(missing)

    def _last_step(self, run_id: str) -> int:
        steps = [m.step for key in ("val/loss", "train/loss") for m in self.client.get_metric_history(run_id, key)]
        return max(steps, default=-1)

    def trial_metrics(self, trial_id: str, metrics: Mapping[str, Any], *, step: int) -> None:
        """Metrics of one evaluation report; a step at or below the last logged one is a replay
        after a restart from a checkpoint and is skipped (no duplicated points). The trial's
        last report (:func:`~harness.studies.tune.trainable.is_final_report`) adds no curve
        point: its evaluation metrics are the last evaluation's, and a diverged trial stops
        off the evaluation steps; its summary is :meth:`end_trial`'s."""
        run_id = self._children.get(trial_id)
        if run_id is None or trial_id in self._ended or step <= self._logged_step.get(trial_id, -1):
            return
        if is_final_report(metrics):
            return
        values = {k: float(v) for k, v in metrics.items() if is_metric(k, v) and not is_summary(k)}
        if not values:
            return

        def log() -> bool:
            self.client.log_metrics(run_id, values, step=step)
            return True

        if self._safely(f"logging metrics of trial {trial_id}", log):
            self._logged_step[trial_id] = step

    def backfill(self, trial_id: str, reports: Sequence[Mapping[str, Any]]) -> int:
        """Log the reports of trial ``trial_id`` (Tune's ``result.json``, in order) whose step its
        child run lacks; returns how many were logged.

        A report reaches MLflow live through :meth:`trial_metrics`, which never logs a step at or
        below the last one logged. Reports made while the store was down under a driver that
        then died fall in a gap *below* the steps the resumed driver logs, so only the trial's
        stored reports can fill it. The rule is :meth:`trial_metrics`'s: the first report of a
        step wins (a trial restarted from a checkpoint reports its steps again, with the same
        values on CPU), a step MLflow holds is left alone, the trial's last report adds no point
        and its summary is :meth:`end_trial`'s.
        Works on ended runs too (MLflow logs to any run that is not deleted)."""
        run_id = self._children.get(trial_id)
        if run_id is None:
            return 0
        histories: dict[str, set[int]] = {}

        def logged(key: str) -> set[int]:
            if key not in histories:
                histories[key] = {m.step for m in self.client.get_metric_history(run_id, key)}
            return histories[key]

        def fill() -> int:
            count, top = 0, self._logged_step.get(trial_id, -1)
            for report in reports:
                step = report.get("step")
                if not isinstance(step, (int, float)) or isinstance(step, bool) or is_final_report(report):
                    continue
                values = {k: float(v) for k, v in report.items() if is_metric(k, v) and not is_summary(k)}
                markers = [k for k in _STEP_MARKERS if k in values] or sorted(values)
                if not values or any(int(step) in logged(k) for k in markers):
                    continue
                self.client.log_metrics(run_id, values, step=int(step))
                for key in values:
                    logged(key).add(int(step))
                count, top = count + 1, max(top, int(step))
            if trial_id in self._logged_step:  # live reports go on after the highest step MLflow holds
                self._logged_step[trial_id] = top
            return count

        return self._safely(f"filling in the metrics of trial {trial_id}", fill) or 0

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
        """Final metrics, artifacts, the ``status`` tag, the run's description (markdown,
        :func:`~harness.training.description.trial_description`) and its end state."""
        run_id = self._children.get(trial_id)
        if run_id is None or trial_id in self._ended:
            return

        def _end() -> None:
            client = self.client
            # The evaluation metrics of the last step (best/val_loss too) are logged already
            # (on_trial_result): only the end-of-run summary is new here.
            logged = self._summary_logged.get(trial_id, set())  # before a driver died between the two calls
            values = {
                k: float(v) for k, v in (metrics or {}).items() if is_metric(k, v) and is_summary(k) and k not in logged
            }
            if values:
                client.log_metrics(run_id, values, step=step)
            if "num_parameters" in values:  # the count as built, a param too: MLflow plots against params
                held = self._param_keys.get(trial_id, set())
                count = {"num_parameters": int(values["num_parameters"])}
                self._param_keys[trial_id] = self._complete_params(run_id, held, count)
            for f in files:
                client.log_artifact(run_id, f)
            all_tags = {**(tags or {}), "status": status}
            if description is not None:
                all_tags[NOTE_TAG] = description
            client.log_tags(run_id, all_tags)
            client.set_terminated(run_id, status)

        self._safely(f"finishing the run of trial {trial_id}", _end)

    def ui_url(self, host: str = "127.0.0.1", port: int = 5000) -> str | None:
        """Where the MLflow UI (``harness ui``, or the tracking server itself) shows the
        parent run, in MLflow 3's "Model training" view (``workflowType``; its default is
        the GenAI view). Never with the URI's credentials: the browser asks for them."""
        if self.parent_run_id is None or self.experiment_id is None:
            return None
        return run_ui_url(self.tracking_uri, self.experiment_id, self.parent_run_id, host=host, port=port)


def run_ui_url(tracking_uri: str, experiment_id: str, run_id: str, *, host: str = "127.0.0.1", port: int = 5000) -> str:
    """The page of a run in MLflow 3's "Model training" view: on the tracking server itself
    for an http(s) URI (without its credentials), else on ``harness ui`` at ``host:port``."""
    parsed = urlparse(tracking_uri)
    if parsed.scheme in ("http", "https"):
        base = parsed._replace(netloc=parsed.netloc.rsplit("@", 1)[-1], query="", fragment="").geturl()
    else:
        base = f"http://{host}:{port}"
    return f"{base.rstrip('/')}/{run_page_link(experiment_id, run_id)}"


def default_tracking_uri(flag: str | None, spec_uri: str | None) -> str:
    """Precedence: ``--tracking-uri`` > the spec's ``tracking.uri`` > ``$MLFLOW_TRACKING_URI``
    > ``sqlite:///<cwd>/mlflow.db``."""
    return resolve_tracking_uri(flag or spec_uri)


# -- the Tune callback ----------------------------------------------------------------------


class MlflowStudyCallback(Callback):
    """Tune driver callback: one child run per trial under the study's parent run.

    ``trials`` maps trial ids (the ``trial`` entry of each Tune config) to
    :class:`~harness.studies.spec.grid.Trial`."""

    def __init__(self, recorder: StudyRecorder, trials: Mapping[str, Any], *, study: str) -> None:
        self.recorder = recorder
        self.trials = dict(trials)
        self.study = study
        self.attempts: dict[str, int] = {}

    def _trial_id(self, trial: Any) -> str:
        return str(trial.config["trial"])

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        tid = self._trial_id(trial)
        spec = self.trials[tid]
        self.attempts[tid] = self.attempts.get(tid, 0) + 1
        self.recorder.child(
            tid,
            study=self.study,
            tags=spec.tags(),
            params=spec.config.run_params(),
            datasets=[spec.config.dataset],
            data_dir=spec.config.data_dir,
        )

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
        step = result.get("step")
        if step is not None:
            self.recorder.trial_metrics(self._trial_id(trial), result, step=int(step))

    def on_trial_recover(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        # The trial failed and Tune restarts it from its last checkpoint (FailureConfig).
        tid = self._trial_id(trial)
        self.recorder.set_child_tags(tid, {"harness.retries": self.attempts.get(tid, 1)})

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        tid = self._trial_id(trial)
        result = dict(trial.last_result or {})
        status = str(result.get("status", "finished"))
        with tempfile.TemporaryDirectory() as tmp:
            files = final_files(trial.checkpoint, Path(tmp))
            self.recorder.end_trial(
                tid,
                status,
                metrics=result,
                step=int(result.get("step", 0) or 0),
                files=files,
                description=self._description(tid, result, None),
            )

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        tid = self._trial_id(trial)
        error = trial_error_summary(trial) or ""
        if getattr(trial, "error_file", None):
            error = f"{error[:4000]}\n(see {trial.error_file})".lstrip()
        self.recorder.end_trial(
            tid,
            "failed",
            tags={"harness.error": error} if error else None,
            description=self._description(tid, None, error or "failed"),
        )

    def _description(self, tid: str, result: dict[str, Any] | None, error: Any) -> str:
        """The trial's description from its row of the results table (as results.parquet will hold it)."""
        table = results_table(self.study, [self.trials[tid]], {tid: (result, error)})
        return trial_description(table.row(0, named=True))


def final_files(checkpoint: Any, into: Path) -> list[Path]:
    """Copy the artifacts of a trial's final checkpoint (Tune storage, maybe remote) to
    ``into``; [] when the trial has none (diverged, failed, no checkpoint)."""
    if checkpoint is None:
        return []
    try:
        local = Path(checkpoint.to_directory(str(into / "final")))
    except Exception:  # noqa: BLE001 - a missing checkpoint just means no artifacts
        return []
    return [local / name for name in FINAL_ARTIFACTS if (local / name).is_file()]
