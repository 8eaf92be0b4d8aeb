"""One row of the scorecard, typed: :class:`ScorecardRow`, and the parquet schema derived from it.

The fields are the columns of ``scorecard.parquet`` in order (docs/scorecard.md lists them);
:data:`SCORECARD_SCHEMA` is read off the field types (``str`` -> String, ``int`` -> Int64,
``float`` -> Float64, ``bool`` -> Boolean; ``| None`` columns may be null), so the table and
its schema cannot drift apart.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import polars as pl

#: What a row is: a claim read as a whole over its independent cells (``claim``), one cell of one
#: study (its final numbers), a trend across sizes or context
#: lengths, one cell at one evaluation step (``training``), a prediction at the papers' size
#: over size x training steps (``predicted``; refused: verdict kind ``not predictable``), or a
#: claim no study read can measure.
RowKind = Literal["claim", "cell", "trend", "training", "predicted", "not measured"]


@dataclass(frozen=True)
class ScorecardRow:
    """One claim, reading, study and cell (or trend, step, prediction, or ``not measured``) of
    the scorecard.

    ``estimate``: the mean over seeds of the paired effect, the interaction or the level (a
    trend row: the slope per doubling; a predicted row: of the per-seed predictions at the
    papers' size, whose parameter count is ``params``); ``step`` a training row's evaluation
    step and ``stable_from`` the step from which its curve's verdict kind no longer changed;
    ``extrapolation`` a predicted row's papers' parameters / the largest measured,
    ``steps_extrapolation`` its papers' steps / the last evaluation measured (1.0: within),
    ``slope`` its mean per-seed slope per doubling of parameters at the papers' steps,
    ``backtest_*`` the interval of its size backtest's errors (the surface without the largest
    size against that size) and ``calibration`` the rates its own design showed in simulated
    studies at its own noise; ``power_sign`` / ``power_paper`` a claim row's chance, at its own noise
    and estimate, of showing the sign and of excluding the paper's value (before the card's
    adjustment); ``skew_sigma`` the lognormal shape its skew-robust interval holds at;
    ``ci_*`` the 95 % t-interval over seeds (a claim row: over its cells' means) and ``robust_*`` the same
    widened to the skew-robust critical value,
    ``equivalence_*`` the 90 % one (the TOST's), ``prediction_*`` where a new seed's run lands
    (a claim about runs); ``margin`` the claim's smallest effect of interest (a level: how far
    from its start counts as moved), ``band`` a level's band half-width and ``start`` where it
    started; ``pvalue`` the t-test against the row's null, ``pvalue_robust`` the same made
    valid for strongly skewed seeds too, ``pvalue_holm`` that adjusted across the claim's rows
    (Holm) and ``pvalue_card`` the claim's own p adjusted across the card's claims
    (:mod:`harness.scorecard.family`); ``settled`` what the row's test decided (settled, not
    distinguishable, not testable); ``signed`` whether it asserts a direction after every
    adjustment; ``measurement`` identifies what was measured, so that two
    claims reading the same contrast count it once."""

    claim: str
    paper: str
    reading: str
    study: str | None
    kind: RowKind
    statement: str
    paper_value: float | None = None
    sign: str | None = None
    metric: str | None = None
    factor: str | None = None
    levels: int | None = None
    dataset: str | None = None
    size: str | None = None
    params: int | None = None
    context_length: int | None = None
    steps: int | None = None
    step: int | None = None
    stable_from: int | None = None
    group: str | None = None
    at_paper_setting: bool | None = None
    n_seeds: int | None = None
    estimate: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    robust_low: float | None = None
    robust_high: float | None = None
    equivalence_low: float | None = None
    equivalence_high: float | None = None
    prediction_low: float | None = None
    prediction_high: float | None = None
    margin: float | None = None
    band: float | None = None
    start: float | None = None
    extrapolation: float | None = None
    slope: float | None = None
    backtest_low: float | None = None
    backtest_high: float | None = None
    steps_extrapolation: float | None = None
    calibration: str | None = None
    power_sign: float | None = None
    power_paper: float | None = None
    skew_sigma: float | None = None
    pvalue: float | None = None
    pvalue_robust: float | None = None
    pvalue_holm: float | None = None
    pvalue_card: float | None = None
    interval: str | None = None
    verdict: str | None = None
    verdict_kind: str | None = None
    settled: str | None = None
    signed: bool | None = None
    where: str | None = None
    measurement: str | None = None
    parent_run_id: str | None = None


_POLARS: dict[type, pl.DataType] = {str: pl.String(), int: pl.Int64(), float: pl.Float64(), bool: pl.Boolean()}


def _polars_type(annotation: object) -> pl.DataType:
    """The polars type of a field annotation: ``T`` or ``T | None`` with T a plain type or a
    ``Literal`` of strings."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        (annotation,) = [a for a in args if a is not type(None)]
    if typing.get_origin(annotation) is Literal:
        return pl.String()
    return _POLARS[annotation]  # type: ignore[index]


#: Columns of the scorecard table, in order, with their types (from :class:`ScorecardRow`).
SCORECARD_SCHEMA: dict[str, pl.DataType] = {
    f.name: _polars_type(t)
    for f, t in zip(dataclasses.fields(ScorecardRow), typing.get_type_hints(ScorecardRow).values(), strict=True)
}
#: The scorecard table's columns, in order (the keys of :data:`SCORECARD_SCHEMA`).
SCORECARD_COLUMNS: tuple[str, ...] = tuple(SCORECARD_SCHEMA)


def rows_frame(rows: Sequence[ScorecardRow]) -> pl.DataFrame:
    """The rows as a table of :data:`SCORECARD_SCHEMA`."""
    return pl.DataFrame([dataclasses.astuple(r) for r in rows], schema=SCORECARD_SCHEMA, orient="row")


__all__ = ["SCORECARD_COLUMNS", "SCORECARD_SCHEMA", "RowKind", "ScorecardRow", "rows_frame"]
