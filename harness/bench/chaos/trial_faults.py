"""Faults injected inside a study's trials: Lightning callbacks that each trial trains with,
made in the trial's own process by :class:`TrialFaults`, which the chaos campaign and the
tests hand to :func:`harness.studies.runner.run_study` (``trial_callbacks=``).

The runner knows nothing of faults: it hands the object on to every trial (pickled with the
trainable by ``tune.with_parameters``), and the trial calls it with its id and the study's
trial ids (:data:`harness.studies.plan.TrialCallbacks`). A real study hands
nothing.

=================  ================================================================================
field              fault
=================  ================================================================================
``nan_from_step``  trial id -> step: from that step on the trial's weights hold NaN, so its
                   training loss is NaN as in a real divergence, and the training loop's own check
                   must end the run as ``diverged``. An id the study does not have fails the trial
                   (a typo would otherwise inject nothing).
``kill_at_step``   ``N``: each trial's process is SIGKILLed once at step N, as a preempted worker
                   is; a marker file ``marker_dir/<trial id>.killed`` says it happened, so the
                   restarted trial trains on. Needs ``marker_dir``.
=================  ================================================================================

Lightning is imported inside :meth:`TrialFaults.__call__`, in the trial's process: the driver
only builds and pickles the object.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import InputError


@dataclass(frozen=True)
class TrialFaults:
    """The faults of a study's trials (the module docstring's table), checked at construction;
    called in a trial's process, the Lightning callbacks that inject that trial's faults.

    Examples
    --------
    >>> faults = TrialFaults(nan_from_step={"ega_s1_nano_T32_tinyshakespeare": 4})
    >>> faults("baseline_s0_nano_T32_tinyshakespeare", {"baseline_s0_nano_T32_tinyshakespeare"})
    []
    """

    nan_from_step: Mapping[str, int] = field(default_factory=dict)
    kill_at_step: int | None = None
    marker_dir: Path | None = None

    def __post_init__(self) -> None:
        for trial_id, step in self.nan_from_step.items():
            if not isinstance(step, int) or step < 0:
                raise InputError(f"nan_from_step[{trial_id!r}]: {step!r} is not a non-negative integer")
        if self.kill_at_step is not None:
            if not isinstance(self.kill_at_step, int) or self.kill_at_step < 0:
                raise InputError(f"kill_at_step: {self.kill_at_step!r} is not a non-negative integer")
            if self.marker_dir is None:
                raise InputError("kill_at_step needs marker_dir: the folder of the markers saying a kill happened")

    def __call__(self, trial_id: str, known: Collection[str]) -> list[Any]:
        """The callbacks of trial ``trial_id``; ``known`` are the study's trial ids.

        Raises
        ------
        InputError
            A trial of :attr:`nan_from_step` that is not in ``known``.
        """
        unknown = sorted(set(self.nan_from_step) - set(known))
        if unknown:
            trials = ", ".join(sorted(known))
            raise InputError(f"nan_from_step: no trial {unknown[0]!r} in this study; its trials: {trials}")
        callbacks: list[Any] = []
        if trial_id in self.nan_from_step:
            callbacks.append(_nan_weights(self.nan_from_step[trial_id]))
        if self.kill_at_step is not None:
            assert self.marker_dir is not None  # checked at construction
            callbacks.append(_kill_once(self.kill_at_step, self.marker_dir / f"{trial_id}.killed"))
        return callbacks


def _nan_weights(nan_step: int) -> Any:
    """A Lightning callback: from ``nan_step`` on, the first parameter is NaN before each training batch."""
    from lightning.pytorch import Callback  # the trial's process only: see the module docstring

    class NanWeights(Callback):
        def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
            if trainer.global_step >= nan_step:
                import torch

                with torch.no_grad():
                    next(pl_module.parameters()).fill_(float("nan"))

    return NanWeights()


def _kill_once(step: int, marker: Path) -> Any:
    """A Lightning callback: SIGKILL of this process after training step ``step``, once per
    trial (``marker`` written first says it happened)."""
    from lightning.pytorch import Callback  # the trial's process only: see the module docstring

    class KillOnce(Callback):
        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            if trainer.global_step < step or marker.exists():
                return
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.write_text(str(trainer.global_step))
            os.kill(os.getpid(), signal.SIGKILL)

    return KillOnce()
