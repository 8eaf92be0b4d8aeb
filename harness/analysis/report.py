"""The study report: verdicts with intervals, plots, tables; rendered stand-alone and
logged to the study's MLflow parent run.

:func:`build_report` computes every section the table allows (a section whose columns
or variants are missing is skipped with a note), then writes, all at once at the end:

- ``report.html``: one self-contained page (CSS inline, plots as ``data:`` URIs: MLflow's
  artifact viewer shows HTML in a sandboxed iframe that cannot load sibling files);
- the verdict table: the primary hypothesis (``analysis.primary``) first, read at the
  unadjusted level, the other headline verdicts Holm-adjusted as one family, each p-value
  with the test it belongs to;
- the plots as PNG: ``forest.png`` (effects with intervals per cell), ``interaction.png``,
  ``effects_vs_size.png``, ``effects_vs_context.png``, ``tau.png`` (tau across runs with
  the reference band), ``open_fraction.png`` (open fraction against 1 - Phi(tau)),
  ``mope_scales.png``;
- ``summary.md`` and parquet tables (``effects``, ``trends``, ``verdicts``, ``tau_runs``,
  ``divergence`` when a run diverged, ``seeds_needed``...).

:func:`log_report` logs those files under ``report/`` and the headline numbers as
metrics (``superadditivity/estimate`` ...). Plots use ``matplotlib.figure.Figure``
directly: no pyplot, no global backend state.
"""

from __future__ import annotations

import base64
import dataclasses
import html
import io
import math
import os
import re
import textwrap
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from harness.analysis.contrasts import effects_table, interaction_contrast, main_effect, primary_effect, seed_blocks
from harness.analysis.divergence import divergence_method, divergence_table
from harness.analysis.mope import mope_scales
from harness.analysis.multi_bootstrap import multi_bootstrap
from harness.analysis.planning import seeds_needed
from harness.analysis.results import cell_columns, diverged_mask, require_columns, require_table, unfinished_mask
from harness.analysis.results_types import (
    BOOTSTRAP_MIN_SEEDS,
    NOT_DISTINGUISHABLE,
    NOT_TESTABLE,
    SETTLED,
    VERDICT_KINDS,
    AnalysisSettings,
    ConfidenceInterval,
    ContrastResult,
    TrendResult,
    VerdictKind,
    format_interval,
    format_pvalue,
)
from harness.analysis.sequential import (
    CS_ASSUMPTION,
    SequentialSummary,
    confidence_sequence,
    sequential_verdict,
    sequential_verdict_kind,
)
from harness.analysis.tables import frame_table_html, loss_unit, strip_external_resources, verdict_table_html
from harness.analysis.tau import tau_runs, tau_stability
from harness.analysis.tau_types import OpenFractionResult, TauStabilityResult
from harness.analysis.trends import effect_trend
from harness.analysis.verdict_words import T_ASSUMPTION, descriptive_after_stop, not_after_holm
from harness.errors import InputError
from harness.mlflow_client import TrackingClient, redact_uri
from harness.models.variants import DIAGNOSTIC_LABEL, is_diagnostic
from harness.training.description import NOTE_TAG

_MAX_FOREST_ROWS = 60


# ----------------------------------------------------------------------------- result
#: Short names of the tests behind the verdict table's p column (footer of the table).
TEST_ABBREVIATIONS = {
    "t": "paired t-test over seeds",
    "slope t": "t-test of the per-seed slopes",
    "TOST": "two one-sided t-tests (equivalence to the band)",
    "diff t": "t-test over seeds of open fraction - Gaussian tail",
    "anytime t": "anytime-valid t-mixture test (Lai 1976; Wang & Ramdas 2023), valid under optional stopping",
}


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
            kind = NOT_TESTABLE if not _finite(self.pvalue) else SETTLED if self.claim else NOT_DISTINGUISHABLE
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
    them (``statsmodels.stats.multitest.multipletests``); a secondary claim whose
    adjusted p is not below ``alpha`` loses its claim words (:func:`not_after_holm`:
    "not significant after Holm (p=...): estimate ... [...] before adjustment") and is no
    longer settled (kind "not distinguishable")."""
    from statsmodels.stats.multitest import multipletests

    primary = [v for v in verdicts if v.role == "primary"]
    secondary = [v for v in verdicts if v.role != "primary"]
    idx = [i for i, v in enumerate(secondary) if _finite(v.pvalue)]
    adjusted = (
        dict(zip(idx, multipletests([secondary[i].pvalue for i in idx], method="holm")[1], strict=True)) if idx else {}
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


def _verdict_of(label: str, res: ContrastResult, role: str = "secondary") -> Verdict:
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


def format_verdict_table(verdicts: Sequence[Verdict], *, confidence: float = 0.95, title: str = "") -> str:
    """A short fixed-width table for the terminal:
    ``effect | estimate | CI | p (test) | Holm p | seeds | verdict``, the primary row
    marked ``*``, and a footer naming the tests."""
    head = ("effect", "estimate", f"{confidence:.0%} CI", "p (test)", "Holm p", "seeds", "verdict")
    rows = [head]
    for v in verdicts:
        est = "n/a" if not _finite(v.estimate) else (f"{v.estimate:+.4f}" if v.signed else f"{v.estimate:.4f}")
        rows.append(
            (
                f"{v.effect} *" if v.role == "primary" else v.effect,
                est,
                format_interval(v.confidence_interval, v.signed, 4),
                "" if v.pvalue is None else f"{format_pvalue(v.pvalue)} ({v.test})",
                "" if v.pvalue_holm is None else format_pvalue(v.pvalue_holm),
                "" if v.n_seeds is None else str(v.n_seeds),
                v.verdict,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(head) - 1)]
    lines = [title] if title else []
    for r in rows:
        lines.append(" " + "  ".join(c.ljust(w) for c, w in zip(r[:-1], widths, strict=False)) + "  " + r[-1])
    footer = verdict_footer(verdicts)
    if footer:
        lines.append(f" ({footer})")
    return "\n".join(lines)


def verdict_footer(verdicts: Sequence[Verdict]) -> str:
    """The tests behind the p column, the primary mark and Holm's family, in words (the
    footer of every form of the verdict table); ``""`` when no row has a p-value."""
    used = [t for t in TEST_ABBREVIATIONS if any(v.test == t and v.pvalue is not None for v in verdicts)]
    if not used:
        return ""
    footer = "; ".join(f"{t}: {TEST_ABBREVIATIONS[t]}" for t in used)
    if "t" in used or "slope t" in used:
        footer += f"; {T_ASSUMPTION}"
    if any(v.role == "primary" for v in verdicts):
        footer += "; * primary hypothesis (unadjusted); Holm p: the other rows adjusted as one family"
    return footer


#: MLflow keeps at most this many characters of a tag's value (``mlflow.note.content`` too).
DESCRIPTION_MAX_CHARS = 8000


def _md(text: str) -> str:
    """Text inside a markdown table cell: markdown's special characters escaped."""
    return re.sub(r"([\\`*_|\[\]])", r"\\\1", text)


def _verdict_markdown_row(v: Verdict, max_verdict: int | None) -> str:
    est = "n/a" if not _finite(v.estimate) else (f"{v.estimate:+.4f}" if v.signed else f"{v.estimate:.4f}")
    if v.unit and est != "n/a":
        est += f" {v.unit}"
    text = v.verdict if max_verdict is None or len(v.verdict) <= max_verdict else v.verdict[:max_verdict] + "…"
    # the kind, in markdown's only means: bold = settled, plain = not distinguishable, italic = not testable
    verdict = {SETTLED: f"**{_md(text)}**", NOT_TESTABLE: f"_{_md(text)}_"}.get(v.kind, _md(text))
    cells = (
        f"**{_md(v.effect)}** \\*" if v.role == "primary" else _md(v.effect),
        est,
        format_interval(v.confidence_interval, v.signed, 4),
        "" if v.pvalue is None else f"{format_pvalue(v.pvalue)} ({_md(v.test)})",
        "" if v.pvalue_holm is None else format_pvalue(v.pvalue_holm),
        "" if v.n_seeds is None else str(v.n_seeds),
        verdict,
    )
    return "| " + " | ".join(cells) + " |"


def parent_description(report: Report, *, report_link: str = "report/report.html") -> str:
    """The markdown description of the study's parent run (MLflow tag
    ``mlflow.note.content``, shown first on the run's Overview tab): the verdict table
    (effect, estimate, interval, ``p (test)``, ``Holm p``, seeds, verdict; the primary row
    marked ``*``; settled verdicts in bold, untestable ones in italics), one line on how
    to read it, and the link to the full report (``report_link``: the run page's
    artifact URL of ``report/report.html``). Longer than MLflow keeps
    (:data:`DESCRIPTION_MAX_CHARS`), the verdicts' words are shortened, never the rows.

    Examples
    --------
    >>> v = Verdict("ega gain", 0.02, ConfidenceInterval(-0.01, 0.05), 0.2, 3,
    ...             "not distinguishable from control", unit="nats")
    >>> r = Report(Path("."), Path("report.html"), Path("summary.md"), "", {}, {}, {}, (v,), "",
    ...            heading="demo — 3 seeds")
    >>> parent_description(r).splitlines()[4]
    '| ega gain | +0.0200 nats | [-0.0100, +0.0500] | 0.2 (t) |  | 3 | not distinguishable from control |'
    """
    head = [
        f"### Verdicts: {_md(report.heading)}" if report.heading else "### Verdicts",
        "",
        f"| effect | estimate | {report.confidence:.0%} CI | p (test) | Holm p | seeds | verdict |",
        "| :-- | --: | :-- | :-- | --: | --: | :-- |",
    ]
    if not report.verdicts:
        head = head[:2] + ["No headline question could be computed from this study's table: see the report's notes."]
    footer = verdict_footer(report.verdicts)
    reading = (
        "How to read it: one row per question, over seeds (the unit of replication); a gain is "
        "L(control) − L(treatment) in nats of loss, positive = lower loss (interaction: positive = superadditive); "
        f"intervals are {report.confidence:.0%} t-intervals. **Bold**: a claim the test supports; plain: not "
        "distinguishable (the test ran and supports no claim); _italic_: no test possible."
        + (f" {_md(footer)}." if footer else "")
    )
    link = f"Full report, with every plot and table: [report/report.html]({report_link}) (Artifacts tab → report)."
    notes = [f"{len(report.notes)} note(s) in the report (sections skipped, runs dropped)."] if report.notes else []
    for limit in (None, 160, 60, 0):
        rows = [_verdict_markdown_row(v, limit) for v in report.verdicts]
        text = "\n".join([*head, *rows, "", reading, "", link, *([""] + notes if notes else [])]) + "\n"
        if len(text) <= DESCRIPTION_MAX_CHARS:
            return text
    return text[: DESCRIPTION_MAX_CHARS - 1] + "…"


@dataclass(frozen=True)
class Report:
    """What :func:`build_report` wrote: paths, the markdown text, the headline metrics
    and the verdicts (``verdict_table`` is the terminal version, :func:`parent_description`
    the markdown one for the parent run's page)."""

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

    @property
    def files(self) -> list[Path]:
        """Every file of the report (what :func:`log_report` uploads)."""
        return [self.html_path, self.markdown_path, *self.png_paths.values(), *self.table_paths.values()]


# ----------------------------------------------------------------------------- helpers
def _cell_label(cell: Mapping[str, Any]) -> str:
    parts = []
    for key, value in cell.items():
        parts.append(f"T={value}" if key == "context_length" else str(value))
    return "/".join(parts) or "all"


def _finite(x: Any) -> bool:
    return x is not None and isinstance(x, (int, float, np.floating, np.integer)) and math.isfinite(float(x))


def _metric_key(key: str) -> str:
    # MLflow allows alphanumerics, _ - . / and spaces in metric names
    return re.sub(r"[^A-Za-z0-9_\-./ ]", "_", key)


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    return buf.getvalue()


def _figure(width: float, height: float):
    from matplotlib.figure import Figure  # Agg canvas via savefig; no pyplot state

    fig = Figure(figsize=(width, height), layout="constrained")
    return fig


def _contrast_headline(prefix: str, res: ContrastResult) -> dict[str, float]:
    out = {
        f"{prefix}/estimate": res.estimate,
        f"{prefix}/n_seeds": float(res.n_seeds),
        f"{prefix}/n_dropped": float(res.n_dropped),
    }
    if res.confidence_interval is not None:
        out[f"{prefix}/ci_low"], out[f"{prefix}/ci_high"] = res.confidence_interval
    if res.pvalue is not None:
        out[f"{prefix}/pvalue"] = res.pvalue
    if res.permutation_pvalue is not None:
        out[f"{prefix}/perm_pvalue"] = res.permutation_pvalue
    if res.bootstrap_interval is not None:
        out[f"{prefix}/boot_low"], out[f"{prefix}/boot_high"] = res.bootstrap_interval
    if res.sd is not None:
        out[f"{prefix}/seed_sd"] = res.sd
    return out


def _df_to_html(df: pl.DataFrame, max_rows: int = 200, **style: Any) -> str:
    """A report table as HTML, by great-tables: number formats, intervals, units and
    grouping (``style``: see :func:`~harness.analysis.tables.frame_table_html`)."""
    return frame_table_html(df, max_rows=max_rows, **style)


def _effect_style(metric: str, *, value: str = "estimate", per: str = "", group_by: Sequence[str] = ()) -> dict:
    """How a table of effects on ``metric`` shows: ``value`` and its intervals signed, in
    the metric's unit (nats for a loss, ``per`` appended: "per e-fold"), a bits column
    beside a loss effect, rows grouped by ``group_by`` (e.g. the cell)."""
    unit = loss_unit(metric)
    shown_unit = f"{unit} {per}".strip() if unit else ""
    return {
        "units": {value: shown_unit, "ci": shown_unit, "boot": shown_unit},
        "signed": (value, "ci_low", "boot_low"),
        "bits": (value,) if unit and not per else (),
        "group_by": tuple(group_by),
    }


def _df_to_markdown(df: pl.DataFrame, max_rows: int = 50) -> str:
    df = df.drop("verdict_kind", strict=False)  # the HTML colours by it; in text the verdict's words say it
    cols = df.columns
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in df.head(max_rows).iter_rows():
        lines.append("| " + " | ".join(_cell_text(v).replace("|", "\\|") for v in row) + " |")
    return "\n".join(lines)


def _cell_text(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        if math.isnan(v):
            return "n/a"
        return f"{v:.3g}" if abs(v) < 1e-3 and v != 0 else f"{v:.4f}"
    return str(v)


# ----------------------------------------------------------------------------- plots
def _forest_plot(effects: pl.DataFrame, cells: Sequence[str], confidence: float) -> bytes:
    rows = effects.head(_MAX_FOREST_ROWS)
    n = rows.height
    fig = _figure(7.5, 1.2 + 0.32 * n)
    ax = fig.subplots()
    colors = {"interaction": "tab:red", "main_effect": "tab:blue"}
    labels = []
    for i, r in enumerate(rows.iter_rows(named=True)):
        y = n - 1 - i
        cell = _cell_label({c: r[c] for c in cells})
        labels.append(f"{r['effect']}  [{cell}]" if cells else r["effect"])
        color = colors.get(r["kind"], "tab:gray")
        if r["ci_low"] is not None and r["ci_high"] is not None:
            ax.plot([r["ci_low"], r["ci_high"]], [y, y], color=color, lw=2)
        ax.plot([r["estimate"]], [y], "o", color=color, ms=5)
        if r["boot_low"] is not None and r["boot_high"] is not None:
            ax.plot([r["boot_low"], r["boot_high"]], [y - 0.18, y - 0.18], color=color, lw=1, alpha=0.5)
    ax.axvline(0.0, color="black", lw=0.8, ls="--")
    ax.set_yticks(range(n))
    ax.set_yticklabels(labels[::-1], fontsize=8)
    ax.set_xlabel(
        f"gain in {effects.get_column('metric')[0]} (positive = better / superadditive); "
        f"thick: {confidence:.0%} t-interval, thin: BCa bootstrap (from {BOOTSTRAP_MIN_SEEDS} seeds)"
    )
    ax.set_title("Effects per cell (paired seeds)")
    return _png(fig)


def _interaction_plot(df: pl.DataFrame, settings: AnalysisSettings) -> bytes:
    variants = (settings.base, settings.a, settings.b, settings.ab)
    blocks = seed_blocks(df, variants, settings.metric, None)
    cells = blocks.all_cells[:6]
    fig = _figure(4.2 * min(len(cells), 3), 3.4 * math.ceil(len(cells) / 3))
    axes = np.atleast_1d(fig.subplots(math.ceil(len(cells) / 3), min(len(cells), 3), squeeze=False)).ravel()
    from scipy import stats

    for ax, cell in zip(axes, cells, strict=False):
        idx = [i for i, k in enumerate(blocks.keys) if k[0] == cell]
        vals = blocks.values[idx]  # (n_seeds, 4): base, a, b, ab
        for (j0, j1), label, color in (
            ((0, 1), f"without {settings.b}", "tab:blue"),
            ((2, 3), f"with {settings.b}", "tab:orange"),
        ):
            means = vals[:, [j0, j1]].mean(axis=0) if len(vals) else np.full(2, np.nan)
            if len(vals) >= 2:
                half = (
                    stats.t.ppf(0.5 + settings.confidence / 2, len(vals) - 1)
                    * vals[:, [j0, j1]].std(axis=0, ddof=1)
                    / math.sqrt(len(vals))
                )
            else:
                half = np.zeros(2)
            ax.errorbar([0, 1], means, yerr=half, marker="o", capsize=4, color=color, label=label)
            for seed_row in vals[:, [j0, j1]]:
                ax.plot([0, 1], seed_row, color=color, alpha=0.15, lw=0.8)
        ax.set_xticks([0, 1])
        ax.set_xticklabels([f"without {settings.a}", f"with {settings.a}"])
        ax.set_ylabel(settings.metric)
        ax.set_title(f"{_cell_label(dict(zip(blocks.cells, cell, strict=False)))} ({len(vals)} seeds)", fontsize=9)
        ax.legend(fontsize=8)
    for ax in axes[len(cells) :]:
        ax.set_visible(False)
    fig.suptitle(f"Interaction plot: parallel lines = additive (means, {settings.confidence:.0%} t-intervals)")
    return _png(fig)


def _trend_plot(
    effects: pl.DataFrame,
    trends: Sequence[TrendResult],
    x_by_cell: Mapping[tuple, float],
    cells: Sequence[str],
    xlabel: str,
    title: str,
) -> bytes:
    fig = _figure(6.5, 4.6)
    ax = fig.subplots()
    palette = ["tab:red", "tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown"]
    for k, trend in enumerate(trends):
        color = palette[k % len(palette)]
        sub = effects.filter(pl.col("effect") == trend.effect)
        xs, ys, lo, hi = [], [], [], []
        for r in sub.iter_rows(named=True):
            x = x_by_cell.get(tuple(r[c] for c in cells))
            if x is None:
                continue
            xs.append(x)
            ys.append(r["estimate"])
            lo.append(r["estimate"] - r["ci_low"] if r["ci_low"] is not None else 0.0)
            hi.append(r["ci_high"] - r["estimate"] if r["ci_high"] is not None else 0.0)
        ax.errorbar(
            xs,
            ys,
            yerr=[lo, hi],
            fmt="o",
            capsize=3,
            color=color,
            alpha=0.8,
            label=f"{trend.effect}: slope {trend.estimate:+.3g} {format_interval(trend.confidence_interval)}",
        )
        lx = np.log(trend.x_values)
        if len(lx) >= 2 and _finite(trend.estimate):
            grid = np.linspace(lx.min(), lx.max(), 50)
            centre = float(np.mean(trend.cell_estimates))
            ax.plot(np.exp(grid), centre + trend.estimate * (grid - lx.mean()), color=color, lw=1.2)
    ax.axhline(0.0, color="black", lw=0.8, ls="--")
    ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("effect (gain, positive = better)")
    ax.set_title(title)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(0.0, -0.18), ncol=1, frameon=False)
    return _png(fig)


def _tau_plot(runs: pl.DataFrame, tau: TauStabilityResult, column: str) -> bytes:
    fig = _figure(7.0, 3.8)
    ax = fig.subplots()
    groups = ["variant"] + [c for c in ("dataset", "size", "context_length") if c in runs.columns]
    groups = [g for g in groups if g in runs.columns]
    keys = runs.select(groups).unique(maintain_order=True).rows() if groups else [()]
    rng = np.random.default_rng(0)  # jitter only
    for i, key in enumerate(keys):
        sub = runs.filter(*(pl.col(g) == v for g, v in zip(groups, key, strict=False))) if groups else runs
        y = sub.get_column(column).to_numpy()
        x = i + rng.uniform(-0.15, 0.15, len(y))
        if "tau_head_min" in sub.columns and sub.get_column("tau_head_min").drop_nulls().len() == len(y):
            ax.vlines(
                x,
                sub.get_column("tau_head_min").to_numpy(),
                sub.get_column("tau_head_max").to_numpy(),
                color="gray",
                alpha=0.4,
                lw=1,
            )
        ax.plot(x, y, "o", ms=4, color="tab:blue")
    ax.axhspan(
        tau.reference - tau.margin,
        tau.reference + tau.margin,
        color="tab:green",
        alpha=0.15,
        label=f"reference {tau.reference:g} ± {tau.margin:g}",
    )
    ax.axhline(tau.reference, color="tab:green", lw=1)
    if tau.confidence_interval is not None:
        ax.axhspan(
            tau.confidence_interval.low,
            tau.confidence_interval.high,
            color="tab:red",
            alpha=0.15,
            label=f"mean {tau.estimate:.3f}, {tau.confidence:.0%} CI",
        )
    if tau.prediction_interval is not None:
        for bound in tau.prediction_interval:
            ax.axhline(bound, color="tab:purple", lw=1, ls=":")
        ax.plot([], [], color="tab:purple", ls=":", label=f"{tau.confidence:.0%} prediction interval (new run)")
    ax.axhline(tau.estimate, color="tab:red", lw=1, ls="--")
    ax.set_xticks(range(len(keys)))
    ax.set_xticklabels(["/".join(map(str, k)) for k in keys], rotation=20, fontsize=8, ha="right")
    ax.set_ylabel("learned tau (head mean; bar: range)")
    ax.set_title(textwrap.fill(f"tau across runs: {tau.verdict}", 90), fontsize=9)
    ax.legend(fontsize=8)
    return _png(fig)


def _open_fraction_plot(runs: pl.DataFrame, tau: TauStabilityResult, column: str) -> bytes:
    from scipy import stats

    fig = _figure(6.0, 4.0)
    ax = fig.subplots()
    t = runs.get_column(column).to_numpy()
    o = runs.get_column("open_fraction").cast(pl.Float64).to_numpy()
    lo, hi = min(np.nanmin(t), tau.reference) - 0.3, max(np.nanmax(t), tau.reference) + 0.3
    grid = np.linspace(lo, hi, 200)
    ax.plot(grid, stats.norm.sf(grid), color="black", lw=1.2, label="1 - Phi(tau) (Gaussian tail)")
    ax.plot(t, o, "o", color="tab:blue", ms=5, label="measured open fraction (runs)")
    if "gaussian_tail" in runs.columns:  # the mean over heads of 1 - Phi(tau_h): off the curve when heads differ
        tails = runs.get_column("gaussian_tail").to_numpy()
        ax.plot(t, tails, "x", color="black", ms=5, label="its Gaussian tail (mean over heads)")
    of = tau.open_fraction
    if of is not None and of.content_fraction is not None:
        ax.axhline(
            of.content_fraction, color="tab:orange", ls="--", label=f"content-word fraction {of.content_fraction:.3f}"
        )
    if of is not None and of.ground_truth is not None:
        ax.axhline(of.ground_truth, color="tab:purple", ls=":", label=f"synthetic ground truth {of.ground_truth:.3f}")
    ax.axvline(tau.reference, color="tab:green", lw=0.8, ls="--")
    ax.set_xlabel("learned tau")
    ax.set_ylabel("fraction of open gates (g > 1/2)")
    ax.set_title(
        "Open fraction against the Gaussian tail" + (f"\n{textwrap.fill(of.verdict, 80)}" if of is not None else ""),
        fontsize=9,
    )
    ax.legend(fontsize=7)
    return _png(fig)


def _mope_plot(sigmas: np.ndarray, scales) -> bytes:
    fig = _figure(6.0, 3.6)
    ax = fig.subplots()
    ax.hist(np.log10(sigmas), bins=min(40, max(10, len(sigmas) // 3)), color="tab:blue", alpha=0.7)
    for c in scales.centres:
        ax.axvline(np.log10(c), color="tab:red", lw=1.5)
    for name, length in scales.corpus_lengths.items():
        ax.axvline(np.log10(length), color="tab:green", ls="--", lw=1)
        ax.text(np.log10(length), ax.get_ylim()[1] * 0.9, name, rotation=90, fontsize=8, color="tab:green")
    ax.set_xlabel("log10 sigma (characters); red: cluster centres, green: corpus scales")
    ax.set_ylabel("count")
    ax.set_title(f"MOPE widths: k={scales.k} clusters ({scales.criterion.upper()})")
    return _png(fig)


# ----------------------------------------------------------------------------- report
def _to_numpy_sigmas(mope_sigmas: Any) -> np.ndarray | None:
    if mope_sigmas is None:
        return None
    if isinstance(mope_sigmas, pl.DataFrame):
        if "sigma" not in mope_sigmas.columns or mope_sigmas.height == 0:
            return None
        return mope_sigmas.get_column("sigma").drop_nulls().cast(pl.Float64).to_numpy()
    arr = np.asarray(mope_sigmas, dtype=float).ravel()
    return arr if arr.size else None


@dataclass
class _Parts:
    """What the report's sections add up to, filled section by section."""

    notes: list[str] = field(default_factory=list)
    sections: list[tuple[str, list[str], list[str]]] = field(default_factory=list)  # (title, html, markdown)
    pngs: dict[str, bytes] = field(default_factory=dict)
    tables: dict[str, pl.DataFrame] = field(default_factory=dict)
    headline: dict[str, float] = field(default_factory=dict)
    verdicts: list[Verdict] = field(default_factory=list)
    results: dict[str, Any] = field(default_factory=dict)
    primary: ContrastResult | None = None  # the primary hypothesis's contrast, once the effects section has it
    stopped_on_data: bool = False  # a sequential study: the secondary verdicts are descriptive

    def skip(self, note: str, h: list[str], m: list[str]) -> None:
        """A note that also shows in the section being built."""
        self.notes.append(note)
        h.append(f"<p class='note'>{html.escape(note)}</p>")
        m.append(f"> {note}")


@dataclass(frozen=True)
class _Study:
    """The table's layout, read once."""

    name: str
    cells: tuple[str, ...]
    variants: list[str]
    seeds: list[Any]

    @property
    def paired(self) -> bool:
        return bool(self.seeds)


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
        reference and margin, confidence, resampling seed.
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
    """
    settings = settings or AnalysisSettings()
    df = require_table(df)
    require_columns(df, ("variant", settings.metric))
    corpus_info = dict(corpus_info or {})
    study = _study_layout(df, title)
    parts = _Parts()
    rng = np.random.default_rng(settings.seed)
    _overview_section(df, study, parts)
    contrasts = _contrasts_section(df, settings, study, rng, parts)
    if sequential is not None:
        _sequential_section(df, settings, sequential, parts)
    effects = _cells_section(df, settings, study, rng, contrasts, parts)
    _multi_bootstrap_section(window_losses, settings, study, rng, parts)
    _trends_section(df, settings, study, effects, parts)
    _divergence_section(df, settings, parts)
    _seeds_needed_section(contrasts, settings, parts)
    _tau_section(df, settings, corpus_info, parts)
    _mope_section(mope_sigmas, settings, corpus_info, parts)
    parts.results.update(contrasts)
    return _write_report(df, settings, study, Path(out_dir), parts)


def _study_layout(df: pl.DataFrame, title: str | None) -> _Study:
    name = title
    if name is None and "study" in df.columns:
        name = ", ".join(map(str, df.get_column("study").drop_nulls().unique().sort().to_list())) or None
    variants = list(dict.fromkeys(df.get_column("variant").drop_nulls().to_list()))
    seeds = sorted(set(df.get_column("seed").drop_nulls().to_list())) if "seed" in df.columns else []
    return _Study(name or "study", cell_columns(df), variants, seeds)


def _overview_section(df: pl.DataFrame, study: _Study, parts: _Parts) -> None:
    cells = study.cells
    n_unfinished = int(unfinished_mask(df).sum())
    cell_keys = df.select(cells).unique(maintain_order=True).rows() if cells else []
    cell_text = ", ".join(_cell_label(dict(zip(cells, k, strict=False))) for k in cell_keys[:20])
    if len(cell_keys) > 20:
        cell_text += f", ... ({len(cell_keys)} cells)"
    overview = [
        f"{df.height} trials, {len(study.variants)} variants ({', '.join(map(str, study.variants))}), "
        f"{_seeds(len(study.seeds))}",
        f"cells ({', '.join(cells) or 'none'}): {cell_text or 'one'}",
    ]
    if "status" in df.columns:
        counts = df.group_by("status").len().sort("status")
        overview.append("status: " + ", ".join(f"{s}={n}" for s, n in counts.iter_rows()))
    if n_unfinished:
        overview.append(f"{n_unfinished} trial(s) did not finish: their seed blocks are dropped from paired contrasts")
        overview.extend(_unfinished_lines(df))
    parts.headline["trials/total"] = float(df.height)
    parts.headline["trials/unfinished"] = float(n_unfinished)
    parts.sections.append(
        ("Study", [f"<ul>{''.join(f'<li>{html.escape(o)}</li>' for o in overview)}</ul>"], [f"- {o}" for o in overview])
    )


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


def _has_factorial(settings: AnalysisSettings, study: _Study) -> bool:
    return all(v in study.variants for v in (settings.base, settings.a, settings.b, settings.ab))


def _primary_label(settings: AnalysisSettings, study: _Study) -> str | None:
    """The verdict-table label of the primary hypothesis (None: no primary computable)."""
    primary = settings.primary
    if primary is None:
        return "interaction (superadd.)" if _has_factorial(settings, study) else None
    if primary.kind == "interaction":
        return "interaction (superadd.)"
    if primary.control == settings.base and primary.treatment in (settings.a, settings.b, settings.ab):
        return f"{primary.treatment} gain"
    return f"{primary.treatment} vs {primary.control}"


def _contrasts_section(
    df: pl.DataFrame, settings: AnalysisSettings, study: _Study, rng: np.random.Generator, parts: _Parts
) -> dict[str, ContrastResult]:
    """Main effects against the base and the interaction, pooled over cells; the primary
    hypothesis marked; the headline family adjusted (Holm) at the end of the report."""
    common = dict(metric=settings.metric, confidence=settings.confidence, n_resamples=settings.n_resamples)
    primary_label = _primary_label(settings, study)
    results: dict[str, ContrastResult] = {}
    h: list[str] = []
    m: list[str] = []

    def add(key: str, label: str, compute: Any, prefix: str) -> None:
        try:
            res = compute()
        except InputError as exc:
            parts.notes.append(f"{label}: {exc}")
            return
        results[key] = res
        parts.headline.update(_contrast_headline(prefix, res))
        role = "primary" if label == primary_label else "secondary"
        parts.verdicts.append(_verdict_of(label, res, role))
        if role == "primary":
            parts.primary = res
            if prefix != "primary":
                parts.headline.update(_contrast_headline("primary", res))

    if settings.base not in study.variants:
        parts.skip(f"effects skipped: the control variant {settings.base!r} is not in the table", h, m)
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
        else:
            missing = [v for v in settings.factorial.values() if v not in study.variants]
            parts.skip(f"interaction skipped: factorial variant(s) {', '.join(missing)} not in the table", h, m)
    if primary_label is not None and primary_label not in {v.effect for v in parts.verdicts}:
        add("primary", primary_label, lambda: primary_effect(df, settings, rng=rng), "primary")
    if primary_label is None:
        parts.notes.append("no primary hypothesis (analysis.primary): every headline verdict is Holm-adjusted")
    if results:
        _contrasts_table(results, parts, h, m)
    parts.sections.append(("Effects (paired seeds)", h, m))
    return results


def _contrasts_table(results: Mapping[str, ContrastResult], parts: _Parts, h: list[str], m: list[str]) -> None:
    summary = pl.DataFrame([r.to_row() for r in results.values()], infer_schema_length=None)
    parts.tables["contrasts"] = summary
    columns = ["effect", "estimate", "ci_low", "ci_high", "pvalue", "boot_low", "boot_high", "permutation_pvalue"]
    columns += ["n_seeds", "n_dropped", "verdict", "verdict_kind", "message"]
    shown = summary.select(columns)
    if shown.get_column("boot_low").null_count() == shown.height:  # fewer than 10 seeds: no bootstrap interval
        shown = shown.drop("boot_low", "boot_high")
    h.append(_df_to_html(shown, **_effect_style(summary.get_column("metric")[0])))
    m.append(_df_to_markdown(shown))
    h.append(
        "<p>Gain = L<sub>control</sub> − L<sub>treatment</sub> per seed (positive: lower loss); "
        "interaction I = L<sub>a</sub> + L<sub>b</sub> − L<sub>base</sub> − L<sub>ab</sub> "
        "(positive: superadditive). t-interval and paired t-test p over seeds (the basis of the verdicts); "
        f"BCa bootstrap over seeds only from {BOOTSTRAP_MIN_SEEDS} seeds, as a check (it covers about 90 % at "
        "10 seeds and under-covers badly below: see the README's Calibration); "
        "sign-flip permutation p. With several cells, each seed's contrast is averaged over the cells complete "
        "for that seed. The primary hypothesis is read at the unadjusted level; the other verdicts of the "
        "table at the top are Holm-adjusted as one family.</p>"
    )


def _sequential_section(df: pl.DataFrame, settings: AnalysisSettings, seq: SequentialSummary, parts: _Parts) -> None:
    """A sequential study: the rule, where and why it stopped, the primary effect's
    anytime-valid interval beside the fixed-n t-interval, and the decision log; the
    primary verdict is re-read off the anytime-valid interval (the only one valid after
    a data-dependent stop)."""
    h: list[str] = []
    m: list[str] = []
    lines = [
        f"Rule: {seq.rule}.",
        f"Stopped: {seq.stop_text}.",
        "Only the anytime-valid interval stays valid after a stop that depended on the data; the other "
        "intervals of this report assume a number of seeds fixed in advance: read them as descriptive.",
        CS_ASSUMPTION,
    ]
    parts.stopped_on_data = True
    parts.headline.update(
        {"sequential/n_seeds": float(seq.seeds_scheduled), "sequential/stopped_by": seq.stopped_by_code}
    )
    try:
        # The effects section's primary contrast (same metric, confidence, seeds; only its
        # per-seed values and t-interval are read here). Where that section has none,
        # primary_effect is called for the InputError that says why.
        res = parts.primary if parts.primary is not None else primary_effect(df, settings)
    except InputError as exc:
        parts.skip(f"sequential: the primary effect cannot be computed ({exc})", h, m)
        parts.sections.append(("Sequential design", h, m))
        return
    cs = confidence_sequence(res.per_seed, confidence=settings.confidence, tightest_at=seq.tightest_at)
    if res.shape is not None and res.shape.fires:
        lines.append(f"Here the {res.shape.words}: the anytime-valid interval's guarantee is in doubt.")
    h += [f"<p>{html.escape(line)}</p>" for line in lines]
    m += [*(f"- {line}" for line in lines), ""]
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
    h.append(_df_to_html(rows))
    m.append(_df_to_markdown(rows))
    if seq.decisions:
        log = pl.DataFrame(
            [
                {k: d.get(k) for k in ("seeds_scheduled", "n_seeds", "low", "high", "action", "text")}
                for d in seq.decisions
            ],
            infer_schema_length=None,
        )
        parts.tables["sequential_decisions"] = log
        h.append("<p>Decision log (one row per completed batch):</p>" + _df_to_html(log))
        m += ["", "Decision log (one row per completed batch):", "", _df_to_markdown(log)]
    kind = settings.primary_or_default().kind
    verdict = sequential_verdict(kind, cs, settings.smallest_effect)
    parts.verdicts = [
        dataclasses.replace(
            v,
            confidence_interval=cs.confidence_interval,
            pvalue=cs.pvalue,
            n_seeds=cs.n,
            test="anytime t",
            verdict=verdict,
            claim=cs.pvalue is not None and cs.pvalue <= settings.alpha,
            kind=sequential_verdict_kind(cs, settings.smallest_effect),  # not the fixed-n interval's
        )
        if v.role == "primary"
        else v
        for v in parts.verdicts
    ]
    if cs.low is not None and cs.bounded:
        parts.headline.update({"sequential/cs_low": cs.low, "sequential/cs_high": cs.high})
    if cs.pvalue is not None:
        parts.headline["sequential/pvalue"] = cs.pvalue
    parts.sections.append(("Sequential design", h, m))


def _cells_section(
    df: pl.DataFrame,
    settings: AnalysisSettings,
    study: _Study,
    rng: np.random.Generator,
    contrasts: Mapping[str, ContrastResult],
    parts: _Parts,
) -> pl.DataFrame | None:
    """Every effect in every cell (Holm across the table), the forest and interaction plots."""
    effects = None
    if settings.base in study.variants and study.paired and len(study.variants) > 1:
        try:
            effects = effects_table(df, settings=settings, rng=rng)
        except InputError as exc:
            parts.notes.append(f"effects table: {exc}")
    cells = study.cells
    if effects is not None:
        effects = label_diagnostic_rows(effects, df)
        parts.tables["effects"] = effects
        parts.pngs["forest"] = _forest_plot(effects, cells, settings.confidence)
        columns = [*cells, "effect", "estimate", "ci_low", "ci_high", "pvalue", "pvalue_holm", "n_seeds"]
        shown = effects.select(*columns, "n_dropped", "verdict", "verdict_kind")
        style = _effect_style(settings.metric, group_by=cells)
        h = [_df_to_html(shown, **style), "<p>p-values adjusted with Holm's method across the table.</p>"]
        if effects.height > _MAX_FOREST_ROWS:
            h.append(f"<p class='note'>The forest plot shows the first {_MAX_FOREST_ROWS} rows.</p>")
        parts.sections.append(
            ("Effects per cell (Holm-adjusted)", h, [_df_to_markdown(shown), "", "![forest](forest.png)"])
        )
        parts.results["effects"] = effects
    if _has_factorial(settings, study) and study.paired and "interaction" in contrasts:
        try:
            parts.pngs["interaction"] = _interaction_plot(df, settings)
            parts.sections.append(("Interaction plot", [], ["![interaction](interaction.png)"]))
        except InputError as exc:
            parts.notes.append(f"interaction plot: {exc}")
    return effects


def _multi_bootstrap_section(
    window_losses: pl.DataFrame | None,
    settings: AnalysisSettings,
    study: _Study,
    rng: np.random.Generator,
    parts: _Parts,
) -> None:
    if window_losses is None or not window_losses.height or not _has_factorial(settings, study):
        return
    rows = []
    wcells = cell_columns(window_losses)
    groups = window_losses.partition_by(list(wcells), as_dict=True) if wcells else {(): window_losses}
    for key, wdf in groups.items():
        try:
            res = multi_bootstrap(wdf, **settings.factorial, confidence=settings.confidence, rng=rng)
        except InputError as exc:
            parts.notes.append(f"multi-bootstrap {_cell_label(dict(zip(wcells, key, strict=False)))}: {exc}")
            continue
        rows.append({**dict(zip(wcells, key, strict=False)), **res.to_row()})
    if not rows:
        return
    mb = pl.DataFrame(rows, infer_schema_length=None)
    parts.tables["multi_bootstrap"] = mb
    shown = mb.select(*wcells, "effect", "estimate", "ci_low", "ci_high", "n_seeds", "method", "message")
    text = (
        "<p>Resamples seeds and evaluation windows together, so the interval also carries the uncertainty of "
        f"the finite evaluation set. Like every bootstrap over seeds it is shown only from {BOOTSTRAP_MIN_SEEDS} "
        "seeds.</p>"
    )
    parts.sections.append(
        (
            "Multi-bootstrap (seeds × evaluation windows)",
            [_df_to_html(shown, **_effect_style(settings.metric, group_by=wcells)), text],
            [_df_to_markdown(shown)],
        )
    )
    if len(rows) == 1 and rows[0]["ci_low"] is not None:
        parts.headline["superadditivity/multiboot_low"] = rows[0]["ci_low"]
        parts.headline["superadditivity/multiboot_high"] = rows[0]["ci_high"]


def _trends_section(
    df: pl.DataFrame, settings: AnalysisSettings, study: _Study, effects: pl.DataFrame | None, parts: _Parts
) -> None:
    """Slopes of each effect against log parameters and log context length."""
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
            parts.pngs[png_name] = _trend_plot(
                effects, trends, x_by_cell, study.cells, xlabel, f"Effects against {label}"
            )
    if trend_rows:
        trend_df = pl.DataFrame(trend_rows, infer_schema_length=None)
        parts.tables["trends"] = trend_df
        text = (
            "<p>Slope of the effect per e-fold increase of the parameter count or the context length: fitted "
            "within each seed across its cells, t-interval over seeds (cells of one seed are correlated; seeds "
            "are the independent replicates). Other cell columns that vary enter as fixed effects. Every trend's "
            "verdict is in the verdict table at the top, Holm-adjusted with the other headline verdicts.</p>"
        )
        images = [f"![{n}]({n}.png)" for n in ("effects_vs_size", "effects_vs_context") if n in parts.pngs]
        shown = trend_df.drop("metric", "method", "verdict", "verdict_kind")
        parts.sections.append(
            (
                "Trends with size and context",
                [_df_to_html(shown, **_effect_style(settings.metric, value="slope", per="per e-fold")), text],
                [_df_to_markdown(shown), "", *images],
            )
        )


def _trends_against(
    df: pl.DataFrame, settings: AnalysisSettings, study: _Study, against: str, label: str, parts: _Parts
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
        parts.headline[f"{key}/slope_log_{label}"] = tr.estimate
        if tr.confidence_interval is not None:
            low, high = tr.confidence_interval
            parts.headline[f"{key}/slope_log_{label}_ci_low"], parts.headline[f"{key}/slope_log_{label}_ci_high"] = (
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
                unit=f"{unit} per e-fold" if (unit := loss_unit(tr.metric)) else "",
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


def _divergence_section(df: pl.DataFrame, settings: AnalysisSettings, parts: _Parts) -> None:
    """Each variant's divergence rate with its exact interval, whenever a run diverged."""
    if not bool(diverged_mask(df).any()):
        return
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
    parts.sections.append(
        (
            "Divergence",
            [f"<p>{html.escape(text)}</p>", _df_to_html(table, percent=("rate", "ci_low", "ci_high"))],
            [text, "", _df_to_markdown(table)],
        )
    )


def _seeds_needed_section(contrasts: Mapping[str, ContrastResult], settings: AnalysisSettings, parts: _Parts) -> None:
    """Seeds for a paired t-test to detect the smallest effect of interest, with the range
    that the uncertainty of the seed-to-seed sd gives; without a stated smallest effect,
    the observed-effect figure, labelled post-hoc."""
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
        return
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
    parts.sections.append(
        (
            "Seeds needed",
            [_df_to_html(table, units=_seeds_needed_units(table, settings.metric)), f"<p>{html.escape(text)}</p>"],
            [_df_to_markdown(table), "", text],
        )
    )


def _seeds_needed_units(table: pl.DataFrame, metric: str) -> dict[str, str]:
    """The effect and the seed-to-seed sd (and its interval) in the metric's unit."""
    unit = loss_unit(metric)
    effect = [c for c in table.columns if c.startswith(("smallest_effect", "observed_effect"))]
    return {c: unit for c in (*effect, "seed_sd", "sd_ci")} if unit else {}


def _tau_section(
    df: pl.DataFrame, settings: AnalysisSettings, corpus_info: Mapping[str, Mapping[str, float]], parts: _Parts
) -> None:
    """tau's stability (mean and new runs), its heterogeneity, the open fraction."""
    column = "tau_mean"
    if column not in df.columns or df.get_column(column).drop_nulls().len() == 0:
        parts.notes.append("tau section skipped: no learned tau in the table (no gated variant, or no tau_mean column)")
        return
    content = {d: v["content_fraction"] for d, v in corpus_info.items() if "content_fraction" in v} or None
    truth = {d: v["salient_fraction"] for d, v in corpus_info.items() if "salient_fraction" in v} or None
    try:
        tau = tau_stability(
            df,
            reference=settings.tau_reference,
            margin=settings.tau_margin,
            confidence=settings.confidence,
            content_fraction=content,
            ground_truth=truth,
        )
    except InputError as exc:
        parts.notes.append(f"tau: {exc}")
        return
    parts.results["tau"] = tau
    parts.headline.update(_tau_headline(tau))
    parts.verdicts.append(
        Verdict(
            "tau",
            tau.estimate,
            tau.confidence_interval,
            tau.tost_pvalue,
            tau.n_seeds,
            tau.verdict,
            signed=False,
            test="TOST",
            claim=tau.equivalent,
            kind=tau.verdict_kind,
        )
    )
    runs = tau_runs(df)
    parts.tables["tau_runs"] = runs
    parts.pngs["tau"] = _tau_plot(runs, tau, column)
    text = _tau_text(tau)
    h, m = [f"<p><b>{html.escape(tau.verdict)}</b>. {html.escape(text)}</p>"], [f"**{tau.verdict}**. {text}"]
    if tau.heterogeneity:
        het = _heterogeneity_table(tau)
        parts.tables["tau_heterogeneity"] = het
        convergence = _convergence_text(tau)
        h += [
            f"<p>Heterogeneity of tau across groups, the seed as the unit. {html.escape(convergence)}</p>",
            _df_to_html(het),
        ]
        m += ["", convergence, "", _df_to_markdown(het)]
    of = tau.open_fraction
    if of is not None:
        _open_fraction_part(of, tau, runs, column, corpus_info, parts, h, m)
    images = ["![tau](tau.png)", *(["![open](open_fraction.png)"] if of else [])]
    parts.sections.append(("tau: the learned EGA threshold", h, [*m, "", *images]))


def _tau_headline(tau: TauStabilityResult) -> dict[str, float]:
    out: dict[str, Any] = {"tau/mean": tau.estimate, "tau/n_seeds": float(tau.n_seeds)}
    for name, ci in (
        ("ci", tau.confidence_interval),
        ("tost_ci", tau.equivalence_interval),
        ("pi", tau.prediction_interval),
    ):
        if ci is not None:
            out[f"tau/{name}_low"], out[f"tau/{name}_high"] = ci
    if tau.tost_pvalue is not None:
        out["tau/tost_pvalue"] = tau.tost_pvalue
        out["tau/equivalent"] = float(tau.equivalent)
        out["tau/stable"] = float(tau.stable)
    out["tau/pvalue"] = tau.pvalue
    out["tau/within_band_fraction"] = tau.within_band_fraction
    out["tau/head_sd"] = tau.head_spread
    return {k: v for k, v in out.items() if v is not None}


def _tau_text(tau: TauStabilityResult) -> str:
    level, eq_level = f"{tau.confidence:.0%}", f"{1.0 - 2.0 * (1.0 - tau.confidence):.0%}"
    band = format_interval(tau.band, False, 3)
    text = (
        f"Mean {tau.estimate:.4f} over {tau.n_seeds} seeds ({tau.n_runs} runs), {level} CI "
        f"{format_interval(tau.confidence_interval, False, 4)}; t-test against {tau.reference:g}: "
        f"p={format_pvalue(tau.pvalue)}. Equivalence of the mean to the band {band}: TOST "
        f"p={format_pvalue(tau.tost_pvalue)}, {eq_level} CI {format_interval(tau.equivalence_interval, False, 4)}. "
        f"Stability (where a new seed's run lands, {level} prediction interval"
        f"{' per cell' if tau.cells else ''}): {tau.new_seed_words}; stable only if inside the band."
    )
    if tau.within_band_text:
        text += f" {tau.within_band_text}."
    if tau.head_spread is not None:
        text += f" Spread over heads (mean sd): {tau.head_spread:.3f}."
    return text + (f" ({tau.message}.)" if tau.message else "")


def _heterogeneity_table(tau: TauStabilityResult) -> pl.DataFrame:
    return pl.DataFrame(
        [
            {
                "factor": r.factor,
                "design": r.design,
                "levels": ", ".join(map(str, r.levels)),
                "means": ", ".join(f"{x:.3f}" for x in r.group_means),
                "seeds": r.n_seeds,
                "test": r.test,
                "pvalue": r.pvalue,
                "pvalue_holm": r.pvalue_holm,
                "rank_test": r.rank_test,
                "rank_pvalue": r.rank_pvalue,
                "tost_max_pvalue": r.equivalence_pvalue,
                "tost_max_pvalue_holm": r.equivalence_pvalue_holm,
                "verdict": r.verdict,
                "verdict_kind": r.verdict_kind,
            }
            for r in tau.heterogeneity
        ],
        infer_schema_length=None,
    )


def _convergence_text(tau: TauStabilityResult) -> str:
    """What was and was not shown about "tau converges to the reference whatever X"."""
    band = f"{tau.reference:g} ± {tau.margin:g}"
    tested = [r for r in tau.heterogeneity if r.pvalue is not None or r.equivalence_pvalue is not None]
    shown = [r.factor for r in tested if r.equivalent_at_every_level]
    differs = [r.factor for r in tested if r.differs]
    open_ = [r.factor for r in tested if r.factor not in shown and r.factor not in differs]
    out = []
    if shown:
        out.append(
            f"Mean tau lies within {band} at every level of {', '.join(shown)} (TOST per level, Holm across "
            f"factors): the data support 'converges to {band} whatever {', '.join(shown)}'."
        )
    if differs:
        out.append(f"tau differs across {', '.join(differs)} (seed-level test, Holm across factors).")
    if open_:
        out.append(
            f"Across {', '.join(open_)} neither a difference nor the mean inside {band} at every level was shown: "
            "no claim either way."
        )
    untestable = [r.factor for r in tau.heterogeneity if r not in tested]
    if untestable:
        out.append(f"Not testable: {', '.join(untestable)}.")
    return " ".join(out)


def _open_fraction_part(
    of: OpenFractionResult,
    tau: TauStabilityResult,
    runs: pl.DataFrame,
    column: str,
    corpus_info: Mapping[str, Mapping[str, float]],
    parts: _Parts,
    h: list[str],
    m: list[str],
) -> None:
    parts.pngs["open_fraction"] = _open_fraction_plot(runs, tau, column)
    parts.headline["open_fraction/mean"] = of.estimate
    parts.headline["open_fraction/gaussian_tail"] = of.gaussian_tail
    parts.headline["open_fraction/minus_tail"] = of.difference
    if of.difference_interval is not None:
        low, high = of.difference_interval
        parts.headline["open_fraction/minus_tail_ci_low"], parts.headline["open_fraction/minus_tail_ci_high"] = (
            low,
            high,
        )
    if of.content_fraction is not None:
        parts.headline["open_fraction/content_fraction"] = of.content_fraction
    claim = of.difference_interval is not None and of.difference_interval.excludes(0.0)
    parts.verdicts.append(
        Verdict(
            "open fraction",
            of.estimate,
            of.confidence_interval,
            of.difference_pvalue,
            of.n_seeds or None,
            _open_verdict_short(of),
            signed=False,
            test="diff t",
            claim=claim,
            kind=of.verdict_kind,
        )
    )
    letters = [v["content_letter_fraction"] for v in corpus_info.values() if _finite(v.get("content_letter_fraction"))]
    text = _open_fraction_discussion(of, tau, float(np.mean(letters)) if letters else None)
    h.append(f"<p>{html.escape(text)}</p>")
    m += ["", text]


def _mope_section(
    mope_sigmas: Any, settings: AnalysisSettings, corpus_info: Mapping[str, Mapping[str, float]], parts: _Parts
) -> None:
    sigmas = _to_numpy_sigmas(mope_sigmas)
    if sigmas is None or sigmas.size < 2:
        return

    try:
        scales = mope_scales(sigmas, corpus_lengths=_corpus_lengths(corpus_info), rng=settings.seed)
    except InputError as exc:
        parts.notes.append(f"MOPE scales: {exc}")
        return
    parts.results["mope_scales"] = scales
    parts.headline["mope/n_clusters"] = float(scales.k)
    tab = pl.DataFrame(
        {
            "centre_sigma": scales.centres.tolist(),
            "weight": scales.weights.tolist(),
            "nearest_scale": list(scales.nearest_scale) or [None] * scales.k,
        }
    )
    parts.tables["mope_scales"] = tab
    parts.pngs["mope_scales"] = _mope_plot(sigmas, scales)
    h = [
        f"<p>{html.escape(scales.method)}: k = {scales.k}. {html.escape(scales.message)}</p>",
        _df_to_html(tab, units={"centre_sigma": "characters"}, percent=("weight",)),
    ]
    m = [f"{scales.method}: k = {scales.k}.", "", _df_to_markdown(tab), "", "![mope](mope_scales.png)"]
    parts.sections.append(("MOPE scales", h, m))


def _seeds(n: int) -> str:
    """``"1 seed"``, ``"2 seeds"``."""
    return f"{n} seed" if n == 1 else f"{n} seeds"


def _write_report(df: pl.DataFrame, settings: AnalysisSettings, study: _Study, out_dir: Path, parts: _Parts) -> Report:
    """Adjust the headline family, render, then write every file (each via a temporary name)."""
    verdicts = headline_family(parts.verdicts, alpha=settings.alpha)
    if parts.stopped_on_data:
        verdicts = [v if v.role == "primary" else descriptive_verdict(v) for v in verdicts]
    for v in verdicts:
        if v.pvalue_holm is not None:
            parts.headline[f"holm/{v.effect.replace(' (superadd.)', '').replace(' ', '_')}"] = v.pvalue_holm
    n_seeds_note = f" — {_seeds(len(study.seeds))}: too few for narrow intervals" if 0 < len(study.seeds) < 5 else ""
    heading = f"{study.name}{n_seeds_note}"
    verdict_table = format_verdict_table(verdicts, confidence=settings.confidence, title=f"Report ({heading}):")
    parts.tables["verdicts"] = (
        pl.DataFrame([v.to_row() for v in verdicts], infer_schema_length=None, schema_overrides=_VERDICT_SCHEMA)
        if verdicts
        else pl.DataFrame(schema={"effect": pl.String, "verdict": pl.String})
    )
    parts.tables["results"] = df
    headline = {_metric_key(k): float(v) for k, v in parts.headline.items() if _finite(v)}
    doc_title = f"Study report: {study.name}"
    markdown = _markdown(doc_title, verdict_table, parts.sections, parts.notes)
    verdicts_html = verdict_table_html(
        verdicts, confidence=settings.confidence, title=heading, footer=verdict_footer(verdicts)
    )
    page = _html(doc_title, verdicts_html, parts.sections, parts.notes, parts.pngs)
    out_dir.mkdir(parents=True, exist_ok=True)
    html_path = _write(out_dir / "report.html", page.encode("utf-8"))
    md_path = _write(out_dir / "summary.md", markdown.encode("utf-8"))
    png_paths = {name: _write(out_dir / f"{name}.png", data) for name, data in parts.pngs.items()}
    table_paths = {}
    for name, table in parts.tables.items():
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
        verdict_table=verdict_table,
        notes=tuple(parts.notes),
        results=parts.results,
        heading=heading,
        confidence=settings.confidence,
    )


_VERDICT_SCHEMA = {
    "estimate": pl.Float64,
    "ci_low": pl.Float64,
    "ci_high": pl.Float64,
    "pvalue": pl.Float64,
    "pvalue_holm": pl.Float64,
    "n_seeds": pl.Int64,
}


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


def _parquet_safe(df: pl.DataFrame) -> pl.DataFrame:
    """Object columns cannot go to parquet: write them as text."""
    casts = [pl.col(c).map_elements(str, return_dtype=pl.String) for c, t in df.schema.items() if t == pl.Object]
    return df.with_columns(casts) if casts else df


def _write(path: Path, data: bytes) -> Path:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return path


def _corpus_lengths(corpus_info: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    keys = {"word": "mean_word_length", "clause": "mean_clause_length", "sentence": "mean_sentence_length"}
    out = {"character": 1.0}
    for name, key in keys.items():
        vals = [v[key] for v in corpus_info.values() if key in v and _finite(v[key])]
        if vals:
            out[name] = float(np.mean(vals))
    return out if len(out) > 1 else {}


def _open_verdict_short(of: OpenFractionResult) -> str:
    tail = f"Gaussian tail {of.gaussian_tail:.3f}"
    if of.difference_interval is None:
        reason = of.message.split(";")[0] if of.message.startswith("no test possible") else "no test possible"
        return f"{reason} against the {tail}"
    if of.difference_interval.excludes(0.0):
        return f"differs from the {tail} by {of.difference:+.3f} ({of.confidence:.0%} CI excludes 0)"
    return f"consistent with the {tail} ({of.confidence:.0%} CI of the difference covers 0)"


def _open_fraction_discussion(
    of: OpenFractionResult, tau: TauStabilityResult, letter_fraction: float | None = None
) -> str:
    ci = format_interval(of.confidence_interval, False, 3)
    text = (
        f"Measured open fraction {of.estimate:.3f} {ci} over {of.n_runs} runs. If the z-normalised energies "
        f"were standard normal, head h would open for a fraction 1 - Phi(tau_h) of the keys whatever the text "
        f"(1 - Phi(0.35) = 0.363); the reference is {of.reference_method}: {of.gaussian_tail:.3f}. "
        f"Difference open - tail: {of.difference:+.3f} {format_interval(of.difference_interval)}; "
    )
    if of.difference_interval is None:
        text += "no test possible. "
    elif of.difference_interval.excludes(0.0):
        text += "the measured fraction differs from the Gaussian tail. "
    else:
        text += (
            "the measured fraction is consistent with the Gaussian tail (not distinguishable from it); that "
            "does not show the tail is its cause, and a text-driven gate with the same fraction would read alike. "
        )
    if of.message:
        text += f"({of.message}.) "
    if of.content_fraction is not None:
        text += (
            f"The corpus's content-word fraction is {of.content_fraction:.3f} "
            f"({'close to' if abs(of.content_fraction - of.estimate) < 0.03 else 'away from'} the measured "
            "fraction, by eye: no test); "
        )
        if abs(of.content_fraction - of.gaussian_tail) < 0.03:
            text += "it is also close to the tail, so this corpus cannot separate the two readings. "
    if letter_fraction is not None:
        text += f"Letters inside content words make up {letter_fraction:.3f} of the letters. "
    if of.ground_truth is not None:
        text += (
            f"On the synthetic corpus the true salient fraction is {of.ground_truth:.3f}: a gate that tracks "
            f"content would open for about that fraction, the Gaussian tail predicts {of.gaussian_tail:.3f}."
        )
    return text.strip()


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;
color:#222;line-height:1.45}
h1{font-size:1.5em}h2{font-size:1.2em;border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
img{max-width:100%;margin:.6em 0}.note{color:#8a5a00}.gt_table{margin-left:0 !important}
"""

#: How to read the verdict table, under it on the page.
_VERDICT_READING = (
    "One row per headline question, over seeds (the unit of replication). A gain is L(control) − L(treatment) "
    "(positive: the treatment lowers the loss); the interaction I = L(a) + L(b) − L(base) − L(ab) (positive: "
    "superadditive). The primary hypothesis (*) is read at the unadjusted level; the other rows' p-values are "
    "Holm-adjusted as one family. The verdict's colour says what its test decided."
)


def _html(title: str, verdicts_html: str, sections, notes, pngs: Mapping[str, bytes]) -> str:
    """The page: the verdict table (great-tables), then each section's text, tables and
    plots (PNG as ``data:`` URIs); nothing is loaded from outside the file."""

    def img(name: str) -> str:
        data = base64.b64encode(pngs[name]).decode("ascii")
        return f"<img alt='{html.escape(name)}' src='data:image/png;base64,{data}'>"

    placement = {
        "Effects per cell (Holm-adjusted)": ["forest"],
        "Interaction plot": ["interaction"],
        "Trends with size and context": ["effects_vs_size", "effects_vs_context"],
        "tau: the learned EGA threshold": ["tau", "open_fraction"],
        "Divergence": [],
        "MOPE scales": ["mope_scales"],
    }
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f"<p>Generated {time.strftime('%Y-%m-%d %H:%M:%S')} by harness.analysis.</p>",
        "<h2>Verdicts</h2>",
        verdicts_html,
        f"<p>{html.escape(_VERDICT_READING)}</p>",
    ]
    for sec_title, body, _ in sections:
        parts.append(f"<h2>{html.escape(sec_title)}</h2>")
        parts.extend(body)
        parts.extend(img(n) for n in placement.get(sec_title, []) if n in pngs)
    if notes:
        parts.append("<h2>Notes</h2><ul>" + "".join(f"<li class='note'>{html.escape(n)}</li>" for n in notes) + "</ul>")
    parts.append("</body></html>")
    return strip_external_resources("\n".join(parts))


def _markdown(title: str, verdict_table: str, sections, notes) -> str:
    lines = [f"# {title}", "", "## Verdicts", "", "```", verdict_table, "```", ""]
    for sec_title, _, md in sections:
        lines += [f"## {sec_title}", "", *md, ""]
    if notes:
        lines += ["## Notes", "", *(f"- {n}" for n in notes), ""]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- MLflow
def log_report(report: Report, *, run_id: str, tracking_uri: str, artifact_path: str = "report") -> None:
    """Log the report's files under ``artifact_path`` and its headline metrics to the
    MLflow run ``run_id`` (the study's parent run), and write the run's description
    (:func:`parent_description`: the verdict table, shown first on the run's page) with
    the link to ``report.html`` in the run page's Artifacts tab."""
    client = TrackingClient(tracking_uri)
    run = client.find_run(run_id)
    if run is None:
        raise InputError(f"no MLflow run {run_id!r} at {redact_uri(tracking_uri)} (or the store cannot be reached)")
    for path in report.files:
        client.log_artifact(run_id, path, artifact_path)
    client.log_metrics(run_id, report.headline_metrics, step=0)
    # a link relative to the MLflow UI's page (its routes live in the URL's fragment): it
    # works whatever host and port serve the UI; in MLflow 3's "Model training" view
    link = (
        f"#/experiments/{run.info.experiment_id}/runs/{run_id}/artifacts/{artifact_path}/{report.html_path.name}"
        "?workflowType=machine_learning"
    )
    client.set_tag(run_id, NOTE_TAG, parent_description(report, report_link=link))


__all__ = [
    "DESCRIPTION_MAX_CHARS",
    "TEST_ABBREVIATIONS",
    "Report",
    "Verdict",
    "build_report",
    "format_verdict_table",
    "headline_family",
    "log_report",
    "parent_description",
    "verdict_footer",
]
