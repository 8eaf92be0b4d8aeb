"""Repair of a Tune experiment snapshot whose checkpoint references went stale.

Why this exists: with ``CheckpointConfig(num_to_keep=1)`` Ray Tune (checked on 2.60)
deletes a trial's previous checkpoint the moment it registers the new one
(``_CheckpointManager.register_checkpoint``), but writes the experiment snapshot
(``experiment_state-*.json``) only at the end of that controller step and uploads it to
storage asynchronously. A driver killed in between leaves a snapshot whose latest
checkpoint no longer exists, and ``Tuner.restore`` then fails the trial on every retry
with "Could not recover from checkpoint as it does not exist on storage anymore".

Ray's private names used here (``_find_newest_experiment_checkpoint``,
``_loads_with_cloudpickle``, ``get_fs_and_path``, the checkpoint manager's
``_latest_checkpoint_result`` and ``_checkpoint_results``, the tuner's ``_local_tuner``) are
those of Ray 2.60; tests/studies/test_studies_tune_state.py and
tests/studies/test_studies_ray_internals.py fail when Ray changes them.

Only older checkpoints are ever deleted, so a newer checkpoint of the trial is on storage:
the one whose registration deleted the stale one. Complete checkpoints are told from one
being written when the driver died by the trial's ``result.json``: a worker persists a
checkpoint before it reports the result naming it (``checkpoint_dir_name``), and the
driver logs that result before it registers the checkpoint. :func:`repair_stale_checkpoints`
points each stale reference at the newest reported checkpoint before the resume.

The snapshot stores each trial's checkpoint manager as a cloudpickle blob inside the
JSON (``TuneFunctionEncoder``); decoding it runs pickle on the study's own storage,
which the harness wrote and trusts like Tune itself does on restore. Anything not shaped
as expected is left untouched (Tune then reports the problem as before).
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

log = logging.getLogger(__name__)

_CHECKPOINT_DIR = re.compile(r"^checkpoint_(\d+)$")


def reported_checkpoints(fs: Any, trial_dir: str) -> set[str] | None:
    """Names of the checkpoints the trial reported (``checkpoint_dir_name`` of the rows of
    its ``result.json``): each was fully persisted. None when there is no ``result.json``
    (Tune's JSON logger turned off)."""
    try:
        with fs.open_input_stream(f"{trial_dir}/result.json") as f:
            text = f.read().decode(errors="replace")
    except (OSError, FileNotFoundError):
        return None
    names = set()
    for line in text.splitlines():
        try:
            name = json.loads(line).get("checkpoint_dir_name")
        except (ValueError, AttributeError):  # a line cut short by the kill
            continue
        if isinstance(name, str):
            names.add(name)
    return names


def newest_checkpoint_dir(fs: Any, trial_dir: str, *, among: set[str] | None = None) -> str | None:
    """The ``checkpoint_<n>`` folder with the largest ``n`` under ``trial_dir`` (a path
    on ``fs``), only those named in ``among`` if given; None when there is none."""
    import pyarrow.fs

    try:
        infos = fs.get_file_info(pyarrow.fs.FileSelector(trial_dir, allow_not_found=True))
    except OSError:
        return None
    numbered = [
        (int(m.group(1)), info.path)
        for info in infos
        if info.type == pyarrow.fs.FileType.Directory
        and (m := _CHECKPOINT_DIR.match(info.base_name))
        and (among is None or info.base_name in among)
    ]
    return max(numbered)[1] if numbered else None


def _exists(fs: Any, path: str) -> bool:
    import pyarrow.fs

    return fs.get_file_info(path).type != pyarrow.fs.FileType.NotFound


def _repair_manager(manager: Any) -> tuple[str, str] | None:
    """Point a trial checkpoint manager's missing latest checkpoint at the newest reported
    one on storage; returns (old path, new path) when it changed something."""
    from ray.tune import Checkpoint

    latest = getattr(manager, "_latest_checkpoint_result", None)
    checkpoint = getattr(latest, "checkpoint", None)
    if checkpoint is None:
        return None
    fs, old_path = checkpoint.filesystem, checkpoint.path
    if _exists(fs, old_path):
        return None
    trial_dir = old_path.rstrip("/").rsplit("/", 1)[0]
    newest = newest_checkpoint_dir(fs, trial_dir, among=reported_checkpoints(fs, trial_dir))
    if newest is None or newest == old_path:
        return None
    replacement = Checkpoint(path=newest, filesystem=fs)
    # The latest result is also an entry of the kept list (same object after unpickling);
    # fix every entry whose folder is gone so Tune's bookkeeping stays consistent.
    for result in [latest, *getattr(manager, "_checkpoint_results", [])]:
        ckpt = getattr(result, "checkpoint", None)
        if ckpt is not None and (ckpt.path == old_path or not _exists(ckpt.filesystem, ckpt.path)):
            result.checkpoint = replacement
    return old_path, newest


def replace_restored_callbacks(tuner: Any, callbacks: list[Any]) -> None:
    """Give a restored ``tune.Tuner`` today's driver callbacks.

    ``Tuner.restore`` brings back the RunConfig Tune pickled when the study started, with the
    callbacks of that day (a stale MLflow recorder and progress view); it takes no new ones.
    The only way to set them is the tuner's private ``_local_tuner`` (Ray 2.60);
    tests/studies/test_studies_ray_internals.py and
    tests/studies/test_studies_resume.py::test_interrupted_study_resumes_without_repeating_finished_trials
    fail when Ray changes it."""
    tuner._local_tuner.get_run_config().callbacks = callbacks


def repair_stale_checkpoints(experiment_path: str) -> list[tuple[str, str]]:
    """Rewrite the newest experiment snapshot under ``experiment_path`` (local path or
    URI) so that no trial refers to a deleted checkpoint; returns the (old, new) pairs
    it changed ([] when the snapshot was consistent or not understood)."""
    from ray.train._internal.storage import get_fs_and_path
    from ray.tune.execution.experiment_state import _find_newest_experiment_checkpoint
    from ray.tune.utils.serialization import TuneFunctionEncoder, _loads_with_cloudpickle

    fs, fs_path = get_fs_and_path(experiment_path)
    snapshot = _find_newest_experiment_checkpoint(fs_path, fs=fs)
    if snapshot is None:
        return []
    with fs.open_input_stream(snapshot) as f:
        state = json.loads(f.read())
    changed: list[tuple[str, str]] = []
    trial_data = state.get("trial_data")
    if not isinstance(trial_data, list):
        return []
    for entry in trial_data:
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[1], str)):
            continue
        try:
            run_metadata = _loads_with_cloudpickle(entry[1])
        except Exception as exc:  # noqa: BLE001 - another Ray's format: leave it to Tune
            log.warning("cannot read a trial's run metadata in %s: %s", snapshot, exc)
            continue
        manager = run_metadata.get("checkpoint_manager") if isinstance(run_metadata, dict) else None
        fixed = _repair_manager(manager) if manager is not None else None
        if fixed is None:
            continue
        run_metadata["checkpoint_manager"] = manager
        entry[1] = json.dumps(run_metadata, indent=2, cls=TuneFunctionEncoder)
        changed.append(fixed)
    if changed:
        # Write a sibling, then move it over the snapshot: a kill mid-write leaves the
        # original intact (a move is atomic on local disks; object stores copy whole).
        tmp = f"{snapshot}.harness-tmp"
        with fs.open_output_stream(tmp) as f:
            f.write(json.dumps(state, cls=TuneFunctionEncoder).encode())
        fs.move(tmp, snapshot)
    return changed
