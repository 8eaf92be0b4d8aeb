"""``run_study``: a validated spec -> a Ray Tune sweep -> MLflow -> results table -> report.

Order of work, so that bad input starts nothing and leaves nothing behind:

1. parse and validate the spec (structure, registries), expand the grid;
2. resolve where things go (flag > spec > environment > default):
   tracking URI (``--tracking-uri``, ``tracking.uri``, ``$MLFLOW_TRACKING_URI``,
   ``sqlite:///mlflow.db`` in the working directory), storage (``--storage-path``,
   ``storage_path``, ``$HARNESS_STORAGE_PATH``, ``./results``), the data folder
   (``train.data_dir``, ``$HARNESS_DATA_DIR``), Ray (``--address``, ``$RAY_ADDRESS``, else
   an embedded local Ray); every local path absolute, as the user's working directory
   reads it, and handed to the trials in their configs;
3. every variant naming a user's component is imported, constructed and checked (causal,
   finite: :mod:`harness.studies.spec.components`); ``--dry-run`` stops here: the grid, the
   resources and a cost estimate;
4. connect to Ray (on a cluster by address, with the user's modules as the job's runtime_env:
   :mod:`harness.studies.cluster.modules`) and check the request against the cluster (GPUs, CPUs
   per node, shared storage on a multi-node cluster), the corpora on every node and, on a
   cluster, the user's components on every node (one task per node) -- on failure Ray is
   released again;
5. check the tracking store (an experiment may be created, never a run);
6. only now: the parent run, the Tune experiment directory, the trials.

A study lives in ``<storage>/<name>/<YYYYmmdd-HHMMSS>/`` (Ray Tune's experiment directory
plus ``harness_study.json``, ``spec.yaml``, ``results.parquet``, ``curves.parquet``,
``window_losses.parquet`` and ``report/``; a sequential study also its decision log,
``sequential_decisions.jsonl``: :mod:`harness.studies.tune.sequential`). ``--resume``
continues the most recent one of that name.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from harness.datasets import check_train_fraction, load
from harness.errors import InputError
from harness.mlflow_client import check_tracking_uri, resolve_tracking_uri
from harness.studies.cluster.connect import (
    RayConnection,
    check_cluster,
    check_local_gpus,
    ray_session,
    resolve_address,
    resolve_storage,
)
from harness.studies.cluster.corpora import check_corpora_on_nodes, trial_data_dir
from harness.studies.cluster.destinations import (
    absolute_tracking_uri,
    job_driver,
    refuse_ephemeral_destinations,
)
from harness.studies.cluster.modules import check_components_on_nodes, cluster_runtime_env
from harness.studies.collect import collect_outcomes, sequential_outcome
from harness.studies.dry_run import dry_run_text, start_line
from harness.studies.finish import analyse, tell_where
from harness.studies.launch import fit_with_progress, launch_tune, open_recorder
from harness.studies.plan import (
    CollectedOutcomes,
    StudyLayout,
    StudyOutcome,
    StudyPlan,
    TrialCallbacks,
    study_layout,
)
from harness.studies.record.study_end import complete_child_runs, record_outcome
from harness.studies.record.study_start import design_changes, start_parent_run, study_design, write_study_files
from harness.studies.spec.components import check_user_components
from harness.studies.spec.grid import expand_grid
from harness.studies.spec.sequential_design import SequentialDesign
from harness.studies.spec.study_spec import StudySpec, load_spec, read_spec_text, spec_folder
from harness.studies.storage import check_storage, latest_study_dir
from harness.studies.tune.sequential import design_changed

if TYPE_CHECKING:  # imported by the phase that records (harness.studies.launch), for the annotations
    from harness.studies.record.recorder import StudyRecorder

# Imports that stay inside the phases that use them, for a measured start-up cost: Ray
# (``ray.tune``: about 3-4 s here), the MLflow recorder with its Tune callback and the live
# progress view (both subclass Ray Tune's ``Callback``) and the analysis (scipy, statsmodels, matplotlib: about
# 1.5-3 s). A bad spec, a bad destination and ``--dry-run`` answer without paying for them
# (``harness run studies/smoke.yaml --dry-run``: 2.6 s, against 7.3 s with the recorder
# imported first; medians of 5 on the shared 2-CPU machine).

# -- checks before the study starts --------------------------------------------------------


def prepare_corpora(plan: StudyPlan) -> None:
    """Load (and if needed download, checksum-verified, into the cache) every corpus of the
    study once on the driver, before Ray starts: a missing or corrupt corpus is one
    InputError here instead of every trial failing with it. Done for the embedded local Ray,
    whose trials share this machine's cache; on a cluster each node is checked once Ray is
    connected (:func:`~harness.studies.cluster.corpora.check_corpora_on_nodes`)."""
    lengths = {name: len(load(name, data_dir=plan.data_dir).train) for name in plan.spec.datasets}
    for trial in plan.trials:  # a train_fraction too small for a batch: one InputError, before Ray
        c = trial.config
        check_train_fraction(lengths[c.dataset], c.train_fraction, block_size=c.context_length, batch_size=c.batch_size)


# -- the phases of a study ---------------------------------------------------------------------
#
# run_study reads as its phases, each in the module named beside it:
#   resolve and validate         resolve_study (here: the plan, with what is derived from the spec once)
#   check before anything starts check_before_start, find_resumable (here)
#   connect Ray                  connect_ray (here)
#   plan where the run lives     study_layout (harness.studies.plan)
#   open the record              start_parent_run, write_study_files (harness.studies.record.study_start)
#   launch Tune                  launch_tune, fit_with_progress (harness.studies.launch)
#   collect the outcomes         sequential_outcome, collect_outcomes (harness.studies.collect)
#   analyse                      analyse (harness.studies.finish)
#   end the record               complete_child_runs, record_outcome (harness.studies.record.study_end)
#   tell the user                tell_where (harness.studies.finish)


def resolve_study(
    spec: StudySpec | str | os.PathLike[str],
    *,
    tracking_uri: str | None,
    storage_path: str | None,
    address: str | None,
) -> StudyPlan:
    """Resolve and validate: parse and check the spec, expand the grid, resolve the
    tracking URI, the storage path, the data folder and the Ray address (flag > spec >
    environment > default). Every local path is made absolute here, against the user's working
    directory (the spec's folder, where a user's component may lie, too), and each trial's
    config carries the data folder: a trial runs in a working directory of Tune's, on a node
    that does not inherit this environment. The sequential design is derived here, once, and
    handed on in the plan."""
    spec_text, component_dir = None, None
    if not isinstance(spec, StudySpec):
        spec_text = read_spec_text(spec) if Path(spec).is_file() else None
        component_dir = spec_folder(spec)
        spec = load_spec(spec)
    spec_text = spec_text or spec.canonical_yaml()
    data_dir = trial_data_dir(spec.train_overrides().get("data_dir"))
    trials = [
        dataclasses.replace(t, config=t.config.model_copy(update={"data_dir": data_dir}))
        for t in expand_grid(spec, component_dir=component_dir)
    ]
    given_uri = resolve_tracking_uri(tracking_uri or spec.tracking.uri)
    return StudyPlan(
        spec=spec,
        spec_text=spec_text,
        trials=trials,
        tracking_uri=absolute_tracking_uri(given_uri),
        storage=resolve_storage(storage_path, spec),
        address=resolve_address(address),
        sequential=SequentialDesign.from_spec(spec),
        data_dir=data_dir,
        tracking_uri_as_given=given_uri,
        component_dir=component_dir,
    )


@contextmanager
def connect_ray(plan: StudyPlan, say: Callable[[str], None]) -> Iterator[RayConnection]:
    """Ray for the study, checked before the first trial: the request against the cluster, the
    corpora on every node and, on a cluster, every user component resolved on every node.
    Connecting to a cluster by address (not as a Ray job's driver, whose job carries them
    already), the user's modules travel as the job-level runtime_env
    (:mod:`harness.studies.cluster.modules`)."""
    with tempfile.TemporaryDirectory(prefix="harness-py-modules-") as staging:
        ships = plan.address is not None and job_driver() is None and plan.names_user_components
        runtime_env = cluster_runtime_env(plan.spec, plan.component_dir, Path(staging)) if ships else None
        with ray_session(plan.address, runtime_env) as ray_conn:
            check_cluster(plan.spec, ray_conn, plan.storage)
            check_corpora_on_nodes(plan.spec.datasets, plan.data_dir)  # each node, before the first trial
            if plan.address is not None:
                for line in check_components_on_nodes(plan.spec, plan.component_dir):
                    say(f"  {line}")
            yield ray_conn


def check_before_start(plan: StudyPlan) -> None:
    """Check before anything starts, what can be checked without Ray: the storage path, the
    tracking URI (a file store or a missing directory), and on an embedded local Ray the GPUs
    and the corpora (downloaded and verified once, here); as a Ray job's driver, no destination
    inside Ray's temporary working directory."""
    # As a Ray job's driver: the rule reads the URI as the user wrote it (a relative path is lost).
    refuse_ephemeral_destinations(tracking_uri=plan.tracking_uri_as_given or plan.tracking_uri, storage=plan.storage)
    check_storage(plan.storage)
    check_tracking_uri(plan.tracking_uri)
    if plan.address is None:
        check_local_gpus(plan.spec)
        prepare_corpora(plan)


def find_resumable(plan: StudyPlan) -> tuple[str, dict[str, Any]]:
    """The study run that ``--resume`` continues (its directory and ``harness_study.json``);
    InputError when there is none or its design differs from the spec's."""
    spec, storage = plan.spec, plan.storage
    previous = latest_study_dir(storage, spec.name)
    if previous is None:
        raise InputError(
            f"nothing to resume: no study {spec.name!r} under {storage}/{spec.name} "
            "(run it without --resume, or pass the --storage-path it ran with)"
        )
    stored = previous[1].get("design")
    changes = design_changes(stored, study_design(plan.trials)) if stored is not None else []
    if design_changed(plan.sequential, previous[1]):
        changes.append("the sequential design (seeds: min, max, batch; stop_when)")
    if changes:
        shown = "; ".join(changes[:5]) + (f"; ... ({len(changes)} changes)" if len(changes) > 5 else "")
        raise InputError(
            f"cannot resume {previous[0]}: the spec's grid, training settings or sequential design changed since it "
            f"started ({shown}; resuming would mix two designs); run it as a new study without --resume"
        )
    return previous


def run_study(
    spec: StudySpec | str | os.PathLike[str],
    *,
    address: str | None = None,
    tracking_uri: str | None = None,
    storage_path: str | None = None,
    resume: bool = False,
    dry_run: bool = False,
    callbacks: Sequence[Any] = (),
    trial_callbacks: TrialCallbacks | None = None,
    report: bool = True,
    stream: TextIO | None = None,
    live: bool | None = None,
) -> StudyOutcome:
    """Run (or resume) a study; see the module docstring for the order of work.

    Parameters
    ----------
    spec
        A :class:`StudySpec` or the path of a spec file.
    address
        Ray cluster address (``host:6379``, ``auto``); default ``$RAY_ADDRESS``, else an
        embedded local Ray. An already initialised Ray session is reused as it is.
    tracking_uri, storage_path
        Override the spec's (and the environment's) MLflow URI and storage path.
    resume
        Continue the most recent study of this name under the storage path: finished
        trials are kept, unfinished and failed ones continue from their last checkpoint,
        MLflow runs are continued (never duplicated).
    dry_run
        Print the grid, resources and a cost estimate; start nothing.
    callbacks, trial_callbacks
        Extra Ray Tune callbacks (driver side); the trials' extra Lightning callbacks, made in
        each trial's process (:data:`~harness.studies.plan.TrialCallbacks`: picklable).
    report
        Run the analysis at the end and log its report to the parent run.
    stream, live
        Where progress goes (stdout) and whether as a live table (default: on terminals).

    Raises
    ------
    InputError
        Bad spec, unreachable cluster or tracking store, resources the cluster lacks,
        local storage on a multi-node cluster, nothing to resume -- before anything starts.
    """
    started, out = time.perf_counter(), stream or sys.stdout
    say = functools.partial(_say, out)
    plan = resolve_study(spec, tracking_uri=tracking_uri, storage_path=storage_path, address=address)
    plan = dataclasses.replace(plan, trial_callbacks=trial_callbacks)  # handed to every trial as it is
    check_user_components(plan.spec, plan.component_dir, say)  # imported, constructed, causal: or nothing starts
    if dry_run:
        return _dry_run(plan, say)
    check_before_start(plan)
    previous = find_resumable(plan) if resume else None

    recorder = open_recorder(plan)
    with connect_ray(plan, say) as ray_conn:
        recorder.store.connect()  # may create the experiment; never a run
        layout = study_layout(plan, previous)
        say(start_line(plan, ray_conn, resuming=previous is not None))
        git_commit = start_parent_run(recorder, plan, layout, ray_conn, previous)
        try:
            plan, collected, rep = _run_collect_report(
                plan, layout, recorder, previous, git_commit, callbacks=callbacks, report=report, out=out, live=live
            )
        except BaseException:
            recorder.parent.end("killed" if sys.exc_info()[0] is KeyboardInterrupt else "failed")
            raise

    wall = time.perf_counter() - started
    ui_url = tell_where(
        plan, layout, collected, recorder, wall=wall, storage_flag=storage_path, tracking_flag=tracking_uri, say=say
    )
    return _outcome(plan, layout, recorder, collected, rep, ui_url=ui_url, wall=wall)


def _say(out: TextIO, text: str = "") -> None:
    print(text, file=out, flush=True)


def _dry_run(plan: StudyPlan, say: Callable[[str], None]) -> StudyOutcome:
    """What ``--dry-run`` prints (the grid, resources, cost) and returns: nothing started."""
    spec = plan.spec
    say(
        dry_run_text(
            spec,
            plan.trials,
            design=plan.sequential,
            storage=plan.storage,
            tracking_uri=plan.tracking_uri,
            address=plan.address,
        )
    )
    return StudyOutcome(study=spec.name, status="dry_run", trials=len(plan.trials), tracking_uri=plan.tracking_uri)


def _outcome(
    plan: StudyPlan,
    layout: StudyLayout,
    recorder: StudyRecorder,
    collected: CollectedOutcomes,
    rep: Any,
    *,
    ui_url: str | None,
    wall: float,
) -> StudyOutcome:
    """The finished (or failed) study as :func:`run_study` returns it."""
    return StudyOutcome(
        study=plan.spec.name,
        status=collected.status,
        trials=len(plan.trials),
        study_dir=layout.study_dir,
        tracking_uri=plan.tracking_uri,
        experiment_id=recorder.store.experiment_id,
        parent_run_id=recorder.parent.run_id,
        counts=collected.counts,
        results=collected.table,
        curves=collected.curves,
        report=rep,
        ui_url=ui_url,
        wall_time_s=wall,
    )


def _run_collect_report(
    plan: StudyPlan,
    layout: StudyLayout,
    recorder: StudyRecorder,
    previous: tuple[str, dict[str, Any]] | None,
    git_commit: str,
    *,
    callbacks: Sequence[Any],
    report: bool,
    out: TextIO,
    live: bool | None,
) -> tuple[StudyPlan, CollectedOutcomes, Any]:
    """The study's run once its parent run is open: launch Tune, write the study's files, fit,
    read the sequential design's outcome, collect every trial, complete the children a resume
    continued, analyse (``report``) and record the outcome on the parent. Returns the plan (the
    sequential design may have narrowed it), what was collected and the report (or None)."""
    say = functools.partial(_say, out)
    tuner, progress, already = launch_tune(
        plan, layout, recorder, previous, callbacks=callbacks, out=out, live=live, say=say
    )
    write_study_files(plan, layout, recorder, previous, git_commit)
    grid = fit_with_progress(tuner, progress, already)
    plan, sequential = sequential_outcome(plan, layout)
    collected = collect_outcomes(plan, layout, grid)
    if previous is not None:
        complete_child_runs(recorder, plan, layout, collected)
    rep = None
    if report and collected.status == "finished" and collected.counts["finished"] > 0:
        rep = analyse(
            plan.spec,
            collected.table,
            collected.windows,
            collected.sigmas,
            layout.local_dir,
            recorder,
            say,
            sequential=sequential,
            curves=collected.curves,
        )
    record_outcome(recorder, collected, sequential=sequential, layout=layout)
    return plan, collected, rep
