"""What ``harness scorecard`` prints: what was measured first, the rest folded.

:func:`terminal_document` is a short :class:`~harness.report.document.Document` for the
terminal: the counts (claims and rows apart) and the card's family-wise rate; per measured
claim, a small table with one line per row that measured it (its cells, trends and
predictions: where, the estimate, the 95 % interval, the seeds, the verdict's kind, and for a
cell since which evaluation step its kind has not changed); then the claims no study read
measures, one line per study that would measure them. The full words of every row stay in
``scorecard.html``, ``scorecard.md`` and ``scorecard.parquet``.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from harness.report.document import Document, Paragraph, Section, Table
from harness.scorecard.document import VERDICT_ROWS, count_words, family_words, whole_claims_table
from harness.scorecard.rows import ScorecardRow
from harness.scorecard.sections import paper_text, texts


def _since(table: pl.DataFrame) -> dict[str, str]:
    """Cell measurement key -> since which step its training curve's kind held ("every step")."""
    training = table.filter(pl.col("kind") == "training").sort("step")
    out = {}
    for row in training.group_by(["measurement_cell"], maintain_order=True).last().iter_rows(named=True):
        first = training.filter(pl.col("measurement_cell") == row["measurement_cell"]).get_column("step").min()
        since = row["stable_from"]
        out[row["measurement_cell"]] = "every step" if since == first else f"step {since:,}"
    return out


def _where(row: dict, datasets: int) -> str:
    """Where a row measured, as short as the card allows: ``nano/T=128``, ``trend vs size``,
    ``predicted`` (how far on both axes: the claim's title); the corpus only when the card has several."""
    if row["kind"] == "trend":
        where = f"trend vs {'size' if row['factor'] == 'params' else 'context'}"
    elif row["kind"] == "predicted":
        where = "predicted"  # where, and how far on both axes: the claim table's title
    else:
        where = f"{row['size']}/T={row['context_length']}" + (f" ({row['group']})" if row["group"] else "")
    if datasets > 1 and row["dataset"] is not None:
        where = f"{row['dataset']}/{where}"
    return where


def _predicted_at(row: dict) -> str:
    """Where a claim is predicted and how far on both axes: "predicted at 4.76M parameters (5.9x
    the largest size measured) and 5,000 steps (2.5x the last evaluation)"."""

    def reach(x: float | None, what: str) -> str:
        return "" if x is None else f" ({x:.1f}x {what})" if x > 1.0 else " (within those measured)"

    return (
        f"predicted at {row['params'] / 1e6:.2f}M parameters{reach(row['extrapolation'], 'the largest size measured')} "
        f"and {row['steps']:,} steps{reach(row['steps_extrapolation'], 'the last evaluation')}"
    )


def _claim_table(rows: pl.DataFrame, since: dict[str, str] | None, studies: int, datasets: int) -> Table:
    """One claim's measured rows (of one study, when the card has several): where, the
    estimate and interval, the seeds, the kind, and (with curves: ``since``) since which step a
    cell's kind has held."""
    first = rows.row(0, named=True)
    paper = paper_text(first["paper_value"], first["metric"], first["sign"])
    frame = pl.DataFrame(
        {
            "reading": [r.split(" (")[0] for r in rows.get_column("reading").to_list()],
            "where": [_where(r, datasets) for r in rows.iter_rows(named=True)],
            "estimate": texts(rows, "estimate"),
            "ci_low": rows.get_column("ci_low"),
            "ci_high": rows.get_column("ci_high"),
            "n_seeds": rows.get_column("n_seeds"),
            "kind": rows.get_column("verdict_kind"),
        }
    )
    if since is not None:
        cells = rows.get_column("measurement_cell").to_list()
        frame = frame.with_columns(pl.Series("since", [since.get(m, "") for m in cells], dtype=pl.String))
    predicted = rows.filter((pl.col("kind") == "predicted") & pl.col("params").is_not_null())
    notes = ([f"paper: {paper}"] if paper else []) + (
        [_predicted_at(predicted.row(0, named=True))] if predicted.height else []
    )
    title = (
        first["claim"] + (f" in {first['study']}" if studies > 1 else "") + (f" ({'; '.join(notes)})" if notes else "")
    )
    return Table(frame, stub="reading", signed=("ci_low",), labels={"since": "held since"}, title=title)


def _calibration_lines(part: pl.DataFrame) -> list[Paragraph]:
    """Beside a claim's predicted rows: the rates its own design showed in simulated studies at
    its own noise (each distinct one once)."""
    predicted = part.filter((pl.col("kind") == "predicted") & pl.col("calibration").is_not_null())
    words = dict.fromkeys(predicted.get_column("calibration").to_list())
    return [Paragraph(f"  the prediction's own calibration: {w}") for w in words]


def _measured_tables(table: pl.DataFrame) -> list[Table | Paragraph]:
    """A table per measured claim, in the card's order, each prediction's calibration below it."""
    table = table.with_columns(pl.col("measurement").str.split("|step=").list.first().alias("measurement_cell"))
    since = _since(table) if table.filter(pl.col("kind") == "training").height else None
    rows = table.filter(pl.col("kind").is_in(VERDICT_ROWS))
    studies = rows.get_column("study").n_unique()
    datasets = rows.get_column("dataset").drop_nulls().n_unique()
    parts = rows.partition_by(["claim", "study"] if studies > 1 else ["claim"], as_dict=True, maintain_order=True)
    rank = {kind: i for i, kind in enumerate(VERDICT_ROWS)}  # cells by size and context, then trends, predictions

    def ordered(part: pl.DataFrame) -> pl.DataFrame:
        order = pl.col("kind").replace_strict(rank, return_dtype=pl.Int64)
        return part.sort(["reading", order, "params", "context_length"], nulls_last=True, maintain_order=True)

    blocks: list[Table | Paragraph] = []
    for part in parts.values():
        blocks += [_claim_table(ordered(part), since, studies, datasets), *_calibration_lines(part)]
    return blocks


def _unmeasured_lines(table: pl.DataFrame) -> list[str]:
    """One line per study that would measure the claims no study read measures."""
    measured = set(table.filter(pl.col("kind").is_in(VERDICT_ROWS)).get_column("claim").to_list())
    missing = table.filter((pl.col("kind") == "not measured") & ~pl.col("claim").is_in(list(measured)))
    lines = []
    for (study,), part in missing.partition_by("study", as_dict=True, maintain_order=True).items():
        ids = list(dict.fromkeys(part.get_column("claim").to_list()))
        lines.append(f"studies/{study}.yaml would measure {len(ids)}: {', '.join(ids)}")
    return lines


def terminal_document(table: pl.DataFrame, studies: Sequence[str], skew_words: str = "") -> Document:
    """The scorecard as the terminal shows it (see the module docstring); ``skew_words``: the skew
    its robust intervals hold at (:attr:`~harness.scorecard.skew.CardSkew.words`)."""
    rows = [ScorecardRow(**r) for r in table.iter_rows(named=True)]
    head = [Paragraph(count_words(table, studies)), Paragraph(family_words(rows))]
    head += [Paragraph(f"The skew guarded against: {skew_words}.")] if skew_words else []
    whole = whole_claims_table(table)
    blocks = [*head, *([whole] if whole is not None else []), *_measured_tables(table)]
    unmeasured = _unmeasured_lines(table)
    if unmeasured:
        blocks.append(Paragraph("Not measured by the studies read (one line per study that would):"))
        blocks += [Paragraph(f"- {line}") for line in unmeasured]
    blocks.append(Paragraph("Every row with its words: scorecard.html, scorecard.md and scorecard.parquet."))
    return Document("Scorecard", (Section("measured", "What was measured", tuple(blocks)),))


__all__ = ["terminal_document"]
