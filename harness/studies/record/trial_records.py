"""A trial's child run completed from what the study keeps on storage.

Tune writes every report of a trial to its ``result.json`` (one JSON object a line) and the
trainable writes a final checkpoint with the trial's tables, whatever happens to the
tracking server. :func:`complete_child_run` brings a trial's child run in line with them:
the reports MLflow lacks (a gap left by an outage under a driver that died, or the whole
curve), the end-of-run summary, the final tables, the status and the run's end. Two callers:
``harness report --from`` (:func:`harness.studies.replay.record_study`), and a resumed study
before it ends its record (:func:`harness.studies.record.study_end.complete_child_runs`), so that a study resumed
after an outage and a killed driver ends with the record of an unfaulted one.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow.fs

from harness.mlflow_client import ENDED_MLFLOW_STATUSES
from harness.results_schema import RUN_TAG_OF_TRIAL_STATUS
from harness.studies.spec.grid import Trial
from harness.studies.storage import read_bytes, trial_reports
from harness.studies.tune.trainable import FINAL_ARTIFACTS, FINAL_RESULT
from harness.training.description import DESCRIBED_STATUSES, trial_description

if TYPE_CHECKING:  # callers import the recorder (its imports wait for the phase that records)
    from harness.studies.record.recorder import StudyRecorder


def final_checkpoint_files(fs: pyarrow.fs.FileSystem, trial_dir: str, into: Path) -> list[Path]:
    """The tables of the trial's final checkpoint (the newest ``checkpoint_*`` holding the
    trainable's ``train_result.json``), copied to ``into``."""
    try:
        infos = fs.get_file_info(pyarrow.fs.FileSelector(trial_dir, allow_not_found=True))
    except Exception:  # noqa: BLE001
        return []
    checkpoints = sorted(
        (i for i in infos if i.type == pyarrow.fs.FileType.Directory and i.base_name.startswith("checkpoint_")),
        key=lambda i: i.base_name,
        reverse=True,
    )
    for info in checkpoints:
        if fs.get_file_info(f"{info.path}/{FINAL_RESULT}").type != pyarrow.fs.FileType.File:
            continue
        files = []
        for name in FINAL_ARTIFACTS:
            data = read_bytes(fs, f"{info.path}/{name}")
            if data is not None:
                target = into / name
                target.write_bytes(data)
                files.append(target)
        return files
    return []


def complete_child_run(
    recorder: StudyRecorder,
    *,
    study: str,
    trial: Trial,
    row: dict[str, Any] | None,
    fs: pyarrow.fs.FileSystem,
    trial_dir: str,
    check: Callable[[], None] = lambda: None,
) -> str | None:
    """Trial ``trial``'s child run from its ``result.json`` and final checkpoint in ``trial_dir``
    (``row``: its row of the results table, None when it has none): ``created``, ``completed``
    (it existed without its end or with a gap in its curve), ``unchanged`` (complete already)
    or None (the trial never started: like a live study, no run). ``check`` raises when the
    store went away (the caller's way to stop)."""
    tid = trial.trial_id
    status = str(row["status"]) if row is not None else "incomplete"
    tag = RUN_TAG_OF_TRIAL_STATUS.get(status, status)
    lines = trial_reports(fs, trial_dir)
    existed = recorder.children.run_id(tid) is not None
    if not existed and status == "incomplete" and not lines:
        return None
    if existed:  # its gaps first: a run already ended as it should is not reopened
        filled = recorder.children.backfill(tid, lines)
        run = recorder.children.run(tid)
        check()  # the store went away while recording
        if run is None:
            return None
        if run.info.status in ENDED_MLFLOW_STATUSES and run.data.tags.get("status") == tag:
            return "completed" if filled else "unchanged"
    recorder.child(
        tid,
        study=study,
        tags=trial.tags(),
        params=trial.config.model_dump(),
        datasets=[trial.config.dataset],
        data_dir=trial.config.data_dir,
    )
    if not existed:
        recorder.children.backfill(tid, lines)
    _end_child_run(recorder, tid, status, tag, row, lines, fs, trial_dir)
    return "completed" if existed else "created"


def _end_child_run(
    recorder: StudyRecorder,
    tid: str,
    status: str,
    tag: str,
    row: dict[str, Any] | None,
    lines: list[dict[str, Any]],
    fs: pyarrow.fs.FileSystem,
    trial_dir: str,
) -> None:
    """The run's end as a live study records it: the summary of the trial's last report and its
    final checkpoint's tables for a finished or diverged trial; the status and description."""
    description = trial_description(row) if row is not None and status in DESCRIBED_STATUSES else None
    if status not in ("finished", "diverged"):
        recorder.children.end(tid, tag, description=description)
        return
    final = next((line for line in reversed(lines) if line.get("status") in ("finished", "diverged")), {})
    with tempfile.TemporaryDirectory() as tmp:
        files = final_checkpoint_files(fs, trial_dir, Path(tmp))
        recorder.children.end(
            tid, status, metrics=final, step=int(final.get("step", 0) or 0), files=files, description=description
        )
