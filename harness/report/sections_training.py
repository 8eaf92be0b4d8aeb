"""The study report's section on effects over training: the study's factorial read at every
evaluation step of its curves table (paired over seeds, the same t-intervals as the final
numbers: :func:`~harness.analysis.over_training.effects_over_training`), tau per initial value
along training, and from which step on each effect's interval stopped changing side. The
steps are one curve, not many tests: nothing is adjusted across them, and the verdicts of
record are the final ones at the top of the report.

The curve's points rest on each periodic evaluation's windows (``train.eval_windows``, the same
windows at every step); the verdicts rest on the final evaluation's (the whole validation split
by default: ``val_windows``), read at the same last step. So each curve ends at its verdict:
:func:`curve_ends` puts the final evaluation's contrast of each effect and cell at the curve's
last step (the table ``final_effects``), and the figure marks it there beside the periodic point.
"""

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
from harness.analysis.results_types import AnalysisSettings, ConfidenceInterval
from harness.report.document import Block, Figure, Paragraph
from harness.report.plots_training import (
    Curve,
    EndPoint,
    Marks,
    Panel,
    Reference,
    axis_label,
    over_training_plot,
)
from harness.report.sections import SectionDraft, SectionOutput, frame_table

#: The columns of :func:`curve_ends`'s table besides the cell columns.
END_COLUMNS: tuple[str, ...] = ("effect", "step", "estimate", "ci_low", "ci_high", "n_seeds")


def final_effects(effects: pl.DataFrame | None, primary_interval: ConfidenceInterval | None = None) -> pl.DataFrame:
    """The final evaluation's effect of each claim in each cell: the rows of the report's effects
    table (the cells section's contrasts, which in a study of one cell are the verdict table's),
    with ``primary_interval`` (a sequential study of one cell: the anytime-valid interval its
    primary verdict reads) as the interval of the primary row. Empty without an effects table."""
    if effects is None or effects.height == 0:
        return pl.DataFrame(schema={"effect": pl.String})
    if primary_interval is not None and "role" in effects.columns:
        primary = pl.col("role") == "primary"
        effects = effects.with_columns(
            pl.when(primary).then(pl.lit(primary_interval.low)).otherwise(pl.col("ci_low")).alias("ci_low"),
            pl.when(primary).then(pl.lit(primary_interval.high)).otherwise(pl.col("ci_high")).alias("ci_high"),
        )
    return effects


def curve_ends(over_training: pl.DataFrame, final: pl.DataFrame, cells: Sequence[str]) -> pl.DataFrame:
    """Where each curve of ``over_training`` ends: the ``final`` row of its effect and cell
    (:func:`final_effects`) at the curve's last step, the step whose model the final evaluation
    read. Curves without a final row (a cell the final contrasts lack) have none. Columns: the
    cell columns and :data:`END_COLUMNS`."""
    keys = [*cells, "effect"]
    schema = {**{c: over_training.schema[c] for c in keys}, "step": pl.Int64}
    schema |= {"estimate": pl.Float64, "ci_low": pl.Float64, "ci_high": pl.Float64, "n_seeds": pl.Int64}
    if final.height == 0 or not set(keys) <= set(final.columns):
        return pl.DataFrame(schema=schema)
    last = over_training.group_by(keys, maintain_order=True).agg(pl.col("step").max())
    rows = final.select(*keys, *END_COLUMNS[2:]).cast({c: over_training.schema[c] for c in keys})
    return last.join(rows, on=keys, how="inner").select(*cells, *END_COLUMNS).cast(schema)


def _end_of(ends: pl.DataFrame | None, key: dict) -> EndPoint | None:
    """The end of the curve whose cell and effect are ``key`` (None: it has none)."""
    if ends is None or ends.height == 0:
        return None
    rows = ends.filter(*(pl.col(c) == v for c, v in key.items()))
    if rows.height == 0:
        return None
    row = rows.row(0, named=True)
    return EndPoint(row["step"], row["estimate"], row["ci_low"], row["ci_high"])


def _panels(frame: pl.DataFrame, cells: list[str], line: str, label, ends: pl.DataFrame | None = None) -> list[Panel]:
    """One panel per cell, one curve per value of ``line`` (``label`` names it), each ending at
    its row of ``ends`` where it has one."""
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
                    end=_end_of(ends, {**dict(zip(cells, key, strict=True)), line: value}),
                )
            )
        panels.append(Panel(cell_label(cells, list(key)) if cells else "all", curves))
    return panels


def window_marks(eval_windows: int | None, final_windows: Sequence[int]) -> Marks:
    """The legend's words for what each point rests on: ``eval_windows`` windows at every
    periodic evaluation (None: not known), ``final_windows`` (the results' ``val_windows``) at the
    final one.

    >>> window_marks(64, [1742]).end
    'verdict: final evaluation, 1,742 windows'
    """
    line = "periodic evaluations: " + (f"{eval_windows:,} windows each" if eval_windows else "the same windows each")
    counts = " / ".join(f"{w:,}" for w in sorted(set(final_windows)))
    return Marks(line, f"verdict: final evaluation, {counts} windows" if counts else "verdict: final evaluation")


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
    curves: pl.DataFrame | None,
    settings: AnalysisSettings,
    *,
    tau_left_out: Sequence[str] = (),
    final: pl.DataFrame | None = None,
    marks: Marks | None = None,
) -> SectionOutput:
    """Effects and tau over training (skipped, with a note, without a curves table or with
    one evaluation only); tau of the variants ``tau_left_out`` (users' gates) is not drawn
    against the papers' band. ``final``: the final evaluation's effects (:func:`final_effects`),
    where each curve ends (the table ``final_effects``, the figure's diamonds); ``marks``: the
    windows each rests on, in the figure's legend (:func:`window_marks`)."""
    parts = SectionDraft()
    if curves is None or curves.height == 0 or curves.get_column("step").n_unique() < 2:
        parts.notes.append("effects over training skipped: no curves table with two or more evaluations")
        return parts.done()
    effects = effects_over_training(curves, settings)
    blocks: list[Block] = [Paragraph(_training_text(settings))]
    if effects.height:
        _effects_over_training(effects, final, marks, settings, parts, blocks)
    if tau_left_out and "variant" in curves.columns:
        curves = curves.filter(~pl.col("variant").is_in(list(tau_left_out)))
    _tau_over_training(curves, settings, parts, blocks)
    parts.add("training", "Over training", blocks)
    return parts.done()


def _training_text(settings: AnalysisSettings) -> str:
    return (
        "Each effect of the 2x2 read at every evaluation step, paired over seeds, with the same "
        f"{settings.confidence:.0%} t-intervals as the final numbers (at tau's reference initial value). "
        "The steps are one curve, not many tests: nothing is adjusted across them, and the verdicts of record "
        "are the final ones above. Every point of a curve rests on the periodic evaluation's windows (the same "
        "windows at every step), the verdicts on the final evaluation's (the whole validation split by default), "
        "read at the same last step: the figure marks each verdict at its curve's end, and the table's last step "
        "is the periodic one. *From step S on* says since when the interval has stayed on its side of 0: "
        "a side reached only at the last evaluation is one more training could change."
    )


def _effects_over_training(
    effects: pl.DataFrame,
    final: pl.DataFrame | None,
    marks: Marks | None,
    settings: AnalysisSettings,
    parts: SectionDraft,
    blocks: list[Block],
) -> None:
    """The effects' table (from step S on) and figure, each curve ending at its verdict."""
    cells = [c for c in ("dataset", "size", "context_length") if c in effects.columns]
    table = _stability(effects, cells)
    parts.tables["effects_over_training"] = effects
    ends = curve_ends(effects, final if final is not None else final_effects(None), cells)
    if ends.height:
        parts.tables["final_effects"] = ends
    blocks.append(frame_table(table, confidence=settings.confidence, signed=("estimate", "ci_low"), stub="effect"))
    delta = settings.smallest_effect
    band = None if delta is None else Reference(f"± smallest effect {delta:g}", None, -delta, delta)
    parts.pngs["effects_over_training"] = over_training_plot(
        _panels(effects, cells, "effect", str, ends),
        title="Effects over training (paired seeds, 95 % band; ◇ the verdict)",
        ylabel=axis_label(settings.metric, gain=True),
        reference=band,
        marks=marks if ends.height else None,
    )
    blocks.append(Figure("effects_over_training", parts.pngs["effects_over_training"]))


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


__all__ = ["END_COLUMNS", "curve_ends", "final_effects", "training_section", "window_marks"]
