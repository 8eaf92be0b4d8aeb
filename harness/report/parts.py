"""What the study report's sections share: the study's layout read once, what the sections
add up to (:class:`Parts`), and how a frame of the report becomes a
:class:`~harness.report.document.Table`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from harness.analysis.results import cell_columns
from harness.analysis.results_types import ContrastResult
from harness.report.document import Block, Note, Section, Table
from harness.report.verdict import Verdict, loss_unit


@dataclass(frozen=True)
class StudyLayout:
    """The table's layout, read once: the study's name, its cell columns, variants, seeds."""

    name: str
    cells: tuple[str, ...]
    variants: list[str]
    seeds: list[Any]

    @property
    def paired(self) -> bool:
        return bool(self.seeds)

    @classmethod
    def of(cls, df: pl.DataFrame, title: str | None) -> StudyLayout:
        name = title
        if name is None and "study" in df.columns:
            name = ", ".join(map(str, df.get_column("study").drop_nulls().unique().sort().to_list())) or None
        variants = list(dict.fromkeys(df.get_column("variant").drop_nulls().to_list()))
        seeds = sorted(set(df.get_column("seed").drop_nulls().to_list())) if "seed" in df.columns else []
        return cls(name or "study", cell_columns(df), variants, seeds)


@dataclass
class Parts:
    """What the report's sections add up to, filled section by section: the document's
    sections and notes, the figures (also written as PNG files), the tables (written as
    parquet), the headline metrics, the verdicts, the result objects."""

    notes: list[str] = field(default_factory=list)
    sections: list[Section] = field(default_factory=list)
    pngs: dict[str, bytes] = field(default_factory=dict)
    tables: dict[str, pl.DataFrame] = field(default_factory=dict)
    headline: dict[str, float] = field(default_factory=dict)
    verdicts: list[Verdict] = field(default_factory=list)
    results: dict[str, Any] = field(default_factory=dict)
    primary: ContrastResult | None = None  # the primary hypothesis's contrast, once the effects section has it
    stopped_on_data: bool = False  # a sequential study: the secondary verdicts are descriptive

    def skip(self, note: str, blocks: list[Block]) -> None:
        """A note on the document that also shows in the section being built."""
        self.notes.append(note)
        blocks.append(Note(note, kind="caution"))

    def add(self, key: str, title: str, blocks: Sequence[Block]) -> None:
        self.sections.append(Section(key, title, tuple(blocks)))


def frame_table(df: pl.DataFrame, *, confidence: float = 0.95, **style: Any) -> Table:
    """A report frame as a table: a ``verdict_kind`` column colours the ``verdict``
    (``style``: the :class:`~harness.report.document.Table` options)."""
    kinds = "verdict_kind" if {"verdict_kind", "verdict"} <= set(df.columns) else None
    return Table(df, kind_column=kinds, confidence=confidence, **style)


def effect_style(metric: str, *, value: str = "estimate", per: str = "", group_by: Sequence[str] = ()) -> dict:
    """How a table of effects on ``metric`` shows: ``value`` and its intervals signed, in
    the metric's unit (nats for a loss, ``per`` appended: "per doubling"), a bits column
    beside a loss effect, rows grouped by ``group_by`` (e.g. the cell)."""
    unit = loss_unit(metric)
    shown_unit = f"{unit} {per}".strip() if unit else ""
    return {
        "units": {value: shown_unit, "ci": shown_unit, "boot": shown_unit},
        "signed": (value, "ci_low", "boot_low"),
        "bits": (value,) if unit and not per else (),
        "group_by": tuple(group_by),
    }


def seeds_text(n: int) -> str:
    """``"1 seed"``, ``"2 seeds"``."""
    return f"{n} seed" if n == 1 else f"{n} seeds"


__all__ = ["Parts", "StudyLayout", "effect_style", "frame_table", "seeds_text"]
