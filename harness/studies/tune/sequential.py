"""Sequential studies: add seed blocks in batches until the primary effect is settled.

A spec with ``seeds: {min: 3, max: 20, batch: 2}`` and a stopping rule runs seeds
0..min-1 first; after each completed batch it computes the primary effect
(:func:`harness.analysis.primary_effect`) and its anytime-valid confidence sequence
(:func:`harness.analysis.confidence_sequence`, made tightest at ``sqrt(min * max)``
seeds), and schedules the next ``batch`` seeds only if the rule does not hold yet:

- ``stop_when: {precision: 0.01}``: the interval's half-width is at most 0.01;
- ``stop_when: settled``: the interval excludes 0, or lies within
  +-``analysis.smallest_effect``.

``max`` bounds the cost: the study stops there whatever the interval says. A batch is
whole seed blocks (every variant and cell of its seeds), so seeds stay paired. Because
the interval is valid simultaneously at every number of seeds, the one the study stops
at keeps its 95 % whatever the rule did.

The Ray Tune way: :class:`harness.studies.tune.seed_search.SeedBatchSearcher` is a Tune ``Searcher`` that emits one
config ``{"trial": <trial id>}`` per trial of the scheduled batches (so trial names,
retries, GPU packing, the MLflow record and the live table work as for a fixed grid),
waits (``None``) while a batch runs, and returns ``Searcher.FINISHED`` once the rule
holds or ``max`` seeds ran. Tune saves its state with every experiment snapshot and
restores it on ``Tuner.restore``.

The decision log, ``sequential_decisions.jsonl`` in the study's directory, is written the moment
a decision is taken and is the record of truth: a resumed study replays the logged
decisions instead of recomputing them (a trial finished again after a resume cannot
change a decision already taken), and the results table and the report are built from
the seeds it scheduled.

This module holds the decisions and their log, and the runner's cheap views (a dry run
imports neither Ray nor scipy); the design, derived from the spec once per study, is in
:mod:`harness.studies.spec.sequential_design`, the searcher in
:mod:`harness.studies.tune.seed_search`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from harness.studies.spec.grid import Trial
from harness.studies.spec.sequential_design import SequentialDesign
from harness.studies.spec.study_spec import StudySpec
from harness.studies.storage import read_text, storage_filesystem, write_bytes

if TYPE_CHECKING:  # the analysis (scipy) loads with the searcher, not with a dry run
    from harness.analysis.sequential import ConfidenceSequenceResult, SequentialSummary

#: The decision log in the study's directory. Not ``.json``: on ``Tuner.restore`` Tune copies
#: every ``*.json`` / ``*.pkl`` of the experiment directory into its driver staging folder
#: and uploads that folder back with each snapshot, which would overwrite the log with the
#: copy it had at the resume (checked on Ray 2.60, ``sync_down_experiment_state``).
DECISIONS_FILE = "sequential_decisions.jsonl"


# ----------------------------------------------------------------------------- decisions
@dataclass(frozen=True)
class Decision:
    """What the study did after a completed batch."""

    batch: int  # index of the batch just completed
    seeds_scheduled: int  # seeds run so far
    n_seeds: int  # complete seed blocks the interval used
    estimate: float | None
    low: float | None  # None: unbounded or no interval
    high: float | None
    action: str  # "continue" | "stop"
    stopped_by: str | None  # "precision" | "settled" | "max"
    text: str
    decided: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S%z"))

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Decision:
        return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls) if f.name in data})


def _finite_or_none(x: float | None) -> float | None:
    return float(x) if x is not None and math.isfinite(x) else None


def decide(design: SequentialDesign, cs: ConfidenceSequenceResult, *, batch: int, note: str = "") -> Decision:
    """The decision after batch ``batch``: stop when the rule holds or max seeds ran, else continue."""
    seeds = len(design.scheduled_seeds(batch + 1))
    met = design.met(cs)
    shown = _interval_text(cs)
    if met is not None:
        action, stopped_by = "stop", met
        text = f"{'precision reached' if met == 'precision' else 'settled'} at {cs.n} seeds: {shown}"
    elif seeds >= design.max_seeds:
        action, stopped_by = "stop", "max"
        text = f"max seeds reached ({seeds}): {shown}"
    else:
        action, stopped_by = "continue", None
        nxt = design.batch_seeds(batch + 1)
        text = f"after {seeds} seeds: {shown}; not settled, running seed{'s' if len(nxt) > 1 else ''} " + ", ".join(
            map(str, nxt)
        )
    if note:
        text += f" ({note})"
    return Decision(
        batch=batch,
        seeds_scheduled=seeds,
        n_seeds=cs.n,
        estimate=_finite_or_none(cs.estimate),
        low=_finite_or_none(cs.low),
        high=_finite_or_none(cs.high),
        action=action,
        stopped_by=stopped_by,
        text=text,
    )


def _interval_text(cs: ConfidenceSequenceResult) -> str:
    level = f"{cs.confidence:.0%} anytime-valid CI"
    if cs.low is None:
        return f"no {level} ({cs.message})"
    if not cs.bounded:
        return f"{level} unbounded at {cs.n} seeds"
    return f"{level} [{cs.low:+.4f}, {cs.high:+.4f}] (half-width {cs.half_width:.4f})"


class DecisionLog:
    """:data:`DECISIONS_FILE` in the study's directory (a local path or a URI): the design
    and every decision, rewritten whole at each decision (object stores cannot append).
    Its filesystem is resolved once (:func:`~harness.studies.storage.storage_filesystem`);
    pyarrow filesystems pickle, so a searcher holding the log still does."""

    def __init__(self, study_dir: str) -> None:
        self.study_dir = study_dir.rstrip("/")
        self.fs, root = storage_filesystem(self.study_dir)
        self.path = f"{root.rstrip('/')}/{DECISIONS_FILE}"

    def read(self) -> dict[str, Any] | None:
        """``{"design": ..., "decisions": [...]}`` (None: no log yet, or not readable)."""
        text = read_text(self.fs, self.path)
        if text is None:
            return None
        try:
            return self.parse(text)
        except ValueError:
            return None

    @staticmethod
    def parse(text: str) -> dict[str, Any]:
        """The log's text as ``{"design": ..., "decisions": [...]}``."""
        lines = [json.loads(line) for line in text.splitlines() if line.strip()]
        return {"design": lines[0].get("design") if lines else None, "decisions": lines[1:]}

    @staticmethod
    def parse_decisions(text: str) -> list[Decision]:
        """The decisions in the log's text."""
        return [Decision.from_json(d) for d in DecisionLog.parse(text)["decisions"]]

    def decisions(self) -> list[Decision]:
        data = self.read() or {}
        return [Decision.from_json(d) for d in data.get("decisions", [])]

    def write(self, design: SequentialDesign, decisions: Sequence[Decision]) -> None:
        """JSON lines: the design, then one decision per line."""
        lines = [json.dumps({"design": design.record()}), *(json.dumps(dataclasses.asdict(d)) for d in decisions)]
        write_bytes(self.fs, f"{self.path}.tmp", ("\n".join(lines) + "\n").encode())
        self.fs.move(f"{self.path}.tmp", self.path)  # a kill mid-write leaves the previous log intact


def scheduled_batches(decisions: Sequence[Decision]) -> int:
    """Batches scheduled so far: the first, plus one per logged "continue"."""
    return 1 + sum(1 for d in decisions if d.action == "continue")


# ----------------------------------------------------------------------------- the runner's views
def trials_scheduled(design: SequentialDesign, decisions: Sequence[Decision], trials: Sequence[Trial]) -> list[Trial]:
    """The trials of the batches ``decisions`` scheduled (the trials of their seeds)."""
    seeds = set(design.scheduled_seeds(scheduled_batches(decisions)))
    return [t for t in trials if t.config.seed in seeds]


def scheduled_trials(design: SequentialDesign | None, trials: Sequence[Trial], study_dir: str) -> list[Trial]:
    """The trials a sequential study (``design``) scheduled (per its decision log): its results
    table holds these; a fixed grid (no design): all of them."""
    if design is None:
        return list(trials)
    return trials_scheduled(design, DecisionLog(study_dir).decisions(), trials)


def summary_from_log(design: SequentialDesign, decisions: Sequence[Decision]) -> SequentialSummary:
    """What the report states about the sequential design (from the decision log)."""
    from harness.analysis.sequential import SequentialSummary  # the analysis loads with the report

    last = decisions[-1] if decisions else None
    stopped = last is not None and last.action == "stop"
    return SequentialSummary(
        rule=design.rule_text(),
        tightest_at=design.tightest_at,
        seeds_scheduled=len(design.scheduled_seeds(scheduled_batches(decisions))),
        stopped_by=last.stopped_by if stopped else None,
        stop_text=last.text if stopped else "not stopped yet (the study did not finish its batches)",
        decisions=tuple(dataclasses.asdict(d) for d in decisions),
    )


def design_changed(design: SequentialDesign | None, stored: Mapping[str, Any]) -> bool:
    """True when a resume would change the stored sequential design (rule, min, max, batch)."""
    return (design.record() if design else None) != stored.get("sequential")


def describe_seeds(spec: StudySpec) -> str:
    """``seed 0``, ``2 seeds``, ``3 to 20 seeds (batches of 2)``."""
    schedule = spec.seed_schedule
    if schedule is not None:
        return f"{schedule.min} to {schedule.max} seeds (batches of {schedule.batch})"
    seeds = spec.grid_seeds()
    return f"{len(seeds)} seeds" if len(seeds) > 1 else f"seed {seeds[0]}"


def trial_range(design: SequentialDesign | None, trials: Sequence[Trial]) -> tuple[list[Trial], list[Trial]]:
    """The trials of the least and of the most a study may run (the same for a fixed grid)."""
    if design is None:
        return list(trials), list(trials)
    first = set(design.batch_seeds(0))
    return [t for t in trials if t.config.seed in first], list(trials)


__all__ = [
    "DECISIONS_FILE",
    "Decision",
    "DecisionLog",
    "SequentialDesign",
    "decide",
    "describe_seeds",
    "design_changed",
    "scheduled_batches",
    "scheduled_trials",
    "summary_from_log",
    "trial_range",
    "trials_scheduled",
]
