"""A study's trials in one process, without Ray or MLflow: the runner of a GPU lease.

A lease is one machine for minutes, with no network and an image without Ray, MLflow or
polars (:mod:`harness.studies.device.image`). :func:`run_device_study` runs a study spec's
trials there one seed group after another and writes, under an output folder, what the CPU
side needs to analyse and record the study as if Ray Tune had run it:

* ``results.parquet``: one row per trial (:data:`~harness.results_schema.RESULT_TYPES`);
* ``curves.parquet``: one row per trial and evaluation (:data:`~harness.results_schema.CURVE_TYPES`);
* ``window_losses.parquet``: the per-window losses of each trial's final evaluation, with its
  factors (``trial_id, variant, seed, dataset, size, context_length, tau_init, split, window, loss``);
* ``spec.yaml``: the spec as given (``harness scorecard --from`` reads its analysis settings);
* ``device_study.json`` (:data:`DEVICE_FILE`): the study's name, trial ids, every trial's reports
  (each evaluation's metrics, then the final summary: what Tune keeps in ``result.json``), the
  machine, and how each group trained.

Five files, each far under the 16 MiB a lease hands back per file (a trial's reports are a few
kB a evaluation), written after every seed group, each replaced atomically: a command stopped at
its limit leaves the groups it finished, the others ``incomplete``.

**Seed groups.** The trials of a spec that differ only in seed (one variant, one cell) form a
group (:func:`seed_groups`). A group trains as one seed-batched model when
``harness.training.seed_batch.train_seed_batch`` exists (each seed its own initialisation, data
order, dropout and optimizer state: the same experiment as separate runs), else its trials run
one after another with :func:`harness.training.run.train`. Each trial is a run with MLflow off.

**The CPU side.** ``harness report STUDY --from DIR`` and ``harness scorecard --from DIR`` read
the folder as it is; ``harness device record DIR`` (:mod:`harness.studies.device.record`) lays it
out as a study directory and records it in MLflow, parent and child runs, as a Ray study is.
"""

from __future__ import annotations

import json
import math
import platform
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import InputError
from harness.studies.device.tables import write_study_tables
from harness.studies.spec.grid import Trial, expand_grid
from harness.studies.spec.study_spec import load_spec, read_spec_text, spec_folder
from harness.studies.tune.trainable import final_report
from harness.training.plan import available_cpus

#: The runner's own record in the output folder (module docstring).
DEVICE_FILE = "device_study.json"
#: The format of :data:`DEVICE_FILE` (raised when its fields change meaning).
DEVICE_FORMAT = 1


@dataclass
class TrialOutcome:
    """What one trial left: its reports (every evaluation's metrics, then the final summary
    for a trial that ended), its per-window losses, and the error of a trial that failed."""

    trial: Trial
    reports: list[dict[str, Any]] = field(default_factory=list)
    window_losses: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    @property
    def final(self) -> dict[str, Any] | None:
        """The final summary (the last report, when it names how the trial ended)."""
        last = self.reports[-1] if self.reports else None
        return last if last is not None and last.get("status") in ("finished", "diverged") else None


@dataclass(frozen=True)
class DeviceStudy:
    """A run of :func:`run_device_study`: the folder, the outcomes by trial id (in grid order)
    and how each seed group trained."""

    out: Path
    study: str
    outcomes: dict[str, TrialOutcome]
    groups: list[dict[str, Any]]
    wall_s: float

    def count(self, status: str) -> int:
        """Trials of the study whose row has ``status``."""
        return sum(_status(o) == status for o in self.outcomes.values())


def _status(outcome: TrialOutcome) -> str:
    final = outcome.final
    if final is not None:
        return str(final["status"])
    return "failed" if outcome.error is not None else "incomplete"


def seed_groups(trials: Sequence[Trial]) -> list[list[Trial]]:
    """The trials that differ only in seed, together (in the order their first trial comes in
    the grid), each group by seed: what one seed-batched model can train."""
    groups: dict[str, list[Trial]] = {}
    for trial in trials:
        key = json.dumps({k: v for k, v in trial.config.model_dump().items() if k != "seed"}, sort_keys=True)
        groups.setdefault(key, []).append(trial)
    return [sorted(group, key=lambda t: t.config.seed) for group in groups.values()]


def seed_batch_trainer() -> Callable[..., Any] | None:
    """``train_seed_batch(configs, **kw) -> list[TrainResult]`` when the training package has it."""
    try:
        from harness.training.seed_batch import train_seed_batch  # type: ignore[import-not-found]
    except ImportError:
        return None
    return train_seed_batch


def device_configs(trials: Sequence[Trial], *, accelerator: str, threads: int) -> list[Trial]:
    """The trials as this one process runs them: on ``accelerator`` (``auto``: the GPU when there
    is one) with ``threads`` torch threads. Both say how a run computes, not what (fields a resume
    may change), so the trials stay those of the spec."""
    return [
        Trial(
            trial_id=t.trial_id,
            config=t.config.model_copy(update={"accelerator": accelerator, "num_threads": threads}),
            position=t.position,
            gate=t.gate,
            scoring=t.scoring,
        )
        for t in trials
    ]


def run_device_study(
    spec_path: str | Path,
    out: str | Path,
    *,
    deadline_s: float | None = None,
    accelerator: str = "auto",
    say: Callable[[str], None] = print,
) -> DeviceStudy:
    """Run the trials of the spec at ``spec_path`` in this process, seed group after seed group,
    and write the study's tables under ``out`` (module docstring).

    Parameters
    ----------
    deadline_s
        Seconds from now after which no group starts and a training run stops at its next step
        (its trial ``incomplete``, its evaluations kept); None: no limit.
    accelerator
        ``auto`` (a GPU when there is one), ``gpu`` or ``cpu``, for every trial.

    Raises
    ------
    InputError
        A spec that cannot be read or checked, a sequential spec (its seeds are decided between
        batches by a searcher: run it with ``harness run``), an output folder that already holds
        a study, or a corpus that cannot be found.
    """
    started = time.monotonic()
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    deadline = None if deadline_s is None else started + deadline_s
    spec_text, name, trials = _check(spec_path, Path(out))
    threads = available_cpus()
    trials = device_configs(trials, accelerator=accelerator, threads=threads)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    outcomes = {t.trial_id: TrialOutcome(t) for t in trials}
    groups: list[dict[str, Any]] = []
    batched = seed_batch_trainer()
    for group in seed_groups(trials):
        if deadline is not None and time.monotonic() >= deadline:
            say(f"deadline reached: {len(group)} trial(s) of {group[0].config.variant} not started")
            continue
        t0 = time.monotonic()
        how = _run_group(group, outcomes, batched=batched, deadline=deadline)
        groups.append({"trials": [t.trial_id for t in group], "trainer": how, "wall_s": time.monotonic() - t0})
        say(_group_line(group, outcomes, how, groups[-1]["wall_s"]))
        _package(out, (name, stamp), spec_text, outcomes, groups, started)
    _package(out, (name, stamp), spec_text, outcomes, groups, started)
    return DeviceStudy(out, name, outcomes, groups, time.monotonic() - started)


def _check(spec_path: str | Path, out: Path) -> tuple[str, str, list[Trial]]:
    """The spec's text, name and trials; :class:`InputError` before anything runs."""
    from harness import datasets

    spec = load_spec(spec_path)
    if spec.seed_schedule is not None:
        raise InputError(
            f"{spec_path}: a sequential study (seeds: {{min, max, batch}}) decides its seeds between batches; "
            "the device runner runs a fixed grid: give `seeds` as a number or a list"
        )
    if (out / DEVICE_FILE).exists():
        raise InputError(f"{out} already holds a study ({DEVICE_FILE}); pass another --out")
    trials = expand_grid(spec, component_dir=spec_folder(spec_path))
    for dataset in sorted({t.config.dataset for t in trials}):
        datasets.load(dataset, data_dir=trials[0].config.data_dir, progress=False)  # InputError naming the corpus
    return read_spec_text(spec_path), spec.name, trials


def _run_group(
    group: list[Trial], outcomes: dict[str, TrialOutcome], *, batched: Callable[..., Any] | None, deadline: float | None
) -> str:
    """Train one seed group (seed-batched when ``batched`` is given and the group has several
    seeds, else one trial after another); fills the group's outcomes; returns how it trained."""
    stop = _deadline_callback(deadline)
    if batched is not None and len(group) > 1:
        try:
            results = batched([t.config for t in group], **_accepted(batched, callbacks=[stop], progress_bar=False))
        except Exception as exc:  # noqa: BLE001 - a failed group is failed trials, as in a Ray study
            for trial in group:
                outcomes[trial.trial_id].error = f"{type(exc).__name__}: {exc}"
            return "seed-batched"
        for trial, result in zip(group, results, strict=True):
            _take(outcomes[trial.trial_id], result, stopped=stop.stopped)
        return "seed-batched"
    from harness.training.run import train

    for trial in group:
        if stop.stopped:
            break
        try:
            result = train(
                trial.config,
                callbacks=[stop],
                mlflow_logging=False,
                progress_bar=False,
                compile_sharing=len(group),
            )
        except Exception as exc:  # noqa: BLE001 - a failed trial is data, as in a Ray study
            outcomes[trial.trial_id].error = f"{type(exc).__name__}: {exc}"
            continue
        _take(outcomes[trial.trial_id], result, stopped=stop.stopped)
    return "one at a time"


def _accepted(function: Callable[..., Any], **wanted: Any) -> dict[str, Any]:
    """The keyword arguments of ``wanted`` that ``function`` takes (all of them when it takes ``**kw``)."""
    import inspect

    parameters = inspect.signature(function).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return wanted
    return {k: v for k, v in wanted.items() if k in parameters}


def _take(outcome: TrialOutcome, result: Any, *, stopped: bool) -> None:
    """A training result into its trial's outcome: its evaluations, then (unless the deadline
    cut it short: an ``incomplete`` trial) its final summary and window losses."""
    outcome.reports = [dict(e) for e in getattr(result, "evaluations", ())]
    if stopped and result.status == "finished" and result.steps < result.config.max_steps:
        return
    outcome.reports.append(final_report(result))
    outcome.window_losses = dict(result.window_losses)


def _deadline_callback(deadline: float | None) -> Any:
    """A Lightning callback that stops training at the first step past ``deadline``
    (``time.monotonic()``); ``stopped`` says whether it did."""
    from lightning.pytorch import Callback

    class StopAtDeadline(Callback):
        def __init__(self) -> None:
            self.stopped = False

        def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
            if deadline is not None and time.monotonic() >= deadline:
                self.stopped = True
                trainer.should_stop = True

    return StopAtDeadline()


def _group_line(group: list[Trial], outcomes: Mapping[str, TrialOutcome], how: str, wall_s: float) -> str:
    c = group[0].config
    states = [_status(outcomes[t.trial_id]) for t in group]
    losses = [(outcomes[t.trial_id].final or {}).get("final/val_loss", math.nan) for t in group]
    shown = ", ".join(f"{v:.3f}" for v in losses)
    return (
        f"{c.variant} {c.dataset} {c.size} T={c.context_length}: {len(group)} seed(s) {how} in {wall_s:.0f} s; "
        f"{', '.join(sorted(set(states)))}; val loss {shown}"
    )


def machine() -> dict[str, Any]:
    """Where the study ran: Python, torch, the GPU (if any), the CPUs."""
    import torch

    cuda = torch.cuda.is_available()
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda if cuda else None,
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "cpus": available_cpus(),
        "host": platform.node(),
    }


def _package(
    out: Path,
    study: tuple[str, str],
    spec_text: str,
    outcomes: Mapping[str, TrialOutcome],
    groups: list[dict[str, Any]],
    started: float,
) -> None:
    """The folder's five files, each replaced atomically, the runner's record last; ``study``:
    the study's name and the time it started (``YYYYmmdd-HHMMSS``, UTC)."""
    from harness.mlflow_client import harness_git_commit

    name, stamp = study
    write_study_tables(out, name, outcomes.values())
    _replace_text(out / "spec.yaml", spec_text)
    record = {
        "format": DEVICE_FORMAT,
        "study": name,
        "trial_ids": list(outcomes),
        "git_commit": harness_git_commit(),
        "started": stamp,
        "machine": machine(),
        "wall_s": time.monotonic() - started,
        "groups": groups,
        "status": {tid: _status(o) for tid, o in outcomes.items()},
        "errors": {tid: o.error for tid, o in outcomes.items() if o.error is not None},
        "reports": {tid: o.reports for tid, o in outcomes.items() if o.reports},
    }
    _replace_text(out / DEVICE_FILE, json.dumps(record, allow_nan=True))


def _replace_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)
