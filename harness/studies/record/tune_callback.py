"""The Ray Tune driver callback that turns Tune's trial events into the study's MLflow record
(:class:`~harness.studies.record.recorder.StudyRecorder`; the table of events and MLflow calls
is in that module's docstring). Imports Ray Tune: loaded with the tuner
(:mod:`harness.studies.launch`), never with the package.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ray.tune import Callback

from harness.studies.record.recorder import StudyRecorder
from harness.studies.tune.progress import trial_error_summary
from harness.studies.tune.results_table import results_table
from harness.studies.tune.trainable import FINAL_ARTIFACTS
from harness.training.description import trial_description


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
            self.recorder.children.metrics(self._trial_id(trial), result, step=int(step))

    def on_trial_recover(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        # The trial failed and Tune restarts it from its last checkpoint (FailureConfig).
        tid = self._trial_id(trial)
        self.recorder.children.set_tags(tid, {"harness.retries": self.attempts.get(tid, 1)})

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        tid = self._trial_id(trial)
        result = dict(trial.last_result or {})
        status = str(result.get("status", "finished"))
        with tempfile.TemporaryDirectory() as tmp:
            files = final_files(trial.checkpoint, Path(tmp))
            self.recorder.children.end(
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
        self.recorder.children.end(
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
