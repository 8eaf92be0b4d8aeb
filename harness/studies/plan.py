"""What the phases of :func:`~harness.studies.runner.run_study` hand each other: the
checked plan (with what is derived from the spec once: the sequential design, the trials'
configs, the compile groups), where one run of the study lives, what its trials ended with,
and what the study did (:class:`StudyOutcome`, what ``run_study`` returns).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import polars as pl
import pyarrow.fs

from harness.studies.cluster.destinations import is_uri
from harness.studies.spec.grid import Trial
from harness.studies.spec.sequential_design import SequentialDesign
from harness.studies.spec.study_spec import StudySpec
from harness.studies.storage import storage_filesystem

#: Extra Lightning callbacks of a study's trials: called in each trial's process with the trial's
#: id and the study's trial ids, it returns the callbacks that trial trains with beside its report
#: to Tune (:func:`harness.studies.tune.trainable.run_trial`). Handed to the trials with the
#: trainable (``tune.with_parameters``), so it must pickle: the chaos campaign's faults
#: (:class:`harness.bench.chaos.trial_faults.TrialFaults`) are one; a real study has none.
TrialCallbacks = Callable[[str, Collection[str]], Sequence[Any]]


@dataclass(frozen=True)
class StudyPlan:
    """A checked spec, its grid and where everything goes (the first phase's result). Every path
    the user gave is resolved here, on the driver, against the user's working directory: a
    trial runs in a working directory of Tune's, where a relative path means another folder.

    What the phases derive from the spec is made here once and handed on: the sequential design
    (``sequential``), every trial's config as the trainable receives it (:attr:`trial_configs`)
    and how many trials share each one's compiled graph (:attr:`compile_sharing`)."""

    spec: StudySpec
    spec_text: str
    trials: list[Trial]  # their configs carry data_dir, absolute
    tracking_uri: str  # a local database's path absolute (resolved against the user's working directory)
    storage: str  # a local folder absolute
    address: str | None  # None: an embedded local Ray
    sequential: SequentialDesign | None  # SequentialDesign.from_spec(spec); None: a fixed list of seeds
    data_dir: str | None = None  # the folder the trials search first, absolute (None: their node's cache)
    tracking_uri_as_given: str | None = None  # as the user wrote it (a Ray job's driver checks that)
    # The spec's folder (absolute, resolved on the driver): where a trial looks for a user
    # component's module after the Python path; None for a spec given as an object.
    component_dir: str | None = None
    # The trials' extra Lightning callbacks, handed to every trial with its config: the chaos
    # campaign's faults (tests); None in a real study.
    trial_callbacks: TrialCallbacks | None = None

    @property
    def by_id(self) -> dict[str, Trial]:
        return {t.trial_id: t for t in self.trials}

    @property
    def names_user_components(self) -> bool:
        """Whether a trial's variant names a user's component (its module travels with the study)."""
        return self.component_dir is not None and any(t.config.component_dir for t in self.trials)

    @functools.cached_property
    def trial_configs(self) -> dict[str, dict[str, Any]]:
        """Trial id -> its config as a dict (``TrainConfig.model_dump``), the form the trials
        receive through Ray's object store (:func:`harness.studies.launch.make_trainable`)."""
        return {t.trial_id: t.config.model_dump() for t in self.trials}

    @functools.cached_property
    def compile_sharing(self) -> dict[str, int]:
        """Trial id -> how many of the plan's trials compile its graph (``compile: auto`` shares
        one cold compile among them: :func:`harness.training.compile.graph_sharing`). Made here
        once, on the driver, instead of by every trial from all the configs. Not made before it
        is asked for: a variant naming a user's component is checked first
        (:func:`harness.studies.spec.components.check_user_components`)."""
        from harness.training.compile import graph_sharing  # torch: the trainable asks, once Tune starts

        return graph_sharing({t.trial_id: t.config for t in self.trials})


@dataclass(frozen=True)
class StudyLayout:
    """Where one run of a study lives: ``<storage>/<name>/<run_name>``."""

    run_name: str
    study_run: str  # ``<name>/<run_name>``: the tag that finds the parent run again
    study_dir: str  # as the user names it (a URI or a local path)
    study_root: str  # the same folder as a path of ``fs``
    fs: Any  # pyarrow filesystem of the storage
    local_dir: Path | None  # None for remote storage


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


def _fresh_run_name(storage: str, name: str) -> str:
    """``YYYYmmdd-HHMMSS`` (``-2``, ``-3`` ... if that directory exists already)."""
    fs, root = storage_filesystem(storage)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    candidate, n = stamp, 1
    while fs.get_file_info(f"{root.rstrip('/')}/{name}/{candidate}").type != pyarrow.fs.FileType.NotFound:
        n += 1
        candidate = f"{stamp}-{n}"
    return candidate


@dataclass(frozen=True)
class CollectedOutcomes:
    """What the trials ended with: the results table, counts by status, the study's status,
    the curves table."""

    table: pl.DataFrame  # one row per trial
    counts: dict[str, int]
    status: Literal["finished", "interrupted"]
    windows: Any  # per-window losses of the finished trials (polars) or None
    sigmas: Any  # MOPE scales of the finished trials (polars) or None
    curves: pl.DataFrame | None = None  # one row per trial and evaluation (CURVE_SCHEMA)


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
