"""Figures made to be read where they are shown (issue 41): drawn at the manual's column width
(so shown unscaled), no text under 9 pt at that width, every axis in words with its unit,
panels of one claim on one y-axis, titles that state what the figure found, and captions that
name no seed count the data does not have. Read off real figures: the scorecard's of the
published ladder card and the report's forest plot."""

from __future__ import annotations

import struct
from pathlib import Path

import polars as pl
import pytest

from harness.report.plots import forest_figure
from harness.report.plots_training import DISPLAY_WIDTH_IN, DPI, MIN_FONT_PT, png_bytes
from harness.scorecard.figures import prediction_figure, training_figure

REPO = Path(__file__).resolve().parents[2]
LADDER = REPO / "published" / "ladder-cpu-2026-12-02" / "scorecard" / "scorecard.parquet"


def _texts(fig) -> list:
    """Every text the figure draws (titles, labels, ticks, legends, notes), after a draw."""
    from matplotlib.text import Text

    png_bytes(fig)  # lays the figure out (constrained layout) and draws its tick labels
    return [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]


def _png_width(data: bytes) -> int:
    return struct.unpack(">I", data[16:20])[0]  # the IHDR chunk's width


def _check_readable(fig) -> None:
    assert fig.get_figwidth() == pytest.approx(DISPLAY_WIDTH_IN)
    assert _png_width(png_bytes(fig)) == round(DISPLAY_WIDTH_IN * DPI)
    small = {(t.get_text()[:40], t.get_fontsize()) for t in _texts(fig) if t.get_fontsize() < MIN_FONT_PT}
    assert not small, f"text under {MIN_FONT_PT} pt at the shown width: {sorted(small)[:5]}"


@pytest.fixture(scope="module")
def ladder() -> pl.DataFrame:
    return pl.read_parquet(LADDER)


@pytest.mark.parametrize("claim", ["superadditivity", "tau-035", "open-fraction-36"])
def test_training_figures_read_at_the_column_width(ladder: pl.DataFrame, claim: str) -> None:
    rows = ladder.filter((pl.col("kind") == "training") & pl.col("estimate").is_not_null() & (pl.col("claim") == claim))
    fig = training_figure(claim, rows)
    _check_readable(fig)
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert len(axes) == 3  # one panel a row per size
    assert all(axes[0].get_shared_y_axes().joined(axes[0], ax) for ax in axes[1:]), "sizes share one y-axis"
    label = axes[0].get_ylabel()
    assert "_" not in label  # words, not a column name (tau_mean)
    if claim == "superadditivity":
        assert label == "gain in validation loss (nats)"
    title = fig.get_suptitle()
    final = rows.sort("step").group_by("size").last().get_column("verdict_kind").to_list()
    assert "ends at" in title and all(kind in title for kind in final), title


def test_prediction_figure_states_the_prediction(ladder: pl.DataFrame) -> None:
    predicted = ladder.filter((pl.col("kind") == "predicted") & (pl.col("claim") == "superadditivity"))
    fig = prediction_figure("superadditivity", ladder, predicted)
    _check_readable(fig)
    row = predicted.row(0, named=True)
    assert f"{row['estimate']:+.3f}" in fig.get_suptitle() and "extrapolated" in fig.get_suptitle()
    assert "(nats)" in fig.axes[0].get_ylabel()


def test_forest_plot_names_no_seed_count_it_lacks() -> None:
    """A 2-seed study has no bootstrap interval: its axis says nothing of one (it once said
    "from 10 seeds" under a 2-seed caption), and it reads at the column width with units."""
    effects = pl.DataFrame(
        {
            "effect": ["ega gain", "interaction"],
            "kind": ["main_effect", "interaction"],
            "metric": ["val_loss", "val_loss"],
            "size": ["nano", "nano"],
            "estimate": [0.01, -0.002],
            "ci_low": [-0.02, -0.03],
            "ci_high": [0.04, 0.03],
            "boot_low": [None, None],
            "boot_high": [None, None],
        },
        schema_overrides={"boot_low": pl.Float64, "boot_high": pl.Float64},
    )
    fig = forest_figure(effects, ["size"], 0.95)
    _check_readable(fig)
    xlabel = fig.axes[0].get_xlabel()
    assert "(nats)" in xlabel and "bootstrap" not in xlabel and "10" not in xlabel
    booted = effects.with_columns(pl.col("ci_low").alias("boot_low"), pl.col("ci_high").alias("boot_high"))
    assert "bootstrap" in forest_figure(booted, ["size"], 0.95).axes[0].get_xlabel()
