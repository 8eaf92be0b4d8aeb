"""A Tune driver killed inside the window between Tune's checkpoint pruning and its
experiment snapshot, deterministically; run as a script by tests/studies/test_studies_tune_state.py:

    python killed_tune_driver.py <storage> <num_to_keep> <kill after this many saves>

Tune (2.60) handles a trial's checkpoint in one controller step: ``Trial.on_checkpoint``
registers it (with ``num_to_keep`` set, deleting the older ones), then calls its callbacks'
``on_trial_save``, and only at the end of the step writes the experiment snapshot that
names the new checkpoint. The callback below exits the driver in ``on_trial_save`` (as a
SIGKILL would: no clean-up), so the snapshot on storage is the one of the step before.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

from ray import tune

from harness.studies.tune.state import write_manifest

STEPS = 8


def trainable(config: dict) -> None:
    """Count to ``STEPS``, one checkpoint (with the harness's manifest) per step; resume
    from the checkpoint Tune hands back."""
    start = 0
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            start = json.loads((Path(d) / "state.json").read_text())["step"] + 1
    for step in range(start, STEPS):
        with tempfile.TemporaryDirectory() as d:
            (Path(d) / "state.json").write_text(json.dumps({"step": step}))
            write_manifest(Path(d))
            tune.report({"step": step, "start": start}, checkpoint=tune.Checkpoint.from_directory(d))


class ExitAfterSaves(tune.Callback):
    """Exit the driver right after Tune registered its ``saves``-th checkpoint (only this
    driver: ``Tuner.restore`` brings the callback back in the process that resumes)."""

    def __init__(self, saves: int) -> None:
        self.saves, self.seen, self.driver = saves, 0, os.getpid()

    def on_trial_save(self, iteration: int, trials: list, trial: object, **info: object) -> None:
        self.seen += 1
        if self.seen >= self.saves and os.getpid() == self.driver:
            os._exit(17)


def main(storage: str, num_to_keep: int, saves: int) -> None:
    tune.Tuner(
        trainable,
        run_config=tune.RunConfig(
            name="exp",
            storage_path=storage,
            callbacks=[ExitAfterSaves(saves)],
            checkpoint_config=tune.CheckpointConfig(num_to_keep=num_to_keep),
            verbose=0,
        ),
    ).fit()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
