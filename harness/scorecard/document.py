"""The scorecard as a :class:`~harness.report.document.Document`: the HTML page, the markdown
table (and MLflow description) and the terminal table are its renderings.

Sections: ``summary`` (one row per claim and reading: its verdict at the paper's setting, the
kinds found beyond it and predicted at the papers' size and steps; a claim about a trend: its trend; in
bold where it replicated; above it the claims measured and not, the rows by kind, each
measurement counted once, and the card's procedure with its rate under a global null), ``claims``
(one row per claim, reading, study and cell), ``trends`` (per claim and factor, with where it
holds), ``predicted`` (at the papers' size and training steps, from a surface over size x
steps, or why not, with its own calibration and a figure per claim), ``training`` (every
curve's final kind and since when, with a figure per claim),
``kinds`` (what each verdict kind means) and ``statements`` (every claim as the paper states
it, with its margin and the studies that measure it). Each row is coloured by what its test
settled (the row's ``settled`` column). Counts print as whole numbers, a bound as a percentage
(:func:`value_text`).
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from harness.analysis.results_types import NOT_TESTABLE
from harness.report.document import Document, Note, Paragraph, Section, Table
from harness.scorecard.claims import ClaimSet
from harness.scorecard.compute import cell_of
from harness.scorecard.family import CARD_RATE, PROCEDURE, card_family_wise
from harness.scorecard.prediction_words import reach_text
from harness.scorecard.rows import ScorecardRow
from harness.scorecard.sections import paper_text, predicted_section, texts, training_section, value_text
from harness.scorecard.verdicts import KIND_MEANINGS

#: Rows that read a claim with a verdict of their own (not the training curves, not "not measured").
VERDICT_ROWS = ("cell", "trend", "predicted")


def _claims_frame(table: pl.DataFrame) -> pl.DataFrame:
    rows = table.filter(pl.col("kind").is_in(["cell", "not measured"]))
    return pl.DataFrame(
        {
            "claim": rows.get_column("claim"),
            "reading": rows.get_column("reading"),
            "study": rows.get_column("study"),
            "cell": [cell_of(r) for r in rows.iter_rows(named=True)],
            "params": rows.get_column("params"),
            "paper": texts(rows, "paper_value"),
            "estimate": texts(rows, "estimate"),
            "ci_low": rows.get_column("ci_low"),
            "ci_high": rows.get_column("ci_high"),
            "n_seeds": rows.get_column("n_seeds"),
            "verdict": rows.get_column("verdict"),
            "__kind": rows.get_column("settled"),
            "__replicated": rows.get_column("verdict_kind") == "replicated",
        }
    )


def _trends_frame(table: pl.DataFrame) -> pl.DataFrame:
    rows = table.filter(pl.col("kind") == "trend")
    return pl.DataFrame(
        {
            "claim": rows.get_column("claim"),
            "reading": rows.get_column("reading"),
            "study": rows.get_column("study"),
            "against": ["size" if f == "params" else "context" for f in rows.get_column("factor").to_list()],
            "levels": rows.get_column("levels"),
            "slope": rows.get_column("estimate"),
            "ci_low": rows.get_column("ci_low"),
            "ci_high": rows.get_column("ci_high"),
            "n_seeds": rows.get_column("n_seeds"),
            "verdict": rows.get_column("verdict"),
            "where": rows.get_column("where"),
            "__kind": rows.get_column("settled"),
        },
        schema_overrides={
            "levels": pl.Int64,
            "slope": pl.Float64,
            "ci_low": pl.Float64,
            "ci_high": pl.Float64,
            "n_seeds": pl.Int64,
        },
    )


def _paper_value(claim) -> str:
    if claim.paper_count is not None:
        return f"{claim.paper_count} per head"
    if claim.kind == "level" and claim.band is not None:
        return f"{claim.paper_value:g} ± {claim.band:g}"
    if claim.paper_value is None:
        return {"+": "positive", "-": "negative", "±": "a difference"}.get(claim.sign, claim.sign)
    if claim.sign == "<":
        return f"< {100 * claim.paper_value:g} %"
    return f"{claim.paper_value:+.4g}" if claim.sign in ("+", "-") else f"{claim.paper_value:g}"


def _statements_frame(claims: ClaimSet) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "claim": [c.id for c in claims],
            "paper": [c.paper for c in claims],
            "section": [c.section for c in claims],
            "statement": [c.claim for c in claims],
            "value": [_paper_value(c) for c in claims],
            "margin": ["" if c.margin is None else f"±{c.margin:g}: {c.margin_reason}".rstrip(": ") for c in claims],
            "setting": [
                f"{c.setting.dataset}/{c.setting.size}/T={c.setting.context_length}, {c.setting.steps:,} steps, "
                f"{c.setting.seeds} seed"
                for c in claims
            ],
            "studies": [", ".join(dict.fromkeys(s for m in c.measures for s in m.studies)) for c in claims],
        }
    )


def _predicted_text(rows: pl.DataFrame) -> str:
    """The kinds predicted at the papers' size and steps, with how far each reaches on both axes
    ("smaller (5.9x in size, 2.5x in steps)")."""
    predicted = rows.filter(pl.col("kind") == "predicted")
    made = predicted.filter(pl.col("verdict_kind") != "not predictable")
    if made.height:
        return ", ".join(
            f"{r['verdict_kind']} ({reach_text(r['extrapolation'], r['steps_extrapolation'])})"
            for r in made.iter_rows(named=True)
        )
    return "not predictable" if predicted.height else ""


def _summary_row(claim: str, reading: str, rows: pl.DataFrame) -> dict:
    cells = rows.filter(pl.col("kind") == "cell")
    first = rows.row(0, named=True)
    values = rows.get_column("paper_value").drop_nulls().unique()
    paper = values[0] if values.len() == 1 else None  # a count per head: d + 2 differs by cell
    metric, sign = first["metric"], first["sign"]
    out = {"claim": claim, "reading": reading, "paper": paper_text(paper, metric, sign), "estimate": None}
    out.update(ci_low=None, ci_high=None, n_seeds=None, elsewhere="", predicted=_predicted_text(rows))
    out["__replicated"] = False
    trends = rows.filter(pl.col("kind") == "trend")
    if cells.height == 0 and trends.height:  # a claim about a trend: its trend is its verdict
        best = trends.sort(["levels", "n_seeds"], descending=True, nulls_last=True).row(0, named=True)
        out.update({k: best[k] for k in ("ci_low", "ci_high", "n_seeds", "verdict")})
        out["estimate"] = value_text(best["estimate"], metric, sign)
        return {**out, "__kind": best["settled"], "__replicated": best["verdict_kind"] == "grows"}
    if cells.height == 0:
        return {**out, "verdict": first["verdict"], "__kind": first["settled"]}
    at_paper = cells.filter(pl.col("at_paper_setting"))
    other = cells.filter(~pl.col("at_paper_setting"))
    if other.height:
        counts = other.group_by("verdict_kind").len().sort(["len", "verdict_kind"], descending=[True, False])
        kinds = ", ".join(f"{n} {k}" for k, n in counts.iter_rows())
        out["elsewhere"] = f"{other.height} cell{'s' if other.height > 1 else ''}: {kinds}"
    if at_paper.height == 0:
        return {**out, "verdict": "not measured at the paper's setting", "__kind": NOT_TESTABLE}
    best = at_paper.sort("n_seeds", descending=True, nulls_last=True).row(0, named=True)
    out.update({k: best[k] for k in ("ci_low", "ci_high", "n_seeds", "verdict")})
    out["estimate"] = value_text(best["estimate"], metric, sign)
    return {**out, "__kind": best["settled"], "__replicated": best["verdict_kind"] == "replicated"}


def summary_frame(table: pl.DataFrame) -> pl.DataFrame:
    """One row per claim and reading: the verdict at the paper's setting (the cell with the
    most seeds there), the kinds found elsewhere and predicted at the papers' size and steps; a claim
    about a trend: its trend (the one across the most levels). Training rows are not read."""
    table = table.filter(pl.col("kind") != "training")
    groups = table.partition_by(["claim", "reading"], as_dict=True, maintain_order=True)
    rows = [_summary_row(claim, reading, part) for (claim, reading), part in groups.items()]
    types = {"paper": pl.String, "estimate": pl.String, "ci_low": pl.Float64, "ci_high": pl.Float64}
    frame = pl.DataFrame(rows, schema_overrides={**types, "n_seeds": pl.Int64}, infer_schema_length=None)
    order = ("claim", "reading", "paper", "estimate", "ci_low", "ci_high", "n_seeds", "verdict", "elsewhere")
    return frame.select(*order, "predicted", "__kind", "__replicated")


def count_words(table: pl.DataFrame, studies: Sequence[str]) -> str:
    """Claims and rows counted apart: "24 claims against 1 study (smoke): 13 measured, 11 not
    measured. 36 rows read them (cells, trends, predictions; one measurement that two claims
    read counted once): 1 replicated, ... Besides, 120 rows follow the cells over training."."""
    claims = table.get_column("claim").unique()
    measured = table.filter(pl.col("kind").is_in(VERDICT_ROWS)).get_column("claim").unique()
    head = (
        f"{claims.len()} claims against {len(studies)} stud{'y' if len(studies) == 1 else 'ies'} "
        f"({', '.join(studies) or 'none'}): {measured.len()} measured, {claims.len() - measured.len()} not measured."
    )
    rows = table.filter(pl.col("kind").is_in(VERDICT_ROWS))
    keyed = rows.with_columns(pl.coalesce("measurement", pl.col("claim") + pl.col("reading")).alias("__m"))
    unique = keyed.unique(["__m", "verdict_kind"])
    counts = dict(unique.group_by("verdict_kind").len().iter_rows())
    kinds = ", ".join(f"{counts[k]} {k}" for k in KIND_MEANINGS if k in counts)
    body = f" {unique.height} rows read them (cells, trends, predictions; a measurement two claims read counted once)"
    body = f"{body}: {kinds}." if unique.height else " No row reads them."
    training = table.filter(pl.col("kind") == "training").height
    tail = f" Besides, {training} rows follow the cells over training (one curve per cell)." if training else ""
    return head + body + tail


def whole_claims_frame(table: pl.DataFrame) -> pl.DataFrame:
    """One line per claim row (a claim read as a whole over its independent cells): the estimate and
    its 95 % interval, the paper's value and how many times below or above it the estimate lies,
    the cells and seeds, the kind, and its power at its own noise (the chance of showing the sign,
    and of excluding the paper's value)."""
    rows = table.filter(pl.col("kind") == "claim")
    times = [  # the type M ratio, where the sign is shown on the paper's side
        r["paper_value"] / r["estimate"] if r["verdict_kind"] in ("smaller", "larger") and r["paper_value"] else None
        for r in rows.iter_rows(named=True)
    ]
    return pl.DataFrame(
        {
            "claim": rows.get_column("claim"),
            "reading": [r.split(" (")[0] for r in rows.get_column("reading").to_list()],
            "cells": rows.get_column("levels"),
            "seeds": rows.get_column("n_seeds"),
            "estimate": rows.get_column("estimate"),
            "ci_low": rows.get_column("ci_low"),
            "ci_high": rows.get_column("ci_high"),
            "paper": rows.get_column("paper_value"),
            "paper_over_estimate": pl.Series(times, dtype=pl.Float64),
            "kind": rows.get_column("verdict_kind"),
            "power_sign": rows.get_column("power_sign"),
            "power_paper": rows.get_column("power_paper"),
        },
        strict=False,
    )


def whole_claims_table(table: pl.DataFrame) -> Table | None:
    """:func:`whole_claims_frame` as a table (None: no claim row)."""
    frame = whole_claims_frame(table)
    if not frame.height:
        return None
    return Table(
        frame,
        stub="claim",
        signed=("estimate", "ci_low", "paper"),
        percent=("power_sign", "power_paper"),
        labels={
            "paper_over_estimate": "paper / estimate",
            "power_sign": "power: sign",
            "power_paper": "power: paper excluded",
        },
        title="The claims as a whole (each over its independent cells)",
    )


def family_words(rows: Sequence[ScorecardRow]) -> str:
    """The card's procedure and its rate under a global null, in a few sentences (the simulated
    rates from ``benchmarks/calibration.py``, shipped as ``harness/scorecard/calibration.json``)."""
    card, rates = card_family_wise(rows)
    if card is None:
        return "No row has a test, so the card's procedure has nothing to adjust."
    families = f"{card.families} claim famil{'ies' if card.families != 1 else 'y'}"
    head = (
        f"Every direction asserted against 0 passed the card's procedure: {PROCEDURE}. This card has {families} at "
        f"{card.seeds} or more seeds: where no claim is true anywhere, at most {CARD_RATE:.0%} of such cards show one "
        "(Benjamini-Hochberg across the families)"
    )
    if not rates:
        return f"{head}."
    shown = ", ".join(f"{r:.1%} with {noise} seeds" for noise, r in rates["rates"].items())
    return (
        f"{head}; simulated for the published combined design at {rates['seeds']} seeds, {rates['cards']:,} cards: "
        f"{shown} (docs/calibration.md)."
    )


def description_document(table: pl.DataFrame, studies: Sequence[str], skew_words: str = "") -> Document:
    """The scorecard as its MLflow run's description (a few thousand characters): the counts,
    the family-wise rate, one row per measured claim and reading with its kind only (the words
    are in the run's ``scorecard.html``), and the ids of the claims no study read measures."""
    rows = [ScorecardRow(**r) for r in table.iter_rows(named=True)]
    summary = summary_frame(table)
    shown = summary.filter(~pl.col("verdict").str.starts_with("not measured:")).with_columns(
        pl.col("verdict").str.split(":").list.first()
    )
    missing = sorted(set(summary.get_column("claim").to_list()) - set(shown.get_column("claim").to_list()))
    blocks: list = [Paragraph(count_words(table, studies)), Paragraph(family_words(rows))]
    blocks += [Paragraph(f"The skew guarded against: {skew_words}.")] if skew_words else []
    whole = whole_claims_table(table)
    blocks += [whole] if whole is not None else []
    if shown.height:
        shown = _without_empty_columns(shown)
        blocks.append(_claims_table(shown, labels={"estimate": "at the paper's setting", "verdict": "kind"}))
    if missing:
        blocks.append(Paragraph(f"Not measured by the studies read: {', '.join(missing)}."))
    return Document("Scorecard: the papers' claims", (Section("summary", "The claims measured", tuple(blocks)),))


def _without_empty_columns(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` without the shown columns that hold nothing in any row (every value null or
    empty: a column of dashes says nothing; e.g. the estimate at the paper's setting when no
    study ran there); an interval's two columns go together."""

    def empty(column: str) -> bool:
        values = frame.get_column(column)
        return values.null_count() == frame.height or (values.dtype == pl.String and (values.fill_null("") == "").all())

    drop = [c for c in frame.columns if not c.startswith("__") and c != "claim" and empty(c)]
    if ("ci_low" in drop) != ("ci_high" in drop):
        drop = [c for c in drop if c not in ("ci_low", "ci_high")]
    return frame.drop(drop)


def _claims_table(frame: pl.DataFrame, labels: dict[str, str] | None = None) -> Table:
    """A table of claims: coloured by what its test supports, in bold where it replicated."""
    return Table(
        frame,
        kind_column="__kind",
        bold_rows="__replicated",
        stub="claim",
        signed=("paper", "estimate", "ci_low"),
        labels={"paper": "paper's value", **(labels or {})},
        max_rows=500,
    )


def scorecard_document(
    table: pl.DataFrame, claims: ClaimSet, studies: Sequence[str], skew_words: str = "", dropout: str = ""
) -> Document:
    """The scorecard as a document, from :func:`~harness.scorecard.compute.scorecard_table`'s
    table, the claims it read, the names of the studies it read, the skew its robust intervals
    hold at (``skew_words``) and the dropout the studies trained with
    (:func:`~harness.scorecard.pooling.dropout_words`)."""
    rows = [ScorecardRow(**r) for r in table.iter_rows(named=True)]
    intro = Paragraph(
        f"{count_words(table, studies)} "
        "A claim in **bold** replicated at the paper's setting (corpus, size, context, steps). "
        "Each verdict reads the study report's own intervals (paired over seeds) against the claim's own "
        "margin; the interval column of `scorecard.parquet` names the interval each verdict rests on."
    )
    claims_table = _claims_table(_claims_frame(table))
    summary = _claims_table(
        summary_frame(table),
        labels={
            "estimate": "at the paper's setting",
            "elsewhere": "beyond it",
            "predicted": "at the papers' size and steps",
        },
    )
    whole = whole_claims_table(table)
    skew = (Paragraph(f"The skew guarded against: {skew_words}."),) if skew_words else ()
    if dropout:
        skew += (Paragraph(f"Dropout the studies trained with (the papers state none): {dropout}."),)
    sections = [
        Section(
            "summary",
            "At the papers' setting, and beyond",
            (intro, Paragraph(family_words(rows)), *skew, *((whole,) if whole is not None else ()), summary),
        ),
        Section("claims", "Every cell", (claims_table,)),
    ]
    trends = _trends_frame(table)
    if trends.height:
        sections.append(
            Section(
                "trends",
                "Across sizes and context lengths",
                (
                    Paragraph(
                        "The slope of the per-seed effect per doubling of the parameter count or the context length "
                        "(per-seed least-squares slopes, t-interval over seeds; the report's unit too). From three "
                        "levels on: **grows** (in the paper's direction), **shrinks**, **flat** (the 90 % interval "
                        "within ± the claim's margin per doubling); from two levels a **difference**, never flat."
                    ),
                    Table(trends, kind_column="__kind", stub="claim", signed=("slope", "ci_low"), max_rows=200),
                ),
            )
        )
    sections += [s for s in (predicted_section(table), training_section(table)) if s is not None]
    legend = "; ".join(f"**{k}**: {v}" for k, v in KIND_MEANINGS.items())
    sections.append(Section("kinds", "What the verdicts mean", (Paragraph(legend),)))
    sections.append(Section("statements", "The claims", (Table(_statements_frame(claims), stub="claim"),)))
    notes = (
        Note(
            "Each claim's rows are one family (Holm within it) and the claims are adjusted across the card "
            "(Benjamini-Hochberg): a signed verdict lost to either says so. The rate above says how often a card "
            "this size shows a signed verdict where nothing is true.",
            kind="caution",
        ),
        Note(
            "A row away from the paper's setting (another size, context, corpus or number of steps) asks whether "
            "the claim still holds there; it neither confirms nor refutes the papers' own number.",
        ),
    )
    return Document("Scorecard: the papers' claims", tuple(sections), notes)


__all__ = [
    "VERDICT_ROWS",
    "count_words",
    "description_document",
    "family_words",
    "scorecard_document",
    "summary_frame",
    "whole_claims_frame",
    "whole_claims_table",
]
