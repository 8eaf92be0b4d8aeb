"""Claims over training: every claim read at every evaluation step of every cell.

A study's curves table (``curves.parquet``: one row per trial and evaluation) is read step by
step as a results table (:func:`~harness.analysis.over_training.step_frames`), and each step
is read by the same function as the final numbers, :func:`~harness.scorecard.cells.measure_cell`
(the same readers, intervals, margins, bands and shape check), for every claim whose reader
reads a quantity with seeds (contrasts, the interaction, the levels, the open fraction against
its tail: :attr:`~harness.scorecard.readers.Reader.over_training`). Each gives a ``training``
row with its ``step``.

The steps of one cell are one curve, not many tests: a training row is adjusted within its
claim's family as if it stood in its cell's final row's place, never across steps
(:func:`~harness.scorecard.family.adjust_training_rows`), and the verdict of record stays the
final row's (``kind = "cell"``). :func:`with_stability` then says, per curve, from which step on
the verdict kind stopped changing (``stable_from``, and in words in ``where``): a kind reached
only at the last evaluation is one more training could still change.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from harness.analysis.over_training import stable_from, step_frames
from harness.scorecard.cells import StudyResults, measure_cell, readable_cells, with_derived
from harness.scorecard.claims import Claim, ClaimSet, Measure
from harness.scorecard.family import STEP_MARK
from harness.scorecard.readers import READERS
from harness.scorecard.rows import ScorecardRow


def training_rows(claim: Claim, measure: Measure, study: StudyResults, claims: ClaimSet) -> list[ScorecardRow]:
    """The claim's reading at every evaluation step of every cell of the study's curves that
    can measure it (none without curves, or for a count); unadjusted, without ``stable_from``."""
    if study.curves is None or study.curves.height == 0 or not READERS[claim.kind].over_training:
        return []
    rows = []
    for step, frame in step_frames(with_derived(study.curves)):
        for cell, part in readable_cells(claim, measure, study, frame):
            for row in measure_cell(claim, measure, study, cell, part, claims):
                key = f"{row.measurement}{STEP_MARK}{step}"
                rows.append(replace(row, kind="training", step=step, measurement=key))
    return rows


def _curve_key(row: ScorecardRow) -> str:
    return (row.measurement or "").split(STEP_MARK)[0] + f"|{row.claim}|{row.reading}"


def stability_words(kind: str, first: int, last: int, steps: int, since: int) -> str:
    """Where a curve's verdict kind stopped changing, in words."""
    span = f"{steps} evaluations, steps {first:,} to {last:,}" if steps > 1 else f"1 evaluation, step {first:,}"
    if since == first:
        return f"{kind} at every evaluation ({span})"
    if since == last:
        return f"{kind} only at the last evaluation ({span}): more training could change it"
    return f"{kind} from step {since:,} on ({span}); the verdict of record is the final row's"


def with_stability(rows: Sequence[ScorecardRow]) -> list[ScorecardRow]:
    """Training rows with ``stable_from`` (the first step from which their curve's verdict kind
    equals its last) and ``where`` (that in words), per claim, reading, study, cell and group."""
    curves: dict[str, list[ScorecardRow]] = {}
    for row in rows:
        curves.setdefault(_curve_key(row), []).append(row)
    out = []
    for curve in curves.values():
        curve = sorted(curve, key=lambda r: r.step or 0)
        steps = [int(r.step or 0) for r in curve]
        since = stable_from(steps, [str(r.verdict_kind) for r in curve])
        words = stability_words(str(curve[-1].verdict_kind), steps[0], steps[-1], len(steps), int(since or 0))
        out += [replace(r, stable_from=since, where=words) for r in curve]
    return out


__all__ = ["stability_words", "training_rows", "with_stability"]
