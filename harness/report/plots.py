"""The report's figures, drawn with ``matplotlib.figure.Figure`` directly (no pyplot, no
global backend state) and returned as PNG bytes: the forest plot of the effects per cell,
the interaction plot, the effects against size or context, tau across runs with its
reference band, the open fraction against the Gaussian tail, the MOPE widths.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl

from harness.analysis.contrasts import seed_blocks
from harness.analysis.results_types import (
    AnalysisSettings,
    TrendResult,
    format_interval,
)
from harness.analysis.tau_types import TauStabilityResult
from harness.report.plots_training import DISPLAY_WIDTH_IN, MIN_FONT_PT, axis_label, png_bytes
from harness.report.verdict import finite

#: Rows of the effects table the forest plot shows.
MAX_FOREST_ROWS = 60


def cell_label(cell: Mapping[str, Any]) -> str:
    """``tinyshakespeare/nano/T=128``: a cell's values, the context length as ``T=``."""
    parts = []
    for key, value in cell.items():
        parts.append(f"T={value}" if key == "context_length" else str(value))
    return "/".join(parts) or "all"


def _png(fig) -> bytes:
    return png_bytes(fig)


def _figure(height: float):
    """A figure as wide as the report and the manual show it (``DISPLAY_WIDTH_IN``): drawn at the
    size it is seen, its text at the size it was set (none under ``MIN_FONT_PT``)."""
    from matplotlib.figure import Figure  # Agg canvas via savefig; no pyplot state

    return Figure(figsize=(DISPLAY_WIDTH_IN, height), layout="constrained")


def forest_plot(effects: pl.DataFrame, cells: Sequence[str], confidence: float) -> bytes:
    """:func:`forest_figure` as PNG bytes."""
    return _png(forest_figure(effects, cells, confidence))


def forest_figure(effects: pl.DataFrame, cells: Sequence[str], confidence: float):
    """Each effect of each cell (the first :data:`MAX_FOREST_ROWS` rows) with its t-interval
    (thick) and, where the study has the seeds for one, its bootstrap interval (thin), against
    0 (a ``matplotlib.figure.Figure``)."""
    rows = effects.head(MAX_FOREST_ROWS)
    n = rows.height
    fig = _figure(1.6 + 0.34 * n)
    ax = fig.subplots()
    colors = {"interaction": "tab:red", "main_effect": "tab:blue"}
    labels = []
    for i, r in enumerate(rows.iter_rows(named=True)):
        y = n - 1 - i
        cell = cell_label({c: r[c] for c in cells})
        labels.append(f"{r['effect']}  [{cell}]" if cells else r["effect"])
        color = colors.get(r["kind"], "tab:gray")
        if r["ci_low"] is not None and r["ci_high"] is not None:
            ax.plot([r["ci_low"], r["ci_high"]], [y, y], color=color, lw=2)
        ax.plot([r["estimate"]], [y], "o", color=color, ms=5)
        if r["boot_low"] is not None and r["boot_high"] is not None:
            ax.plot([r["boot_low"], r["boot_high"]], [y - 0.18, y - 0.18], color=color, lw=1, alpha=0.5)
    ax.axvline(0.0, color="black", lw=0.8, ls="--")
    ax.set_yticks(range(n))
    ax.set_yticklabels(labels[::-1], fontsize=MIN_FONT_PT)
    booted = rows.get_column("boot_low").drop_nulls().len() > 0 if "boot_low" in rows.columns else False
    # the thin line is drawn only from BOOTSTRAP_MIN_SEEDS seeds on: named only where it is drawn
    thin = "; thin: BCa bootstrap" if booted else ""
    ax.set_xlabel(
        f"{axis_label(effects.get_column('metric')[0], gain=True)}, positive = better / superadditive\n"
        f"thick: {confidence:.0%} t-interval over seeds{thin}",
        fontsize=MIN_FONT_PT,
    )
    ax.tick_params(axis="x", labelsize=MIN_FONT_PT)
    ax.set_title("Effects per cell (paired seeds)", fontsize=MIN_FONT_PT + 2)
    return fig


def interaction_plot(df: pl.DataFrame, settings: AnalysisSettings) -> bytes:
    """Per cell (six at most): the loss without and with ``a``, one line without ``b`` and one
    with it (means with t-intervals, each seed faint): parallel lines are additive."""
    variants = (settings.base, settings.a, settings.b, settings.ab)
    blocks = seed_blocks(df, variants, settings.metric, None)
    cells = blocks.all_cells[:6]
    cols = min(len(cells), 2)  # two a row at most: each panel half the column, its text still 9 pt
    fig = _figure(3.4 * math.ceil(len(cells) / cols) + 0.4)
    axes = np.atleast_1d(fig.subplots(math.ceil(len(cells) / cols), cols, squeeze=False, sharey=True)).ravel()
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
        ax.set_xticklabels([f"without {settings.a}", f"with {settings.a}"], fontsize=MIN_FONT_PT)
        ax.tick_params(axis="y", labelsize=MIN_FONT_PT)
        ax.set_ylabel(axis_label(settings.metric, gain=False), fontsize=MIN_FONT_PT)
        ax.set_title(f"{cell_label(dict(zip(blocks.cells, cell, strict=False)))} ({len(vals)} seeds)", fontsize=10)
        ax.legend(fontsize=MIN_FONT_PT)
    for ax in axes[len(cells) :]:
        ax.set_visible(False)
    fig.suptitle(
        f"Interaction plot: parallel lines = additive (means, {settings.confidence:.0%} t-intervals)", fontsize=11
    )
    return _png(fig)


def trend_plot(
    effects: pl.DataFrame,
    trends: Sequence[TrendResult],
    x_by_cell: Mapping[tuple, float],
    cells: Sequence[str],
    xlabel: str,
    title: str,
) -> bytes:
    """Each effect per cell against the cell's size or context (log scale), with its fitted
    slope over seeds."""
    fig = _figure(4.8)
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
        lx = np.log2(trend.x_values)  # the slope is per doubling
        if len(lx) >= 2 and finite(trend.estimate):
            grid = np.linspace(lx.min(), lx.max(), 50)
            centre = float(np.mean(trend.cell_estimates))
            ax.plot(np.exp2(grid), centre + trend.estimate * (grid - lx.mean()), color=color, lw=1.2)
    ax.axhline(0.0, color="black", lw=0.8, ls="--")
    ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    metric = effects.get_column("metric")[0] if "metric" in effects.columns and effects.height else None
    ax.set_ylabel(axis_label(metric or "val_loss", gain=True), fontsize=MIN_FONT_PT)
    ax.tick_params(labelsize=MIN_FONT_PT)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=MIN_FONT_PT, loc="upper left", bbox_to_anchor=(0.0, -0.18), ncol=1, frameon=False)
    return _png(fig)


def tau_plot(runs: pl.DataFrame, tau: TauStabilityResult, column: str) -> bytes:
    """:func:`tau_figure` as PNG bytes."""
    return _png(tau_figure(runs, tau, column))


def tau_figure(runs: pl.DataFrame, tau: TauStabilityResult, column: str):
    """tau of every run by group, with the reference band, the mean's interval and the
    prediction interval of a new run (a ``matplotlib.figure.Figure``)."""
    fig = _figure(4.0)
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
    ax.set_xlim(-0.5, len(keys) - 0.5)  # every group a whole unit wide: none sits on the frame
    ax.set_xticks(range(len(keys)))
    _group_labels(ax, [_tau_group_label(groups, k) for k in keys])
    ax.set_ylabel("learned tau (head mean; bar: range)")
    ax.tick_params(axis="y", labelsize=MIN_FONT_PT)
    ax.set_title(textwrap.fill(f"tau across runs: {tau.verdict}", 80), fontsize=10)
    ax.legend(fontsize=MIN_FONT_PT)
    return fig


def _tau_group_label(groups: Sequence[str], key: tuple) -> str:
    """A group's tick label: the variant on the first line, its cell (``T=`` before the
    context length) on the second, so that the label is as narrow as its longest part."""
    values = dict(zip(groups, key, strict=False))
    variant = str(values.pop("variant", ""))
    return "\n".join(part for part in (variant, cell_label(values) if values else "") if part)


def _group_labels(ax, labels: Sequence[str]) -> None:
    """Tick labels that stay inside the figure and apart: level while the widest line fits
    the width a group has, else upright (each label in its own column under its tick; the
    saved figure grows downwards to hold them)."""
    width_chars = 8.0 * ax.figure.get_figwidth() / max(len(labels), 1)  # characters a group has at 9 pt
    widest = max((len(line) for label in labels for line in label.splitlines()), default=0)
    if widest <= width_chars:
        ax.set_xticklabels(labels, fontsize=MIN_FONT_PT)
    else:
        ax.set_xticklabels(labels, fontsize=MIN_FONT_PT, rotation=90, ha="center", va="top")


def open_fraction_plot(runs: pl.DataFrame, tau: TauStabilityResult, column: str) -> bytes:
    """Each run's open fraction against its tau, beside the Gaussian tail 1 - Phi(tau) and
    the corpus's content-word fraction."""
    from scipy import stats

    fig = _figure(4.4)
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
        fontsize=10,
    )
    ax.tick_params(labelsize=MIN_FONT_PT)
    ax.legend(fontsize=MIN_FONT_PT)
    return _png(fig)


def mope_plot(sigmas: np.ndarray, scales) -> bytes:
    """:func:`mope_figure` as PNG bytes."""
    return _png(mope_figure(sigmas, scales))


def mope_figure(sigmas: np.ndarray, scales):
    """The histogram of log10 of the MOPE widths, with the cluster centres and the corpus's
    scales (word, clause, sentence), each named inside the axes (a ``matplotlib.figure.Figure``)."""
    fig = _figure(3.8)
    ax = fig.subplots()
    ax.hist(np.log10(sigmas), bins=min(40, max(10, len(sigmas) // 3)), color="tab:blue", alpha=0.7)
    for c in scales.centres:
        ax.axvline(np.log10(c), color="tab:red", lw=1.5)
    for name, length in scales.corpus_lengths.items():
        ax.axvline(np.log10(length), color="tab:green", ls="--", lw=1)
        # inside the axes, hanging from its top edge (x in data, y in axes units): the label
        # never reaches the title, whatever the counts
        ax.text(
            np.log10(length),
            0.98,
            f" {name}",
            rotation=90,
            va="top",
            ha="right",
            fontsize=MIN_FONT_PT,
            color="tab:green",
            transform=ax.get_xaxis_transform(),
        )
    ax.set_xlabel("log10 sigma (characters); red: cluster centres, green: corpus scales")
    ax.set_ylabel("count")
    ax.set_title(f"MOPE widths: k={scales.k} clusters ({scales.criterion.upper()})")
    return fig


__all__ = [
    "MAX_FOREST_ROWS",
    "cell_label",
    "forest_figure",
    "forest_plot",
    "interaction_plot",
    "mope_figure",
    "mope_plot",
    "open_fraction_plot",
    "tau_figure",
    "tau_plot",
    "trend_plot",
]
