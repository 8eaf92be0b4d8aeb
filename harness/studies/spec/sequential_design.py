"""A sequential study's design as its spec states it: seeds from ``min`` to ``max`` in batches of
``batch``, and the rule that stops it (``stop_when``). Derived from the spec alone, once per study
(:attr:`harness.studies.plan.StudyPlan.sequential`); its decisions, their log and the searcher
that takes them are in :mod:`harness.studies.tune.sequential`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness.studies.spec.blocks import PrecisionRule
from harness.studies.spec.study_spec import StudySpec

if TYPE_CHECKING:  # the analysis (scipy) loads with the searcher, not with a dry run
    from harness.analysis.sequential import ConfidenceSequenceResult


@dataclass(frozen=True)
class SequentialDesign:
    """Sequential seeds and their stopping rule, as the spec states them."""

    min_seeds: int
    max_seeds: int
    batch: int
    rule: str  # "precision" | "settled"
    precision: float | None
    smallest_effect: float | None
    confidence: float

    @classmethod
    def from_spec(cls, spec: StudySpec) -> SequentialDesign | None:
        """The spec's design; None for a study with a fixed list of seeds."""
        schedule = spec.seed_schedule
        if schedule is None or spec.stop_when is None:
            return None
        rule = spec.stop_when
        return cls(
            min_seeds=schedule.min,
            max_seeds=schedule.max,
            batch=schedule.batch,
            rule="precision" if isinstance(rule, PrecisionRule) else "settled",
            precision=rule.precision if isinstance(rule, PrecisionRule) else None,
            smallest_effect=spec.analysis.smallest_effect,
            confidence=spec.analysis.confidence,
        )

    @property
    def tightest_at(self) -> float:
        """Where the confidence sequence is made narrowest: ``sqrt(min * max)`` seeds."""
        return math.sqrt(self.min_seeds * self.max_seeds)

    def batch_seeds(self, index: int) -> list[int]:
        """The seeds of batch ``index``: 0..min-1 first, then ``batch`` at a time up to max."""
        if index == 0:
            return list(range(self.min_seeds))
        start = self.min_seeds + (index - 1) * self.batch
        return list(range(start, min(start + self.batch, self.max_seeds)))

    @property
    def n_batches(self) -> int:
        """Batches up to ``max`` seeds."""
        return 1 + math.ceil((self.max_seeds - self.min_seeds) / self.batch)

    def scheduled_seeds(self, n_batches: int) -> list[int]:
        return [s for i in range(n_batches) for s in self.batch_seeds(i)]

    def rule_text(self) -> str:
        """``stop when the 95 % anytime-valid half-width of the primary effect is <= 0.01``."""
        level = f"{self.confidence:.0%} anytime-valid interval"
        if self.rule == "precision":
            what = f"its half-width is at most {self.precision:g}"
        else:
            what = f"it excludes 0 or lies within +-{self.smallest_effect:g}"
        return (
            f"seeds {self.min_seeds} to {self.max_seeds} in batches of {self.batch}; stop when the primary effect's "
            f"{level} is settled: {what}"
        )

    def met(self, cs: ConfidenceSequenceResult) -> str | None:
        """Which rule the interval meets: ``precision`` or ``settled`` (None: not met)."""
        if cs.low is None or cs.high is None or not cs.bounded:
            return None
        if self.rule == "precision":
            return "precision" if cs.half_width <= self.precision else None
        margin = float(self.smallest_effect or 0.0)
        if cs.low > 0.0 or cs.high < 0.0 or (-margin <= cs.low and cs.high <= margin):
            return "settled"
        return None

    def record(self) -> dict[str, Any]:
        """What a resume must find unchanged (stored in ``harness_study.json``)."""
        return dataclasses.asdict(self)
