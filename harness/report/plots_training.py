"""Figures of effects over training and across sizes, shared by the study report and the
scorecard: an effect (or a level) against the training step with its interval as a band, one
panel per cell (:func:`over_training_plot`), and an effect against the parameter count with
each size's interval, the fitted line and the prediction at the papers' size
(:func:`prediction_plot`). Drawn with ``matplotlib.figure.Figure`` (no pyplot state) at the
width the manual shows them (:data:`DISPLAY_WIDTH_IN` at :data:`DPI`), one panel a row on one
y-axis, no text under :data:`MIN_FONT_PT`, each axis in its unit (:func:`axis_label`); the
``*_figure`` functions return the figure, the ``*_plot`` ones its PNG bytes.
"""

from __future__ import annotations

import io
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

#: Panels a figure shows at most (a caption says when there were more).
MAX_PANELS = 6
_PALETTE = ("tab:blue", "tab:red", "tab:green", "tab:orange", "tab:purple", "tab:brown", "tab:gray", "tab:olive")


#: Each metric an axis shows, named in words with its unit (a loss in nats; a level as what it is).
METRIC_LABELS = {
    "val_loss": "validation loss (nats)",
    "gen_gap": "generalisation gap (nats)",
    "tau_mean": "learned tau (mean over heads)",
    "open_fraction": "open fraction (share of keys with gate > 1/2)",
    "tail": "open fraction - Gaussian tail 1 - Φ(tau)",
    "pc1_cosine": "|cos| with the first principal component",
    "log_tokens_per_s": "log tokens per second",
}


def axis_label(metric: str | None, *, gain: bool) -> str:
    """The axis label of ``metric`` with its unit: ``gain in validation loss (nats)`` for a
    paired gain, the level's own name for a level (``learned tau (mean over heads)``).

    >>> axis_label("val_loss", gain=True)
    'gain in validation loss (nats)'
    """
    label = METRIC_LABELS.get(metric or "", metric or "value")
    return f"gain in {label}" if gain and metric != "tail" else label


@dataclass(frozen=True)
class EndPoint:
    """Where a curve ends when its last point is read on other windows than the line's: the
    verdict's estimate and interval at step ``x`` (drawn as a marker with its interval)."""

    x: float
    y: float
    low: float | None
    high: float | None


@dataclass(frozen=True)
class Curve:
    """One line with its interval: ``x`` (steps or parameter counts), ``y`` the estimate,
    ``low`` / ``high`` the interval (None where there is none); ``end``, the verdict it ends at
    (None: the line's last point is the end)."""

    label: str
    x: Sequence[float]
    y: Sequence[float]
    low: Sequence[float | None]
    high: Sequence[float | None]
    end: EndPoint | None = None


@dataclass(frozen=True)
class Marks:
    """What the line's points and the end markers rest on, as legend entries (e.g. ``periodic
    evaluations: 64 windows each``, ``verdict: final evaluation, 1,742 windows``)."""

    line: str
    end: str


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


#: The width a figure is drawn at, in inches at :data:`DPI`: the manual's content column at
#: 1280 px (720 px), so that a figure is shown at the size it was drawn and its text at the
#: size it was set (a figure drawn wider is scaled down, and its 9 pt become 5).
DISPLAY_WIDTH_IN = 7.2
DPI = 100
#: The smallest text a figure sets, in points at its drawn size (ticks, legends, notes).
MIN_FONT_PT = 9
#: How far right of its step a curve's end marker is drawn (points): beside the periodic point.
END_OFFSET_PT = 7
#: Each panel's height (inches): panels stand one a row, sharing their axes, so that every
#: panel is as wide as the figure (one a row on a phone too) and the cells read on one scale.
PANEL_HEIGHT_IN = 2.5


def png_bytes(fig) -> bytes:
    """A figure as PNG bytes at its own size (:data:`DPI`; no tight bounding box)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)  # the figure's own size: no tight bounding box
    return buf.getvalue()


def _grid(n: int, *, sharex: bool = True):
    """``n`` panels one a row, :data:`DISPLAY_WIDTH_IN` wide, sharing the y-axis (and the
    x-axis: the same steps or sizes), laid out by matplotlib's constrained layout."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(DISPLAY_WIDTH_IN, PANEL_HEIGHT_IN * n + 1.0), layout="constrained")
    axes = np.atleast_1d(fig.subplots(n, 1, sharey=True, sharex=sharex, squeeze=False)).ravel()
    return fig, axes


def _band(ax, curve: Curve, color: str, marker: str = "") -> None:
    x = np.asarray(curve.x, dtype=float)
    y = np.asarray(curve.y, dtype=float)
    low = np.array([np.nan if v is None else v for v in curve.low], dtype=float)
    high = np.array([np.nan if v is None else v for v in curve.high], dtype=float)
    ax.fill_between(x, low, high, color=color, alpha=0.18, lw=0)
    ax.plot(x, y, marker or "-", color=color, lw=1.6, ms=5, label=curve.label)


def _end(ax, end: EndPoint, color: str) -> None:
    """The verdict at the curve's end: a hollow diamond with its interval as an error bar, set
    :data:`END_OFFSET_PT` right of the step so that it does not hide the periodic point there."""
    from matplotlib.transforms import offset_copy

    span = None
    if end.low is not None and end.high is not None:
        span = [[end.y - end.low], [end.high - end.y]]
    shifted = offset_copy(ax.transData, fig=ax.figure, x=END_OFFSET_PT, units="points")
    ax.errorbar(
        [end.x], [end.y], yerr=span, fmt="D", capsize=4, color=color, mfc="white", ms=6, zorder=3, transform=shifted
    )


def _mark_legend(ax, marks: Marks | None) -> None:
    """Legend entries (in grey, drawing nothing) saying what the points and the end markers rest on."""
    if marks is None:
        return
    ax.plot([], [], "o-", color="tab:gray", ms=5, lw=1.6, label=marks.line)
    ax.plot([], [], "D", color="tab:gray", mfc="white", ms=6, label=marks.end)


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


def _finish(fig, axes, panels: Sequence[Panel], title: str, total: int) -> None:
    """Panel titles, notes, ticks and legends at :data:`MIN_FONT_PT` or more; the figure's
    title (what it shows) above, left-aligned, wrapped to the width."""
    for ax, panel in zip(axes, panels, strict=False):
        ax.set_title(panel.title, fontsize=MIN_FONT_PT + 1, loc="left")
        if panel.note:
            ax.text(
                0.01, 0.03, textwrap.fill(panel.note, 90), transform=ax.transAxes, fontsize=MIN_FONT_PT, va="bottom"
            )
        ax.tick_params(labelsize=MIN_FONT_PT)
        entries = len(ax.get_legend_handles_labels()[1])
        ax.legend(fontsize=MIN_FONT_PT, loc="best", framealpha=0.85, ncols=2 if entries > 4 else 1)
    more = f" (first {len(panels)} of {total} panels)" if total > len(panels) else ""
    fig.suptitle(textwrap.fill(title + more, 78), fontsize=MIN_FONT_PT + 2, ha="left", x=0.01)


def over_training_plot(panels: Sequence[Panel], **options: Any) -> bytes:
    """:func:`over_training_figure` (with its keyword ``options``) as PNG bytes."""
    return png_bytes(over_training_figure(panels, **options))


def over_training_figure(
    panels: Sequence[Panel],
    *,
    title: str,
    ylabel: str,
    reference: Reference | None = None,
    zero: bool = True,
    marks: Marks | None = None,
):
    """An effect (or a level) against the training step, one panel a row per cell on one
    y-axis, each curve with its interval as a band, the paper's value (or band) and 0 as lines
    (a ``matplotlib.figure.Figure``; ``title`` states the finding, ``ylabel`` the unit). A curve
    with an ``end`` also shows its points and, at the end, the verdict as a hollow diamond with
    its interval; ``marks`` names in the legend the windows each rests on."""
    from matplotlib.ticker import MaxNLocator

    shown = list(panels)[:MAX_PANELS]
    fig, axes = _grid(max(len(shown), 1))
    for ax, panel in zip(axes, shown, strict=False):
        for k, curve in enumerate(panel.curves):
            color = _PALETTE[k % len(_PALETTE)]
            _band(ax, curve, color, "o-" if curve.end is not None else "")
            if curve.end is not None:
                _end(ax, curve.end, color)
        _reference(ax, reference, zero)
        _mark_legend(ax, marks)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
        ax.set_ylabel(ylabel, fontsize=MIN_FONT_PT)
    axes[len(shown) - 1].set_xlabel("training step", fontsize=MIN_FONT_PT)
    _finish(fig, axes, shown, title, len(panels))
    return fig


def prediction_plot(
    panels: Sequence[Panel], *, title: str, ylabel: str, reference: Reference | None = None, zero: bool = True
) -> bytes:
    """:func:`prediction_figure` as PNG bytes."""
    return png_bytes(prediction_figure(panels, title=title, ylabel=ylabel, reference=reference, zero=zero))


def prediction_figure(
    panels: Sequence[Panel], *, title: str, ylabel: str, reference: Reference | None = None, zero: bool = True
):
    """An effect against the parameter count (log scale): each size's estimate with its
    interval, the fitted line through the prediction at the papers' size, and the prediction
    with its interval (a refused one: the sizes only, and the panel's note says why); one
    panel a row on one y-axis (a ``matplotlib.figure.Figure``)."""
    shown = list(panels)[:MAX_PANELS]
    fig, axes = _grid(max(len(shown), 1), sharex=False)
    for ax, panel in zip(axes, shown, strict=False):
        for k, curve in enumerate(panel.curves):
            color = _PALETTE[k % len(_PALETTE)]
            low = [y - lo if lo is not None else 0.0 for y, lo in zip(curve.y, curve.low, strict=True)]
            high = [hi - y if hi is not None else 0.0 for y, hi in zip(curve.y, curve.high, strict=True)]
            ax.errorbar(curve.x, curve.y, yerr=[low, high], fmt="o", capsize=3, color=color, ms=5, label=curve.label)
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
        ax.set_xlabel("parameters (log scale); ◇ predicted at the papers' size and steps", fontsize=MIN_FONT_PT)
        ax.set_ylabel(ylabel, fontsize=MIN_FONT_PT)
    _finish(fig, axes, shown, title, len(panels))
    return fig


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
        ax.tick_params(axis="x", labelsize=MIN_FONT_PT)


__all__ = [
    "DISPLAY_WIDTH_IN",
    "METRIC_LABELS",
    "axis_label",
    "DPI",
    "MAX_PANELS",
    "MIN_FONT_PT",
    "Curve",
    "EndPoint",
    "Extrapolation",
    "Marks",
    "Panel",
    "Reference",
    "over_training_figure",
    "png_bytes",
    "over_training_plot",
    "prediction_figure",
    "prediction_plot",
]
