"""Repair of a Tune experiment snapshot whose checkpoint references went stale.

Why this exists: with ``CheckpointConfig(num_to_keep=1)`` Ray Tune (checked on 2.60)
deletes a trial's previous checkpoint the moment it registers the new one
(``_CheckpointManager.register_checkpoint``), but writes the experiment snapshot
(``experiment_state-*.json``) only at the end of that controller step and uploads it to
storage asynchronously. A driver killed in between leaves a snapshot whose latest
checkpoint no longer exists, and ``Tuner.restore`` then fails the trial on every retry
with "Could not recover from checkpoint as it does not exist on storage anymore".

No setting Tune supports closes the window. ``num_to_keep=2`` (or any number) prunes at
registration just the same, and Tune forces a snapshot only every ``num_to_keep``
checkpoints, so the snapshot on storage can name the checkpoint just pruned;
``num_to_keep=None`` keeps every checkpoint of every trial (one per evaluation: too much
disk for real models); a ``tune.Callback`` runs around the registration but cannot write
the snapshot. tests/studies/test_studies_tune_state.py reproduces the race with Tune's
public hooks only (a callback that exits the driver in ``on_trial_save``, which runs after
the registration and before the snapshot) for ``num_to_keep`` 1 and 2. Upstream:
ray-project/ray#27790 reported it for Tune's earlier syncing code and
ray-project/ray#29099 answered with a fallback to the latest available checkpoint, which
the storage code of Ray 2.x no longer has. What to report upstream: "With
``CheckpointConfig(num_to_keep=k)``, ``Trial.on_checkpoint`` deletes the checkpoints
beyond ``k`` before the experiment snapshot that names the new one is written and synced;
a driver killed in between (e.g. from ``Callback.on_trial_save``) leaves a snapshot whose
latest checkpoint is deleted, and ``Tuner.restore(resume_errored=True)`` fails that trial on
every retry. Deleting after the snapshot that no longer names a checkpoint has been synced,
or restoring from the newest checkpoint on storage, would close it."

Ray's private names used here (``_find_newest_experiment_checkpoint``,
``_loads_with_cloudpickle``, ``get_fs_and_path``, the checkpoint manager's
``_latest_checkpoint_result`` and ``_checkpoint_results``, the tuner's ``_local_tuner``) are
those of Ray 2.60; tests/studies/test_studies_tune_state.py and
tests/studies/test_studies_ray_internals.py fail when Ray changes them.

Only older checkpoints are ever deleted, so a newer checkpoint of the trial is on storage:
the one whose registration deleted the stale one. Which newer folder that is, and whether
it is complete, cannot be read from the trial's ``result.json`` on storage alone: the
driver writes that file in its local staging folder and uploads it with the snapshot, so
after a kill it lags behind storage just as the snapshot does (CI, Ray 2.60: the stale
``checkpoint_000001`` beside a complete ``checkpoint_000002`` that result.json did not
name yet). Each checkpoint the harness reports therefore carries a manifest
(:data:`MANIFEST`, the size of each of its files, written before ``ray.tune.report``
hands the folder to Tune); a folder whose files all have their listed sizes is complete.
:func:`repair_stale_checkpoints` points each stale reference at

1. the newest checkpoint newer than the stale one that ``result.json`` names (the driver
   handled its result, so the MLflow record has it), or else
2. the oldest complete checkpoint newer than the stale one: the one whose registration
   deleted the stale one (a worker runs at most one report ahead of the driver, so a
   newer folder may hold a result the driver never handled).

**A torn snapshot.** Tune writes the snapshot in place, in its staging folder and then over
the copy on storage (``TuneController.save_to_dir`` and the experiment syncer, Ray 2.60): a
driver SIGKILLed during that copy leaves an empty or cut file, which ``Tuner.restore``
cannot read (a JSONDecodeError; found by the fault campaign). :class:`harness.studies.
snapshot_keeper.KeepLastGoodSnapshot` copies each snapshot that parses to
:data:`LAST_GOOD` beside it, and :func:`restore_torn_snapshot` puts that copy back before
a resume: the study resumes from the previous snapshot, as if the driver had died a
moment earlier (trials continue from the checkpoints it names; :func:`repair_stale_checkpoints`
then fixes those that were deleted since).

The snapshot stores each trial's checkpoint manager as a cloudpickle blob inside the
JSON (``TuneFunctionEncoder``); decoding it runs pickle on the study's own storage,
which the harness wrote and trusts like Tune itself does on restore. Anything not shaped
as expected is left untouched (Tune then reports the problem as before).
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

from harness.errors import InputError
from harness.studies.storage import read_bytes

log = logging.getLogger(__name__)

_CHECKPOINT_DIR = re.compile(r"^checkpoint_(\d+)$")

#: The file, in each checkpoint folder the harness reports, that lists the sizes of the others.
MANIFEST = "harness_checkpoint.json"
#: The last experiment snapshot that parsed, beside Tune's (a name Tune's glob
#: ``experiment_state-*.json`` does not match).
LAST_GOOD = "harness-last-good-experiment_state.json"


def _newest_snapshot(experiment_path: str) -> tuple[Any, str, str | None]:
    """(filesystem, experiment folder as its path, Tune's newest snapshot or None)."""
    from ray.train._internal.storage import get_fs_and_path
    from ray.tune.execution.experiment_state import _find_newest_experiment_checkpoint

    fs, fs_path = get_fs_and_path(experiment_path)
    return fs, fs_path, _find_newest_experiment_checkpoint(fs_path, fs=fs)


def _parsed(fs: Any, path: str) -> tuple[bytes, dict[str, Any]] | None:
    """The file's bytes and JSON object, or None when it is missing, empty or cut."""
    data = read_bytes(fs, path)
    try:
        state = json.loads(data) if data is not None else None
    except ValueError:
        return None
    return (data, state) if isinstance(state, dict) else None


def _write_atomically(fs: Any, path: str, data: bytes) -> None:
    """A sibling, then a move over ``path``: a kill mid-write leaves the old file whole (a move
    is atomic on local disks; object stores copy whole objects)."""
    tmp = f"{path}.harness-tmp"
    with fs.open_output_stream(tmp) as f:
        f.write(data)
    fs.move(tmp, path)


def snapshot_stamp(experiment_path: str) -> tuple[str, int, int] | None:
    """``(path, size, mtime in ns)`` of Tune's newest snapshot: what changes when Tune writes it
    again. None when there is none, or its filesystem keeps no modification time (then only
    reading it tells)."""
    fs, _, snapshot = _newest_snapshot(experiment_path)
    if snapshot is None:
        return None
    info = fs.get_file_info(snapshot)
    if info.mtime_ns is None or info.size is None:
        return None
    return snapshot, int(info.size), int(info.mtime_ns)


def keep_last_good_snapshot(experiment_path: str) -> bool:
    """Copy Tune's newest snapshot to :data:`LAST_GOOD` when it parses; returns whether it did."""
    fs, fs_path, snapshot = _newest_snapshot(experiment_path)
    parsed = _parsed(fs, snapshot) if snapshot is not None else None
    if parsed is None:
        return False
    _write_atomically(fs, f"{fs_path}/{LAST_GOOD}", parsed[0])
    return True


def restore_torn_snapshot(experiment_path: str) -> str | None:
    """Put :data:`LAST_GOOD` over Tune's newest snapshot when that one cannot be read; returns the
    snapshot's name when it did, None when the snapshot was whole (or there is none).

    Raises
    ------
    InputError
        The snapshot is torn and no complete copy is kept (a study started by an older harness).
    """
    fs, fs_path, snapshot = _newest_snapshot(experiment_path)
    if snapshot is None or _parsed(fs, snapshot) is not None:
        return None
    kept = _parsed(fs, f"{fs_path}/{LAST_GOOD}")
    if kept is None:
        raise InputError(
            f"cannot resume {experiment_path}: Tune's experiment snapshot {snapshot.rsplit('/', 1)[-1]} is empty "
            "or cut (the driver was killed while writing it) and no complete copy of it is kept. Its finished "
            "trials are in their folders; start the study again under a new storage path to rerun it"
        )
    _write_atomically(fs, snapshot, kept[0])
    return snapshot.rsplit("/", 1)[-1]


def write_manifest(directory: Path) -> None:
    """Write :data:`MANIFEST` into ``directory``: ``{"files": {relative path: size in bytes}}``
    of every other file under it. Call it last, just before the folder is reported."""
    files = {
        path.relative_to(directory).as_posix(): path.stat().st_size
        for path in sorted(directory.rglob("*"))
        if path.is_file() and path.name != MANIFEST
    }
    (directory / MANIFEST).write_text(json.dumps({"files": files}))


def is_complete(fs: Any, checkpoint_dir: str) -> bool:
    """Whether the checkpoint folder ``checkpoint_dir`` (a path on ``fs``) holds its
    :data:`MANIFEST` and every file it lists at its listed size (a folder still being
    copied when the driver died lacks a file, or has one short)."""
    import pyarrow.fs

    try:
        with fs.open_input_stream(f"{checkpoint_dir}/{MANIFEST}") as f:
            files = json.loads(f.read())["files"]
        infos = fs.get_file_info([f"{checkpoint_dir}/{name}" for name in files])
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return all(
        info.type == pyarrow.fs.FileType.File and info.size == size
        for info, size in zip(infos, files.values(), strict=True)
    )


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


def numbered_checkpoint_dirs(fs: Any, trial_dir: str) -> list[tuple[int, str]]:
    """The ``checkpoint_<n>`` folders under ``trial_dir`` (a path on ``fs``) as (n, path),
    by increasing ``n``; [] when there is none."""
    import pyarrow.fs

    try:
        infos = fs.get_file_info(pyarrow.fs.FileSelector(trial_dir, allow_not_found=True))
    except OSError:
        return []
    return sorted(
        (int(m.group(1)), info.path)
        for info in infos
        if info.type == pyarrow.fs.FileType.Directory and (m := _CHECKPOINT_DIR.match(info.base_name))
    )


def replacement_checkpoint(fs: Any, stale_path: str) -> str | None:
    """The checkpoint a trial resumes from in place of its deleted ``stale_path``: the newest
    newer one that the trial's ``result.json`` names, else the oldest newer complete one
    (:func:`is_complete`); None when there is none (see the module docstring for why)."""
    trial_dir, stale_name = stale_path.rstrip("/").rsplit("/", 1)
    m = _CHECKPOINT_DIR.match(stale_name)
    if m is None:
        return None
    newer = [(n, path) for n, path in numbered_checkpoint_dirs(fs, trial_dir) if n > int(m.group(1))]
    reported = reported_checkpoints(fs, trial_dir) or set()
    named = [path for _, path in newer if path.rsplit("/", 1)[-1] in reported]
    if named:
        return named[-1]
    return next((path for _, path in newer if is_complete(fs, path)), None)


def _exists(fs: Any, path: str) -> bool:
    import pyarrow.fs

    return fs.get_file_info(path).type != pyarrow.fs.FileType.NotFound


def _repair_manager(manager: Any) -> tuple[str, str] | None:
    """Point a trial checkpoint manager's missing latest checkpoint at its
    :func:`replacement_checkpoint`; returns (old path, new path) when it changed something."""
    from ray.tune import Checkpoint

    latest = getattr(manager, "_latest_checkpoint_result", None)
    checkpoint = getattr(latest, "checkpoint", None)
    if checkpoint is None:
        return None
    fs, old_path = checkpoint.filesystem, checkpoint.path
    if _exists(fs, old_path):
        return None
    new_path = replacement_checkpoint(fs, old_path)
    if new_path is None:
        return None
    replacement = Checkpoint(path=new_path, filesystem=fs)
    # The latest result is also an entry of the kept list (same object after unpickling);
    # fix every entry whose folder is gone so Tune's bookkeeping stays consistent.
    for result in [latest, *getattr(manager, "_checkpoint_results", [])]:
        ckpt = getattr(result, "checkpoint", None)
        if ckpt is not None and (ckpt.path == old_path or not _exists(ckpt.filesystem, ckpt.path)):
            result.checkpoint = replacement
    return old_path, new_path


def tolerate_repeated_actor_failure() -> None:
    """Make Ray Tune (2.60) count one worker death once.

    With ``reuse_actors=True`` a worker process can die with two calls of Tune outstanding on
    it (a trial's next call queued behind the one running, e.g. right after the actor was
    handed to a new trial). Each fails with the actor's death. The first goes through
    ``TuneController._process_trial_failure`` as it should: the trial has retries left, so
    it is set PENDING to restart from its checkpoint. The second arrives for a PENDING trial,
    and that branch stops the trial as ERROR -- a trial with ``retries: 6`` ended after one
    kill (fault campaign, schedule 699642624). A PENDING trial has no actor, so an actor's
    death reported for it is the death already handled: the patched method ignores it and
    the trial restarts as the first failure asked. Applied once per driver process, before
    the tuner runs; tests/studies/test_studies_tune_state.py checks it on Ray's own
    controller and fails when Ray changes the method."""
    from ray.exceptions import RayActorError
    from ray.tune.execution.tune_controller import TuneController
    from ray.tune.experiment import Trial

    original = TuneController._process_trial_failure
    if hasattr(original, "harness_original"):
        return

    def _process_trial_failure(self: Any, trial: Any, exception: BaseException) -> None:
        if trial.status == Trial.PENDING and isinstance(exception, RayActorError):
            log.info("trial %s: its dead worker reported a second failure; already restarting it", trial)
            return
        original(self, trial, exception)

    _process_trial_failure.harness_original = original  # type: ignore[attr-defined]
    TuneController._process_trial_failure = _process_trial_failure


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
    from ray.tune.utils.serialization import TuneFunctionEncoder, _loads_with_cloudpickle

    fs, _, snapshot = _newest_snapshot(experiment_path)
    parsed = _parsed(fs, snapshot) if snapshot is not None else None
    if parsed is None:  # none, or torn (restore_torn_snapshot comes first): Tune says what is wrong
        return []
    state = parsed[1]
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
        _write_atomically(fs, snapshot, json.dumps(state, cls=TuneFunctionEncoder).encode())
    return changed
