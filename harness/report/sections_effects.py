"""The study report's sections on effects: the study overview, the pooled contrasts (main
effects and the interaction, the primary hypothesis marked), the sequential design, the
effects per cell with the forest and interaction plots, the multi-bootstrap over seeds and
evaluation windows, and the trends with size and context. Each returns its
:class:`~harness.report.sections.SectionOutput` (its sections of the document, its tables,
figures, headline metrics and verdicts), with what a later section reads of it beside
(:class:`Contrasts`, the effects table); the sequential design returns how it re-reads the
primary verdict (:class:`SequentialReading`) for :func:`~harness.report.study.build_report` to
apply, in the open."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from harness.analysis.contrasts import effects_table, interaction_contrast, main_effect, primary_effect
from harness.analysis.divergence import divergence_method, divergence_table
from harness.analysis.multibootstrap import multi_bootstrap
from harness.analysis.planning import seeds_needed
from harness.analysis.results import cell_columns, diverged_mask, unfinished_mask
from harness.analysis.results_types import (
    BCA_TEST,
    BOOTSTRAP_MIN_SEEDS,
    SIGN_FLIP_TEST,
    AnalysisSettings,
    ConfidenceInterval,
    ContrastResult,
    TrendResult,
)
from harness.analysis.sequential import (
    CS_ASSUMPTION,
    SequentialSummary,
    confidence_sequence,
    sequential_verdict,
    sequential_verdict_kind,
)
from harness.analysis.trends import effect_trend
from harness.errors import InputError
from harness.models.variants import DIAGNOSTIC_LABEL, is_diagnostic
from harness.report.document import Block, Figure, Note, Paragraph
from harness.report.plots import MAX_FOREST_ROWS, cell_label, forest_plot, interaction_plot, trend_plot
from harness.report.sections import ReportLayout, SectionDraft, SectionOutput, effect_style, frame_table, seeds_text
from harness.report.verdict import Verdict, VerdictKind, loss_unit, verdict_of


def _contrast_headline(prefix: str, res: ContrastResult) -> dict[str, float]:
    """A contrast's headline numbers: the estimate, then each test's interval and p where it gave
    one (the verdict's test as ``ci_*``/``pvalue``, the sign flip's p, the BCa interval)."""
    out = {
        f"{prefix}/estimate": res.estimate,
        f"{prefix}/n_seeds": float(res.n_seeds),
        f"{prefix}/n_dropped": float(res.n_dropped),
    }
    verdict_test, flip, boot = (res.tests.get(k) for k in (res.verdict_test, SIGN_FLIP_TEST, BCA_TEST))
    if verdict_test is not None and verdict_test.interval is not None:
        out[f"{prefix}/ci_low"], out[f"{prefix}/ci_high"] = verdict_test.interval
    if verdict_test is not None and verdict_test.p_value is not None:
        out[f"{prefix}/pvalue"] = verdict_test.p_value
    if flip is not None and flip.p_value is not None:
        out[f"{prefix}/perm_pvalue"] = flip.p_value
    if boot is not None and boot.interval is not None:
        out[f"{prefix}/boot_low"], out[f"{prefix}/boot_high"] = boot.interval
    if res.sd is not None:
        out[f"{prefix}/seed_sd"] = res.sd
    return out


def overview_section(df: pl.DataFrame, study: ReportLayout) -> SectionOutput:
    """The study at a glance: trials, variants, seeds, cells, statuses, the unfinished trials."""
    parts = SectionDraft()
    cells = study.cells
    n_unfinished = int(unfinished_mask(df).sum())
    cell_keys = df.select(cells).unique(maintain_order=True).rows() if cells else []
    cell_text = ", ".join(cell_label(dict(zip(cells, k, strict=False))) for k in cell_keys[:20])
    if len(cell_keys) > 20:
        cell_text += f", ... ({len(cell_keys)} cells)"
    overview = [
        f"{df.height} trials, {len(study.variants)} variants ({', '.join(map(str, study.variants))}), "
        f"{seeds_text(len(study.seeds))}",
        f"cells ({', '.join(cells) or 'none'}): {cell_text or 'one'}",
    ]
    components = _components_line(df)
    if components:
        overview.append(components)
    overview.append(_evaluation_line(df))
    if "status" in df.columns:
        counts = df.group_by("status").len().sort("status")
        overview.append("status: " + ", ".join(f"{s}={n}" for s, n in counts.iter_rows()))
    if n_unfinished:
        overview.append(f"{n_unfinished} trial(s) did not finish: their seed blocks are dropped from paired contrasts")
        overview.extend(_unfinished_lines(df))
    parts.headline["trials/total"] = float(df.height)
    parts.headline["trials/unfinished"] = float(n_unfinished)
    parts.add("study", "Study", [Paragraph(o) for o in overview])
    return parts.done()


def _evaluation_line(df: pl.DataFrame) -> str:
    """How many validation windows the final losses rest on (``val_windows``, per context length
    where it varies), or that the table does not say (tables written before it was kept)."""
    if "val_windows" not in df.columns or df["val_windows"].is_null().all():
        return "final losses: how many validation windows they rest on was not kept (an older table)"
    by = "context_length" if "context_length" in df.columns else None
    counts = df.filter(pl.col("val_windows").is_not_null())
    if by is None or counts[by].n_unique() == 1:
        windows = sorted(set(counts["val_windows"].to_list()))
        return f"final losses: each on {' / '.join(f'{w:,}' for w in windows)} validation windows"
    pairs = counts.group_by(by).agg(pl.col("val_windows").max()).sort(by).rows()
    return "final losses: each on " + ", ".join(f"{w:,} validation windows at T = {t}" for t, w in pairs)


def _components_line(df: pl.DataFrame) -> str | None:
    """``components: fox = none + forget_gate:ForgetGate + dot; ...`` (position + gate + scoring of
    each variant; a user's component by its import path), when the table has the slots."""
    slots = ("position", "gate", "scoring")
    if not all(c in df.columns for c in slots):
        return None
    rows = df.select("variant", *slots).unique(subset="variant", maintain_order=True).drop_nulls().rows()
    return "components (position + gate + scoring): " + "; ".join(f"{v} = {' + '.join(r)}" for v, *r in rows)


def _unfinished_lines(df: pl.DataFrame) -> list[str]:
    """Name the unfinished trials, by status: a diverged trial is a finding about the
    variant, a failed one about the infrastructure; the reader must see which and where."""
    bad = df.filter(unfinished_mask(df))
    lines = []
    for status_name, group in bad.group_by(pl.col("status").fill_null("unknown"), maintain_order=True):
        name = status_name[0] if isinstance(status_name, tuple) else status_name
        if "trial_id" in group.columns:
            ids = group.get_column("trial_id").cast(pl.String).to_list()
        else:
            seeds = group.get_column("seed").to_list() if "seed" in group.columns else [None] * group.height
            ids = [f"{v} seed {s}" for v, s in zip(group.get_column("variant").to_list(), seeds, strict=False)]
        shown = ", ".join(map(str, ids[:20])) + (f", ... ({len(ids)} in all)" if len(ids) > 20 else "")
        lines.append(f"{name}: {len(ids)} trial(s), excluded from the paired contrasts: {shown}")
    return lines


def _has_factorial(settings: AnalysisSettings, study: ReportLayout) -> bool:
    return all(v in study.variants for v in (settings.base, settings.a, settings.b, settings.ab))


def _primary_label(settings: AnalysisSettings, study: ReportLayout) -> str | None:
    """The verdict-table label of the primary hypothesis (None: no primary computable)."""
    primary = settings.primary
    if primary is None:
        return "interaction (superadd.)" if _has_factorial(settings, study) else None
    if primary.kind == "interaction":
        return "interaction (superadd.)"
    if primary.control == settings.base and primary.treatment in (settings.a, settings.b, settings.ab):
        return f"{primary.treatment} gain"
    return f"{primary.treatment} vs {primary.control}"


@dataclass(frozen=True)
class Contrasts:
    """What the pooled contrasts return: the section's output, the contrasts by key (the
    treatments' names, ``interaction``, ``primary``) and the primary hypothesis's contrast
    (None: none could be computed), which the sequential design reads."""

    output: SectionOutput
    results: Mapping[str, ContrastResult]
    primary: ContrastResult | None


def contrasts_section(
    df: pl.DataFrame,
    settings: AnalysisSettings,
    study: ReportLayout,
    rng: np.random.Generator,
    *,
    interaction_asked: bool = True,
) -> Contrasts:
    """Main effects against the base and the interaction, pooled over cells; the primary
    hypothesis marked; the headline family adjusted (Holm) at the end of the report. A missing
    factorial variant is noted only where the study asked for the interaction
    (``interaction_asked``, or a primary hypothesis that is the interaction)."""
    common = dict(metric=settings.metric, confidence=settings.confidence, n_resamples=settings.n_resamples)
    primary_label = _primary_label(settings, study)
    parts = SectionDraft()
    results: dict[str, ContrastResult] = {}
    primary: list[ContrastResult] = []  # the primary hypothesis's contrast, once computed
    blocks: list[Block] = []

    def add(key: str, label: str, compute: Any, prefix: str) -> None:
        try:
            res = compute()
        except InputError as exc:
            parts.notes.append(f"{label}: {exc}")
            return
        results[key] = res
        parts.headline.update(_contrast_headline(prefix, res))
        role = "primary" if label == primary_label else "secondary"
        parts.verdicts.append(verdict_of(label, res, role))
        if role == "primary":
            primary.append(res)
            if prefix != "primary":
                parts.headline.update(_contrast_headline("primary", res))

    if settings.base not in study.variants:
        parts.skip(f"effects skipped: the control variant {settings.base!r} is not in the table", blocks)
    else:
        for name in (settings.a, settings.b, settings.ab):
            if name in study.variants:
                add(
                    name,
                    f"{name} gain",
                    lambda n=name: main_effect(df, n, settings.base, rng=rng, **common),
                    f"{name}/gain",
                )
        if _has_factorial(settings, study):
            f = settings.factorial
            add(
                "interaction",
                "interaction (superadd.)",
                lambda: interaction_contrast(df, **f, rng=rng, **common),
                "superadditivity",
            )
        elif interaction_asked or primary_label == "interaction (superadd.)":
            missing = [v for v in settings.factorial.values() if v not in study.variants]
            parts.skip(f"interaction skipped: factorial variant(s) {', '.join(missing)} not in the table", blocks)
    if primary_label is not None and primary_label not in {v.effect for v in parts.verdicts}:
        add("primary", primary_label, lambda: primary_effect(df, settings, rng=rng), "primary")
    if primary_label is None:
        parts.notes.append("no primary hypothesis (analysis.primary): every headline verdict is Holm-adjusted")
    if results:
        blocks += _contrasts_table(results, settings, parts)
    parts.add("effects", "Effects (paired seeds)", blocks)
    return Contrasts(parts.done(), results, primary[0] if primary else None)


def _contrasts_table(
    results: Mapping[str, ContrastResult], settings: AnalysisSettings, parts: SectionDraft
) -> list[Block]:
    summary = pl.DataFrame([r.to_row() for r in results.values()], infer_schema_length=None)
    parts.tables["contrasts"] = summary
    columns = ["effect", "estimate", "ci_low", "ci_high", "pvalue", "boot_low", "boot_high", "permutation_pvalue"]
    columns += ["n_seeds", "n_dropped", "verdict", "verdict_kind", "message"]
    shown = summary.select(columns)
    if shown.get_column("boot_low").null_count() == shown.height:  # fewer than 10 seeds: no bootstrap interval
        shown = shown.drop("boot_low", "boot_high")
    table = frame_table(shown, confidence=settings.confidence, **effect_style(summary.get_column("metric")[0]))
    text = (
        "Gain = L(control) − L(treatment) per seed (positive: lower loss); "
        "interaction I = L(a) + L(b) − L(base) − L(ab) "
        "(positive: superadditive). t-interval and paired t-test p over seeds (the basis of the verdicts); "
        f"BCa bootstrap over seeds only from {BOOTSTRAP_MIN_SEEDS} seeds, as a check (it covers about 90 % at "
        "10 seeds and under-covers badly below: see docs/calibration.md); "
        "sign-flip permutation p. With several cells, each seed's contrast is averaged over the cells complete "
        "for that seed. The primary hypothesis is read at the unadjusted level; the other verdicts of the "
        "table at the top are Holm-adjusted as one family."
    )
    return [table, Paragraph(text)]


@dataclass(frozen=True)
class SequentialReading:
    """The primary verdict as a sequential study reads it: off the anytime-valid interval
    (the confidence sequence), the only one valid after a stop that depended on the data."""

    confidence_interval: ConfidenceInterval | None
    pvalue: float | None
    n_seeds: int
    verdict: str
    claim: bool
    kind: VerdictKind
    test: str = "anytime t"

    def apply(self, verdict: Verdict) -> Verdict:
        """``verdict`` (the primary hypothesis's, as the pooled contrasts read it) re-read."""
        return dataclasses.replace(
            verdict,
            confidence_interval=self.confidence_interval,
            pvalue=self.pvalue,
            n_seeds=self.n_seeds,
            test=self.test,
            verdict=self.verdict,
            claim=self.claim,
            kind=self.kind,
        )


def sequential_section(
    df: pl.DataFrame, settings: AnalysisSettings, seq: SequentialSummary, primary: ContrastResult | None
) -> tuple[SectionOutput, SequentialReading | None]:
    """A sequential study: the rule, where and why it stopped, the primary effect's
    anytime-valid interval beside the fixed-n t-interval, and the decision log; and how the
    primary verdict is re-read off the anytime-valid interval (None: no primary effect).
    ``primary`` is the pooled contrasts' primary contrast (same metric, confidence, seeds;
    only its per-seed values and t-interval are read here)."""
    parts = SectionDraft()
    blocks: list[Block] = []
    lines = [
        f"Rule: {seq.rule}.",
        f"Stopped: {seq.stop_text}.",
        "Only the anytime-valid interval stays valid after a stop that depended on the data; the other "
        "intervals of this report assume a number of seeds fixed in advance: read them as descriptive.",
        CS_ASSUMPTION,
    ]
    parts.headline.update(
        {"sequential/n_seeds": float(seq.seeds_scheduled), "sequential/stopped_by": seq.stopped_by_code}
    )
    try:
        # Where the contrasts have no primary, primary_effect is called for the InputError that says why.
        res = primary if primary is not None else primary_effect(df, settings)
    except InputError as exc:
        parts.skip(f"sequential: the primary effect cannot be computed ({exc})", blocks)
        parts.add("sequential", "Sequential design", blocks)
        return parts.done(), None
    cs = confidence_sequence(res.per_seed, confidence=settings.confidence, tightest_at=seq.tightest_at)
    if res.shape is not None and res.shape.fires:
        lines.append(f"Here the {res.shape.words}: the anytime-valid interval's guarantee is in doubt.")
    blocks += [Paragraph(line) for line in lines]
    blocks += _sequential_tables(res, cs, seq, settings, parts)
    kind = settings.primary_or_default().kind
    reading = SequentialReading(
        confidence_interval=cs.confidence_interval,
        pvalue=cs.pvalue,
        n_seeds=cs.n,
        verdict=sequential_verdict(kind, cs, settings.smallest_effect),
        claim=cs.pvalue is not None and cs.pvalue <= settings.alpha,
        kind=sequential_verdict_kind(cs, settings.smallest_effect),  # not the fixed-n interval's
    )
    if cs.low is not None and cs.bounded:
        parts.headline.update({"sequential/cs_low": cs.low, "sequential/cs_high": cs.high})
    if cs.pvalue is not None:
        parts.headline["sequential/pvalue"] = cs.pvalue
    parts.add("sequential", "Sequential design", blocks)
    return parts.done(), reading


def _sequential_tables(
    res: ContrastResult, cs: Any, seq: SequentialSummary, settings: AnalysisSettings, parts: SectionDraft
) -> list[Block]:
    """The anytime-valid interval beside the fixed-n one, and the decision log."""
    level = f"{settings.confidence:.0%}"
    rows = pl.DataFrame(
        {
            "interval": [f"anytime-valid {level} (confidence sequence)", f"fixed-n {level} t-interval"],
            "low": [cs.low, None if res.confidence_interval is None else float(res.confidence_interval.low)],
            "high": [cs.high, None if res.confidence_interval is None else float(res.confidence_interval.high)],
            "seeds": [cs.n, res.n_seeds],
            "basis": [
                "supports the verdict: valid at every n, so also where the study stopped",
                "for comparison only: assumes the number of seeds was fixed in advance",
            ],
        },
        schema_overrides={"low": pl.Float64, "high": pl.Float64},
    )
    parts.tables["sequential"] = rows
    blocks: list[Block] = [frame_table(rows, confidence=settings.confidence, stub="interval")]
    if seq.decisions:
        log = pl.DataFrame(
            [
                {k: d.get(k) for k in ("seeds_scheduled", "n_seeds", "low", "high", "action", "text")}
                for d in seq.decisions
            ],
            infer_schema_length=None,
        )
        parts.tables["sequential_decisions"] = log
        blocks += [Paragraph("Decision log (one row per completed batch):"), frame_table(log, intervals=())]
    return blocks


def cells_section(
    df: pl.DataFrame,
    settings: AnalysisSettings,
    study: ReportLayout,
    rng: np.random.Generator,
    contrasts: Mapping[str, ContrastResult],
) -> tuple[SectionOutput, pl.DataFrame | None]:
    """Every effect in every cell (Holm across the table), the forest and interaction plots;
    returns the effects table too (the trends read it; None: no effects)."""
    parts = SectionDraft()
    effects = None
    # the primary hypothesis reads as in the verdict table: unadjusted, marked, in every cell
    primary = settings.primary_or_default() if _primary_label(settings, study) is not None else None
    if settings.base in study.variants and study.paired and len(study.variants) > 1:
        try:
            effects = effects_table(df, settings=settings, rng=rng, primary=primary)
        except InputError as exc:
            parts.notes.append(f"effects table: {exc}")
    cells = study.cells
    if effects is not None:
        effects = label_diagnostic_rows(effects, df)
        parts.tables["effects"] = effects
        parts.pngs["forest"] = forest_plot(effects, cells, settings.confidence)
        columns = [*cells, "effect", "estimate", "ci_low", "ci_high", "pvalue", "pvalue_holm", "n_seeds"]
        shown = effects.select(*columns, "n_dropped", "verdict", "verdict_kind").with_columns(
            pl.when(effects.get_column("role") == "primary")
            .then(pl.col("effect") + " *")
            .otherwise(pl.col("effect"))
            .alias("effect")
        )
        style = effect_style(settings.metric, group_by=cells)
        holm = "p-values adjusted with Holm's method across the table"
        if primary is not None:
            holm += (
                ", except the primary hypothesis (*), read at the unadjusted level in every cell as in the "
                "verdict table (its Holm p is empty)"
            )
        blocks: list[Block] = [frame_table(shown, confidence=settings.confidence, **style), Paragraph(holm + ".")]
        if effects.height > MAX_FOREST_ROWS:
            blocks.append(Note(f"The forest plot shows the first {MAX_FOREST_ROWS} rows."))
        blocks.append(Figure("forest", parts.pngs["forest"]))
        title = (
            "Effects per cell (Holm-adjusted; the primary * unadjusted)"
            if primary
            else "Effects per cell (Holm-adjusted)"
        )
        parts.add("cells", title, blocks)
        parts.results["effects"] = effects
    if _has_factorial(settings, study) and study.paired and "interaction" in contrasts:
        try:
            parts.pngs["interaction"] = interaction_plot(df, settings)
            parts.add("interaction", "Interaction plot", [Figure("interaction", parts.pngs["interaction"])])
        except InputError as exc:
            parts.notes.append(f"interaction plot: {exc}")
    return parts.done(), effects


def multi_bootstrap_section(
    window_losses: pl.DataFrame | None,
    settings: AnalysisSettings,
    study: ReportLayout,
    rng: np.random.Generator,
) -> SectionOutput:
    """The interaction per cell with seeds and evaluation windows resampled together."""
    parts = SectionDraft()
    if window_losses is None or not window_losses.height or not _has_factorial(settings, study):
        return parts.done()
    rows = []
    wcells = cell_columns(window_losses)
    groups = window_losses.partition_by(list(wcells), as_dict=True) if wcells else {(): window_losses}
    for key, wdf in groups.items():
        try:
            res = multi_bootstrap(wdf, **settings.factorial, confidence=settings.confidence, rng=rng)
        except InputError as exc:
            parts.notes.append(f"multi-bootstrap {cell_label(dict(zip(wcells, key, strict=False)))}: {exc}")
            continue
        rows.append({**dict(zip(wcells, key, strict=False)), **res.to_row()})
    if not rows:
        return parts.done()
    mb = pl.DataFrame(rows, infer_schema_length=None)
    parts.tables["multi_bootstrap"] = mb
    shown = mb.select(*wcells, "effect", "estimate", "ci_low", "ci_high", "n_seeds", "method", "message")
    text = (
        "Resamples seeds and evaluation windows together, so the interval also carries the uncertainty of "
        f"the finite evaluation set. Like every bootstrap over seeds it is shown only from {BOOTSTRAP_MIN_SEEDS} "
        "seeds."
    )
    table = frame_table(shown, confidence=settings.confidence, **effect_style(settings.metric, group_by=wcells))
    parts.add("multi_bootstrap", "Multi-bootstrap (seeds × evaluation windows)", [table, Paragraph(text)])
    if len(rows) == 1 and rows[0]["ci_low"] is not None:
        parts.headline["superadditivity/multiboot_low"] = rows[0]["ci_low"]
        parts.headline["superadditivity/multiboot_high"] = rows[0]["ci_high"]
    return parts.done()


def trends_section(
    df: pl.DataFrame, settings: AnalysisSettings, study: ReportLayout, effects: pl.DataFrame | None
) -> SectionOutput:
    """Slopes of each effect against log parameters and log context length."""
    parts = SectionDraft()
    trend_rows = []
    for against, png_name, xlabel, label in (
        ("params", "effects_vs_size", "parameters (log scale)", "size"),
        ("context_length", "effects_vs_context", "context length (log scale)", "context"),
    ):
        if against not in df.columns or effects is None or not study.paired:
            continue
        if df.filter(pl.col("variant") == settings.base).get_column(against).drop_nulls().n_unique() < 2:
            continue
        trends = _trends_against(df, settings, study, against, label, parts)
        trend_rows += [t.to_row() for t in trends]
        if trends:
            x_by_cell = _x_by_cell(df, settings, study.cells, against)
            parts.pngs[png_name] = trend_plot(
                effects, trends, x_by_cell, study.cells, xlabel, f"Effects against {label}"
            )
    if trend_rows:
        trend_df = pl.DataFrame(trend_rows, infer_schema_length=None)
        parts.tables["trends"] = trend_df
        text = (
            "Slope of the effect per doubling of the parameter count or the context length (the scorecard's "
            "unit): fitted within each seed across its cells, t-interval over seeds (cells of one seed are "
            "correlated; seeds are the independent replicates). Other cell columns that vary enter as fixed "
            "effects. Every trend's verdict is in the verdict table at the top, Holm-adjusted with the other "
            "headline verdicts."
        )
        figures = [Figure(n, parts.pngs[n]) for n in ("effects_vs_size", "effects_vs_context") if n in parts.pngs]
        shown = trend_df.drop("metric", "method", "verdict", "verdict_kind")
        style = effect_style(settings.metric, value="slope", per="per doubling")
        table = frame_table(shown, confidence=settings.confidence, **style)
        parts.add("trends", "Trends with size and context", [table, Paragraph(text), *figures])
    return parts.done()


def _trends_against(
    df: pl.DataFrame, settings: AnalysisSettings, study: ReportLayout, against: str, label: str, parts: SectionDraft
) -> list[TrendResult]:
    trends: list[TrendResult] = []
    specs = [(None, "interaction")] if _has_factorial(settings, study) else []
    specs += [(v, f"{v} gain") for v in (settings.a, settings.b, settings.ab) if v in study.variants]
    for treatment, short in specs:
        try:
            tr = effect_trend(
                df,
                against=against,
                treatment=treatment,
                control=settings.base,
                **settings.factorial,
                metric=settings.metric,
                confidence=settings.confidence,
            )
        except InputError as exc:
            parts.notes.append(f"trend of {short} against {label}: {exc}")
            continue
        trends.append(tr)
        key = "superadditivity" if treatment is None else f"{treatment}/gain"
        parts.headline[f"{key}/slope_log2_{label}"] = tr.estimate
        if tr.confidence_interval is not None:
            low, high = tr.confidence_interval
            parts.headline[f"{key}/slope_log2_{label}_ci_low"], parts.headline[f"{key}/slope_log2_{label}_ci_high"] = (
                low,
                high,
            )
        # every trend is a headline verdict: in the Holm family, shown in the verdict table
        parts.verdicts.append(
            Verdict(
                f"{short} vs log {label}",
                tr.estimate,
                tr.confidence_interval,
                tr.pvalue,
                tr.n_seeds,
                tr.verdict,
                test="slope t",
                claim=tr.claims,
                kind=tr.verdict_kind,
                unit=f"{unit} per doubling" if (unit := loss_unit(tr.metric)) else "",
            )
        )
    return trends


def _x_by_cell(df: pl.DataFrame, settings: AnalysisSettings, cells: Sequence[str], against: str) -> dict[tuple, float]:
    if against == "params":
        ref = df.filter(pl.col("variant") == settings.base)
        return {
            tuple(k): float(g.get_column("params").cast(pl.Float64).mean())
            for k, g in ref.partition_by(list(cells), as_dict=True).items()
        }
    return {tuple(k): float(k[list(cells).index(against)]) for k in df.select(cells).unique().rows()}


def label_diagnostic_rows(effects: pl.DataFrame, df: pl.DataFrame) -> pl.DataFrame:
    """Append "[leaks future tokens]" to the effect label of every row whose treatment is a
    diagnostic (``ega-leaky``, or an inline variant with a leaky gate): its gain is what the
    leak fakes, not a model's improvement."""
    if "treatment" not in effects.columns:
        return effects
    gates = dict(df.select("variant", "gate").unique(subset="variant").iter_rows()) if "gate" in df.columns else {}
    leaky = [v for v in df.get_column("variant").drop_nulls().unique().to_list() if is_diagnostic(v, gates.get(v))]
    if not leaky:
        return effects
    labelled = pl.col("effect") + f" [{DIAGNOSTIC_LABEL}]"
    return effects.with_columns(
        pl.when(pl.col("treatment").is_in(leaky)).then(labelled).otherwise(pl.col("effect")).alias("effect")
    )


def divergence_section(df: pl.DataFrame, settings: AnalysisSettings) -> SectionOutput:
    """Each variant's divergence rate with its exact interval, whenever a run diverged."""
    parts = SectionDraft()
    if not bool(diverged_mask(df).any()):
        return parts.done()
    table = divergence_table(df, control=settings.base, confidence=settings.confidence)
    parts.tables["divergence"] = table
    parts.results["divergence"] = table
    for row in table.iter_rows(named=True):
        if row["rate"] is not None:
            parts.headline[f"{row['variant']}/divergence_rate"] = row["rate"]
    text = (
        f"{divergence_method(settings.confidence, settings.base)} A variant that diverges more often is a "
        "finding in itself, and every paired contrast of a variant with diverged runs is conditional on the runs "
        "that converged."
    )
    table_block = frame_table(table, confidence=settings.confidence, percent=("rate", "ci_low", "ci_high"))
    parts.add("divergence", "Divergence", [Paragraph(text), table_block])
    return parts.done()


def seeds_needed_section(contrasts: Mapping[str, ContrastResult], settings: AnalysisSettings) -> SectionOutput:
    """Seeds for a paired t-test to detect the smallest effect of interest, with the range
    that the uncertainty of the seed-to-seed sd gives; without a stated smallest effect,
    the observed-effect figure, labelled post-hoc."""
    parts = SectionDraft()
    rows = []
    planned = settings.smallest_effect is not None
    for key, res in contrasts.items():
        if res.sd is None:
            continue
        need = seeds_needed(res, effect=settings.smallest_effect, power=settings.power, alpha=settings.alpha)
        low, high = need.n_seeds_range or (None, None)
        sd_ci = need.sd_interval
        rows.append(
            {
                "effect": res.name,
                ("smallest_effect" if planned else "observed_effect (post-hoc)"): need.effect,
                "seed_sd": res.sd,
                "sd_ci_low": None if sd_ci is None else sd_ci.low,
                "sd_ci_high": None if sd_ci is None else sd_ci.high,
                ("seeds_needed" if planned else "seeds_needed (post-hoc)"): need.n_seeds,
                "seeds_needed_low": low,
                "seeds_needed_high": high,
                "seeds_now": res.n_seeds,
                "message": need.message,
            }
        )
        if planned and need.n_seeds is not None:
            prefix = "superadditivity" if key == "interaction" else f"{key}/gain" if key != "primary" else "primary"
            parts.headline[f"{prefix}/seeds_needed"] = float(need.n_seeds)
            if low is not None:
                parts.headline[f"{prefix}/seeds_needed_low"] = float(low)
            if high is not None:
                parts.headline[f"{prefix}/seeds_needed_high"] = float(high)
    if not rows:
        return parts.done()
    table = pl.DataFrame(rows, infer_schema_length=None)
    parts.tables["seeds_needed"] = table
    level = f"{settings.confidence:.0%}"
    if planned:
        text = (
            f"Seeds for a paired t-test at alpha {settings.alpha:g} to detect the smallest effect of interest, "
            f"{settings.smallest_effect:g} (analysis.smallest_effect), with power {settings.power:.0%}, at the "
            f"observed seed-to-seed sd; the range uses the ends of the sd's {level} chi-square interval (an sd "
            "from a few seeds is uncertain by a large factor)."
        )
    else:
        text = (
            "No smallest effect of interest stated (set analysis.smallest_effect, in nats): no planned figure. "
            "The post-hoc figure plans at the observed effect, which only restates the p-value; it is not a "
            f"basis for a study's size. The range uses the ends of the sd's {level} chi-square interval."
        )
    units = _seeds_needed_units(table, settings.metric)
    parts.add(
        "seeds_needed",
        "Seeds needed",
        [frame_table(table, confidence=settings.confidence, units=units), Paragraph(text)],
    )
    return parts.done()


def _seeds_needed_units(table: pl.DataFrame, metric: str) -> dict[str, str]:
    """The effect and the seed-to-seed sd (and its interval) in the metric's unit."""
    unit = loss_unit(metric)
    effect = [c for c in table.columns if c.startswith(("smallest_effect", "observed_effect"))]
    return {c: unit for c in (*effect, "seed_sd", "sd_ci")} if unit else {}


__all__ = [
    "Contrasts",
    "SequentialReading",
    "cells_section",
    "contrasts_section",
    "divergence_section",
    "label_diagnostic_rows",
    "multi_bootstrap_section",
    "overview_section",
    "seeds_needed_section",
    "sequential_section",
    "trends_section",
]
