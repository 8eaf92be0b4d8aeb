"""A device runner's folder recorded in MLflow as if Ray Tune had run the study.

:func:`study_directory` lays the folder (:mod:`harness.studies.device.runner`) out as a study
directory of a storage path, the layout ``harness run`` leaves (:mod:`harness.studies.storage`):

    <storage>/<study>/<started>/harness_study.json, spec.yaml, results.parquet, curves.parquet
    <storage>/<study>/<started>/<trial_id>/result.json                 every report, one a line
    <storage>/<study>/<started>/<trial_id>/checkpoint_000000/train_result.json, window_losses.parquet

and :func:`record_device_study` hands it to the replay (:func:`harness.studies.replay.record_study`),
which writes the parent run and one child run per trial with every evaluation's metrics, the final
summary, the window losses and the run descriptions, exactly as for a study whose tracking server
was down. Recording twice adds nothing (the replay is idempotent), and the study directory is a
study like any other: ``harness report STUDY --from <study directory>`` reads it.

What a Ray study records and this one cannot: the gate and MOPE parameter tables of each trial's
final checkpoint (the runner keeps no model), whose values are in the runs' metrics too
(``gate/tau/l0h0``, ``mope/sigma_mean`` ...).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.errors import InputError
from harness.results_schema import CURVES_FILE
from harness.studies.device.runner import DEVICE_FILE, DEVICE_FORMAT
from harness.studies.device.tables import RESULTS_FILE, WINDOWS_FILE
from harness.studies.replay import RecordOutcome, record_study
from harness.studies.storage import STUDY_FILE
from harness.studies.tune.trainable import FINAL_RESULT

#: The one checkpoint folder of a trial laid out from a device run: its final tables.
FINAL_CHECKPOINT = "checkpoint_000000"


def read_device_folder(folder: str | Path) -> dict[str, Any]:
    """The runner's record (:data:`~harness.studies.device.runner.DEVICE_FILE`) of ``folder``;
    :class:`InputError` for a folder that holds no device study or an incomplete one."""
    folder = Path(folder)
    path = folder / DEVICE_FILE
    if not path.is_file():
        raise InputError(
            f"{folder} holds no device study (no {DEVICE_FILE}); pass the folder `harness device run` wrote"
        )
    record = json.loads(path.read_text())
    if record.get("format") != DEVICE_FORMAT:
        raise InputError(f"{path}: format {record.get('format')!r}, this harness reads format {DEVICE_FORMAT}")
    missing = [name for name in (RESULTS_FILE, CURVES_FILE, WINDOWS_FILE, "spec.yaml") if not (folder / name).is_file()]
    if missing:
        raise InputError(f"{folder}: {', '.join(missing)} missing; the device study's folder is incomplete")
    return record


def study_directory(folder: str | Path, storage: str | Path) -> Path:
    """The device study in ``folder`` laid out as a study directory under ``storage`` (module
    docstring), made anew when it exists; returns it."""
    import shutil

    import polars as pl

    folder = Path(folder)
    record = read_device_folder(folder)
    target = Path(storage) / record["study"] / record["started"]
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for name in (RESULTS_FILE, CURVES_FILE, WINDOWS_FILE, "spec.yaml"):
        shutil.copy2(folder / name, target / name)
    meta = {
        "study": record["study"],
        "study_run": f"{record['study']}/{record['started']}",
        "trial_ids": record["trial_ids"],
        "git_commit": record.get("git_commit"),
        "device": record.get("machine"),
        "recorded_from": str(folder.resolve()),
    }
    (target / STUDY_FILE).write_text(json.dumps(meta, indent=2))
    windows = pl.read_parquet(folder / WINDOWS_FILE)
    for trial_id, reports in record.get("reports", {}).items():
        _trial_folder(target / trial_id, reports, windows.filter(pl.col("trial_id") == trial_id))
    return target


def _trial_folder(directory: Path, reports: list[dict[str, Any]], windows: Any) -> None:
    """One trial as Tune keeps it: ``result.json`` (a report a line), and for a trial that ended
    its final checkpoint (the summary, the window losses of its final evaluation)."""
    directory.mkdir()
    (directory / "result.json").write_text("".join(json.dumps(r, allow_nan=True) + "\n" for r in reports))
    final = reports[-1] if reports and reports[-1].get("status") in ("finished", "diverged") else None
    if final is None:
        return
    checkpoint = directory / FINAL_CHECKPOINT
    checkpoint.mkdir()
    (checkpoint / FINAL_RESULT).write_text(json.dumps(final, allow_nan=True))
    if windows.height:
        windows.select("split", "window", "loss").write_parquet(checkpoint / WINDOWS_FILE)


def record_device_study(
    folder: str | Path,
    *,
    storage: str | Path = "results",
    tracking_uri: str | None = None,
    say: Callable[[str], None] = print,
) -> tuple[Path, RecordOutcome]:
    """Lay the device study in ``folder`` out under ``storage`` and record it in MLflow at
    ``tracking_uri`` (default ``$MLFLOW_TRACKING_URI``, else ``sqlite:///mlflow.db``); the study
    directory and what the record did. :class:`InputError` as :func:`read_device_folder` and
    :func:`~harness.studies.replay.record_study`."""
    directory = study_directory(folder, storage)
    say(f"study directory: {directory}")
    return directory, record_study(directory, tracking_uri=tracking_uri, say=say)
