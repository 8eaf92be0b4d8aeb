"""Verdicts: one line of a report's verdict table, the headline family's Holm adjustment,
the kind vocabulary, and the verdict table as a document section.

The kinds (:data:`VERDICT_KINDS`) say what a verdict amounts to, whatever its words:
``settled`` (the test supports the claim), ``not distinguishable`` (the test ran and
supports no claim), ``not testable`` (too few seeds, zero spread). The statistics set them
on their result objects; the renderers colour (HTML), emphasise (markdown) or tag
(terminal) each verdict by its kind.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from harness.analysis.multiplicity import holm_adjusted
from harness.analysis.results_types import (
    NOT_DISTINGUISHABLE,
    NOT_TESTABLE,
    SETTLED,
    VERDICT_KINDS,
    ConfidenceInterval,
    ContrastResult,
    VerdictKind,
)
from harness.analysis.verdict_words import T_ASSUMPTION, descriptive_after_stop, not_after_holm
from harness.report.document import Document, Paragraph, Section, Table
from harness.report.terminal import render_terminal

#: Short names of the tests behind the verdict table's p column (footer of the table).
TEST_ABBREVIATIONS = {
    "t": "paired t-test over seeds",
    "slope t": "t-test of the per-seed slopes",
    "TOST": "two one-sided t-tests (equivalence to the band)",
    "diff t": "t-test over seeds of open fraction - Gaussian tail",
    "anytime t": "anytime-valid t-mixture test (Lai 1976; Wang & Ramdas 2023), valid under optional stopping",
}

#: The key of the verdict section (the MLflow description and the terminal show it alone).
VERDICTS_KEY = "verdicts"


def finite(x: Any) -> bool:
    """A real, finite number (not None, not NaN)."""
    return x is not None and isinstance(x, numbers.Real) and math.isfinite(float(x))


def loss_unit(metric: str) -> str:
    """The unit of a metric's values: ``nats`` for a loss (mean cross-entropy), else ``""``."""
    return "nats" if metric.endswith("loss") else ""


@dataclass(frozen=True)
class Verdict:
    """One line of the verdict table.

    ``test`` names the test ``pvalue`` belongs to (a key of :data:`TEST_ABBREVIATIONS`);
    ``role`` is ``"primary"`` (the study's primary hypothesis, read at the unadjusted
    level) or ``"secondary"`` (Holm-adjusted across the headline family:
    ``pvalue_holm``); ``claim`` says whether the verdict's words rest on ``pvalue``
    being below alpha (an interval excluding 0, an equivalence, a difference), so that
    a claim that does not survive Holm's adjustment can say so. ``kind`` is what the
    verdict amounts to (:data:`~harness.analysis.results_types.VerdictKind`: settled, not
    distinguishable, not testable), set from the result the verdict comes from (by
    default: not testable without a p-value, settled with a claim); the report colours
    verdicts by it. ``unit`` is the unit of ``estimate`` (``nats`` for a loss effect).
    """

    effect: str
    estimate: float | None
    confidence_interval: ConfidenceInterval | None
    pvalue: float | None
    n_seeds: int | None
    verdict: str
    signed: bool = True
    test: str = "t"
    role: str = "secondary"
    pvalue_holm: float | None = None
    claim: bool = False
    kind: VerdictKind | None = None
    unit: str = ""

    def __post_init__(self) -> None:
        if self.kind is None:
            kind = NOT_TESTABLE if not finite(self.pvalue) else SETTLED if self.claim else NOT_DISTINGUISHABLE
            object.__setattr__(self, "kind", kind)
        elif self.kind not in VERDICT_KINDS:
            raise ValueError(f"Verdict.kind must be one of {', '.join(VERDICT_KINDS)}, got {self.kind!r}")

    def to_row(self) -> dict[str, Any]:
        ci = self.confidence_interval
        return {
            "effect": self.effect,
            "role": self.role,
            "estimate": self.estimate,
            "ci_low": None if ci is None else ci.low,
            "ci_high": None if ci is None else ci.high,
            "pvalue": self.pvalue,
            "test": TEST_ABBREVIATIONS.get(self.test, self.test),
            "pvalue_holm": self.pvalue_holm,
            "n_seeds": self.n_seeds,
            "verdict": self.verdict,
            "kind": self.kind,
            "unit": self.unit,
        }


def headline_family(verdicts: Sequence[Verdict], *, alpha: float = 0.05) -> list[Verdict]:
    """The primary row first, then the secondary rows with Holm-adjusted p-values across
    them (:func:`~harness.analysis.multiplicity.holm_adjusted`); a secondary claim whose
    adjusted p is not below ``alpha`` loses its claim words (:func:`not_after_holm`:
    "not significant after Holm (p=...): estimate ... [...] before adjustment") and is no
    longer settled (kind "not distinguishable")."""
    primary = [v for v in verdicts if v.role == "primary"]
    secondary = [v for v in verdicts if v.role != "primary"]
    idx = [i for i, v in enumerate(secondary) if finite(v.pvalue)]
    adjusted = (
        dict(zip(idx, holm_adjusted(np.array([secondary[i].pvalue for i in idx], dtype=float)), strict=True))
        if idx
        else {}
    )
    out = []
    for i, v in enumerate(secondary):
        p = adjusted.get(i)
        text, kind = v.verdict, v.kind
        if p is not None and v.claim and p >= alpha:
            text = not_after_holm("slope" if v.test == "slope t" else "estimate", v.estimate, v.confidence_interval, p)
            kind = NOT_DISTINGUISHABLE if kind == SETTLED else kind
        out.append(dataclasses.replace(v, pvalue_holm=None if p is None else float(p), verdict=text, kind=kind))
    return [*primary, *out]


def descriptive_verdict(v: Verdict) -> Verdict:
    """A secondary verdict of a study that stopped on its data: descriptive, never settled."""
    kind = NOT_DISTINGUISHABLE if v.kind == SETTLED else v.kind
    return dataclasses.replace(v, verdict=descriptive_after_stop(v.verdict), kind=kind)


def verdict_of(label: str, res: ContrastResult, role: str = "secondary") -> Verdict:
    """The verdict of a paired contrast (a claim when its test settles it: :attr:`ContrastResult.claims`)."""
    claim = res.claims
    return Verdict(
        label,
        res.estimate,
        res.confidence_interval,
        res.pvalue,
        res.n_seeds,
        res.verdict,
        role=role,
        claim=claim,
        kind=res.verdict_kind,
        unit=loss_unit(res.metric),
    )


def verdict_footer(verdicts: Sequence[Verdict]) -> str:
    """The tests behind the p column, the primary mark and Holm's family, in words (the
    caption of the verdict table); ``""`` when no row has a p-value."""
    used = [t for t in TEST_ABBREVIATIONS if any(v.test == t and v.pvalue is not None for v in verdicts)]
    if not used:
        return ""
    footer = "; ".join(f"{t}: {TEST_ABBREVIATIONS[t]}" for t in used)
    if "t" in used or "slope t" in used:
        footer += f"; {T_ASSUMPTION}"
    if any(v.role == "primary" for v in verdicts):
        footer += "; * primary hypothesis (unadjusted); Holm p: the other rows adjusted as one family"
    return footer


_VERDICT_SCHEMA = {
    "effect": pl.String,
    "estimate": pl.Float64,
    "unit": pl.String,
    "ci_low": pl.Float64,
    "ci_high": pl.Float64,
    "pvalue": pl.Float64,
    "test": pl.String,
    "pvalue_holm": pl.Float64,
    "n_seeds": pl.Int64,
    "verdict": pl.String,
    "verdict_kind": pl.String,
    "signed": pl.Boolean,
}


def verdict_table(verdicts: Sequence[Verdict], *, confidence: float = 0.95) -> Table:
    """The verdict table: one row per verdict (``effect`` with ``*`` on the primary row; the
    estimate with its unit; the interval; ``p (test)``; ``Holm p``; seeds; the verdict
    marked by its kind: bold where settled, in every rendering), the tests named in the
    caption. The primary row is marked by its ``*`` only: bold means settled."""
    rows = [
        {
            "effect": f"{v.effect} *" if v.role == "primary" else v.effect,
            "estimate": float(v.estimate) if finite(v.estimate) else None,
            "unit": v.unit,
            "ci_low": None if v.confidence_interval is None else float(v.confidence_interval.low),
            "ci_high": None if v.confidence_interval is None else float(v.confidence_interval.high),
            "pvalue": v.pvalue if finite(v.pvalue) else None,
            "test": v.test,
            "pvalue_holm": v.pvalue_holm,
            "n_seeds": v.n_seeds,
            "verdict": v.verdict,
            "verdict_kind": v.kind,
            "signed": v.signed,
        }
        for v in verdicts
    ]
    return Table(
        pl.DataFrame(rows, schema=_VERDICT_SCHEMA),
        kind_column="verdict_kind",
        intervals=("ci",),
        signed=("estimate", "ci_low"),
        signed_rows="signed",
        merge={"estimate": "{estimate}<< {unit}>>", "pvalue": "{pvalue}<< ({test})>>"},
        labels={"pvalue": "p (test)"},
        missing={"estimate": "n/a", "pvalue": "n/a", "pvalue_holm": "", "n_seeds": ""},
        caption=verdict_footer(verdicts),
        confidence=confidence,
    )


def verdict_reading(confidence: float = 0.95) -> str:
    """How to read the verdict table (the paragraph under it in every output)."""
    return (
        "How to read it: one row per headline question, over seeds (the unit of replication). A gain is "
        "L(control) − L(treatment) in nats of loss (positive: the treatment lowers the loss); the interaction "
        "I = L(a) + L(b) − L(base) − L(ab) (positive: superadditive). Intervals are "
        f"{confidence:.0%} t-intervals. The primary hypothesis (*) is read at the unadjusted level; the other "
        "rows' p-values are Holm-adjusted as one family. Each verdict's kind says what its test decided."
    )


def verdict_section(verdicts: Sequence[Verdict], *, heading: str = "", confidence: float = 0.95) -> Section:
    """The verdict section: the table, then how to read it (a paragraph when no verdict
    could be computed)."""
    title = f"Verdicts: {heading}" if heading else "Verdicts"
    if not verdicts:
        empty = "No verdict: no headline question could be computed from this study's table (see the notes)."
        return Section(VERDICTS_KEY, title, (Paragraph(empty),))
    table = verdict_table(verdicts, confidence=confidence)
    return Section(VERDICTS_KEY, title, (table, Paragraph(verdict_reading(confidence))))


def format_verdict_table(verdicts: Sequence[Verdict], *, confidence: float = 0.95, title: str = "") -> str:
    """The verdict section as the terminal shows it (:func:`~harness.report.terminal.render_terminal`):
    ``effect | estimate | CI | p (test) | Holm p | seeds | verdict``, the primary row marked
    ``*``, each verdict with its kind, the tests named under the table."""
    section = verdict_section(verdicts, heading=title, confidence=confidence)
    return render_terminal(Document(title or "Verdicts", (section,)))


__all__ = [
    "NOT_DISTINGUISHABLE",
    "NOT_TESTABLE",
    "SETTLED",
    "TEST_ABBREVIATIONS",
    "VERDICTS_KEY",
    "VERDICT_KINDS",
    "Verdict",
    "VerdictKind",
    "finite",
    "format_verdict_table",
    "headline_family",
    "loss_unit",
    "verdict_footer",
    "verdict_of",
    "verdict_reading",
    "verdict_section",
    "verdict_table",
]
