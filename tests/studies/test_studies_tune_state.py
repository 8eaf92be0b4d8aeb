"""A Tune snapshot that names a checkpoint Tune already deleted (the driver was killed
between ``num_to_keep`` pruning and the next snapshot) is repaired before a resume, and
the trial continues from the checkpoint that replaced it instead of failing on every
retry, whether or not the trial's ``result.json`` on storage caught up with it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import killed_tune_driver
import pytest
from harness_support import cli_env, end_session
from ray import cloudpickle, tune

from harness.errors import InputError
from harness.studies.tune.state import (
    LAST_GOOD,
    MANIFEST,
    is_complete,
    keep_last_good_snapshot,
    numbered_checkpoint_dirs,
    repair_stale_checkpoints,
    replacement_checkpoint,
    reported_checkpoints,
    restore_torn_snapshot,
    tolerate_repeated_actor_failure,
    write_manifest,
)

# Ray's workers cannot import the test modules: ship the trainables by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])
cloudpickle.register_pickle_by_value(killed_tune_driver)


def _trainable(config: dict) -> None:
    """Resume from the checkpoint if any; report three checkpoints holding their step;
    fail on the first run (so the trial is ERROR and ``resume_errored`` restores it)."""
    start = 0
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            start = json.loads((Path(d) / "state.json").read_text())["step"] + 1
    for step in range(start, start + 3):
        with tempfile.TemporaryDirectory() as d:
            (Path(d) / "state.json").write_text(json.dumps({"step": step}))
            tune.report({"step": step, "start": start}, checkpoint=tune.Checkpoint.from_directory(d))
    if start == 0:
        raise RuntimeError("first run fails on purpose")


def _run(storage: Path) -> tune.ResultGrid:
    return tune.Tuner(
        _trainable,
        run_config=tune.RunConfig(
            name="exp",
            storage_path=str(storage),
            checkpoint_config=tune.CheckpointConfig(num_to_keep=1),
            failure_config=tune.FailureConfig(max_failures=0),
            verbose=0,
        ),
    ).fit()


def test_stale_checkpoint_reference_is_repointed_and_the_trial_resumes(tmp_path: Path, local_ray: None) -> None:
    first = _run(tmp_path)
    (result,) = list(first)
    assert result.error is not None
    trial_dir = Path(result.path)
    assert [p.name for p in trial_dir.glob("checkpoint_*")] == ["checkpoint_000002"]

    # The race: the trial reported a newer checkpoint (step 9; its result is in result.json),
    # Tune registered it and deleted checkpoint_000002, the worker began writing the next
    # one, and the driver died before the snapshot that would name checkpoint_000003.
    newer = trial_dir / "checkpoint_000003"
    (trial_dir / "checkpoint_000002").rename(newer)
    (newer / "state.json").write_text(json.dumps({"step": 9}))
    with open(trial_dir / "result.json", "a") as f:
        f.write(json.dumps({"step": 9, "checkpoint_dir_name": newer.name}) + "\n")
    (trial_dir / "checkpoint_000004").mkdir()  # being written, never reported: not complete

    changed = repair_stale_checkpoints(str(tmp_path / "exp"))
    assert changed == [(str(trial_dir / "checkpoint_000002"), str(newer))]
    assert repair_stale_checkpoints(str(tmp_path / "exp")) == []  # consistent now: no change

    resumed = tune.Tuner.restore(str(tmp_path / "exp"), trainable=_trainable, resume_errored=True).fit()
    (result,) = list(resumed)
    assert result.error is None, result.error
    assert result.metrics["start"] == 10 and result.metrics["step"] == 12


def test_stale_reference_is_repaired_when_result_json_lags_behind_storage(tmp_path: Path, local_ray: None) -> None:
    # CI, Ray 2.60: result.json is uploaded with the snapshot, so after the kill it did not
    # name the checkpoint whose registration deleted the stale one.
    (result,) = list(_run(tmp_path))
    trial_dir = Path(result.path)
    registered = trial_dir / "checkpoint_000003"
    (trial_dir / "checkpoint_000002").rename(registered)
    (registered / "state.json").write_text(json.dumps({"step": 9}))
    write_manifest(registered)
    cut_short = trial_dir / "checkpoint_000004"  # the worker's next copy, cut by the kill
    cut_short.mkdir()
    (cut_short / "state.json").write_text(json.dumps({"step": 12}))
    write_manifest(cut_short)
    (cut_short / "state.json").write_text("{")

    assert repair_stale_checkpoints(str(tmp_path / "exp")) == [(str(trial_dir / "checkpoint_000002"), str(registered))]
    resumed = tune.Tuner.restore(str(tmp_path / "exp"), trainable=_trainable, resume_errored=True).fit()
    (result,) = list(resumed)
    assert result.error is None, result.error
    assert result.metrics["start"] == 10 and result.metrics["step"] == 12


KILLED_DRIVER = Path(__file__).with_name("killed_tune_driver.py")


def _killed_driver(storage: Path, num_to_keep: int, saves: int) -> Path:
    """Run tests/studies/killed_tune_driver.py (in a session of its own, ended afterwards): the
    driver exits right after Tune registered the trial's ``saves``-th checkpoint, before the
    snapshot that names it. Returns the trial's folder."""
    proc = subprocess.Popen(
        [sys.executable, str(KILLED_DRIVER), str(storage), str(num_to_keep), str(saves)],
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=300)
    finally:
        end_session(proc.pid)
    assert proc.returncode == 17, out[-3000:]
    (trial_dir,) = [p for p in (storage / "exp").iterdir() if p.is_dir() and p.name.startswith("trainable")]
    return trial_dir


@pytest.mark.slow
@pytest.mark.parametrize("num_to_keep", [1, 2])
def test_a_driver_killed_between_pruning_and_snapshot_leaves_a_stale_reference(
    tmp_path: Path, num_to_keep: int, local_ray: None
) -> None:
    """The race itself, with Tune's public hooks only, for the harness's ``num_to_keep=1``
    and for Tune's own remedy of keeping one more (``num_to_keep=2``: Tune forces a snapshot
    every ``num_to_keep`` checkpoints, but still prunes before it). Killed after the fourth
    save, both snapshots name a deleted checkpoint; the repair points it at the one that
    replaced it, and the trial resumes from there. When this test fails because nothing
    was stale, Ray has closed the race and the repair can go."""
    trial_dir = _killed_driver(tmp_path, num_to_keep, saves=4)
    kept = sorted(p.name for p in trial_dir.glob("checkpoint_*"))
    assert kept == [f"checkpoint_{n:06d}" for n in range(4 - num_to_keep, 4)]
    stale = f"checkpoint_{3 - num_to_keep:06d}"  # the newest checkpoint of the last snapshot: deleted

    ((old, new),) = repair_stale_checkpoints(str(tmp_path / "exp"))
    assert old == str(trial_dir / stale) and Path(new).parent == trial_dir and Path(new).name in kept
    resumed = tune.Tuner.restore(str(tmp_path / "exp"), trainable=killed_tune_driver.trainable, resume_unfinished=True)
    (result,) = list(resumed.fit())
    assert result.error is None, result.error
    assert result.metrics["start"] == int(Path(new).name.split("_")[1]) + 1 and result.metrics["step"] == 7


def _checkpoint_folder(parent: Path, name: str, *, files: dict[str, bytes], manifest: bool = True) -> str:
    folder = parent / name
    folder.mkdir()
    for relative, content in files.items():
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        (folder / relative).write_bytes(content)
    if manifest:
        write_manifest(folder)
    return str(folder)


def test_a_checkpoint_is_complete_when_every_file_of_its_manifest_has_its_size(tmp_path: Path) -> None:
    import pyarrow.fs

    fs = pyarrow.fs.LocalFileSystem()
    whole = _checkpoint_folder(tmp_path, "whole", files={"last.ckpt": b"x" * 100, "tables/a.parquet": b"y"})
    assert json.loads((Path(whole) / MANIFEST).read_text()) == {"files": {"last.ckpt": 100, "tables/a.parquet": 1}}
    assert is_complete(fs, whole)
    short = _checkpoint_folder(tmp_path, "short", files={"last.ckpt": b"x" * 100})
    (Path(short) / "last.ckpt").write_bytes(b"x" * 60)
    assert not is_complete(fs, short)
    missing = _checkpoint_folder(tmp_path, "missing", files={"last.ckpt": b"x", "b": b"y"})
    (Path(missing) / "b").unlink()
    assert not is_complete(fs, missing)
    assert not is_complete(fs, _checkpoint_folder(tmp_path, "no-manifest", files={"last.ckpt": b"x"}, manifest=False))
    garbled = _checkpoint_folder(tmp_path, "garbled", files={"last.ckpt": b"x"})
    (Path(garbled) / MANIFEST).write_text('{"files": ')
    assert not is_complete(fs, garbled)


def test_the_replacement_is_the_newest_named_newer_checkpoint_else_the_oldest_complete_one(tmp_path: Path) -> None:
    import pyarrow.fs

    fs = pyarrow.fs.LocalFileSystem()
    stale = str(tmp_path / "checkpoint_000009")  # deleted: not on disk
    older = _checkpoint_folder(tmp_path, "checkpoint_000008", files={"f": b"1"})
    incomplete = _checkpoint_folder(tmp_path, "checkpoint_000010", files={"f": b"1"}, manifest=False)
    first = _checkpoint_folder(tmp_path, "checkpoint_000011", files={"f": b"1"})
    second = _checkpoint_folder(tmp_path, "checkpoint_000100", files={"f": b"1"})
    (tmp_path / "checkpoint_tmp").mkdir()
    (tmp_path / "checkpoint_000101").write_text("a file, not a checkpoint")
    assert [path for _, path in numbered_checkpoint_dirs(fs, str(tmp_path))] == [older, incomplete, first, second]
    assert numbered_checkpoint_dirs(fs, str(tmp_path / "missing")) == []

    assert reported_checkpoints(fs, str(tmp_path)) is None  # no result.json
    assert replacement_checkpoint(fs, stale) == first  # the oldest complete newer one

    rows = [
        {"step": 1, "checkpoint_dir_name": "checkpoint_000008"},
        {"step": 2, "checkpoint_dir_name": None},
        {"step": 3, "checkpoint_dir_name": "checkpoint_000010"},
    ]
    (tmp_path / "result.json").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 4, "checkpo')
    reported = reported_checkpoints(fs, str(tmp_path))
    assert reported == {"checkpoint_000008", "checkpoint_000010"}  # the line cut by the kill is skipped
    assert replacement_checkpoint(fs, stale) == incomplete  # named by result.json: the driver handled it
    assert replacement_checkpoint(fs, second) is None  # nothing newer


# -- a torn snapshot (found by the fault campaign: a driver SIGKILLed while Tune wrote it) ------

SNAPSHOT = "experiment_state-2026-12-01_00-00-00.json"


def test_a_torn_snapshot_is_replaced_by_the_last_complete_copy(tmp_path: Path) -> None:
    state = {"trial_data": [], "runner_data": {"_session_str": "2026-12-01_00-00-00"}, "stats": {}}
    (tmp_path / SNAPSHOT).write_text(json.dumps(state))
    assert keep_last_good_snapshot(str(tmp_path))
    assert json.loads((tmp_path / LAST_GOOD).read_text()) == state
    (tmp_path / SNAPSHOT).write_text(json.dumps(state)[:40])  # cut mid-write
    assert not keep_last_good_snapshot(str(tmp_path))  # a cut snapshot is never kept
    assert json.loads((tmp_path / LAST_GOOD).read_text()) == state
    (tmp_path / SNAPSHOT).write_bytes(b"")  # the SIGKILL case the campaign met: an empty file
    assert restore_torn_snapshot(str(tmp_path)) == SNAPSHOT
    assert json.loads((tmp_path / SNAPSHOT).read_text()) == state
    assert restore_torn_snapshot(str(tmp_path)) is None  # whole now: nothing to do
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([SNAPSHOT, LAST_GOOD])  # no temporary left


def test_the_keeper_reads_the_snapshot_again_only_when_its_size_or_time_changed(tmp_path: Path) -> None:
    """Tune calls the keeper at every save; a snapshot with the size and modification time of
    the one read last is not read again (so its copy stays), any change in either is."""
    from harness.studies.tune.snapshot_keeper import KeepLastGoodSnapshot

    snapshot = tmp_path / SNAPSHOT
    first = {"trial_data": [], "runner_data": {"_session_str": "2026-12-01_00-00-00"}, "stats": {"n": 1}}
    snapshot.write_text(json.dumps(first))
    keeper = KeepLastGoodSnapshot(str(tmp_path))
    assert keeper.get_state() is None
    assert json.loads((tmp_path / LAST_GOOD).read_text()) == first
    stat = snapshot.stat()
    same_size = {**first, "stats": {"n": 2}}
    snapshot.write_text(json.dumps(same_size))
    os.utime(snapshot, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same size, same time: taken as unchanged
    keeper.get_state()
    assert json.loads((tmp_path / LAST_GOOD).read_text()) == first  # not read again
    os.utime(snapshot, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))  # written again
    keeper.get_state()
    assert json.loads((tmp_path / LAST_GOOD).read_text()) == same_size
    longer = {**first, "stats": {"n": 30}}
    snapshot.write_text(json.dumps(longer))
    os.utime(snapshot, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))  # the time of the one read last
    keeper.get_state()
    assert json.loads((tmp_path / LAST_GOOD).read_text()) == longer  # its size changed


def test_a_torn_snapshot_without_a_copy_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / SNAPSHOT).write_bytes(b"")
    with pytest.raises(InputError, match="empty or cut .* no complete copy"):
        restore_torn_snapshot(str(tmp_path))
    assert (tmp_path / SNAPSHOT).read_bytes() == b""  # nothing written


# -- one worker death, two failures (the fault campaign: schedule 699642624) -------------------


def _pending_trial(tmp_path: Path, name: str):
    """Ray Tune's own controller, and a trial of it set PENDING as ``_try_recover`` leaves a trial
    whose first failure it is restarting from."""
    import copy

    from ray.train._internal.storage import StorageContext
    from ray.tune.execution.tune_controller import TuneController
    from ray.tune.experiment import Trial

    storage = StorageContext(storage_path=str(tmp_path), experiment_dir_name=name)
    controller = TuneController(storage=storage)
    trial = Trial("__fake", config={}, storage=copy.copy(storage), stub=True)
    trial.storage.trial_dir_name = "t0"
    Path(trial.storage.trial_driver_staging_path).mkdir(parents=True)
    controller.add_trial(trial)
    assert trial.status == Trial.PENDING
    return controller, trial


def test_a_dead_workers_second_failure_does_not_end_a_restarting_trial(tmp_path: Path, local_ray: None) -> None:
    from ray.exceptions import ActorDiedError
    from ray.tune.execution.tune_controller import TuneController
    from ray.tune.experiment import Trial

    original = TuneController._process_trial_failure
    original = getattr(original, "harness_original", original)  # another test of this session patched it
    controller, trial = _pending_trial(tmp_path, "unpatched")
    original(controller, trial, ActorDiedError())
    assert trial.status == Trial.ERROR  # Ray Tune's own handling: the bug the patch removes

    tolerate_repeated_actor_failure()
    tolerate_repeated_actor_failure()  # idempotent
    controller, trial = _pending_trial(tmp_path, "patched")
    TuneController._process_trial_failure(controller, trial, ActorDiedError())
    assert trial.status == Trial.PENDING and trial.num_failures == 0  # restarts as the first failure asked
    controller._process_trial_failure(trial, ValueError("a real error"))
    assert trial.status == Trial.ERROR  # anything else is Tune's to handle, as before
