"""The campaign's study and its schedules of faults: a schedule is a function of its seed alone,
so that a failing one replays exactly (``--replay SEED``); any 8 consecutive schedules inject
every kind of fault."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from harness.bench.local_services import TINY

#: The kinds of fault, in the order that draws them (:func:`draw_schedule`); each is an object of
#: :data:`harness.bench.chaos.faults.FAULT_KINDS`.
KINDS = (
    "trial_kill_step",
    "trial_kill_checkpoint",
    "driver_kill",
    "driver_term",
    "driver_int",
    "mlflow_restart",
    "mlflow_during_report",
    "node_leave",
)
#: Faults that fire at a progress point (the others: the report phase).
REPORT_PHASE = -1

STEPS, EVAL_EVERY = 60, 5
#: The campaign's study: 4 trials, each reporting a checkpoint every 5 steps and a final one.
SPEC: dict[str, Any] = {
    **TINY,
    "name": "chaos",
    "train": {**TINY["train"], "max_steps": STEPS, "eval_every": EVAL_EVERY},
    "retries": 6,  # more than the trial faults of any schedule
    "storage_shared": True,  # one machine: the storage path is the same on every node
}
TRIALS = 4
CHECKPOINTS = TRIALS * (STEPS // EVAL_EVERY + 1)


@dataclass(frozen=True)
class Fault:
    kind: str
    at: int  # progress (checkpoints on storage) that fires it; REPORT_PHASE: once results.parquet is written
    delay_s: float  # after the trigger
    repeat: int = 1  # mlflow_restart: stop/start cycles
    down_s: float = 0.0  # mlflow: how long the server stays down (beyond its start-up)
    pick: int = 0  # which of the running trials (sorted by name) a trial fault hits


@dataclass(frozen=True)
class Schedule:
    seed: int
    faults: tuple[Fault, ...]

    @property
    def cluster(self) -> bool:
        return any(f.kind == "node_leave" for f in self.faults)

    def describe(self) -> str:
        return ", ".join(
            f"{f.kind}@{'report' if f.at == REPORT_PHASE else f.at}" + (f"x{f.repeat}" if f.repeat > 1 else "")
            for f in self.faults
        )


def draw_schedule(seed: int) -> Schedule:
    """The schedule of ``seed`` (a pure function of it): its first fault is of kind
    ``KINDS[seed % len(KINDS)]``, then 0-2 more of any kind but ``node_leave``, each at a
    progress point in [2, CHECKPOINTS * 3/4] (the report phase for ``mlflow_during_report``)."""
    rng = random.Random(seed)
    kinds = [KINDS[seed % len(KINDS)]]
    kinds += [rng.choice(KINDS[:-1]) for _ in range(rng.randint(0, 2))]
    faults = []
    for kind in kinds:
        at = REPORT_PHASE if kind == "mlflow_during_report" else rng.randint(2, CHECKPOINTS * 3 // 4)
        mlflow = kind.startswith("mlflow")
        faults.append(
            Fault(
                kind=kind,
                at=at,
                delay_s=round(rng.uniform(0.0, 0.6 if kind == "mlflow_during_report" else 2.0), 2),
                repeat=rng.randint(1, 3) if kind == "mlflow_restart" else 1,
                down_s=round(rng.uniform(0.5, 6.0), 1) if mlflow else 0.0,
                pick=rng.randrange(TRIALS),
            )
        )
    ordered = sorted(faults, key=lambda f: (f.at == REPORT_PHASE, f.at))
    return Schedule(seed=seed, faults=tuple(ordered))


def schedule_seeds(campaign_seed: int, n: int) -> list[int]:
    """``n`` schedule seeds from the campaign's seed; seed i leads with kind ``KINDS[i % 8]``,
    so that any 8 consecutive schedules inject every kind."""
    rng = random.Random(campaign_seed)
    return [len(KINDS) * rng.randrange(10**8) + i % len(KINDS) for i in range(n)]
