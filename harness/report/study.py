"""The study report: verdicts with intervals, plots and tables, as one
:class:`~harness.report.document.Document`, rendered stand-alone and logged to the study's
MLflow parent run.

:func:`build_report` computes every section the table allows (a section whose columns
or variants are missing is skipped with a note); each section returns its output
(:class:`~harness.report.sections.SectionOutput`) and draws from a random generator of its own,
and what one section changes of another's (the sequential design re-reads the primary verdict
the contrasts made) is applied here, in the open. It then builds the document and writes,
all at once at the end:

- ``report.html``: one self-contained page (:func:`~harness.report.html.render_html`: CSS
  inline, plots as ``data:`` URIs: MLflow's artifact viewer shows HTML in a sandboxed
  iframe that cannot load sibling files);
- ``summary.md``: the same document as markdown (:func:`~harness.report.markdown.render_markdown`);
- the verdict table first: the primary hypothesis (``analysis.primary``) read at the
  unadjusted level, the other headline verdicts Holm-adjusted as one family, each p-value
  with the test it belongs to; :attr:`Report.verdict_table` is its terminal form
  (:func:`~harness.report.terminal.render_terminal`), :func:`parent_description` its
  markdown form for the parent run's page;
- the plots as PNG: ``forest.png`` (effects with intervals per cell), ``interaction.png``,
  ``effects_vs_size.png``, ``effects_vs_context.png``, ``tau.png`` (tau across runs with
  the reference band), ``open_fraction.png`` (open fraction against 1 - Phi(tau)),
  ``mope_scales.png``, ``effects_over_training.png`` and ``tau_over_training.png`` (from the
  curves table);
- parquet tables (``effects``, ``trends``, ``verdicts``, ``tau_runs``, ``divergence`` when a
  run diverged, ``seeds_needed``...).

:func:`log_report` logs those files under ``report/`` and the headline numbers as
metrics (``superadditivity/estimate`` ...).
"""

from __future__ import annotations

import dataclasses
import io
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from harness.analysis.results import at_reference_tau_init, require_columns, require_table
from harness.analysis.results_types import AnalysisSettings
from harness.analysis.sequential import SequentialSummary
from harness.errors import InputError
from harness.mlflow_client import TrackingClient, redact_uri, run_page_link
from harness.report.document import Document, Note
from harness.report.effect_metrics import effect_metrics
from harness.report.html import render_html
from harness.report.markdown import render_markdown, table_markdown
from harness.report.sections import ReportLayout, SectionOutput, joined, section_rng, seeds_text
from harness.report.sections_effects import (
    SequentialReading,
    cells_section,
    contrasts_section,
    divergence_section,
    multi_bootstrap_section,
    overview_section,
    seeds_needed_section,
    sequential_section,
    trends_section,
)
from harness.report.sections_tau import mope_section, tau_section, user_gated_variants
from harness.report.sections_training import final_effects, training_section, window_marks
from harness.report.terminal import render_terminal
from harness.report.verdict import (
    VERDICTS_KEY,
    Verdict,
    descriptive_verdict,
    finite,
    headline_family,
    verdict_section,
    verdict_table,
)
from harness.training.description import NOTE_TAG

#: MLflow keeps at most this many characters of a tag's value (``mlflow.note.content`` too).
DESCRIPTION_MAX_CHARS = 8000
#: Rows of each table in ``summary.md`` (the parquet files hold them all).
MARKDOWN_MAX_ROWS = 50


@dataclass(frozen=True)
class Report:
    """What :func:`build_report` wrote: paths, the markdown text, the headline metrics,
    the verdicts and the document they were rendered from (``verdict_table`` is the
    verdict section as the terminal shows it, :func:`parent_description` as the parent
    run's page shows it)."""

    out_dir: Path
    html_path: Path
    markdown_path: Path
    markdown: str
    png_paths: Mapping[str, Path]
    table_paths: Mapping[str, Path]
    headline_metrics: Mapping[str, float]
    verdicts: tuple[Verdict, ...]
    verdict_table: str
    notes: tuple[str, ...] = ()
    results: Mapping[str, Any] = field(default_factory=dict)
    heading: str = ""  # "smoke — 2 seeds: too few for narrow intervals"
    confidence: float = 0.95
    document: Document | None = None  # what every rendering is made from

    @property
    def files(self) -> list[Path]:
        """Every file of the report (what :func:`log_report` uploads)."""
        return [self.html_path, self.markdown_path, *self.png_paths.values(), *self.table_paths.values()]


def build_report(
    df: pl.DataFrame,
    *,
    settings: AnalysisSettings | None = None,
    out_dir: str | os.PathLike,
    window_losses: pl.DataFrame | None = None,
    mope_sigmas: Any = None,
    corpus_info: Mapping[str, Mapping[str, float]] | None = None,
    title: str | None = None,
    sequential: SequentialSummary | None = None,
    curves: pl.DataFrame | None = None,
    interaction_asked: bool = True,
    eval_windows: int | None = None,
) -> Report:
    """Analyse a results table and write the report to ``out_dir``.

    Sections, each skipped with a note when its columns or variants are missing: the
    study overview; the main effects and the interaction pooled over cells (the primary
    hypothesis marked, the other headline verdicts Holm-adjusted as one family); the
    effects per cell (Holm across cells) with the forest and interaction plots; the
    multi-bootstrap over seeds and windows; trends with size and context; divergence
    rates (when any run diverged); seeds needed at the smallest effect of interest; tau's
    stability, heterogeneity and open fraction; MOPE scales.

    Parameters
    ----------
    df : polars.DataFrame
        The results table (one row per trial); needs ``variant`` and ``settings.metric``;
        every other column is optional and its section is skipped with a note when absent.
    settings : AnalysisSettings
        Factorial variant names, primary hypothesis, smallest effect of interest, tau
        reference and margin, confidence, resampling seed (each section draws from its own
        generator, seeded from it and the section's name: :func:`~harness.report.sections.section_rng`).
    out_dir : path
        Created if needed; the report's files are (over)written there.
    window_losses : polars.DataFrame, optional
        Per-window losses (``variant, seed, window, loss`` + cells) for the multi-bootstrap.
    mope_sigmas : array-like or polars.DataFrame with ``sigma``, optional
        Learned MOPE widths to cluster.
    corpus_info : mapping dataset -> {"content_fraction", "salient_fraction",
        "mean_word_length", "mean_clause_length", "mean_sentence_length"}, optional
        Corpus numbers set beside the open fraction and the MOPE scales.
    sequential : SequentialSummary, optional
        A sequential study's rule and stop: the report states them, gives the primary
        effect's anytime-valid interval beside the fixed-n one, and bases the primary
        verdict on the anytime-valid interval.
    curves : polars.DataFrame, optional
        The curves table (one row per trial and evaluation): the effects and tau over training.
    interaction_asked : bool
        Whether the study asked for the 2x2 interaction (its spec names a factorial, or runs the
        papers' four variants). False: a table without the factorial's variants is the design,
        not a gap, and the report says nothing about the interaction it does not compute.
    eval_windows : int, optional
        How many validation windows each periodic evaluation read (the training's
        ``eval_windows``), what the curves' points rest on; the figure of effects over training
        says it (None: not known).
    """
    settings = settings or AnalysisSettings()
    df = require_table(df)
    require_columns(df, ("variant", settings.metric))
    study = ReportLayout.of(df, title)
    outputs, reading = _sections(
        df,
        settings,
        study,
        window_losses,
        mope_sigmas,
        dict(corpus_info or {}),
        sequential,
        _Training(curves, eval_windows),
        interaction_asked,
    )
    parts = joined(outputs)
    verdicts = list(parts.verdicts)
    if reading is not None:  # the sequential design re-reads the primary verdict (the contrasts made it)
        verdicts = [reading.apply(v) if v.role == "primary" else v for v in verdicts]
    # A sequential study stopped on its data: its other verdicts are descriptive (_write_report).
    return _write_report(df, settings, study, Path(out_dir), parts, verdicts, stopped_on_data=sequential is not None)


@dataclass(frozen=True)
class _Training:
    """What the section over training reads: the curves table, and how many validation windows
    each periodic evaluation read (None: not known)."""

    curves: pl.DataFrame | None
    eval_windows: int | None


def _sections(
    df: pl.DataFrame,
    settings: AnalysisSettings,
    study: ReportLayout,
    window_losses: pl.DataFrame | None,
    mope_sigmas: Any,
    corpus_info: dict[str, Mapping[str, float]],
    sequential: SequentialSummary | None,
    training: _Training,
    interaction_asked: bool,
) -> tuple[list[SectionOutput], SequentialReading | None]:
    """Every section's output in the report's order, and the sequential design's reading of the
    primary verdict (None without one). The contrasts read the runs at tau's reference initial
    value (every run when tau_init is not swept); tau's own section reads them all."""
    seed = settings.seed
    paired, reference_tau = at_reference_tau_init(df)
    outputs = [overview_section(df, study)]
    if reference_tau is not None and paired.height < df.height:
        note = (
            f"tau's initial value is swept: the contrasts read the runs at tau_init = {reference_tau:g} (and the "
            f"variants the sweep left alone); the other {df.height - paired.height} run(s) serve tau's analysis"
        )
        outputs.append(SectionOutput(notes=(note,)))
    contrasts = contrasts_section(
        paired, settings, study, section_rng(seed, "contrasts"), interaction_asked=interaction_asked
    )
    outputs.append(contrasts.output)
    reading = None
    if sequential is not None:
        output, reading = sequential_section(paired, settings, sequential, contrasts.primary)
        outputs.append(output)
    output, effects = cells_section(paired, settings, study, section_rng(seed, "cells"), contrasts.results)
    outputs.append(output)
    if window_losses is not None:
        window_losses = at_reference_tau_init(window_losses)[0]
    outputs += [
        multi_bootstrap_section(window_losses, settings, study, section_rng(seed, "multi_bootstrap")),
        trends_section(paired, settings, study, effects),
        divergence_section(paired, settings),
        seeds_needed_section(contrasts.results, settings),
        tau_section(df, settings, corpus_info),
        mope_section(mope_sigmas, settings, corpus_info),
        _training_section(df, settings, training, effects, reading),
        SectionOutput(results=contrasts.results),
    ]
    return outputs, reading


def _training_section(
    df: pl.DataFrame,
    settings: AnalysisSettings,
    training: _Training,
    effects: pl.DataFrame | None,
    reading: SequentialReading | None,
) -> SectionOutput:
    """Effects and tau over training, each effect's curve ending at its final contrast in its cell
    (``effects``, the cells section's; in a study of one cell the verdict's, the sequential
    reading's interval included); the legend says the windows the points and the ends rest on."""
    cells = [c for c in ("dataset", "size", "context_length") if effects is not None and c in effects.columns]
    one_cell = effects is not None and (not cells or effects.select(cells).unique().height == 1)
    primary = reading.confidence_interval if reading is not None and one_cell else None
    windows = df.get_column("val_windows").drop_nulls().to_list() if "val_windows" in df.columns else []
    return training_section(
        training.curves,
        settings,
        tau_left_out=user_gated_variants(df),
        final=final_effects(effects, primary),
        marks=window_marks(training.eval_windows, windows),
    )


def short_verdict(words: str) -> str:
    """A verdict's words up to its first qualification (`` — at 2 seeds: ...``, ``; ...``): the
    claim itself, as a table cell of one line.

    >>> short_verdict("not distinguishable from control — at 2 seeds: 1 degree of freedom")
    'not distinguishable from control'
    """
    return re.split(r" — |; ", words, maxsplit=1)[0]


#: How tall MLflow 3's run page shows a description before folding it behind "Show more" (px),
#: and how tall a line of its markdown tables is: the description's table fits this many rows.
MLFLOW_DESCRIPTION_PX, MLFLOW_TABLE_ROW_PX = 100, 20
DESCRIPTION_ROWS = MLFLOW_DESCRIPTION_PX // MLFLOW_TABLE_ROW_PX - 1  # the header takes a line


def _cut(words: str, limit: int) -> str:
    """``words`` cut to ``limit`` characters, an ellipsis marking the cut."""
    return words if len(words) <= limit else words[: limit - 1].rstrip() + "…"


def parent_description(report: Report, *, report_link: str = "report/report.html") -> str:
    """The markdown description of the study's parent run (MLflow tag ``mlflow.note.content``,
    shown first on the run's Overview tab), made to be read whole at first sight: MLflow folds a
    description taller than 100 px behind "Show more", so it opens with the verdict table alone,
    cut to what a first look needs (effect, the primary row marked ``*``; estimate; interval; the
    verdict's claim, :func:`short_verdict`, in bold where settled, in italics where untestable;
    one line a row), its first header linking the full report (``report_link``: the run page's
    artifact URL of ``report/report.html``, which holds the p-values, the seeds and each
    verdict's full words, its notes and how to read it), its estimate's the seeds. Nothing follows
    the table: a study of :data:`DESCRIPTION_ROWS` verdicts or fewer shows them all unfolded.

    Examples
    --------
    >>> from harness.analysis.results_types import ConfidenceInterval
    >>> v = Verdict("ega gain", 0.02, ConfidenceInterval(-0.01, 0.05), 0.2, 3,
    ...             "not distinguishable from control — at 3 seeds", unit="nats")
    >>> r = Report(Path("."), Path("report.html"), Path("summary.md"), "", {}, {}, {}, (v,), "",
    ...            heading="demo — 3 seeds")
    >>> parent_description(r).splitlines()[2]
    '| ega gain | +0.0200 nats | [-0.0100, +0.0500] | not distinguishable from control |'
    """
    # MLflow keeps DESCRIPTION_MAX_CHARS of a tag: each row's words get an equal share of what
    # the numbers leave (a row's numbers and markup take under 120 characters).
    words_cap = max(40, DESCRIPTION_MAX_CHARS // max(1, len(report.verdicts)) - 160)
    short = [dataclasses.replace(v, verdict=_cut(short_verdict(v.verdict), words_cap)) for v in report.verdicts]
    if not short:
        return f"No verdict: see the notes of the [full report]({report_link}).\n"
    seeds = max((v.n_seeds or 0 for v in short), default=0)
    table = dataclasses.replace(
        verdict_table(short, confidence=report.confidence),
        hidden=("pvalue", "test", "pvalue_holm", "n_seeds"),  # in the full report, one click away
        caption="",
        labels={"effect": "effect (LINK)", "estimate": f"estimate, {seeds_text(seeds)}"},
    )
    # the link goes in after the table is written: a cell's text is escaped, an address must not be
    return table_markdown(table).replace("(LINK)", f"([full report]({report_link}))", 1) + "\n"


def _write_report(
    df: pl.DataFrame,
    settings: AnalysisSettings,
    study: ReportLayout,
    out_dir: Path,
    parts: SectionOutput,
    verdicts: Sequence[Verdict],
    *,
    stopped_on_data: bool,
) -> Report:
    """Adjust the headline family, build the document, render it, then write every file
    (each via a temporary name). ``parts``: every section's output, joined; ``verdicts``: theirs
    as the verdict table reads them; ``stopped_on_data``: a sequential study, whose verdicts
    other than the primary are descriptive."""
    verdicts = headline_family(verdicts, alpha=settings.alpha)
    if stopped_on_data:
        verdicts = [v if v.role == "primary" else descriptive_verdict(v) for v in verdicts]
    headline = dict(parts.headline)
    for v in verdicts:
        if v.pvalue_holm is not None:
            headline[f"holm/{v.effect.replace(' (superadd.)', '').replace(' ', '_')}"] = v.pvalue_holm
    few = 0 < len(study.seeds) < 5
    heading = f"{study.name}{f' — {seeds_text(len(study.seeds))}: too few for narrow intervals' if few else ''}"
    tables = dict(parts.tables)
    tables["verdicts"] = (
        pl.DataFrame([v.to_row() for v in verdicts], infer_schema_length=None, schema_overrides=_VERDICT_SCHEMA)
        if verdicts
        else pl.DataFrame(schema={"effect": pl.String, "verdict": pl.String})
    )
    tables["results"] = df
    headline = {_metric_key(k): float(v) for k, v in headline.items() if finite(v)}
    document = Document(
        f"Study report: {study.name}",
        (verdict_section(verdicts, heading=heading, confidence=settings.confidence), *parts.sections),
        notes=tuple(Note(n, kind="caution") for n in parts.notes),
        headline=headline,
    )
    markdown = render_markdown(document, max_rows=MARKDOWN_MAX_ROWS)
    out_dir.mkdir(parents=True, exist_ok=True)
    html_path = _write(out_dir / "report.html", render_html(document).encode("utf-8"))
    md_path = _write(out_dir / "summary.md", markdown.encode("utf-8"))
    png_paths = {name: _write(out_dir / f"{name}.png", data) for name, data in parts.pngs.items()}
    table_paths = {}
    for name, table in tables.items():
        buf = io.BytesIO()
        _parquet_safe(table).write_parquet(buf)
        table_paths[name] = _write(out_dir / f"{name}.parquet", buf.getvalue())
    return Report(
        out_dir=out_dir,
        html_path=html_path,
        markdown_path=md_path,
        markdown=markdown,
        png_paths=png_paths,
        table_paths=table_paths,
        headline_metrics=headline,
        verdicts=tuple(verdicts),
        verdict_table=render_terminal(document, sections=(VERDICTS_KEY,)),
        notes=tuple(parts.notes),
        results=parts.results,
        heading=heading,
        confidence=settings.confidence,
        document=document,
    )


_VERDICT_SCHEMA = {
    "estimate": pl.Float64,
    "ci_low": pl.Float64,
    "ci_high": pl.Float64,
    "pvalue": pl.Float64,
    "pvalue_holm": pl.Float64,
    "n_seeds": pl.Int64,
}


def _metric_key(key: str) -> str:
    # MLflow allows alphanumerics, _ - . / and spaces in metric names
    return re.sub(r"[^A-Za-z0-9_\-./ ]", "_", key)


def _parquet_safe(df: pl.DataFrame) -> pl.DataFrame:
    """Object columns cannot go to parquet: write them as text."""
    casts = [pl.col(c).map_elements(str, return_dtype=pl.String) for c, t in df.schema.items() if t == pl.Object]
    return df.with_columns(casts) if casts else df


def _write(path: Path, data: bytes) -> Path:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return path


def log_report(report: Report, *, run_id: str, tracking_uri: str, artifact_path: str = "report") -> None:
    """Log the report's files under ``artifact_path`` (the figure ``effects_over_training.png``
    among them), its headline metrics and each core effect over training (``effect/<claim>``,
    ``/lo``, ``/hi`` at every evaluation step, the last one the verdict's:
    :mod:`harness.report.effect_metrics`) to the MLflow run ``run_id`` (the study's parent
    run), and write the run's description
    (:func:`parent_description`: the verdict table, shown first on the run's page) with
    the link to ``report.html`` in the run page's Artifacts tab."""
    client = TrackingClient(tracking_uri)
    run = client.find_run(run_id)
    if run is None:
        raise InputError(f"no MLflow run {run_id!r} at {redact_uri(tracking_uri)} (or the store cannot be reached)")
    for path in report.files:
        client.log_artifact(run_id, path, artifact_path)
    client.log_metrics(run_id, report.headline_metrics, step=0)
    effects, ends = (report.table_paths.get(name) for name in ("effects_over_training", "final_effects"))
    if effects is not None:  # each core effect and its band at every evaluation step, ending at the verdict
        final = pl.read_parquet(ends) if ends is not None else None
        for step, values in effect_metrics(pl.read_parquet(effects), final).items():
            client.log_metrics(run_id, values, step=step)
    # relative to the UI's root: it works whatever host and port serve the UI
    link = run_page_link(run.info.experiment_id, run_id, f"artifacts/{artifact_path}/{report.html_path.name}")
    client.set_tag(run_id, NOTE_TAG, parent_description(report, report_link=link))


__all__ = [
    "DESCRIPTION_MAX_CHARS",
    "Report",
    "build_report",
    "log_report",
    "DESCRIPTION_ROWS",
    "parent_description",
    "short_verdict",
]
