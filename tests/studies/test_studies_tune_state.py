"""A Tune snapshot that names a checkpoint Tune already deleted (the driver was killed
between ``num_to_keep`` pruning and the next snapshot) is repaired before a resume, and
the trial continues from its newest checkpoint instead of failing on every retry."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from ray import cloudpickle, tune

from harness.studies.tune_state import newest_checkpoint_dir, repair_stale_checkpoints, reported_checkpoints

# Ray's workers cannot import this test module: ship the trainable by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


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


def test_newest_checkpoint_dir_orders_by_number_and_keeps_to_reported_ones(tmp_path: Path) -> None:
    import pyarrow.fs

    for name in ("checkpoint_000009", "checkpoint_000010", "checkpoint_000100", "checkpoint_tmp", "other"):
        (tmp_path / name).mkdir()
    (tmp_path / "checkpoint_000101").write_text("a file, not a checkpoint")
    fs = pyarrow.fs.LocalFileSystem()
    assert newest_checkpoint_dir(fs, str(tmp_path)) == str(tmp_path / "checkpoint_000100")
    assert newest_checkpoint_dir(fs, str(tmp_path / "missing")) is None

    assert reported_checkpoints(fs, str(tmp_path)) is None  # no result.json
    rows = [
        {"step": 1, "checkpoint_dir_name": "checkpoint_000009"},
        {"step": 2, "checkpoint_dir_name": None},
        {"step": 3, "checkpoint_dir_name": "checkpoint_000010"},
    ]
    (tmp_path / "result.json").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 4, "checkpo')
    reported = reported_checkpoints(fs, str(tmp_path))
    assert reported == {"checkpoint_000009", "checkpoint_000010"}  # the line cut by the kill is skipped
    assert newest_checkpoint_dir(fs, str(tmp_path), among=reported) == str(tmp_path / "checkpoint_000010")
