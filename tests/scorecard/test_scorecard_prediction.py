"""Predictions at the papers' size and training steps (issue 38, items 2-3): each seed's surface
over size x steps against oracles (numpy's least squares per seed, refitted for every check;
scipy's t-interval; the zoo's parameter counts), the refusals with their reasons, studies of one
recipe pooled, the card's own calibration, and issue 38's test on simulated ladders."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from scipy import stats
from scorecard_sim import row_of

from harness.analysis.extrapolation import effect_surface
from harness.analysis.surface import (
    MAX_STEPS_EXTRAPOLATION,
    grid_design,
    plan_surface,
)
from harness.analysis.surface_calibration import SurfaceNoise, calibrate, measure_noise, simulate_effects
from harness.bench.simulate.scorecard_prediction import (
    anchor_effects,
    done_when,
    ladder_design,
    ladder_parameters,
    simulated_study,
)
from harness.models.sizes import custom_size
from harness.scorecard import StudyResults, scorecard_table
from harness.scorecard.claims import load_claims
from harness.scorecard.prediction import papers_parameters

#: The published ladder's noise as the benchmark measures it (rounded): the tests' default.
NOISE = SurfaceNoise(np.array([0.009, 0.021, 0.013]), 0.67, 0.002, 0.0014)
RECIPE = {"batch_size": 16, "lr": 0.001}


def _papers_count(variant: str = "baseline") -> int:
    """The zoo's count at the papers' size and context with TinyShakespeare's vocabulary."""
    import torch

    from harness.models.transformer import build_model

    with torch.device("meta"):
        return build_model(variant, size="paper", vocab_size=65, block_size=256).num_parameters()


def _linear_ladder(seeds: int = 6, rng: int = 0, design=None, noise: SurfaceNoise = NOISE):
    """Per-seed effects of a log-linear truth (the published scenario's anchor) on ``design``."""
    design = design or ladder_design()
    y = simulate_effects(design, anchor_effects(design)[0], noise, seeds=seeds, reps=1, rng=np.random.default_rng(rng))
    return design, y[0]


def _lstsq(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.linalg.lstsq(x, y, rcond=None)[0]


def test_each_seeds_surface_and_the_interval_match_numpy_and_scipy() -> None:
    """Oracle: per seed, least squares of the effect on (1, log2 N, log2 S, their product, the
    end of a run) over every evaluation, read at 4.76 M parameters and 5,000 steps (a run's end);
    scipy's t-interval of those."""
    design, y = _linear_ladder(rng=1)
    study = simulated_study(design, y)
    at = float(_papers_count())
    res = effect_surface([(study.name, study.curves)], params=at, steps=5000.0, treatment="ega")
    assert res.refused is None, res.refused
    u, v = res.design.u, res.design.v
    end = (np.round(np.exp2(v)) == res.design.run_steps).astype(float)
    x = np.column_stack([np.ones_like(u), u, v, u * v, end])
    target = np.array([1.0, math.log2(at), math.log2(5000), math.log2(at) * math.log2(5000), 1.0])
    order = np.lexsort((v, u))  # the oracle's own order of the points: the fits do not depend on it
    oracle = np.array([target @ _lstsq(x[order], row[order]) for row in res.effects.y])
    np.testing.assert_allclose(res.per_seed, oracle, rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(np.sort(res.effects.y, axis=None), np.sort(y, axis=None), atol=1e-9)
    ci = stats.ttest_1samp(oracle, 0.0).confidence_interval(0.95)
    assert res.confidence_interval.low == pytest.approx(ci.low) and res.confidence_interval.high == pytest.approx(
        ci.high
    )
    assert res.size_extrapolation == pytest.approx(at / design.size_params[-1])
    assert res.steps_extrapolation == pytest.approx(2.5)
    slope = np.mean([_lstsq(x, row)[1] + _lstsq(x, row)[3] * math.log2(5000) for row in res.effects.y])
    assert res.slope == pytest.approx(slope)


def test_every_check_is_the_refit_it_says() -> None:
    """The backtests refit without the largest size / the later half of the steps and average
    the held-out errors; the curvatures are the squares' coefficients of the fit with them."""
    design, y = _linear_ladder(seeds=5, rng=2)
    plan = plan_surface(design, 4.76e6, 5000.0)
    u, v, end = design.u - design.u.mean(), design.v - design.v.mean(), design.end
    x = np.column_stack([np.ones_like(u), u, v, u * v, end])
    largest = design.size == 2
    late = np.exp2(design.v) > 1000.0
    for name, held, cols in (("size backtest", largest, [0, 1, 2, 3, 4]), ("steps backtest", late, [0, 1, 2, 3])):
        keep = ~held
        expected = [row[held].mean() - (x[held][:, cols] @ _lstsq(x[keep][:, cols], row[keep])).mean() for row in y]
        np.testing.assert_allclose(y @ plan.checks[name], expected, atol=1e-12, err_msg=name)
    full = np.column_stack([x, u**2, v**2])
    coef = np.array([_lstsq(full, row) for row in y])
    np.testing.assert_allclose(y @ plan.checks["size curvature"], coef[:, 5], atol=1e-10)
    np.testing.assert_allclose(y @ plan.checks["steps curvature"], coef[:, 6], atol=1e-10)
    np.testing.assert_allclose(y @ plan.checks["end of run"], [_lstsq(x, row)[4] for row in y], atol=1e-10)
    assert "phase" not in plan.checks  # one run length: the design cannot measure it


def test_the_phase_is_the_end_of_the_short_run_minus_the_same_step_of_the_long_one() -> None:
    design = ladder_design(pooled=True)
    _, y = _linear_ladder(seeds=4, design=design)
    plan = plan_surface(design, 4.76e6, 5000.0)
    steps = np.round(np.exp2(design.v))
    pairs = [
        (int(np.flatnonzero((design.size == s) & (steps == 2000) & (design.run_steps == 2000))[0]),
         int(np.flatnonzero((design.size == s) & (steps == 2000) & (design.run_steps == 5000))[0]))
        for s in (0, 2)
    ]  # fmt: skip
    expected = np.mean([y[:, a] - y[:, b] for a, b in pairs], axis=0)
    np.testing.assert_allclose(y @ plan.checks["phase"], expected, atol=1e-12)
    assert plan.steps_extrapolation == 1.0 and plan.refused is None


@pytest.mark.parametrize(
    ("runs", "params", "steps", "reason"),
    [
        ([("a", 1e5, 2000), ("b", 4e5, 2000)], 4.76e6, 2000.0, "2 sizes measured; a prediction across sizes needs 3"),
        ([("a", 1e4, 2000), ("b", 2e4, 2000), ("c", 4e4, 2000)], 4.76e6, 2000.0, "farther than the 16x"),
        ([("a", 1e5, 1000), ("b", 2e5, 1000), ("c", 4e5, 1000)], 1e6, 5000.0, "farther than the 4x"),
        ([("a", 1e5, 500), ("b", 2e5, 500), ("c", 4e5, 500)], 1e6, 1000.0, "2 evaluation steps measured"),
        ([("a", 1e5, 5000), ("b", 2e5, 5000)], 2e5, 5000.0, "nothing to extrapolate"),
    ],
)
def test_the_reach_rules_refuse_before_any_effect_is_seen(runs, params, steps, reason) -> None:
    plan = plan_surface(grid_design(runs, 250), params, steps)
    assert plan.refused is not None and reason in plan.refused, plan.refused
    assert MAX_STEPS_EXTRAPOLATION == 4.0


def test_a_strong_curvature_is_refused_with_the_check_that_saw_it() -> None:
    design = ladder_design()
    quiet = SurfaceNoise(np.full(3, 0.002), 0.3, 0.0, 0.0)
    truth = anchor_effects(design)[0] - 0.03 * (design.u - design.u.mean()) ** 2
    y = simulate_effects(design, truth, quiet, seeds=6, reps=1, rng=np.random.default_rng(1))[0]
    study = simulated_study(design, y)
    res = effect_surface([(study.name, study.curves)], params=4.76e6, steps=5000.0, treatment="ega")
    assert res.refused is not None and "the size curvature failed" in res.refused
    assert res.confidence_interval is None


def test_a_predicted_row_names_both_axes_and_prints_its_own_calibration() -> None:
    design, y = _linear_ladder(seeds=6, rng=2)
    study = simulated_study(design, y, name="ladder")
    table = scorecard_table([study])
    row = row_of(table, "ega-gain-ega-paper", kind="predicted")
    paper = _papers_count()
    truth = float(plan_surface(design, paper, 5000.0).predict @ anchor_effects(design)[0])
    assert row["ci_low"] <= truth <= row["ci_high"], row
    assert row["params"] == paper and row["steps"] == 5000 and row["size"] == "paper" and row["levels"] == 3
    assert row["extrapolation"] == pytest.approx(paper / design.size_params[-1])
    assert row["steps_extrapolation"] == pytest.approx(2.5)
    words = row["verdict"]
    assert ", extrapolated, not measured:" in words
    assert f"at {paper / 1e6:.2f}M parameters and 5,000 training steps" in words
    assert "5.9x beyond the largest size measured" in words and "2.5x beyond the last evaluation measured" in words
    assert "T = 128 as measured (the papers' T = 256 is not extrapolated)" in words
    assert "size backtest [" in words and "steps backtest [" in words and "steps curvature [" in words
    assert row["where"] in words  # the words Holm cannot rewrite
    assert row["calibration"].startswith("simulated at this study's noise")
    for truth_name in ("log-linear truth: covered", "curved: refused", "saturating: refused", "emergent: refused"):
        assert truth_name in row["calibration"]


def test_holm_keeps_both_axes_when_it_withdraws_a_kind() -> None:
    from harness.scorecard.family import adjust_card
    from harness.scorecard.rows import ScorecardRow

    row = ScorecardRow(
        "c", "p", "A", "s", "predicted", "x", params=4_755_712, steps=5000, extrapolation=5.93, steps_extrapolation=2.5,
        n_seeds=4, estimate=0.05, ci_low=0.01, ci_high=0.09, pvalue=0.04, signed=True, verdict_kind="replicated",
    )  # fmt: skip
    other = ScorecardRow("c", "p", "A", "s", "cell", "x", estimate=0.0, pvalue=0.5)
    adjusted = adjust_card([row, other])[0][0]
    assert adjusted.verdict_kind == "inconclusive"
    assert "at 4.76M parameters and 5,000 steps (5.9x in size, 2.5x in steps)" in adjusted.verdict


def test_studies_of_one_recipe_are_pooled_with_seeds_matched_by_number() -> None:
    """A 2,000-step ladder and a 5,000-step run at two of its sizes: one prediction from both,
    within the steps measured; the seed missing from one study is left out; another recipe is
    read on its own."""
    sizes, _ = ladder_parameters()
    short = grid_design([(n, p, 2000) for n, p in sizes.items()], 250)
    long = grid_design([("nano", sizes["nano"], 5000), ("L4H4d128", sizes["L4H4d128"], 5000)], 250)
    _, y_short = _linear_ladder(seeds=5, design=short, rng=1)
    _, y_long = _linear_ladder(seeds=4, design=long, rng=2)
    a = simulated_study(short, y_short, name="ladder", recipe=RECIPE)
    b = simulated_study(long, y_long, name="long", recipe=RECIPE)
    row = row_of(scorecard_table([a, b]), "ega-gain-ega-paper", kind="predicted")
    assert row["study"] == "ladder + long" and row["steps_extrapolation"] == 1.0 and row["n_seeds"] == 4
    assert "runs of 2,000 and 5,000 steps (ladder + long; 4 seeds matched by number)" in row["where"]
    assert "phase (a 2,000-step run's end minus the same step of a 5,000-step run" in row["where"]
    other = simulated_study(long, y_long, name="long", recipe={**RECIPE, "lr": 3e-4})
    rows = scorecard_table([a, other])
    rows = rows.filter((pl.col("claim") == "ega-gain-ega-paper") & (pl.col("kind") == "predicted"))
    assert sorted(rows.get_column("study").to_list()) == ["ladder", "long"]
    alone = rows.filter(pl.col("study") == "long").row(0, named=True)
    assert alone["verdict"].startswith("not predictable: 2 sizes measured; a prediction across sizes needs 3")


def test_a_run_two_studies_hold_is_read_once() -> None:
    design, y = _linear_ladder(seeds=4)
    a, b = simulated_study(design, y, name="a"), simulated_study(design, y, name="b")
    res = effect_surface([("a", a.curves), ("b", b.curves)], params=4.76e6, steps=5000.0, treatment="ega")
    alone = effect_surface([("a", a.curves)], params=4.76e6, steps=5000.0, treatment="ega")
    assert res.design.n_points == design.n_points and "read once" in res.effects.note
    np.testing.assert_allclose(res.per_seed, alone.per_seed)


def test_the_measured_noise_is_the_simulated_one() -> None:
    """Read back from 3,000 simulated seeds, within what the seeds' own slope fits take from an
    autocorrelated noise (they absorb some of its slow part: rho and the sd read a little low)."""
    design = ladder_design()
    noise = SurfaceNoise(np.array([0.01, 0.02, 0.015]), 0.6, 0.004, 0.0)
    y = simulate_effects(design, anchor_effects(design)[0], noise, seeds=3000, reps=1, rng=np.random.default_rng(7))[0]
    got = measure_noise(plan_surface(design, 4.76e6, 5000.0), y)
    np.testing.assert_allclose(got.sd, noise.sd, rtol=0.12)
    assert got.rho == pytest.approx(0.6, abs=0.08)
    assert got.slope_sd == pytest.approx(0.004, abs=0.001)


def test_issue_38_a_linear_truth_is_covered_and_a_saturating_one_refused_or_covered() -> None:
    """Done when: the published ladder at the published noise, 200 simulated cards: a log-linear
    truth covered by about 95 % of the intervals shown; a saturating one refused or covered in at
    least 90 % of cards; the card's own path (tables, surface) gives the same rates."""
    rates = done_when(NOISE, cards=200, rng=11, tables=False)
    se = math.sqrt(0.95 * 0.05 / 170)
    assert abs(rates["log-linear"]["coverage"] - 0.95) < 3.5 * se, rates["log-linear"]
    assert rates["saturating"]["refused or covered"] >= 0.90, rates["saturating"]
    small = done_when(NOISE, cards=25, rng=12, tables=True)
    for truth in ("log-linear", "saturating"):
        for key in ("refused", "covered", "missed"):
            assert small[truth]["tables"][key] == pytest.approx(small[truth][key]), (truth, key)


def test_a_cards_calibration_is_reproducible_and_fast_enough_to_print() -> None:
    design, y = _linear_ladder(seeds=4, rng=3)
    plan = plan_surface(design, 4.76e6, 5000.0)
    first = calibrate(plan, y, reps=500, rng=5)
    assert first.to_json() == calibrate(plan, y, reps=500, rng=5).to_json()
    assert set(first.rates) == {"log-linear", "curved", "saturating", "emergent"}
    assert 0.9 <= first.rates["log-linear"]["coverage"] <= 1.0


def test_the_papers_count_is_the_zoos_at_the_papers_size_with_the_studys_vocabulary() -> None:
    setting = load_claims().paper_setting
    assert papers_parameters("baseline", 65, setting) == _papers_count("baseline")
    assert papers_parameters("learned-pe", 65, setting) == _papers_count("learned-pe")
    # the vocabulary is the study's: one more token is one more row of the tied embedding (d = 256)
    assert papers_parameters("baseline", 66, setting) - papers_parameters("baseline", 65, setting) == 256


#: A ladder of custom shapes whose names say nothing of their shape (the presets of these names
#: are other shapes: the results table's columns, not the names, say what was trained).
NAMED_LADDER = {"small": custom_size(2, 2, 64), "medium": custom_size(3, 4, 96), "large": custom_size(4, 4, 128)}


def test_a_ladder_with_sizes_of_any_name_gets_predicted_rows() -> None:
    """Issue 42's test: sizes named small, medium and large (custom shapes, recorded in the
    results table's n_layer, n_head, d_model and vocab_size) are predicted at the papers' size
    as the published ladder is, from the same effects: the same interval, under other names."""
    sizes, _ = ladder_parameters(NAMED_LADDER)
    design = grid_design([(n, p, 2000) for n, p in sizes.items()], 250)
    _, y = _linear_ladder(seeds=6, design=design, rng=2)
    study = simulated_study(design, y, name="named", shapes=NAMED_LADDER)
    assert study.frame.group_by("size").agg(pl.col("d_model").first()).sort("d_model")["size"].to_list() == [
        "small",
        "medium",
        "large",
    ]
    row = row_of(scorecard_table([study]), "ega-gain-ega-paper", kind="predicted")
    assert row["verdict_kind"] != "not predictable", row["verdict"]
    assert row["params"] == _papers_count() and row["levels"] == 3 and row["ci_low"] < row["ci_high"]
    assert "small" in row["where"] and "large" in row["where"]
    published_names = simulated_study(ladder_design(), y, name="named")
    same = row_of(scorecard_table([published_names]), "ega-gain-ega-paper", kind="predicted")
    assert (row["estimate"], row["ci_low"], row["ci_high"]) == pytest.approx(
        (same["estimate"], same["ci_low"], same["ci_high"])
    )


def test_a_table_without_its_vocabulary_is_refused_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    """A table written before vocab_size was kept, read on a machine without its corpus: the
    vocabulary is unknown (never guessed), and the prediction says so; with the corpus here, it
    is the corpus's (TinyShakespeare's 65) and the prediction is the same as the table's own."""
    import harness.scorecard.model_shape as model_shape

    design, y = _linear_ladder(seeds=4, rng=2)
    study = simulated_study(design, y, name="old")
    old = study.frame.drop("vocab_size")
    resolved = row_of(
        scorecard_table([StudyResults("old", old, curves=study.curves)]), "ega-gain-ega-paper", "predicted"
    )
    assert resolved["verdict"] == row_of(scorecard_table([study]), "ega-gain-ega-paper", "predicted")["verdict"]
    monkeypatch.setattr(model_shape, "corpus_vocab_size", lambda dataset: None)  # no corpus on this machine
    table = scorecard_table([StudyResults("old", old, curves=study.curves)])
    row = row_of(table, "ega-gain-ega-paper", kind="predicted")
    assert row["verdict"].startswith("not predictable: the vocabulary of 'tinyshakespeare' is unknown"), row["verdict"]
    assert "$HARNESS_DATA_DIR" in row["verdict"]


def test_the_shipped_calibration_meets_issue_38s_targets() -> None:
    from harness.scorecard.calibration import load_calibration

    stored = load_calibration()["prediction"]
    assert stored["model"] == "linear + interaction + end of run"
    done = stored["done_when"]
    assert done["cards"] == 200 and abs(done["log-linear"]["coverage"] - 0.95) < 0.05
    assert done["saturating"]["refused or covered"] >= 0.90
    assert done["saturating"]["tables"]["missed"] == pytest.approx(done["saturating"]["missed"])
