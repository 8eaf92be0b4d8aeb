"""The live view of a running study: which trials run, their step and validation loss.

A Tune driver callback. On a terminal it redraws one table in place (rich ``Live``):
the running trials, the latest finished ones and a count by state. Elsewhere (a log
file, ``ray job logs``, CI) it prints one line per event instead, so logs stay readable::

    [ 3/8] DONE     baseline_s0_nano_T128_tinyshakespeare   step 300  val/loss 2.3104  (41 s)
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from ray.tune import Callback

from harness.mlflow_client import redact_uri

STATES = ("PENDING", "RUNNING", "RETRYING", "DONE", "DIVERGED", "ERROR")


@dataclass
class TrialView:
    trial_id: str
    state: str = "PENDING"
    step: int | None = None
    val_loss: float | None = None
    started: float | None = None
    ended: float | None = None
    attempts: int = 0
    max_steps: int | None = None


def trial_error_summary(trial: Any) -> str | None:
    """``Type: message`` of the exception a trial failed with (without Ray's wrapper and
    the traceback; no URI's password), or None when Tune kept none. Read from the driver's own copy of Tune's
    error file: the copy in the study's storage is synced later."""
    from ray import cloudpickle

    try:
        path = getattr(trial, "pickled_error_file", None)
        if path and os.path.isfile(path):
            with open(path, "rb") as f:
                error = cloudpickle.load(f)  # written by this driver's Tune a moment ago
        else:
            error = trial.get_pickled_error()
    except Exception:  # noqa: BLE001 - an unreadable error file: the error log path is printed anyway
        return None
    cause = getattr(error, "cause", None) or error  # RayTaskError wraps the trial's own exception
    if cause is None:
        return None
    return redact_uri(f"{type(cause).__name__}: {cause}")


@dataclass
class StudyProgress(Callback):
    """Tune callback rendering the study's progress (see module docstring)."""

    trial_ids: Sequence[str]
    max_steps: dict[str, int] = field(default_factory=dict)
    stream: TextIO | None = None
    live: bool | None = None  # None: a live table on terminals, event lines elsewhere
    refresh_s: float = 1.0
    max_rows: int = 24

    def __post_init__(self) -> None:
        self.views = {t: TrialView(t, max_steps=self.max_steps.get(t)) for t in self.trial_ids}
        self._live: Any = None
        self._last_draw = 0.0
        self._started = time.monotonic()

    # Tune pickles its callbacks with the experiment: leave the terminal objects behind.
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_live"] = None
        state["stream"] = None
        return state

    @property
    def _out(self) -> TextIO:
        return self.stream or sys.stdout

    def _is_live(self) -> bool:
        if self.live is not None:
            return self.live
        return bool(getattr(self._out, "isatty", lambda: False)())

    # -- life cycle ------------------------------------------------------------------------
    def start(self, already_done: dict[str, str] | None = None) -> None:
        """Mark trials finished before a resume, and open the live table."""
        for tid, state in (already_done or {}).items():
            if tid in self.views:
                self.views[tid].state = state
        if self._is_live() and self._live is None:
            from rich.console import Console
            from rich.live import Live

            self._live = Live(self._table(), console=Console(file=self._out), refresh_per_second=2, transient=False)
            self._live.start()

    def stop(self) -> None:
        if self._live is not None:
            self._live.update(self._table())
            self._live.stop()
            self._live = None

    # -- Tune events ------------------------------------------------------------------------
    def _view(self, trial: Any) -> TrialView:
        tid = str(trial.config["trial"])
        return self.views.setdefault(tid, TrialView(tid))

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        v = self._view(trial)
        v.state, v.started, v.attempts = "RUNNING", time.monotonic(), v.attempts + 1
        self._event(v, "RESTART" if v.attempts > 1 else "START")

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
        v = self._view(trial)
        if result.get("step") is not None:
            v.step = int(result["step"])
        loss = result.get("val/loss", result.get("final/val_loss"))
        if isinstance(loss, (int, float)):
            v.val_loss = float(loss)
        self._draw()

    def on_trial_recover(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        v = self._view(trial)
        v.state = "RETRYING"
        self._event(v, "RETRY")
        self.note(trial_error_summary(trial))

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        v = self._view(trial)
        status = str((trial.last_result or {}).get("status", "finished"))
        v.state, v.ended = ("DIVERGED" if status == "diverged" else "DONE"), time.monotonic()
        self._event(v, v.state)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        v = self._view(trial)
        v.state, v.ended = "ERROR", time.monotonic()
        self._event(v, "ERROR", extra=f"  error log: {trial.error_file}" if getattr(trial, "error_file", None) else "")
        self.note(trial_error_summary(trial))

    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        self._draw()

    # -- output ------------------------------------------------------------------------------
    def counts(self) -> dict[str, int]:
        out = {s: 0 for s in STATES}
        for v in self.views.values():
            out[v.state] = out.get(v.state, 0) + 1
        return out

    def _done(self) -> int:
        c = self.counts()
        return c["DONE"] + c["DIVERGED"] + c["ERROR"]

    def _event(self, v: TrialView, what: str, extra: str = "") -> None:
        if self._live is not None:
            self._draw(force=True)
            return
        elapsed = ""
        if v.ended is not None and v.started is not None:
            elapsed = f"  ({v.ended - v.started:.0f} s)"
        step = f"step {v.step:>6}" if v.step is not None else " " * 11
        loss = f"val/loss {v.val_loss:.4f}" if v.val_loss is not None and math.isfinite(v.val_loss) else ""
        width = len(str(len(self.views)))
        print(
            f"[{self._done():>{width}}/{len(self.views)}] {what:<8} {v.trial_id:<40} {step}  {loss}{elapsed}{extra}",
            file=self._out,
            flush=True,
        )

    def note(self, text: str | None) -> None:
        """A message under the event lines (above the live table on a terminal)."""
        if not text:
            return
        text = "\n".join(f"    {line}" for line in text.splitlines())
        if self._live is not None:
            self._live.console.print(text, markup=False, highlight=False)
        else:
            print(text, file=self._out, flush=True)

    def _draw(self, force: bool = False) -> None:
        if self._live is None:
            return
        now = time.monotonic()
        if force or now - self._last_draw >= self.refresh_s:
            self._last_draw = now
            self._live.update(self._table())

    def _table(self) -> Any:
        from rich.table import Table

        c = self.counts()
        summary = ", ".join(f"{n} {s.lower()}" for s, n in c.items() if n)
        elapsed = time.monotonic() - self._started
        table = Table(
            title=f"{self._done()}/{len(self.views)} trials done ({summary}) - {elapsed:.0f} s", title_justify="left"
        )
        for name, justify in (("trial", "left"), ("state", "left"), ("step", "right"), ("val/loss", "right")):
            table.add_column(name, justify=justify)  # type: ignore[arg-type]
        order = {"RUNNING": 0, "RETRYING": 1, "ERROR": 2, "DIVERGED": 3, "DONE": 4, "PENDING": 5}
        rows = sorted(self.views.values(), key=lambda v: (order.get(v.state, 9), -(v.ended or 0)))
        shown = rows[: self.max_rows]
        for v in shown:
            step = "" if v.step is None else (f"{v.step}/{v.max_steps}" if v.max_steps else str(v.step))
            loss = "" if v.val_loss is None or not math.isfinite(v.val_loss) else f"{v.val_loss:.4f}"
            table.add_row(v.trial_id, v.state, step, loss)
        if len(rows) > len(shown):
            table.add_row(f"... {len(rows) - len(shown)} more", "", "", "")
        return table
