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
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TextIO
from urllib.parse import urlparse

import polars as pl
import pyarrow.fs

from harness.datasets import load
from harness.errors import InputError
from harness.mlflow_client import check_tracking_uri, harness_git_commit, redact_uri, resolve_tracking_uri
from harness.results_schema import CURVES_FILE, RUN_TAG_OF_TRIAL_STATUS
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
    RAY_JOB_TAG,
    absolute_tracking_uri,
    is_uri,
    job_driver,
    refuse_ephemeral_destinations,
)
from harness.studies.cluster.modules import check_components_on_nodes, cluster_runtime_env
from harness.studies.dry_run import describe_grid, describe_resources, dry_run_text
from harness.studies.launch import fit_with_progress, launch_tune, open_recorder
from harness.studies.plan import CollectedOutcomes, StudyLayout, StudyPlan, TrialCallbacks
from harness.studies.record.trial_records import complete_child_run
from harness.studies.spec.components import check_user_components
from harness.studies.spec.grid import Trial, expand_grid
from harness.studies.spec.study_spec import StudySpec, load_spec, read_spec_text, spec_folder
from harness.studies.storage import (
    STUDY_FILE,
    check_storage,
    latest_study_dir,
    parquet_bytes,
    storage_filesystem,
    trial_dir,
    write_bytes,
)
from harness.studies.tune.curves_table import study_curves
from harness.studies.tune.results_table import results_table, trial_status
from harness.studies.tune.sequential import (
    DECISIONS_FILE,
    DecisionLog,
    SequentialDesign,
    design_changed,
    summary_from_log,
    trials_scheduled,
)

if TYPE_CHECKING:  # the lazy imports below, for the annotations
    from harness.studies.record.recorder import StudyRecorder

# Imports that stay inside the phases that use them, for a measured start-up cost: Ray
# (``ray.tune``: about 3-4 s here), the MLflow recorder with its Tune callback and the live
# progress view (both subclass Ray Tune's ``Callback``) and the analysis (scipy, statsmodels, matplotlib: about
# 1.5-3 s). A bad spec, a bad destination and ``--dry-run`` answer without paying for them
# (``harness run studies/smoke.yaml --dry-run``: 2.6 s, against 7.3 s with the recorder
# imported first; medians of 5 on the shared 2-CPU machine).

#: How a study run ended: every trial ended (finished), it stopped early (interrupted:
#: ``--resume`` continues it), or nothing was started (dry_run).
StudyStatus = Literal["finished", "interrupted", "dry_run"]


@dataclass(frozen=True)
class StudyOutcome:
    """What ``run_study`` did (``status``: :data:`StudyStatus`)."""

    study: str
    status: StudyStatus
    trials: int
    study_dir: str | None = None
    tracking_uri: str | None = None
    experiment_id: str | None = None
    parent_run_id: str | None = None
    counts: dict[str, int] | None = None
    results: Any = None  # polars.DataFrame (one row per trial)
    curves: Any = None  # polars.DataFrame (one row per trial and evaluation)
    report: Any = None  # harness.report.Report, when the analysis ran
    ui_url: str | None = None
    wall_time_s: float = 0.0


# -- checks before the study starts --------------------------------------------------------


def prepare_corpora(plan: StudyPlan) -> None:
    """Load (and if needed download, checksum-verified, into the cache) every corpus of the
    study once on the driver, before Ray starts: a missing or corrupt corpus is one
    InputError here instead of every trial failing with it. Done for the embedded local Ray,
    whose trials share this machine's cache; on a cluster each node is checked once Ray is
    connected (:func:`~harness.studies.cluster.corpora.check_corpora_on_nodes`)."""
    for name in plan.spec.datasets:
        load(name, data_dir=plan.data_dir)


# -- per-window losses and MOPE scales of the finished trials ------------------------------


def _window_losses(trials: Sequence[Trial], checkpoints: dict[str, Any]) -> Any:
    """Per-window losses of every finished trial with its factors (for the multi-bootstrap)."""
    frames = []
    with tempfile.TemporaryDirectory() as tmp:
        for trial in trials:
            ckpt = checkpoints.get(trial.trial_id)
            if ckpt is None:
                continue
            try:
                local = Path(ckpt.to_directory(str(Path(tmp) / trial.trial_id)))
            except Exception:  # noqa: BLE001
                continue
            path = local / "window_losses.parquet"
            if not path.is_file():
                continue
            c = trial.config
            frames.append(
                pl.read_parquet(path).with_columns(
                    pl.lit(trial.trial_id).alias("trial_id"),
                    pl.lit(c.variant).alias("variant"),
                    pl.lit(c.seed, dtype=pl.Int64).alias("seed"),
                    pl.lit(c.dataset).alias("dataset"),
                    pl.lit(c.size).alias("size"),
                    pl.lit(c.context_length, dtype=pl.Int64).alias("context_length"),
                    pl.lit(c.tau_init, dtype=pl.Float64).alias("tau_init"),
                )
            )
    return pl.concat(frames, how="diagonal_relaxed") if frames else None


def _mope_sigmas(trials: Sequence[Trial], outcomes: dict[str, tuple[dict[str, Any] | None, Any]]) -> Any:
    rows = []
    for trial in trials:
        metrics = (outcomes.get(trial.trial_id) or (None, None))[0] or {}
        if metrics.get("status") != "finished":
            continue
        for key, value in metrics.items():
            if key.startswith("mope/sigma") and isinstance(value, (int, float)):
                c = trial.config
                rows.append(
                    {
                        "variant": c.variant,
                        "seed": c.seed,
                        "dataset": c.dataset,
                        "size": c.size,
                        "context_length": c.context_length,
                        "key": key,
                        "sigma": float(value),
                    }
                )
    return pl.DataFrame(rows) if rows else None


# -- the study ------------------------------------------------------------------------------------


def parent_params(spec: StudySpec, trials: Sequence[Trial]) -> dict[str, Any]:
    """Params of the study's parent run: the spec's hash, the grid and its factors."""
    return {
        "spec_sha256": spec.sha256(),
        "grid_size": len(trials),
        "datasets": ",".join(spec.datasets),
        "sizes": ",".join(spec.size_names),
        "context_lengths": ",".join(map(str, spec.context_lengths)),
        "variants": ",".join(spec.variant_names),
        "seeds": ",".join(map(str, spec.grid_seeds())),
        "tau_inits": ",".join(f"{t:g}" for t in spec.tau_inits) if spec.tau_inits else "None",
        "tokens_per_batch": spec.tokens_per_batch,
        "cpus_per_trial": spec.resources.cpus,
        "gpus_per_trial": spec.resources.gpus,
        **{f"train.{k}": v for k, v in spec.train_overrides().items()},
    }


def study_design(trials: Sequence[Trial]) -> dict[str, dict[str, Any]]:
    """What must not change between a study and its resume: each trial's resume contract
    (:meth:`~harness.training.config.TrainConfig.resume_contract`), as JSON keeps it in
    ``harness_study.json``."""
    return json.loads(json.dumps({t.trial_id: t.config.resume_contract() for t in trials}))


def design_changes(stored: dict[str, dict[str, Any]], current: dict[str, dict[str, Any]]) -> list[str]:
    """How ``current`` (the spec's :func:`study_design`) differs from the design a study was
    started with: trials added or removed, and contract fields whose value changed. A field
    the stored design lacks, or holds beyond today's contract (a study started by another
    version of the harness), is not compared."""
    changes = [f"trial {tid} {'added' if tid in current else 'removed'}" for tid in sorted(set(stored) ^ set(current))]
    for tid in sorted(set(stored) & set(current)):
        was, now = stored[tid], current[tid]
        changes += [
            f"{tid}: {key} {was[key]!r} -> {value!r}" for key, value in now.items() if key in was and was[key] != value
        ]
    return changes


# -- the phases of a study ---------------------------------------------------------------------
#
# run_study reads as its phases: resolve and validate (resolve_study) -> check before anything
# starts (check_before_start, find_resumable) -> connect Ray (ray_session, check_cluster) -> plan
# where the run lives (study_layout) -> open the record (start_parent_run) -> launch Tune
# (launch_tune, write_study_files, fit_with_progress) -> collect the outcomes (collect_outcomes)
# -> analyse (_analyse) -> record (record_outcome) -> tell the user (tell_where).


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
    that does not inherit this environment."""
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
        ships = plan.address is not None and job_driver() is None and _names_user_components(plan)
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
    if design_changed(spec, previous[1]):
        changes.append("the sequential design (seeds: min, max, batch; stop_when)")
    if changes:
        shown = "; ".join(changes[:5]) + (f"; ... ({len(changes)} changes)" if len(changes) > 5 else "")
        raise InputError(
            f"cannot resume {previous[0]}: the spec's grid, training settings or sequential design changed since it "
            f"started ({shown}; resuming would mix two designs); run it as a new study without --resume"
        )
    return previous


def study_layout(plan: StudyPlan, previous: tuple[str, dict[str, Any]] | None) -> StudyLayout:
    """Plan where this run lives: the resumed run's folder, or a fresh
    ``<storage>/<name>/<YYYYmmdd-HHMMSS>``."""
    storage, name = plan.storage, plan.spec.name
    if previous is not None:
        study_dir = previous[0]
        run_name = study_dir.rsplit("/", 1)[1]
    else:
        run_name = _fresh_run_name(storage, name)
        study_dir = f"{storage}/{name}/{run_name}"
    fs, root = storage_filesystem(storage)
    return StudyLayout(
        run_name=run_name,
        study_run=f"{name}/{run_name}",
        study_dir=study_dir,
        study_root=f"{root.rstrip('/')}/{name}/{run_name}",
        fs=fs,
        local_dir=None if is_uri(storage) else Path(study_dir),
    )


def start_line(plan: StudyPlan, ray_conn: RayConnection, *, resuming: bool) -> str:
    """``Study tiny: 2 trials (...), 1 CPU each, local Ray (2 CPUs)``."""
    spec = plan.spec
    return (
        f"Study {spec.name}: {describe_grid(spec, plan.trials)}, {describe_resources(spec)}, "
        f"{ray_conn.description} ({ray_conn.cpus:g} CPUs{f', {ray_conn.gpus:g} GPUs' if ray_conn.gpus else ''})"
        + (" - resuming" if resuming else "")
    )


def start_parent_run(
    recorder: StudyRecorder,
    plan: StudyPlan,
    layout: StudyLayout,
    ray_conn: RayConnection,
    previous: tuple[str, dict[str, Any]] | None,
) -> str:
    """Open the record: the study's parent run in MLflow (created, or continued on resume).
    Returns the git commit the study is recorded with (a resumed study keeps its own)."""
    git_commit = (previous[1].get("git_commit") if previous else None) or harness_git_commit()
    recorder.start_parent(
        study=plan.spec.name,
        study_run=layout.study_run,
        spec_text=plan.spec_text,
        spec_sha256=plan.spec.sha256(),
        params=parent_params(plan.spec, plan.trials),
        tags={
            "harness.git_commit": git_commit,
            "harness.study_dir": layout.study_dir,
            "ray": ray_conn.description,
            **({"harness.component_dir": plan.component_dir} if _names_user_components(plan) else {}),
        },
        previous_run_id=(previous[1].get("parent_run_id") if previous else None),
        datasets=plan.spec.datasets,
        data_dir=plan.data_dir,
    )
    job = job_driver()
    if job is not None and job.job_id:  # the run `harness submit` looks for when the job ends
        recorder.parent.set_tags({RAY_JOB_TAG: job.job_id})
    return git_commit


def write_study_files(
    plan: StudyPlan,
    layout: StudyLayout,
    recorder: StudyRecorder,
    previous: tuple[str, dict[str, Any]] | None,
    git_commit: str,
) -> None:
    """``harness_study.json`` (what a resume and ``harness report --from`` need) and the
    ``spec.yaml`` the study runs, in the study's folder."""
    spec = plan.spec
    meta = {
        "study": spec.name,
        "study_run": layout.study_run,
        "spec_sha256": spec.sha256(),
        "tracking_uri": redact_uri(plan.tracking_uri),
        "experiment_id": recorder.store.experiment_id,
        "parent_run_id": recorder.parent.run_id,
        "trial_ids": [t.trial_id for t in plan.trials],
        "sequential": (design.record() if (design := SequentialDesign.from_spec(spec)) else None),
        "design": study_design(plan.trials),
        "created": (previous[1].get("created") if previous else time.strftime("%Y-%m-%dT%H:%M:%S%z")),
        "git_commit": git_commit,
    }
    write_bytes(layout.fs, f"{layout.study_root}/{STUDY_FILE}", json.dumps(meta, indent=1).encode())
    write_bytes(layout.fs, f"{layout.study_root}/spec.yaml", plan.spec_text.encode())


def collect_outcomes(plan: StudyPlan, layout: StudyLayout, grid: Any) -> CollectedOutcomes:
    """Collect the outcomes: Tune's results -> the results table (``results.parquet``), every
    evaluation of every trial (``curves.parquet``, from each trial's reports on storage:
    :func:`~harness.studies.tune.curves_table.study_curves`) and the per-window losses of the
    finished trials (``window_losses.parquet``), all in the study's folder."""
    outcomes: dict[str, tuple[dict[str, Any] | None, Any]] = {}
    checkpoints: dict[str, Any] = {}
    for result in grid:
        if not result.config:  # never started (the study was stopped first): its row says incomplete
            continue
        tid = str(result.config["trial"])
        outcomes[tid] = (dict(result.metrics or {}), result.error)
        if trial_status(result.metrics, result.error) == "finished":
            checkpoints[tid] = result.checkpoint
    table = results_table(plan.spec.name, plan.trials, outcomes)
    counts = {s: int((table.get_column("status") == s).sum()) for s in ("finished", "diverged", "failed", "incomplete")}
    status = "interrupted" if counts["incomplete"] else "finished"

    write_bytes(layout.fs, f"{layout.study_root}/results.parquet", parquet_bytes(table))
    curves = study_curves(layout.fs, layout.study_root, table, plan.trials)
    write_bytes(layout.fs, f"{layout.study_root}/{CURVES_FILE}", parquet_bytes(curves))
    windows = _window_losses(plan.trials, checkpoints)
    if windows is not None:
        write_bytes(layout.fs, f"{layout.study_root}/window_losses.parquet", parquet_bytes(windows))
    return CollectedOutcomes(
        table=table,
        counts=counts,
        status=status,
        windows=windows,
        sigmas=_mope_sigmas(plan.trials, outcomes),
        curves=curves,
    )


def complete_child_runs(
    recorder: StudyRecorder, plan: StudyPlan, layout: StudyLayout, collected: CollectedOutcomes
) -> None:
    """A resumed study: every child run brought in line with what storage holds
    (:func:`~harness.studies.record.trial_records.complete_child_run`) before the record ends.
    Reports made while the tracking store was down under a driver that then died lie below
    the steps this driver logged, and a trial that ended under that driver has no end in
    MLflow; the study's storage has both, so the record is completed here, not left to a
    ``harness report --from`` that nothing would ask for."""
    if not recorder.store.active or recorder.parent.run_id is None:
        return  # the closing lines ask for `harness report --from` (tell_where)
    rows = {row["trial_id"]: row for row in collected.table.iter_rows(named=True)}
    for trial in plan.trials:
        complete_child_run(
            recorder,
            study=plan.spec.name,
            trial=trial,
            row=rows.get(trial.trial_id),
            fs=layout.fs,
            trial_dir=trial_dir(layout.study_root, trial.trial_id),
        )


def record_outcome(
    recorder: StudyRecorder, collected: CollectedOutcomes, *, sequential: Any = None, layout: StudyLayout | None = None
) -> None:
    """Record: the end of the MLflow record. Child runs of trials that were still running
    stay resumable (KILLED, not RUNNING); the parent gets the table, the counts and its end;
    a sequential study also its decision log, ``sequential/n_seeds``, ``sequential/stopped_by``
    (:data:`harness.analysis.sequential.STOPPED_BY_CODES`) and why it stopped as a tag."""
    table, counts = collected.table, collected.counts
    if collected.status == "interrupted":
        for tid in table.filter(table.get_column("status") == "incomplete").get_column("trial_id"):
            recorder.children.end(tid, RUN_TAG_OF_TRIAL_STATUS["incomplete"])
    metrics = {
        "trials/finished": counts["finished"],
        "trials/diverged": counts["diverged"],
        "trials/failed": counts["failed"],
        "trials/incomplete": counts["incomplete"],
    }
    files = []
    if sequential is not None:
        metrics.update(
            {"sequential/n_seeds": sequential.seeds_scheduled, "sequential/stopped_by": sequential.stopped_by_code}
        )
        recorder.parent.set_tags({"sequential.rule": sequential.rule, "sequential.stopped_by": sequential.stop_text})
        log = layout.local_dir / DECISIONS_FILE if layout is not None and layout.local_dir is not None else None
        files = [log] if log is not None and log.is_file() else []
    recorder.parent.end(collected.status, results=table, metrics=metrics, files=files)


def sequential_outcome(plan: StudyPlan, layout: StudyLayout) -> tuple[StudyPlan, Any]:
    """After Tune: a sequential study's plan narrowed to the trials its batches scheduled
    (its results table holds those), and the summary of its decisions for the report and
    the record; a fixed grid is returned as it is, with no summary."""
    design = SequentialDesign.from_spec(plan.spec)
    if design is None:
        return plan, None
    decisions = DecisionLog(layout.study_dir).decisions()  # read once: the trials and the summary agree
    narrowed = dataclasses.replace(plan, trials=trials_scheduled(design, decisions, plan.trials))
    return narrowed, summary_from_log(design, decisions)


def tell_where(
    plan: StudyPlan,
    layout: StudyLayout,
    collected: CollectedOutcomes,
    recorder: StudyRecorder,
    *,
    wall: float,
    storage_flag: str | None,
    tracking_flag: str | None,
    say: Any,
) -> str | None:
    """Tell the user: the closing lines (counts, the results, how to resume, where MLflow shows
    the study). Returns the UI link (None when MLflow did not record the study)."""
    spec, uri, study_dir = plan.spec, plan.tracking_uri, layout.study_dir
    summary = ", ".join(f"{n} {s}" for s, n in collected.counts.items() if n)
    say(f"Study {spec.name} {collected.status} in {wall:.0f} s: {summary}")
    say(f"Results: {study_dir}/results.parquet")
    if collected.status == "interrupted":
        say(
            f"Resume it with: harness run {_spec_hint(spec)} --resume"
            + (f" --storage-path {plan.storage}" if storage_flag else "")
        )
    ui_url = recorder.ui_url()
    if recorder.store.broken is not None:
        # The one warning came when the store failed; here is what to do about it.
        ui_url = None
        say(
            f"MLflow: not recorded completely (the tracking store {redact_uri(uri)} failed). Everything is kept in "
            f"{study_dir}; once the store is back, record it there with:\n"
            f"  harness report {spec.name} --from {study_dir} --tracking-uri {redact_uri(uri)}"
        )
    elif recorder.parent.run_id is not None:
        say(f'MLflow: parent run {recorder.parent.run_id} in experiment "{spec.experiment_name()}" ({redact_uri(uri)})')
        default_store = tracking_flag is None and spec.tracking.uri is None and "MLFLOW_TRACKING_URI" not in os.environ
        ui_cmd = "harness ui" if default_store else f"harness ui --tracking-uri {redact_uri(uri)}"
        # The link never holds credentials (StudyRecorder.ui_url drops them).
        say(
            f"View it: {ui_cmd}  ->  {ui_url}"
            if urlparse(uri).scheme not in ("http", "https")
            else f"View it: {ui_url}"
        )
    return ui_url


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
    say(dry_run_text(spec, plan.trials, storage=plan.storage, tracking_uri=plan.tracking_uri, address=plan.address))
    return StudyOutcome(study=spec.name, status="dry_run", trials=len(plan.trials), tracking_uri=plan.tracking_uri)


def _outcome(plan: StudyPlan, layout, recorder, collected, rep, *, ui_url: str | None, wall: float) -> StudyOutcome:
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
    plan: StudyPlan, layout, recorder, previous, git_commit, *, callbacks, report: bool, out, live
) -> tuple[StudyPlan, Any, Any]:
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
        rep = _analyse(
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


def _names_user_components(plan: StudyPlan) -> bool:
    return plan.component_dir is not None and any(t.config.component_dir for t in plan.trials)


def _fresh_run_name(storage: str, name: str) -> str:
    """``YYYYmmdd-HHMMSS`` (``-2``, ``-3`` ... if that directory exists already)."""
    fs, root = storage_filesystem(storage)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    candidate, n = stamp, 1
    while fs.get_file_info(f"{root.rstrip('/')}/{name}/{candidate}").type != pyarrow.fs.FileType.NotFound:
        n += 1
        candidate = f"{stamp}-{n}"
    return candidate


def _spec_hint(spec: StudySpec) -> str:
    return f"studies/{spec.name}.yaml" if Path(f"studies/{spec.name}.yaml").is_file() else "SPEC"


def _analyse(
    spec: StudySpec,
    table: Any,
    windows: Any,
    sigmas: Any,
    local_dir: Path | None,
    recorder: StudyRecorder,
    say: Any,
    *,
    sequential: Any = None,
    curves: Any = None,
) -> Any:
    """The analysis issue's report, logged to the parent run (a failure is a warning: the
    study's results are safe; `harness report` can redo it)."""
    try:
        from harness.analysis import AnalysisSettings, corpus_info_for
        from harness.report import build_report, log_report
    except ImportError:
        return None
    try:
        settings = AnalysisSettings.from_mapping(spec.analysis_settings())
        out_dir = (local_dir / "report") if local_dir is not None else Path(tempfile.mkdtemp(prefix="harness-report-"))
        try:
            corpus_info = corpus_info_for(list(spec.datasets))
        except Exception:  # noqa: BLE001 - corpus numbers are optional context
            corpus_info = None
        if windows is not None and "split" in windows.columns:
            windows = windows.filter(windows.get_column("split") == "val")
        rep = build_report(
            table,
            settings=settings,
            out_dir=out_dir,
            window_losses=windows,
            mope_sigmas=sigmas,
            corpus_info=corpus_info,
            title=spec.name,
            sequential=sequential,
            curves=curves,
        )
    except Exception as exc:  # noqa: BLE001
        say(
            f"warning: the analysis failed ({type(exc).__name__}: {exc}); the results are safe; retry with "
            f"`harness report {spec.name}`"
        )
        return None
    say(rep.verdict_table)
    for note in getattr(rep, "notes", ()):
        say(f"note: {note}")
    if recorder.store.active and recorder.parent.run_id is not None:
        try:
            log_report(rep, run_id=recorder.parent.run_id, tracking_uri=recorder.store.tracking_uri)
        except Exception as exc:  # noqa: BLE001
            recorder.store.fail("logging the report", exc)
    return rep
