"""The Tune ``Searcher`` of a sequential study (see :mod:`harness.studies.tune.sequential`):
it hands Tune the trials of one batch of seed blocks at a time, evaluates the stopping
rule on the primary effect's anytime-valid interval when a batch completes, logs the
decision, and tells Tune it is finished once the rule holds or ``max`` seeds ran.

Imported by the runner only when Tune starts (it loads Ray and the analysis).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl
from ray.tune.search import Searcher

from harness.analysis.contrasts import primary_effect
from harness.analysis.results_types import AnalysisSettings
from harness.analysis.sequential import ConfidenceSequenceResult, confidence_sequence
from harness.errors import InputError
from harness.studies.plan import StudyPlan
from harness.studies.spec.grid import Trial
from harness.studies.tune.results_table import result_row
from harness.studies.tune.sequential import Decision, DecisionLog, SequentialDesign, decide, scheduled_batches


def primary_interval(
    table: pl.DataFrame, settings: AnalysisSettings, design: SequentialDesign
) -> tuple[ConfidenceSequenceResult, str]:
    """The primary effect's per-seed values on ``table`` and their confidence sequence
    (with a note when the effect cannot be computed: then no interval)."""
    note = ""
    try:
        # Only the per-seed values matter here: keep the resampling the contrast also does cheap.
        per_seed = primary_effect(table, dataclasses.replace(settings, n_resamples=99)).per_seed
    except InputError as exc:
        per_seed, note = [], str(exc)
    cs = confidence_sequence(per_seed, confidence=design.confidence, tightest_at=design.tightest_at)
    return cs, note


# ----------------------------------------------------------------------------- the searcher
@dataclass
class _SearchState:
    """What the searcher must carry across a resume (saved as JSON with Tune's snapshot);
    the batches scheduled and whether it finished follow from its decisions."""

    queue: list[str] = field(default_factory=list)  # trial ids scheduled, not yet handed to Tune
    emitted: set[str] = field(default_factory=set)
    tune_ids: dict[str, str] = field(default_factory=dict)  # Tune's trial id -> our trial id
    outcomes: dict[str, dict[str, Any]] = field(default_factory=dict)  # trial id -> results-table row
    decisions: list[Decision] = field(default_factory=list)

    @property
    def batches(self) -> int:
        """Batches scheduled: the first, plus one per "continue"."""
        return scheduled_batches(self.decisions)

    @property
    def finished(self) -> bool:
        """A decision stopped the study (none follows a stop)."""
        return bool(self.decisions) and self.decisions[-1].action == "stop"


class SeedBatchSearcher(Searcher):
    """A Tune ``Searcher`` that runs a sequential study's seed blocks batch by batch (see
    the module docstring). ``known``: trial ids a restored Tune experiment already holds
    (never handed out again); ``announce``: where a decision is told (the live view);
    ``study``: the study's name, the ``study`` column of the outcome rows."""

    def __init__(
        self,
        design: SequentialDesign,
        settings: Mapping[str, Any],
        trials: Sequence[Trial],
        study_dir: str,
        *,
        known: Iterable[str] = (),
        announce: Callable[[str], None] | None = None,
        study: str = "",
    ) -> None:
        super().__init__()
        self.design = design
        self.study = study
        self.settings = dict(settings)
        self.trials = {t.trial_id: t for t in trials}
        self.by_seed: dict[int, list[str]] = {}
        for t in trials:
            self.by_seed.setdefault(t.config.seed, []).append(t.trial_id)
        self.log = DecisionLog(study_dir)
        self.known = set(known)
        self.announce = announce
        self.state = _SearchState()
        self._schedule(0)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["announce"] = None  # a terminal stream does not pickle
        return state

    # -- Tune's interface ----------------------------------------------------------------------
    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        self._maybe_decide()
        if self.state.queue:
            tid = self.state.queue.pop(0)
            self.state.emitted.add(tid)
            self.state.tune_ids[trial_id] = tid
            return {"trial": tid}
        return Searcher.FINISHED if self.state.finished else None  # None: wait for the batch to end

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        tid = result.get("config/trial")
        if isinstance(tid, str) and tid in self.trials:
            self.state.tune_ids.setdefault(trial_id, tid)

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        tid = self.state.tune_ids.get(trial_id) or (result or {}).get("config/trial")
        if tid not in self.trials:
            return
        # Only an outcome counts: a final report (finished, diverged) or a failure Tune gave
        # up on. A trial stopped without one (an interrupted study) is not an outcome.
        if error or (result or {}).get("status") in ("finished", "diverged"):
            # The rule is evaluated on results-table rows; a failure counts as failed
            # whatever its last report said.
            self.state.outcomes[tid] = result_row(
                self.study, self.trials[tid], None if error else result, error or None
            )
            self._maybe_decide()

    def get_state(self) -> dict[str, Any]:
        """The state as JSON-able data (what :meth:`save` writes)."""
        st = self.state
        return {
            "queue": list(st.queue),
            "emitted": sorted(st.emitted),
            "tune_ids": dict(st.tune_ids),
            "outcomes": dict(st.outcomes),
            "decisions": [dataclasses.asdict(d) for d in st.decisions],
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """From :meth:`get_state`'s data; then the decision log and Tune's trials rule."""
        data = dict(state)
        # A state saved before ``batches`` and ``finished`` were derived from the decisions
        # holds them too; they always agreed with its decisions.
        data.pop("batches", None)
        data.pop("finished", None)
        data["emitted"] = set(data["emitted"])
        data["decisions"] = [Decision.from_json(d) for d in data["decisions"]]
        self.state = _SearchState(**data)
        self._reconcile()

    def save(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "w") as f:
            json.dump(self.get_state(), f)

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path) as f:
            self.set_state(json.load(f))

    # -- batches and decisions -----------------------------------------------------------------
    def _schedule(self, index: int) -> None:
        ids = [tid for seed in self.design.batch_seeds(index) for tid in self.by_seed.get(seed, [])]
        self.state.queue.extend(t for t in ids if t not in self.state.emitted and t not in self.known)
        self.state.emitted.update(t for t in ids if t in self.known)

    def _reconcile(self) -> None:
        """After a restore: the logged decisions rule (the log is written before Tune's
        snapshot), and trials Tune already holds are never handed out again."""
        logged = self.log.decisions()
        while len(self.state.decisions) < len(logged) and not self.state.finished:
            self._apply(logged[len(self.state.decisions)])
        self.state.queue = [t for t in self.state.queue if t not in self.known]
        self.state.emitted |= self.known & set(self.trials)

    def _scheduled_ids(self) -> list[str]:
        seeds = self.design.scheduled_seeds(self.state.batches)
        return [tid for seed in seeds for tid in self.by_seed.get(seed, [])]

    def _maybe_decide(self) -> None:
        """Once every trial of the scheduled batches has an outcome: the logged decision
        for this batch if there is one (a resume), else a new one, logged first."""
        s = self.state
        if s.finished or s.queue:
            return
        if any(tid not in s.outcomes for tid in self._scheduled_ids()):
            return
        batch = s.batches - 1
        logged = self.log.decisions()
        if len(logged) > batch:
            decision = logged[batch]
        else:
            settings = AnalysisSettings.from_mapping(self.settings)
            cs, note = primary_interval(pl.DataFrame(list(s.outcomes.values())), settings, self.design)
            decision = decide(self.design, cs, batch=batch, note=note)
            self.log.write(self.design, [*s.decisions, decision])
        self._apply(decision)
        if self.announce is not None:
            self.announce(f"sequential: {decision.text}")

    def _apply(self, decision: Decision) -> None:
        self.state.decisions.append(decision)
        if decision.action == "stop":
            self.state.queue.clear()
        else:
            self._schedule(self.state.batches - 1)  # the batch this "continue" just added


# ----------------------------------------------------------------------------- the runner's hooks
def searcher_for(
    plan: StudyPlan,
    study_dir: str,
    *,
    known: Iterable[str] = (),
    announce: Callable[[str], None] | None = None,
) -> SeedBatchSearcher | None:
    """The study's searcher, for the plan's sequential design; None for a fixed grid (Tune's grid
    search runs it)."""
    if plan.sequential is None:
        return None
    return SeedBatchSearcher(
        plan.sequential,
        plan.spec.analysis_settings(),
        plan.trials,
        study_dir,
        known=known,
        announce=announce,
        study=plan.spec.name,
    )


__all__ = [
    "SeedBatchSearcher",
    "primary_interval",
    "searcher_for",
]
