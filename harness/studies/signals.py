"""SIGTERM stops a study as Ctrl-C does.

``kill PID``, a batch scheduler's notice before its SIGKILL, a container stop: each sends
SIGTERM. Ray's core worker, started in the driver by ``ray.init``, answers SIGTERM with its
failure handler: a stack dump and an abort (exit -6), with Tune's experiment state not saved
one last time and the study's MLflow runs left RUNNING. Installed after ``ray.init``,
:func:`stop_on_sigterm` hands SIGTERM to whatever handles Ctrl-C at that moment: during
``Tuner.fit`` Tune's own handler (it ends the experiment cleanly, the study ends
``interrupted`` and prints how to resume), elsewhere Python's ``KeyboardInterrupt``.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any


def _as_ctrl_c(signum: int, frame: FrameType | None) -> None:
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler):
        handler(signal.SIGINT, frame)
    else:  # SIG_IGN / SIG_DFL: Python's default for Ctrl-C
        raise KeyboardInterrupt


def stop_on_sigterm() -> Any:
    """Route SIGTERM to the Ctrl-C handler (main thread only, where signals are handled);
    returns the handler it replaced (None when not installed)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, _as_ctrl_c)


def restore_sigterm(previous: Any) -> None:
    """Put back the handler :func:`stop_on_sigterm` replaced."""
    if previous is not None and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, previous)
