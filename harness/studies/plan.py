"""What the phases of :func:`~harness.studies.runner.run_study` hand each other: the
checked plan, where one run of the study lives, and what its trials ended with.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import polars as pl

from harness.studies.spec.grid import Trial
from harness.studies.spec.study_spec import StudySpec

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
    trial runs in a working directory of Tune's, where a relative path means another folder."""

    spec: StudySpec
    spec_text: str
    trials: list[Trial]  # their configs carry data_dir, absolute
    tracking_uri: str  # a local database's path absolute (resolved against the user's working directory)
    storage: str  # a local folder absolute
    address: str | None  # None: an embedded local Ray
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


@dataclass(frozen=True)
class StudyLayout:
    """Where one run of a study lives: ``<storage>/<name>/<run_name>``."""

    run_name: str
    study_run: str  # ``<name>/<run_name>``: the tag that finds the parent run again
    study_dir: str  # as the user names it (a URI or a local path)
    study_root: str  # the same folder as a path of ``fs``
    fs: Any  # pyarrow filesystem of the storage
    local_dir: Path | None  # None for remote storage


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
