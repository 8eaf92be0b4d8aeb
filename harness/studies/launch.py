"""Launching a study's trials on Ray Tune: the trainable, the driver's callbacks (the MLflow
record, the progress view), and Tune's experiment, new or restored (a resumed study); a
sequential study's searcher.

Ray Tune, the MLflow recorder, its Tune callback and the progress view (both subclass Tune's
``Callback``) are imported inside the functions that use them, for the start-up cost measured in
:mod:`harness.studies.runner`.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

from harness.studies.cluster.connect import quiet_tune
from harness.studies.plan import StudyLayout, StudyPlan
from harness.studies.tune.results_table import trial_status
from harness.studies.tune.sequential import scheduled_trials
from harness.studies.tune.state import (
    repair_stale_checkpoints,
    replace_restored_callbacks,
    restore_torn_snapshot,
    tolerate_repeated_actor_failure,
)
from harness.studies.tune.trainable import run_trial

if TYPE_CHECKING:  # the lazy imports below, for the annotations
    from ray import tune

    from harness.studies.record.recorder import StudyRecorder
    from harness.studies.tune.progress import StudyProgress


def _trial_name(trial: Any) -> str:
    """Tune trial names and directories are the stable trial ids."""
    return str(trial.config["trial"])


def make_trainable(plan: StudyPlan) -> Any:
    """The Tune trainable: :func:`run_trial` with every trial's config and how many trials share
    each one's compiled graph (both made once by the plan), the trials' extra Lightning callbacks
    (``plan.trial_callbacks``) and the trial's resources."""
    from ray import tune  # see the note on imports at the top of this module

    return tune.with_resources(
        tune.with_parameters(
            run_trial,
            trials=plan.trial_configs,
            compile_sharing=plan.compile_sharing,
            trial_callbacks=plan.trial_callbacks,
        ),
        {"cpu": plan.spec.resources.cpus, "gpu": plan.spec.resources.gpus},
    )


def restore_tuner(
    layout: StudyLayout, trainable: Any, tune_callbacks: list[Any], say: Any
) -> tuple[Any, dict[str, str], set[str]]:
    """Tune's experiment of a resumed study, with today's callbacks; the trials it
    already finished (trial id -> DONE | DIVERGED) for the progress view; and every trial
    id it holds (a sequential study's searcher never hands those out again)."""
    from ray import tune  # see the note on imports at the top of this module

    study_dir = layout.study_dir
    # Trials that had not reported yet have no result file: Tune warns about each
    # when it reads the experiment back; they simply have not finished.
    analysis_log = logging.getLogger("ray.tune.analysis.experiment_analysis")
    level = analysis_log.level
    analysis_log.setLevel(logging.ERROR)
    try:
        torn = restore_torn_snapshot(study_dir)
        if torn is not None:
            say(f"  Tune's snapshot {torn} was cut by the kill: resuming from the complete one before it")
        for stale, replacement in repair_stale_checkpoints(study_dir):
            trial_name, replacement_name = replacement.rstrip("/").rsplit("/", 2)[-2:]
            say(
                f"  {trial_name}: resuming from {replacement_name} (Tune's snapshot named "
                f"{stale.rsplit('/', 1)[-1]}, already deleted)"
            )
        tuner = tune.Tuner.restore(study_dir, trainable=trainable, resume_errored=True)
        # Tune restores the RunConfig it pickled; today's callbacks (tracking URI,
        # terminal) replace the stale copies.
        replace_restored_callbacks(tuner, tune_callbacks)
        already, known = {}, set()
        for result in tuner.get_results():
            if result.config:
                known.add(str(result.config["trial"]))
            status = trial_status(result.metrics, None)
            if status in ("finished", "diverged"):
                already[str(result.config["trial"])] = "DONE" if status == "finished" else "DIVERGED"
    finally:
        analysis_log.setLevel(level)
    return tuner, already, known


def new_tuner(
    plan: StudyPlan, layout: StudyLayout, trainable: Any, tune_callbacks: list[Any], searcher: Any = None
) -> tune.Tuner:
    """A Tune experiment named after the study's run: one grid point per trial id, or a
    sequential study's searcher handing out the trials of its batches."""
    from ray import tune  # see the note on imports at the top of this module

    spec = plan.spec
    trial_ids = [t.trial_id for t in plan.trials]
    return tune.Tuner(
        trainable,
        param_space={"trial": tune.grid_search(trial_ids)} if searcher is None else {},
        tune_config=tune.TuneConfig(
            search_alg=searcher,
            num_samples=1 if searcher is None else len(trial_ids),
            max_concurrent_trials=spec.max_concurrent_trials,
            trial_name_creator=_trial_name,
            trial_dirname_creator=_trial_name,
            reuse_actors=True,  # one worker process per slot: imports once, not per trial
        ),
        run_config=tune.RunConfig(
            name=layout.run_name,
            storage_path=f"{plan.storage}/{spec.name}",
            callbacks=tune_callbacks,
            failure_config=tune.FailureConfig(max_failures=spec.retries),
            checkpoint_config=tune.CheckpointConfig(num_to_keep=1),
            verbose=0,
            log_to_file=True,
        ),
    )


def open_recorder(plan: StudyPlan) -> StudyRecorder:
    """The study's MLflow recorder (no connection yet), with Tune's own console output off."""
    from harness.studies.record.recorder import StudyRecorder  # see the note on imports

    quiet_tune()
    return StudyRecorder(
        plan.tracking_uri,
        plan.spec.experiment_name(),
        warn=lambda m: print(f"warning: {m}", file=sys.stderr, flush=True),
    )


def launch_tune(
    plan: StudyPlan,
    layout: StudyLayout,
    recorder: StudyRecorder,
    previous: tuple[str, dict[str, Any]] | None,
    *,
    callbacks: Sequence[Any],
    out: TextIO,
    live: bool | None,
    say: Any,
) -> tuple[Any, Any, dict[str, str]]:
    """Launch Tune: the trainable, the driver callbacks (the MLflow record, the
    progress view, the caller's) and Tune's experiment, new or restored; a sequential
    study's searcher. Returns the tuner, the progress view and the trials a resumed study
    already finished."""
    # See the note on imports at the top of this module.
    from harness.studies.record.tune_callback import MlflowStudyCallback
    from harness.studies.tune.progress import StudyProgress
    from harness.studies.tune.seed_search import searcher_for
    from harness.studies.tune.snapshot_keeper import KeepLastGoodSnapshot

    tolerate_repeated_actor_failure()  # one worker death is one failure (harness.studies.tune.state)
    trainable = make_trainable(plan)
    shown = scheduled_trials(plan.sequential, plan.trials, layout.study_dir)  # a sequential study: its batches so far
    progress = StudyProgress(
        [t.trial_id for t in shown],
        max_steps={t.trial_id: t.config.max_steps for t in plan.trials},
        stream=out,
        live=live,
    )
    tune_callbacks = [
        MlflowStudyCallback(recorder, plan.by_id, study=plan.spec.name),
        progress,
        KeepLastGoodSnapshot(layout.study_dir),
        *callbacks,
    ]
    if previous is not None:
        tuner, already, known = restore_tuner(layout, trainable, tune_callbacks, say)
        searcher = searcher_for(plan, layout.study_dir, known=known, announce=progress.note)
        if searcher is not None:
            # Tune restores the searcher it pickled at the start and then its saved state;
            # today's (with the terminal and the trials Tune holds) takes that state instead.
            tuner._local_tuner._tune_config.search_alg = searcher
    else:
        searcher = searcher_for(plan, layout.study_dir, announce=progress.note)
        tuner, already = new_tuner(plan, layout, trainable, tune_callbacks, searcher), {}
    return tuner, progress, already


def fit_with_progress(tuner: tune.Tuner, progress: StudyProgress, already: dict[str, str]) -> tune.ResultGrid:
    """Run Tune's experiment to its end (or an interrupt) with the progress view showing."""
    progress.start(already)
    try:
        return tuner.fit()
    finally:
        progress.stop()
