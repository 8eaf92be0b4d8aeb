"""What the study report's sections share: the study's layout read once, what each section
returns (:class:`SectionOutput`, built in a :class:`SectionDraft` of its own), the random
generator each section draws from (:func:`section_rng`), and how a frame of the report becomes
a :class:`~harness.report.document.Table`."""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from harness.analysis.results import cell_columns
from harness.report.document import Block, Note, Section, Table
from harness.report.verdict import Verdict, loss_unit


@dataclass(frozen=True)
class ReportLayout:
    """The table's layout, read once: the study's name, its cell columns, variants, seeds."""

    name: str
    cells: tuple[str, ...]
    variants: list[str]
    seeds: list[Any]

    @property
    def paired(self) -> bool:
        return bool(self.seeds)

    @classmethod
    def of(cls, df: pl.DataFrame, title: str | None) -> ReportLayout:
        name = title
        if name is None and "study" in df.columns:
            name = ", ".join(map(str, df.get_column("study").drop_nulls().unique().sort().to_list())) or None
        variants = list(dict.fromkeys(df.get_column("variant").drop_nulls().to_list()))
        seeds = sorted(set(df.get_column("seed").drop_nulls().to_list())) if "seed" in df.columns else []
        return cls(name or "study", cell_columns(df), variants, seeds)


@dataclass(frozen=True)
class SectionOutput:
    """What one section of the report gives, returned by the section: its parts of the
    document (none: it shows nothing), its notes (skipped parts, dropped runs), its figures
    (also written as PNG files), its tables (written as parquet), its headline metrics, its
    verdicts for the table at the top and its result objects. :func:`~harness.report.study.
    build_report` puts the sections' outputs together in the order it calls them, and nothing
    else changes them."""

    sections: tuple[Section, ...] = ()
    notes: tuple[str, ...] = ()
    pngs: Mapping[str, bytes] = field(default_factory=dict)
    tables: Mapping[str, pl.DataFrame] = field(default_factory=dict)
    headline: Mapping[str, float] = field(default_factory=dict)
    verdicts: tuple[Verdict, ...] = ()
    results: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class SectionDraft:
    """One section's output while that section builds it (never shared: :meth:`done` freezes it
    into the :class:`SectionOutput` the section returns)."""

    notes: list[str] = field(default_factory=list)
    sections: list[Section] = field(default_factory=list)
    pngs: dict[str, bytes] = field(default_factory=dict)
    tables: dict[str, pl.DataFrame] = field(default_factory=dict)
    headline: dict[str, float] = field(default_factory=dict)
    verdicts: list[Verdict] = field(default_factory=list)
    results: dict[str, Any] = field(default_factory=dict)

    def skip(self, note: str, blocks: list[Block]) -> None:
        """A note on the document that also shows in the section being built."""
        self.notes.append(note)
        blocks.append(Note(note, kind="caution"))

    def add(self, key: str, title: str, blocks: Sequence[Block]) -> None:
        self.sections.append(Section(key, title, tuple(blocks)))

    def done(self) -> SectionOutput:
        return SectionOutput(
            sections=tuple(self.sections),
            notes=tuple(self.notes),
            pngs=dict(self.pngs),
            tables=dict(self.tables),
            headline=dict(self.headline),
            verdicts=tuple(self.verdicts),
            results=dict(self.results),
        )


def joined(outputs: Sequence[SectionOutput]) -> SectionOutput:
    """The sections' outputs one after the other (a later section's key of the same name wins,
    as none is expected to repeat one)."""
    return SectionOutput(
        sections=tuple(s for o in outputs for s in o.sections),
        notes=tuple(n for o in outputs for n in o.notes),
        pngs={k: v for o in outputs for k, v in o.pngs.items()},
        tables={k: v for o in outputs for k, v in o.tables.items()},
        headline={k: v for o in outputs for k, v in o.headline.items()},
        verdicts=tuple(v for o in outputs for v in o.verdicts),
        results={k: v for o in outputs for k, v in o.results.items()},
    )


def section_rng(seed: int, name: str) -> np.random.Generator:
    """The random generator of the report's section ``name``: seeded from the analysis seed
    and the section's name (``numpy.random.SeedSequence`` entropy ``[seed, crc32(name)]``), so
    that a section's bootstrap and permutation draws depend on nothing else: adding, removing
    or reordering another section leaves them as they were."""
    return np.random.default_rng([seed, zlib.crc32(name.encode("utf-8"))])


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


__all__ = [
    "SectionDraft",
    "SectionOutput",
    "ReportLayout",
    "effect_style",
    "frame_table",
    "joined",
    "section_rng",
    "seeds_text",
]
