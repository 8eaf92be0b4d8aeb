"""The curves read step by step (harness.analysis.over_training): a step's table is a results
table; an evaluation counts whether or not its trial later diverged; levels per initial value
against a hand-computed oracle (scipy's t-interval)."""

from __future__ import annotations

import math

import polars as pl
import pytest
from scipy import stats

from harness.analysis import AnalysisSettings, main_effect
from harness.analysis.over_training import (
    effects_over_training,
    interval_side,
    level_over_training,
    stable_from,
    step_frames,
)


def _curves() -> pl.DataFrame:
    """baseline and ega, 3 seeds, steps 5 and 10; ega seed 2 diverges after step 5."""
    rows = []
    for seed in range(3):
        for variant, gain in (("baseline", 0.0), ("ega", 0.05 + 0.01 * seed)):
            for step in (5, 10):
                loss = 2.0 - gain * step / 10 + 0.1 * seed
                diverged = variant == "ega" and seed == 2
                if diverged and step == 10:
                    loss = math.nan
                rows.append(
                    {
                        "study": "s",
                        "trial_id": f"{variant}_{seed}",
                        "dataset": "tinyshakespeare",
                        "size": "nano",
                        "context_length": 32,
                        "variant": variant,
                        "seed": seed,
                        "tau_init": 0.7 if variant == "ega" and seed == 0 else (0.0 if variant == "ega" else None),
                        "step": step,
                        "val_loss": loss,
                        "tau_mean": 0.01 * step + 0.001 * seed if variant == "ega" else None,
                        "status": "diverged" if diverged else "finished",
                    }
                )
    return pl.DataFrame(rows)


def test_a_step_is_a_results_table_and_a_later_divergence_does_not_erase_earlier_evaluations() -> None:
    frames = dict(step_frames(_curves()))
    assert sorted(frames) == [5, 10]
    early, late = frames[5], frames[10]
    assert set(early.get_column("steps").to_list()) == {5}
    assert early.filter(pl.col("trial_id") == "ega_2").item(0, "status") == "finished"
    assert late.filter(pl.col("trial_id") == "ega_2").item(0, "status") == "diverged"
    # at tau's reference (0): seeds 1 and 2 pair at step 5; at step 10 seed 2's block is dropped
    reference = pl.col("tau_init").fill_null(0.0) == 0.0
    assert main_effect(early.filter(reference), "ega", "baseline").n_seeds == 2
    late_effect = main_effect(late.filter(reference), "ega", "baseline")
    assert (late_effect.n_seeds, late_effect.n_diverged) == (1, 1)


def test_effects_over_training_read_at_the_reference_tau_and_unadjusted() -> None:
    effects = effects_over_training(_curves(), AnalysisSettings())
    step5 = effects.filter((pl.col("step") == 5) & (pl.col("effect") == "ega vs baseline")).row(0, named=True)
    gains = [0.05 * 0.5 + 0.01 * s * 0.5 for s in (1, 2)]  # seeds at tau_init 0 (seed 0 ran at 0.7)
    ci = stats.ttest_1samp(gains, 0.0).confidence_interval(0.95)
    assert step5["estimate"] == pytest.approx(sum(gains) / 2)
    assert (step5["ci_low"], step5["ci_high"]) == pytest.approx((ci.low, ci.high))


def test_a_level_per_initial_value_and_step() -> None:
    tau = level_over_training(_curves(), column="tau_mean")
    row = tau.filter((pl.col("tau_init") == 0.0) & (pl.col("step") == 10)).row(0, named=True)
    values = [0.1 + 0.001 * s for s in (1, 2)]
    ci = stats.ttest_1samp(values, 0.0).confidence_interval(0.95)
    assert row["estimate"] == pytest.approx(sum(values) / 2) and row["n_seeds"] == 2
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((ci.low, ci.high))
    single = tau.filter((pl.col("tau_init") == 0.7) & (pl.col("step") == 5)).row(0, named=True)
    assert single["n_seeds"] == 1 and single["ci_low"] is None  # one seed: no interval


def test_the_words_of_a_curve() -> None:
    assert interval_side(0.1, 0.2) == "above 0" and interval_side(-0.2, -0.1) == "below 0"
    assert interval_side(-0.1, 0.1) == "covers 0" and interval_side(None, 0.1) == "no interval"
    assert stable_from([10, 5, 15], ["b", "a", "b"]) == 10  # steps in any order
    assert stable_from([5, 10], ["a", "b"]) == 10 and stable_from([], []) is None
