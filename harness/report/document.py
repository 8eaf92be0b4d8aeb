"""One document model for every report: sections of paragraphs, tables, figures and notes,
written once and rendered to every output.

A :class:`Document` is plain data (frozen dataclasses). The renderers turn one document
into each output, so that a sentence written once appears in every output that shows its
section:

- :func:`harness.report.html.render_html`: the self-contained HTML page (great-tables for
  the tables, figures as ``data:`` URIs, verdict cells coloured by their kind);
- :func:`harness.report.markdown.render_markdown`: ``summary.md`` and the MLflow run
  description (``max_rows`` / ``max_chars`` for MLflow's size limit);
- :func:`harness.report.terminal.render_terminal`: the plain-text table printed in the
  terminal, wrapped to a width (100 columns by default).

Blocks
------
:class:`Paragraph`
    Text with light markdown: ``**bold**`` and ```code```.
:class:`Table`
    A polars frame plus how to show it: units per column, the column of verdict kinds
    (``kind_column``, one of :data:`~harness.analysis.results_types.VERDICT_KINDS` per row)
    that colours the ``verdict_column``, the interval columns ``X_low``/``X_high`` merged into
    one ``[low, high]`` column, signed and percent columns, merged columns (``merge``: an
    estimate with its unit), rows in bold, grouping, a caption.
:class:`Figure`
    A named PNG with a caption.
:class:`Note`
    A remark, ``info`` or ``caution`` (a section skipped, runs dropped).

A table cell's text follows the column: ``*pvalue*`` columns as p-values
(:func:`~harness.analysis.results_types.format_pvalue`), integers as integers, percent
columns as ``12.5%``, other floats with ``decimals`` decimals (with their sign when the
column is signed), a missing value as ``missing`` says (default ``–``; ``n/a`` for an
interval). Column labels: :data:`LABELS`, else the name with spaces, plus ``(unit)``.

Examples
--------
>>> import polars as pl
>>> from harness.report.document import Document, Note, Paragraph, Section, Table
>>> from harness.report.markdown import render_markdown
>>> claims = pl.DataFrame({"claim": ["EGA lowers the loss"], "estimate": [0.021],
...                        "ci_low": [0.01], "ci_high": [0.03], "verdict": ["better than control"],
...                        "verdict_kind": ["settled"]})
>>> doc = Document("Scorecard", (Section("claims", "Claims", (
...     Paragraph("One row per **claim**."),
...     Table(claims, units={"estimate": "nats", "ci": "nats"}, signed=("estimate", "ci_low"),
...           kind_column="verdict_kind", stub="claim"),
...     Note("2 claims not run yet", kind="caution"))),))
>>> print(render_markdown(doc, legend=False))  # doctest: +NORMALIZE_WHITESPACE
# Scorecard
<BLANKLINE>
## Claims
<BLANKLINE>
One row per **claim**.
<BLANKLINE>
| claim | estimate (nats) | 95% CI (nats) | verdict |
| :-- | --: | --: | :-- |
| EGA lowers the loss | +0.0210 | [+0.0100, +0.0300] | **better than control** |
<BLANKLINE>
> 2 claims not run yet
<BLANKLINE>
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import polars as pl

from harness.analysis.results_types import VERDICT_KINDS

NoteKind = Literal["info", "caution"]
NOTE_KINDS: tuple[str, ...] = ("info", "caution")

#: Column labels of the report's tables (any other column: its name, underscores as spaces).
LABELS: dict[str, str] = {
    "pvalue": "p",
    "pvalue_holm": "Holm p",
    "permutation_pvalue": "permutation p",
    "rank_pvalue": "rank-test p",
    "tost_max_pvalue": "TOST p (largest)",
    "tost_max_pvalue_holm": "TOST Holm p",
    "n_seeds": "seeds",
    "n_dropped": "dropped",
    "n_runs": "runs",
    "n_diverged": "diverged",
    "n_x": "levels",
    "seeds_now": "seeds now",
    "seed_sd": "seed sd",
    "centre_sigma": "centre σ",
    "nearest_scale": "nearest corpus scale",
    "rank_test": "rank test",
}

#: Interval columns ``<prefix>_low`` / ``<prefix>_high``: the label of the merged column.
INTERVAL_LABELS: dict[str, str] = {
    "ci": "{level} CI",
    "boot": "bootstrap CI",
    "sd_ci": "sd {level} CI",
    "seeds_needed": "range",
}


@dataclass(frozen=True)
class Paragraph:
    """Text with light markdown (``**bold**``, ```code```); every renderer shows it."""

    text: str


@dataclass(frozen=True)
class Note:
    """A remark on the section (or, in :attr:`Document.notes`, on the document): ``info``
    or ``caution`` (something skipped or dropped the reader must know about)."""

    text: str
    kind: NoteKind = "info"

    def __post_init__(self) -> None:
        if self.kind not in NOTE_KINDS:
            raise ValueError(f"Note.kind must be one of {', '.join(NOTE_KINDS)}, got {self.kind!r}")


@dataclass(frozen=True)
class Figure:
    """A PNG image (``png``: its bytes) named ``name`` (the file ``<name>.png`` beside the
    markdown), with a caption."""

    name: str
    png: bytes
    caption: str = ""


@dataclass(frozen=True, eq=False)
class Table:
    """A table: the frame and how to show it.

    Parameters
    ----------
    frame : polars.DataFrame
        The values (numbers stay numbers: the renderers format them).
    units : mapping column -> unit
        Shown in the column's label (``estimate (nats)``); an interval's unit under its
        prefix (``"ci"``) or its low column.
    kind_column : column, optional
        The verdict kind of each row (:data:`~harness.analysis.results_types.VERDICT_KINDS`):
        the HTML colours ``verdict_column`` by it, the markdown sets it bold (settled), plain
        (not distinguishable) or italic (not testable), the terminal writes it in brackets.
        Never shown as a column of its own.
    verdict_column : column
        The column the kinds colour.
    intervals : prefixes, optional
        ``X`` of each ``X_low``/``X_high`` pair shown as one ``[low, high]`` column; None:
        every such pair of the frame.
    signed : columns
        Numbers shown with their sign (effects, slopes); an interval follows its low column.
    signed_rows : column, optional
        A boolean column: the ``signed`` columns carry a sign only in its true rows.
    percent : columns
        Fractions shown as percentages.
    bits : columns
        Loss columns (nats) shown with their value in bits (value / ln 2) beside them.
    merge : mapping column -> pattern
        The column shown as ``pattern`` (``"{estimate}<< {unit}>>"``): ``{name}`` is a
        column's text, a part in ``<<...>>`` is left out when a column in it is missing;
        the other columns of the pattern are not shown on their own.
    bold_rows : column, optional
        A boolean column: its true rows in bold. Bold means settled in every rendering (the
        HTML and the markdown set a settled verdict in bold), so only rows whose verdict is
        settled belong here (the scorecard's replicated claims); a primary hypothesis is
        marked by a ``*`` in its label, never by bold.
    hidden : columns
        Not shown (they carry what other options read, e.g. ``signed_rows``).
    group_by : columns
        Rows grouped under one heading per distinct value (e.g. the cell).
    stub : column, optional
        The row label column (default: ``effect``, ``variant`` or ``factor`` when present).
    labels : mapping column -> label
        Labels over :data:`LABELS`.
    missing : mapping column -> text
        The text of a missing value (default ``–``).
    caption : str
        Under the table (e.g. the tests behind the p column).
    title : str
        Over the table.
    confidence : float
        The level in an interval's label (``95% CI``).
    decimals : int
        Decimals of floats.
    max_rows : int
        Rows shown; a line says how many more the table holds.
    """

    frame: pl.DataFrame
    units: Mapping[str, str] = field(default_factory=dict)
    kind_column: str | None = None
    verdict_column: str = "verdict"
    intervals: Sequence[str] | None = None
    signed: Sequence[str] = ()
    signed_rows: str | None = None
    percent: Sequence[str] = ()
    bits: Sequence[str] = ()
    merge: Mapping[str, str] = field(default_factory=dict)
    bold_rows: str | None = None
    hidden: Sequence[str] = ()
    group_by: Sequence[str] = ()
    stub: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    missing: Mapping[str, str] = field(default_factory=dict)
    caption: str = ""
    title: str = ""
    confidence: float = 0.95
    decimals: int = 4
    max_rows: int = 200

    def __post_init__(self) -> None:
        named = [self.kind_column, self.signed_rows, self.bold_rows, *self.hidden, *self.merge]
        named += [n for pattern in self.merge.values() for n in re.findall(r"\{(\w+)\}", pattern)]
        unknown = list(dict.fromkeys(c for c in named if c is not None and c not in self.frame.columns))
        if unknown:
            raise ValueError(f"Table: columns {unknown} are not in the frame (columns: {self.frame.columns})")
        if self.kind_column is not None:
            if self.verdict_column not in self.frame.columns:
                raise ValueError(f"Table: kind_column {self.kind_column!r} without the column {self.verdict_column!r}")
            bad = set(self.frame.get_column(self.kind_column).drop_nulls().to_list()) - set(VERDICT_KINDS)
            if bad:
                raise ValueError(f"Table: verdict kinds must be among {list(VERDICT_KINDS)}, got {sorted(bad)}")
        if self.stub is None:
            default = next((c for c in ("effect", "variant", "factor") if c in self.frame.columns), None)
            object.__setattr__(self, "stub", default)

    @property
    def interval_pairs(self) -> list[tuple[str, str, str]]:
        """``(low, high, prefix)`` of every interval shown as one column."""
        columns = self.frame.columns
        out = []
        for c in columns:
            if c.endswith("_low") and (high := f"{c[: -len('_low')]}_high") in columns:
                prefix = c[: -len("_low")]
                if self.intervals is None or prefix in self.intervals:
                    out.append((c, high, prefix))
        return out

    @property
    def merged_away(self) -> set[str]:
        """Columns shown only inside another column's ``merge`` pattern."""
        out: set[str] = set()
        for target, pattern in self.merge.items():
            out |= {name for name in re.findall(r"\{(\w+)\}", pattern) if name != target}
        return out

    @property
    def shown_columns(self) -> list[str]:
        """The columns shown, in order (an interval under its low column)."""
        highs = {high for _, high, _ in self.interval_pairs}
        skip = {*self.hidden, *self.merged_away, *highs, *self.group_by}
        if self.kind_column is not None:
            skip.add(self.kind_column)
        for flag in (self.signed_rows, self.bold_rows):
            if flag is not None:
                skip.add(flag)
        return [c for c in self.frame.columns if c not in skip and not c.startswith("__")]

    def label(self, column: str) -> str:
        """The column's label with its unit (an interval's: ``95% CI (nats)``)."""
        for low, _, prefix in self.interval_pairs:
            if column == low:
                label = INTERVAL_LABELS.get(prefix, f"{prefix.replace('_', ' ')} interval")
                label = self.labels.get(low, label.format(level=f"{self.confidence:.0%}"))
                unit = self.units.get(low) or self.units.get(prefix)
                return f"{label} ({unit})" if unit else label
        label = self.labels.get(column, LABELS.get(column, column.replace("_", " ")))
        unit = self.units.get(column)
        return f"{label} ({unit})" if unit else label

    def kinds(self) -> list[str | None]:
        """The verdict kind of each row (None without a kind column)."""
        if self.kind_column is None:
            return [None] * self.frame.height
        return self.frame.get_column(self.kind_column).to_list()


Block = Paragraph | Table | Figure | Note


@dataclass(frozen=True)
class Section:
    """A titled part of a document; ``key`` names it for the renderers' ``sections``
    option (e.g. ``"verdicts"``: the MLflow description shows that section only)."""

    key: str
    title: str
    blocks: tuple[Block, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "blocks", tuple(self.blocks))
        wrong = [type(b).__name__ for b in self.blocks if not isinstance(b, (Paragraph, Table, Figure, Note))]
        if wrong:
            raise TypeError(f"Section {self.key!r}: blocks must be Paragraph, Table, Figure or Note, got {wrong}")


@dataclass(frozen=True)
class Document:
    """A report: its title, its sections in order, notes on the whole (shown last) and the
    headline metrics (numbers logged beside it, e.g. to MLflow; not rendered)."""

    title: str
    sections: tuple[Section, ...] = ()
    notes: tuple[Note, ...] = ()
    headline: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sections", tuple(self.sections))
        object.__setattr__(self, "notes", tuple(n if isinstance(n, Note) else Note(str(n)) for n in self.notes))
        keys = [s.key for s in self.sections]
        if len(set(keys)) != len(keys):
            raise ValueError(f"Document: section keys must be distinct, got {keys}")

    def select(self, keys: Sequence[str] | None) -> tuple[Section, ...]:
        """The sections named by ``keys`` (all when None), in the document's order."""
        if keys is None:
            return self.sections
        unknown = set(keys) - {s.key for s in self.sections}
        if unknown:
            raise KeyError(f"no section {sorted(unknown)} in the document (sections: {[s.key for s in self.sections]})")
        return tuple(s for s in self.sections if s.key in keys)

    def tables(self) -> list[Table]:
        """Every table of the document, in order."""
        return [b for s in self.sections for b in s.blocks if isinstance(b, Table)]


__all__ = [
    "INTERVAL_LABELS",
    "LABELS",
    "NOTE_KINDS",
    "Block",
    "Document",
    "Figure",
    "Note",
    "NoteKind",
    "Paragraph",
    "Section",
    "Table",
]
