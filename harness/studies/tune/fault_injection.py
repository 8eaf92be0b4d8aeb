"""Test-only fault injection into a study's trials: Lightning callbacks that the trainable
appends to a trial's callbacks when the trial's own process environment asks for them.

Never set these outside tests. They are read in the process that runs the trial, never by
the driver: the runner knows nothing of faults. An embedded local Ray started by
``harness run`` inherits them from its shell (the tests run ``harness run`` in a subprocess
with them set); a cluster's nodes would need them in their own environment.

=================================  ================================================================
variable                           fault
=================================  ================================================================
``HARNESS_FAULT_NAN_TRIALS``       ``<trial id>[@step],...``: from ``step`` on (default 1) the
                                   trial's weights hold NaN, so its training loss is NaN as in a
                                   real divergence, and the training loop's own check must end
                                   the run as ``diverged``. An id the study does not have fails
                                   the trial (a typo would otherwise inject nothing).
``HARNESS_FAULT_KILL_AT_STEP``     ``N``: each trial's process is SIGKILLed once at step N, as a
                                   preempted worker is; a marker file
                                   ``$HARNESS_FAULT_DIR/<trial id>.killed`` says it happened, so
                                   the restarted trial trains on. Needs ``HARNESS_FAULT_DIR``.
=================================  ================================================================

Lightning is imported inside :func:`fault_callbacks`: this module loads with the trainable,
which the driver imports too.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from harness.errors import InputError

NAN_TRIALS_ENV = "HARNESS_FAULT_NAN_TRIALS"
KILL_AT_STEP_ENV = "HARNESS_FAULT_KILL_AT_STEP"
FAULT_DIR_ENV = "HARNESS_FAULT_DIR"


def nan_trials(raw: str, known: Collection[str]) -> dict[str, int]:
    """``$HARNESS_FAULT_NAN_TRIALS`` parsed: trial id -> the step its weights become NaN.

    Raises
    ------
    InputError
        An id not in ``known`` (the study's trial ids), or a step that is not a non-negative integer.
    """
    out: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in raw.split(","))):
        tid, _, step = item.partition("@")
        if tid not in known:
            trials = ", ".join(sorted(known))
            raise InputError(f"{NAN_TRIALS_ENV}: no trial {tid!r} in this study; its trials: {trials}")
        if step and not step.isdigit():
            raise InputError(f"{NAN_TRIALS_ENV}: {item!r}: the step after '@' must be a non-negative integer")
        out[tid] = int(step) if step else 1
    return out


def kill_at_step(environ: Mapping[str, str]) -> tuple[int, Path] | None:
    """``($HARNESS_FAULT_KILL_AT_STEP, $HARNESS_FAULT_DIR)``, or None when no kill is asked for."""
    raw = environ.get(KILL_AT_STEP_ENV, "").strip()
    if not raw:
        return None
    if not raw.isdigit():
        raise InputError(f"{KILL_AT_STEP_ENV}: {raw!r} is not a non-negative integer")
    folder = environ.get(FAULT_DIR_ENV, "").strip()
    if not folder:
        raise InputError(f"{KILL_AT_STEP_ENV} needs {FAULT_DIR_ENV}: the folder of the markers saying a kill happened")
    return int(raw), Path(folder)


def fault_callbacks(trial_id: str, known: Collection[str], environ: Mapping[str, str] | None = None) -> list[Any]:
    """The fault-injecting Lightning callbacks trial ``trial_id`` gets from ``environ`` (default:
    this process's environment); ``known`` are the study's trial ids. Empty when none is set."""
    environ = os.environ if environ is None else environ
    from lightning.pytorch import Callback  # the trial's process only: see the module docstring

    callbacks: list[Any] = []
    nan_step = nan_trials(environ.get(NAN_TRIALS_ENV, ""), known).get(trial_id)
    if nan_step is not None:

        class NanWeights(Callback):
            """From ``nan_step`` on, the first parameter is NaN before each training batch."""

            def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
                if trainer.global_step >= nan_step:
                    import torch

                    with torch.no_grad():
                        next(pl_module.parameters()).fill_(float("nan"))

        callbacks.append(NanWeights())
    kill = kill_at_step(environ)
    if kill is not None:
        step, folder = kill
        marker = folder / f"{trial_id}.killed"

        class KillOnce(Callback):
            """SIGKILL of this process after training step ``step``, once per trial (the marker)."""

            def on_train_batch_end(
                self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
            ) -> None:
                if trainer.global_step < step or marker.exists():
                    return
                marker.parent.mkdir(parents=True, exist_ok=True)
                marker.write_text(str(trainer.global_step))
                os.kill(os.getpid(), signal.SIGKILL)

        callbacks.append(KillOnce())
    return callbacks
