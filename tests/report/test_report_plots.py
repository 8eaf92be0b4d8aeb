"""The report's figures keep their words inside the figure and apart: the tau plot's
group labels (long cells, many groups) and the MOPE histogram's corpus-scale labels
(against its title). Checked on the drawn figure: the window extent of every text."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from harness.analysis.mope import mope_scales
from harness.analysis.tau import tau_runs, tau_stability
from harness.report.plots import mope_figure, tau_figure


def _drawn(fig):
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return canvas.get_renderer()


def _inside(inner, outer, slack: float = 1.0) -> bool:
    return (
        inner.x0 >= outer.x0 - slack
        and inner.x1 <= outer.x1 + slack
        and inner.y0 >= outer.y0 - slack
        and inner.y1 <= outer.y1 + slack
    )


@pytest.mark.parametrize("contexts", [(128,), (64, 128, 256, 512, 1024, 2048)])
def test_tau_plot_group_labels_fit_and_do_not_overlap(make_study, contexts) -> None:
    df = make_study(seeds=3, contexts=contexts).with_columns(pl.lit("a-corpus-with-a-long-name").alias("dataset"))
    tau = tau_stability(df)
    fig = tau_figure(tau_runs(df), tau, "tau_mean")
    renderer = _drawn(fig)
    ax = fig.axes[0]
    labels = [t for t in ax.get_xticklabels() if t.get_text()]
    assert len(labels) == 2 * len(contexts)  # ega and ega-mope in every cell
    frame = fig.bbox
    boxes = [t.get_window_extent(renderer) for t in labels]
    assert all(_inside(box, frame) for box in boxes), [(t.get_text(), b) for t, b in zip(labels, boxes, strict=True)]
    for left, right in zip(boxes, boxes[1:], strict=False):
        assert not left.overlaps(right), (left, right)
    lo, hi = ax.get_xlim()
    assert lo <= -0.5 and hi >= len(labels) - 0.5  # no group on the axes' frame


def test_mope_histogram_scale_labels_stay_below_the_title() -> None:
    rng = np.random.default_rng(0)
    sigmas = np.exp(np.concatenate([rng.normal(0.5, 0.2, 24), rng.normal(6.5, 0.3, 24)]))
    lengths = {"character": 1.0, "word": 4.2, "clause": 20.0, "sentence": 74.0}
    scales = mope_scales(sigmas, corpus_lengths=lengths, rng=0)
    fig = mope_figure(sigmas, scales)
    renderer = _drawn(fig)
    ax = fig.axes[0]
    title = ax.title.get_window_extent(renderer)
    names = [t for t in ax.texts if t.get_text().strip() in lengths]
    assert len(names) == len(lengths)
    for text in names:
        box = text.get_window_extent(renderer)
        assert not box.overlaps(title), (text.get_text(), box, title)
        assert _inside(box, ax.bbox), (text.get_text(), box, ax.bbox)
