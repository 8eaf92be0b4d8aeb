"""The study report's section on effects over training: the study's factorial read at every
evaluation step of its curves table (paired over seeds, the same t-intervals as the final
numbers: :func:`~harness.analysis.over_training.effects_over_training`), tau per initial value
along training, and from which step on each effect's interval stopped changing side. The
steps are one curve, not many tests: nothing is adjusted across them, and the verdicts of
record are the final ones at the top of the report."""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from harness.analysis.over_training import (
    effects_over_training,
    interval_side,
    level_over_training,
    stable_from,
)
from harness.analysis.results import cell_label
from harness.analysis.results_types import AnalysisSettings
from harness.report.document import Block, Figure, Paragraph
from harness.report.plots_training import Curve, Panel, Reference, axis_label, over_training_plot
from harness.report.sections import SectionDraft, SectionOutput, frame_table


def _panels(frame: pl.DataFrame, cells: list[str], line: str, label) -> list[Panel]:
    """One panel per cell, one curve per value of ``line`` (``label`` names it)."""
    panels = []
    groups = frame.partition_by(cells, as_dict=True, maintain_order=True) if cells else {(): frame}
    for key, part in groups.items():
        curves = []
        for (value,), rows in part.partition_by(line, as_dict=True, maintain_order=True).items():
            rows = rows.sort("step")
            curves.append(
                Curve(
                    label(value),
                    rows["step"].to_list(),
                    rows["estimate"].to_list(),
                    rows["ci_low"].to_list(),
                    rows["ci_high"].to_list(),
                )
            )
        panels.append(Panel(cell_label(cells, list(key)) if cells else "all", curves))
    return panels


def _stability(frame: pl.DataFrame, cells: list[str]) -> pl.DataFrame:
    """Per effect and cell: the last step's estimate and interval, and where the interval lies
    against 0 from which step on."""
    rows = []
    for key, part in frame.partition_by(["effect", *cells], as_dict=True, maintain_order=True).items():
        part = part.sort("step")
        sides = [interval_side(lo, hi) for lo, hi in zip(part["ci_low"], part["ci_high"], strict=True)]
        steps = part["step"].to_list()
        since = stable_from(steps, sides)
        last = part.row(part.height - 1, named=True)
        when = (
            "at every evaluation"
            if since == steps[0]
            else f"only at the last evaluation, step {since:,}"
            if since == steps[-1]
            else f"from step {since:,} on"
        )
        rows.append(
            {
                "effect": key[0],
                "cell": cell_label(cells, list(key[1:])) if cells else "all",
                "step": last["step"],
                "estimate": last["estimate"],
                "ci_low": last["ci_low"],
                "ci_high": last["ci_high"],
                "n_seeds": last["n_seeds"],
                "interval": f"{sides[-1]} {when}",
            }
        )
    return pl.DataFrame(rows, infer_schema_length=None)


def training_section(
    curves: pl.DataFrame | None, settings: AnalysisSettings, *, tau_left_out: Sequence[str] = ()
) -> SectionOutput:
    """Effects and tau over training (skipped, with a note, without a curves table or with
    one evaluation only); tau of the variants ``tau_left_out`` (users' gates) is not drawn
    against the papers' band."""
    parts = SectionDraft()
    if curves is None or curves.height == 0 or curves.get_column("step").n_unique() < 2:
        parts.notes.append("effects over training skipped: no curves table with two or more evaluations")
        return parts.done()
    effects = effects_over_training(curves, settings)
    blocks: list[Block] = [
        Paragraph(
            "Each effect of the 2x2 read at every evaluation step, paired over seeds, with the same "
            f"{settings.confidence:.0%} t-intervals as the final numbers (at tau's reference initial value). "
            "The steps are one curve, not many tests: nothing is adjusted across them, and the verdicts of record "
            "are the final ones above. *From step S on* says since when the interval has stayed on its side of 0: "
            "a side reached only at the last evaluation is one more training could change."
        )
    ]
    cells = [c for c in ("dataset", "size", "context_length") if c in effects.columns]
    if effects.height:
        table = _stability(effects, cells)
        parts.tables["effects_over_training"] = effects
        blocks.append(frame_table(table, confidence=settings.confidence, signed=("estimate", "ci_low"), stub="effect"))
        delta = settings.smallest_effect
        band = None if delta is None else Reference(f"± smallest effect {delta:g}", None, -delta, delta)
        parts.pngs["effects_over_training"] = over_training_plot(
            _panels(effects, cells, "effect", str),
            title="Effects over training (paired seeds, 95 % band)",
            ylabel=axis_label(settings.metric, gain=True),
            reference=band,
        )
        blocks.append(Figure("effects_over_training", parts.pngs["effects_over_training"]))
    if tau_left_out and "variant" in curves.columns:
        curves = curves.filter(~pl.col("variant").is_in(list(tau_left_out)))
    _tau_over_training(curves, settings, parts, blocks)
    parts.add("training", "Over training", blocks)
    return parts.done()


def _tau_over_training(
    curves: pl.DataFrame, settings: AnalysisSettings, parts: SectionDraft, blocks: list[Block]
) -> None:
    """tau of the gated runs along training, one curve per initial value, against its band."""
    if "tau_mean" not in curves.columns or curves.get_column("tau_mean").drop_nulls().len() == 0:
        return
    tau = level_over_training(curves, column="tau_mean", confidence=settings.confidence)
    parts.tables["tau_over_training"] = tau
    cells = [c for c in ("dataset", "size", "context_length") if c in tau.columns]
    band = Reference(
        f"{settings.tau_reference:g} ± {settings.tau_margin:g}",
        settings.tau_reference,
        settings.tau_reference - settings.tau_margin,
        settings.tau_reference + settings.tau_margin,
    )
    parts.pngs["tau_over_training"] = over_training_plot(
        _panels(tau, cells, "tau_init", lambda v: f"tau started at {v:g}"),
        title="tau over training, per initial value (mean over seeds, 95 % band)",
        ylabel=axis_label("tau_mean", gain=False),
        reference=band,
        zero=False,
    )
    blocks.append(Figure("tau_over_training", parts.pngs["tau_over_training"]))


__all__ = ["training_section"]
