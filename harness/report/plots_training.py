"""Figures of effects over training and across sizes, shared by the study report and the
scorecard: an effect (or a level) against the training step with its interval as a band, one
panel per cell (:func:`over_training_plot`), and an effect against the parameter count with
each size's interval, the fitted line and the prediction at the papers' size
(:func:`prediction_plot`). Drawn with ``matplotlib.figure.Figure`` (no pyplot state) and
returned as PNG bytes.
"""

from __future__ import annotations

import io
import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: Panels a figure shows at most (a caption says when there were more).
MAX_PANELS = 6
_PALETTE = ("tab:blue", "tab:red", "tab:green", "tab:orange", "tab:purple", "tab:brown", "tab:gray", "tab:olive")


@dataclass(frozen=True)
class Curve:
    """One line with its interval: ``x`` (steps or parameter counts), ``y`` the estimate,
    ``low`` / ``high`` the interval (None where there is none)."""

    label: str
    x: Sequence[float]
    y: Sequence[float]
    low: Sequence[float | None]
    high: Sequence[float | None]


@dataclass(frozen=True)
class Extrapolation:
    """A prediction at ``at`` parameters: its estimate and interval and the fit's ``slope`` per
    doubling (the line drawn through the prediction back to the sizes measured)."""

    at: float
    estimate: float
    low: float | None
    high: float | None
    slope: float | None


@dataclass(frozen=True)
class Panel:
    """A panel: its title, its curves (and for a prediction, one :class:`Extrapolation` per
    curve, or None where refused) and a note written inside it (e.g. why it was refused)."""

    title: str
    curves: Sequence[Curve]
    predictions: Sequence[Extrapolation | None] = ()
    note: str = ""


@dataclass(frozen=True)
class Reference:
    """The paper's value as a line (``value``), or its band (``low``, ``high``), named ``label``."""

    label: str
    value: float | None = None
    low: float | None = None
    high: float | None = None


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)  # fixed margins: a layout engine doubles the cost
    return buf.getvalue()


def _grid(n: int, width: float = 4.4, height: float = 3.4):
    """A grid of up to 3 panels a row, with fixed margins (in inches, so they hold at any size)."""
    from matplotlib.figure import Figure

    cols = min(n, 3)
    rows = math.ceil(n / cols)
    fig_w, fig_h = width * cols, height * rows + 0.7
    fig = Figure(figsize=(fig_w, fig_h))
    fig.subplots_adjust(
        left=0.75 / fig_w, right=1 - 0.15 / fig_w, top=1 - 0.75 / fig_h, bottom=0.5 / fig_h, wspace=0.32, hspace=0.55
    )
    axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False)).ravel()
    for ax in axes[n:]:
        ax.set_visible(False)
    return fig, axes


def _band(ax, curve: Curve, color: str, marker: str = "") -> None:
    x = np.asarray(curve.x, dtype=float)
    y = np.asarray(curve.y, dtype=float)
    low = np.array([np.nan if v is None else v for v in curve.low], dtype=float)
    high = np.array([np.nan if v is None else v for v in curve.high], dtype=float)
    ax.fill_between(x, low, high, color=color, alpha=0.18, lw=0)
    ax.plot(x, y, marker or "-", color=color, lw=1.4, ms=4, label=curve.label)


def _reference(ax, reference: Reference | None, zero: bool) -> None:
    if zero:
        ax.axhline(0.0, color="black", lw=0.7, ls=":")
    if reference is None:
        return
    banded = reference.low is not None and reference.high is not None
    if banded:
        ax.axhspan(reference.low, reference.high, color="tab:green", alpha=0.12, label=reference.label)
    if reference.value is not None:
        ax.axhline(reference.value, color="tab:green", lw=1.2, ls="--", label=None if banded else reference.label)


def _finish(fig, axes, panels: Sequence[Panel], title: str, total: int) -> bytes:
    for ax, panel in zip(axes, panels, strict=False):
        ax.set_title(textwrap.fill(panel.title, 48), fontsize=8)
        if panel.note:
            ax.text(0.02, 0.02, textwrap.fill(panel.note, 60), transform=ax.transAxes, fontsize=7, va="bottom")
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=6, loc="best")
    more = f" (first {len(panels)} of {total} panels)" if total > len(panels) else ""
    wrapped = textwrap.fill(title + more, int(14 * fig.get_figwidth()))
    _room_for_title(fig, wrapped.count("\n") + 1)
    fig.suptitle(wrapped, fontsize=9)
    return _png(fig)


def _room_for_title(fig, lines: int, line_in: float = 0.17) -> None:
    """Grow the figure at the top by ``line_in`` inches a title line beyond the two that
    :func:`_grid`'s 0.75 in of top margin holds, keeping the panels' size and margins."""
    extra = max(0, lines - 2) * line_in
    if not extra:
        return
    height = fig.get_figheight()
    fig.set_figheight(height + extra)
    new = height + extra
    fig.subplots_adjust(top=1 - (0.75 + extra) / new, bottom=0.5 / new)


def over_training_plot(
    panels: Sequence[Panel], *, title: str, ylabel: str, reference: Reference | None = None, zero: bool = True
) -> bytes:
    """An effect (or a level) against the training step, one panel per cell, each curve with
    its interval as a band, the paper's value (or band) and 0 as lines."""
    from matplotlib.ticker import MaxNLocator

    shown = list(panels)[:MAX_PANELS]
    fig, axes = _grid(max(len(shown), 1))
    for ax, panel in zip(axes, shown, strict=False):
        for k, curve in enumerate(panel.curves):
            _band(ax, curve, _PALETTE[k % len(_PALETTE)])
        _reference(ax, reference, zero)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
        ax.set_xlabel("training step", fontsize=8)
        ax.set_ylabel(ylabel, fontsize=8)
    return _finish(fig, axes, shown, title, len(panels))


def prediction_plot(
    panels: Sequence[Panel], *, title: str, ylabel: str, reference: Reference | None = None, zero: bool = True
) -> bytes:
    """An effect against the parameter count (log scale): each size's estimate with its
    interval, the fitted line through the prediction at the papers' size, and the prediction
    with its interval (a refused one: the sizes only, and the panel's note says why)."""
    shown = list(panels)[:MAX_PANELS]
    fig, axes = _grid(max(len(shown), 1))
    for ax, panel in zip(axes, shown, strict=False):
        for k, curve in enumerate(panel.curves):
            color = _PALETTE[k % len(_PALETTE)]
            low = [y - lo if lo is not None else 0.0 for y, lo in zip(curve.y, curve.low, strict=True)]
            high = [hi - y if hi is not None else 0.0 for y, hi in zip(curve.y, curve.high, strict=True)]
            ax.errorbar(curve.x, curve.y, yerr=[low, high], fmt="o", capsize=3, color=color, ms=4, label=curve.label)
            pred = panel.predictions[k] if k < len(panel.predictions) else None
            if pred is None:
                continue
            if pred.slope is not None and len(curve.x):
                xs = np.geomspace(min(curve.x), pred.at, 40)
                ax.plot(xs, pred.estimate + pred.slope * np.log2(xs / pred.at), color=color, lw=1, ls="--")
            if pred.low is not None and pred.high is not None:
                span = [[pred.estimate - pred.low], [pred.high - pred.estimate]]
                ax.errorbar([pred.at], [pred.estimate], yerr=span, fmt="D", capsize=4, color=color, mfc="white")
        _reference(ax, reference, zero)
        _parameter_ticks(ax, panel)
        ax.set_xlabel("parameters (log scale); ◇ predicted at the papers' size", fontsize=8)
        ax.set_ylabel(ylabel, fontsize=8)
    return _finish(fig, axes, shown, title, len(panels))


def _parameter_ticks(ax, panel: Panel) -> None:
    """A log axis labelled only where there is something: each measured size and the papers'
    size, in millions (``0.34 M``); log scale's own minor labels collide at sizes 2x apart."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    ax.set_xscale("log")
    at = {float(x) for curve in panel.curves for x in curve.x}
    at |= {float(p.at) for p in panel.predictions if p is not None}
    if at:
        ax.xaxis.set_major_locator(FixedLocator(sorted(at)))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x / 1e6:.2g} M"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.tick_params(axis="x", labelsize=7)


__all__ = ["MAX_PANELS", "Curve", "Extrapolation", "Panel", "Reference", "over_training_plot", "prediction_plot"]
