"""The end of a study's record, once its outcomes are collected: a resumed study's child runs
completed from storage, then the parent run ended with the results table, the counts and (a
sequential study) its decision log.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from harness.results_schema import RUN_TAG_OF_TRIAL_STATUS
from harness.studies.plan import CollectedOutcomes, StudyLayout, StudyPlan
from harness.studies.record.trial_records import complete_child_run
from harness.studies.storage import trial_dir
from harness.studies.tune.sequential import DECISIONS_FILE

if TYPE_CHECKING:  # the recorder is imported by the phase that records (harness.studies.launch)
    from harness.studies.record.recorder import StudyRecorder


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
