"""A Tune callback that keeps a complete copy of the experiment snapshot (see
:mod:`harness.studies.tune.state`, "A torn snapshot"). Imports Ray Tune: loaded with the
tuner (:mod:`harness.studies.launch`), never with the package."""

from __future__ import annotations

import logging
from typing import Any

from ray.tune import Callback

from harness.studies.tune.state import keep_last_good_snapshot, snapshot_stamp

log = logging.getLogger(__name__)


class KeepLastGoodSnapshot(Callback):
    """Copies Tune's snapshot on storage to ``harness-last-good-experiment_state.json`` whenever
    Tune saves its state and that snapshot parses.

    Tune calls every callback's :meth:`get_state` each time it saves the experiment, right
    after writing the snapshot to its staging folder and before uploading it; the copy on
    storage is then the previous upload, whole unless that upload is still running (its
    background thread) or was cut, and :func:`~harness.studies.tune.state.keep_last_good_snapshot`
    copies it only when it parses. So the kept copy is at most two saves old, never cut.

    Tune saves far more often than the copy on storage changes (every trial result may save), so
    the snapshot is read only when its size or modification time differ from the last one read
    (:func:`~harness.studies.tune.state.snapshot_stamp`): an unchanged file would be copied
    again, byte for byte."""

    def __init__(self, study_dir: str) -> None:
        self.study_dir = study_dir
        self.last_read: tuple[str, int, int] | None = None  # the stamp of the snapshot read last

    def get_state(self) -> dict[str, Any] | None:
        try:
            stamp = snapshot_stamp(self.study_dir)
            if stamp is None or stamp != self.last_read:
                keep_last_good_snapshot(self.study_dir)
                self.last_read = stamp
        except Exception as exc:  # noqa: BLE001 - a copy for emergencies must never stop the study
            log.warning("cannot keep a copy of Tune's experiment snapshot in %s: %s", self.study_dir, exc)
        return None  # no state of its own: Tune writes no callback file for it
