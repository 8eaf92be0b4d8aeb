"""Cells read at matched progress: each cell at the step where its baseline's mean validation
loss reaches the level of the cell that got least far (harness.analysis.progress)."""

from __future__ import annotations

import polars as pl
import pytest

from harness.analysis.progress import matched_progress
from harness.analysis.trends import effect_trend
from harness.errors import InputError

STEPS = [0, 100, 200, 300, 400]


def _curves(gain_per_step: float) -> pl.DataFrame:
    """Two cells, 3 seeds: at T = 64 the baseline's loss falls 0.002 a step, at T = 128 0.001 a
    step (it gets half as far); EGA's loss is the baseline's less ``gain_per_step`` x step; seeds
    shift every loss by 0.01 x seed."""
    rows = []
    for T, rate in ((64, 0.002), (128, 0.001)):
        for seed in range(3):
            for variant in ("baseline", "ega"):
                for step in STEPS:
                    loss = 3.0 - rate * step + 0.01 * seed - (gain_per_step * step if variant == "ega" else 0.0)
                    trial = f"{variant}_s{seed}_T{T}"
                    rows.append(
                        dict(dataset="d", size="nano", context_length=T, trial_id=trial, variant=variant)
                        | dict(seed=seed, step=step, val_loss=loss, status="finished")
                    )
    return pl.DataFrame(rows)


def test_each_cell_is_read_where_its_baseline_reaches_the_least_trained_cells_level() -> None:
    matched = matched_progress(_curves(gain_per_step=1e-5))
    # T = 128 ends at 3.0 - 0.4 + 0.01 (mean seed shift): the level; T = 64 reaches it at step 200
    assert matched.level == pytest.approx(2.61)
    assert matched.steps[("d", "nano", 128)] == pytest.approx(400)
    assert matched.steps[("d", "nano", 64)] == pytest.approx(200)
    table = matched.table.sort("context_length", "variant", "seed")
    ega64 = table.filter((pl.col("context_length") == 64) & (pl.col("variant") == "ega") & (pl.col("seed") == 2))
    assert ega64.item(0, "val_loss") == pytest.approx(3.0 - 0.002 * 200 + 0.02 - 1e-5 * 200)
    assert set(table.get_column("steps").to_list()) == {200, 400}


def test_an_effect_that_grows_with_steps_only_shows_no_trend_at_matched_progress() -> None:
    """EGA's gain grows with steps alone; T = 128 trains for as many steps but gets half as far.
    At equal steps the gain is the same in both cells; at matched progress T = 64 is read earlier,
    where its gain is smaller: the trend changes sign."""
    curves = _curves(gain_per_step=1e-5)
    at_end = effect_trend(curves.filter(pl.col("step") == 400).rename({"step": "steps"}), treatment="ega")
    matched = effect_trend(matched_progress(curves).table, treatment="ega")
    assert at_end.estimate == pytest.approx(0.0, abs=1e-12)
    assert matched.estimate == pytest.approx(1e-5 * (400 - 200))


def test_a_curve_table_without_the_reference_is_refused() -> None:
    with pytest.raises(InputError, match="reference variant 'learned-pe'"):
        matched_progress(_curves(1e-5), reference="learned-pe")
