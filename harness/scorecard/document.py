"""The scorecard as a :class:`~harness.report.document.Document`: the HTML page, the markdown
table (and MLflow description) and the terminal table are its renderings.

Sections: ``summary`` (one row per claim and reading: its verdict at the paper's setting, the
kinds found beyond it; in bold where it replicated), ``claims`` (one row per claim, reading,
study and cell), ``trends`` (per claim and factor, with where it holds), ``kinds`` (what each
verdict kind means) and ``statements`` (every claim as the paper states it, with its setting
and the study that measures it).
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from harness.analysis.results_types import NOT_DISTINGUISHABLE, NOT_TESTABLE, SETTLED
from harness.report.document import Document, Note, Paragraph, Section, Table
from harness.scorecard.claims import ClaimSet
from harness.scorecard.compute import cell_of
from harness.scorecard.verdicts import KIND_MEANINGS

#: A scorecard kind as the document model colours it: what the test supports (settled), a test
#: that supports no claim (not distinguishable), no test (not testable).
TEST_KIND: dict[str, str] = {
    "replicated": SETTLED,
    "smaller": SETTLED,
    "larger": SETTLED,
    "reversed": SETTLED,
    "absent": SETTLED,
    "grows": SETTLED,
    "shrinks": SETTLED,
    "flat": SETTLED,
    "inconclusive": NOT_DISTINGUISHABLE,
    "not measured": NOT_TESTABLE,
}


def _claims_frame(table: pl.DataFrame) -> pl.DataFrame:
    rows = table.filter(pl.col("kind") != "trend")
    return pl.DataFrame(
        {
            "claim": rows.get_column("claim"),
            "reading": rows.get_column("reading"),
            "study": rows.get_column("study"),
            "cell": [cell_of(r) for r in rows.iter_rows(named=True)],
            "params": rows.get_column("params"),
            "paper": rows.get_column("paper_value"),
            "estimate": rows.get_column("estimate"),
            "ci_low": rows.get_column("ci_low"),
            "ci_high": rows.get_column("ci_high"),
            "n_seeds": rows.get_column("n_seeds"),
            "verdict": rows.get_column("verdict"),
            "__kind": [TEST_KIND[k] for k in rows.get_column("verdict_kind").to_list()],
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
            "slope": rows.get_column("estimate"),
            "ci_low": rows.get_column("ci_low"),
            "ci_high": rows.get_column("ci_high"),
            "n_seeds": rows.get_column("n_seeds"),
            "verdict": rows.get_column("verdict"),
            "where": rows.get_column("where"),
            "__kind": [TEST_KIND[k] for k in rows.get_column("verdict_kind").to_list()],
        },
        schema_overrides={"slope": pl.Float64, "ci_low": pl.Float64, "ci_high": pl.Float64, "n_seeds": pl.Int64},
    )


def _statements_frame(claims: ClaimSet) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "claim": [c.id for c in claims],
            "paper": [c.paper for c in claims],
            "section": [c.section for c in claims],
            "statement": [c.claim for c in claims],
            "value": [c.paper_value for c in claims],
            "setting": [
                f"{c.setting.dataset}/{c.setting.size}/T={c.setting.context_length}, {c.setting.steps:,} steps, "
                f"{c.setting.seeds} seed"
                for c in claims
            ],
            "studies": [", ".join(dict.fromkeys(m.study for m in c.measures)) for c in claims],
        },
        schema_overrides={"value": pl.Float64},
    )


def _summary_row(claim: str, reading: str, rows: pl.DataFrame) -> dict:
    cells = rows.filter(pl.col("kind") == "cell")
    first = rows.row(0, named=True)
    out = {"claim": claim, "reading": reading, "paper": first["paper_value"], "estimate": None, "ci_low": None}
    out.update(ci_high=None, n_seeds=None, elsewhere="", __replicated=False)
    if cells.height == 0:
        return {**out, "verdict": first["verdict"], "__kind": TEST_KIND[first["verdict_kind"]]}
    at_paper = cells.filter(pl.col("at_paper_setting"))
    other = cells.filter(~pl.col("at_paper_setting"))
    if other.height:
        counts = other.group_by("verdict_kind").len().sort("len", descending=True)
        kinds = ", ".join(f"{n} {k}" for k, n in counts.iter_rows())
        out["elsewhere"] = f"{other.height} cell{'s' if other.height > 1 else ''}: {kinds}"
    if at_paper.height == 0:
        return {**out, "verdict": "not measured at the paper's setting", "__kind": NOT_TESTABLE}
    best = at_paper.sort("n_seeds", descending=True, nulls_last=True).row(0, named=True)
    out.update({k: best[k] for k in ("estimate", "ci_low", "ci_high", "n_seeds", "verdict")})
    return {**out, "__kind": TEST_KIND[best["verdict_kind"]], "__replicated": best["verdict_kind"] == "replicated"}


def summary_frame(table: pl.DataFrame) -> pl.DataFrame:
    """One row per claim and reading: the verdict at the paper's setting (the cell with the
    most seeds there) and the kinds found elsewhere."""
    cells = table.filter(pl.col("kind") != "trend")
    groups = cells.partition_by(["claim", "reading"], as_dict=True, maintain_order=True)
    rows = [_summary_row(claim, reading, part) for (claim, reading), part in groups.items()]
    floats = {c: pl.Float64 for c in ("paper", "estimate", "ci_low", "ci_high")}
    frame = pl.DataFrame(rows, schema_overrides={**floats, "n_seeds": pl.Int64}, infer_schema_length=None)
    order = ("claim", "reading", "paper", "estimate", "ci_low", "ci_high", "n_seeds", "verdict", "elsewhere")
    return frame.select(*order, "__kind", "__replicated")


def _counts(table: pl.DataFrame) -> str:
    cells = table.filter(pl.col("kind") != "trend")
    counts = cells.group_by("verdict_kind").len()
    found = dict(zip(counts.get_column("verdict_kind").to_list(), counts.get_column("len").to_list(), strict=True))
    return ", ".join(f"{found[k]} {k}" for k in KIND_MEANINGS if k in found)


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


def scorecard_document(table: pl.DataFrame, claims: ClaimSet, studies: Sequence[str]) -> Document:
    """The scorecard as a document, from :func:`~harness.scorecard.compute.scorecard_table`'s
    table, the claims it read and the names of the studies it read."""
    n_claims = table.get_column("claim").n_unique()
    intro = Paragraph(
        f"{n_claims} claims of the two papers against {len(studies)} "
        f"stud{'y' if len(studies) == 1 else 'ies'} ({', '.join(studies) or 'none'}): {_counts(table)}. "
        "A claim in **bold** replicated at the paper's setting (corpus, size, context, steps). "
        "Each verdict reads the study report's own interval (paired over seeds); the interval column of "
        "`scorecard.parquet` names the interval each verdict rests on."
    )
    claims_table = _claims_table(_claims_frame(table))
    summary = _claims_table(
        summary_frame(table), labels={"estimate": "at the paper's setting", "elsewhere": "beyond it"}
    )
    sections = [
        Section("summary", "At the papers' setting, and beyond", (intro, summary)),
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
                        "(per-seed least-squares slopes, t-interval over seeds); **grows** means in the paper's "
                        "direction, **flat** an equivalence within the smallest effect per doubling."
                    ),
                    Table(trends, kind_column="__kind", stub="claim", signed=("slope", "ci_low"), max_rows=200),
                ),
            )
        )
    legend = "; ".join(f"**{k}**: {v}" for k, v in KIND_MEANINGS.items())
    sections.append(Section("kinds", "What the verdicts mean", (Paragraph(legend),)))
    sections.append(
        Section("statements", "The claims", (Table(_statements_frame(claims), stub="claim", signed=("value",)),))
    )
    notes = (
        Note(
            "Each row is read at its own level, unadjusted across rows: where the truth is 0, about 2.5 % of "
            "rows say replicated and 2.5 % reversed by chance.",
            kind="caution",
        ),
        Note(
            "A row away from the paper's setting (another size, context, corpus or number of steps) asks whether "
            "the claim still holds there; it neither confirms nor refutes the papers' own number.",
        ),
    )
    return Document("Scorecard: the papers' claims", tuple(sections), notes)


__all__ = ["TEST_KIND", "scorecard_document", "summary_frame"]
