"""Contrasts against oracles: hand-computed t-intervals, exact sign-flip enumeration,
scipy's bootstrap, statsmodels' Holm and power, pooled OLS; a calibration study."""

from __future__ import annotations

import itertools
import math

import numpy as np
import polars as pl
import pytest
from numpy.testing import assert_allclose
from scipy import stats

from harness.analysis import (
    effect_trend,
    effects_table,
    interaction_contrast,
    linear_contrast,
    main_effect,
    multi_bootstrap,
    seeds_needed,
)
from harness.errors import InputError

PAPER = pl.DataFrame(
    {"variant": ["baseline", "ega", "mope", "ega-mope"], "seed": [0] * 4, "val_loss": [1.4742, 1.3821, 1.5060, 1.3550]}
)


def _factorial(per_seed: dict[str, list[float]]) -> pl.DataFrame:
    rows = [{"variant": v, "seed": s, "val_loss": x} for v, xs in per_seed.items() for s, x in enumerate(xs)]
    return pl.DataFrame(rows)


def test_papers_single_seed_numbers_give_0_0589_and_no_interval() -> None:
    res = interaction_contrast(PAPER)
    assert res.estimate == pytest.approx(1.3821 + 1.5060 - 1.4742 - 1.3550)
    assert round(res.estimate, 4) == 0.0589
    assert res.n_seeds == 1 and res.confidence_interval is None and res.pvalue is None
    assert "needs at least 2 seeds" in res.message
    assert res.verdict == "no test possible (1 seed)"
    gain = main_effect(PAPER, "ega")
    assert gain.estimate == pytest.approx(1.4742 - 1.3821)


def test_t_interval_equals_hand_computation(make_study) -> None:
    df = make_study(seeds=7, rng=3)
    res = interaction_contrast(df, confidence=0.9, rng=0)
    wide = df.pivot(on="variant", index="seed", values="val_loss").sort("seed")
    per_seed = (wide["ega"] + wide["mope"] - wide["baseline"] - wide["ega-mope"]).to_numpy()
    n, mean, sd = len(per_seed), per_seed.mean(), per_seed.std(ddof=1)
    half = stats.t.ppf(0.95, n - 1) * sd / math.sqrt(n)
    assert_allclose(res.per_seed, per_seed, rtol=0, atol=1e-12)
    assert_allclose([res.estimate, *res.confidence_interval], [mean, mean - half, mean + half], rtol=1e-12)
    t = mean / (sd / math.sqrt(n))
    assert res.pvalue == pytest.approx(2 * stats.t.sf(abs(t), n - 1), rel=1e-10)
    assert res.sd == pytest.approx(sd)
    assert res.seeds == tuple(range(7)) and res.n_dropped == 0


def test_main_effect_sign_and_verdict() -> None:
    df = _factorial({"baseline": [1.50, 1.52, 1.49, 1.51], "ega": [1.40, 1.41, 1.40, 1.42]})
    res = main_effect(df, "ega", "baseline", rng=0)
    assert_allclose(res.per_seed, [0.10, 0.11, 0.09, 0.09], atol=1e-12)
    assert res.estimate > 0 and res.confidence_interval.low > 0
    assert res.verdict.startswith("better than control")
    worse = main_effect(df, "baseline", "ega", rng=0)
    assert worse.estimate == pytest.approx(-res.estimate) and worse.verdict.startswith("worse")


def test_sign_flip_pvalue_is_exact_enumeration() -> None:
    values = {"baseline": [1.5, 1.5, 1.5, 1.5, 1.5, 1.5], "ega": [1.4, 1.45, 1.52, 1.38, 1.41, 1.47]}
    res = main_effect(_factorial(values), "ega", rng=1)
    d = np.array(values["baseline"]) - np.array(values["ega"])
    signs = np.array(list(itertools.product([-1.0, 1.0], repeat=len(d))))  # (64, 6)
    null = signs @ d / len(d)
    expected = np.mean(np.abs(null) >= abs(d.mean()) - 1e-12)
    assert res.permutation_pvalue == pytest.approx(expected)


def test_bootstrap_interval_is_bca_from_10_seeds_and_absent_below() -> None:
    """Below 10 seeds a bootstrap over seeds under-covers (47 % at n = 2): no interval,
    and the message says why; from 10 seeds the BCa interval, equal to scipy's."""
    gen = np.random.default_rng(4)
    for n in (2, 3, 5, 9):
        base = 1.5 + gen.normal(0, 0.02, n)
        df = _factorial({"baseline": base.tolist(), "ega": (base - 0.05 + gen.normal(0, 0.02, n)).tolist()})
        res = main_effect(df, "ega", rng=0, n_resamples=999)
        assert res.bootstrap_interval is None and res.bootstrap_method is None
        assert "no bootstrap interval below 10 seeds" in res.message
        assert res.to_row()["boot_low"] is None and res.confidence_interval is not None
    for n in (10, 12):
        base = 1.5 + gen.normal(0, 0.02, n)
        df = _factorial({"baseline": base.tolist(), "ega": (base - 0.05 + gen.normal(0, 0.02, n)).tolist()})
        res = main_effect(df, "ega", rng=np.random.default_rng(11), n_resamples=2000)
        expected = stats.bootstrap(
            (res.per_seed,), np.mean, n_resamples=2000, method="BCa", rng=np.random.default_rng(11)
        ).confidence_interval
        assert res.bootstrap_method == "BCa"
        assert_allclose(res.bootstrap_interval, [expected.low, expected.high], rtol=1e-12)


def test_incomplete_seed_blocks_are_dropped_and_counted(make_study) -> None:
    df = make_study(seeds=5, rng=1)
    df = df.with_columns(
        pl.when((pl.col("seed") == 1) & (pl.col("variant") == "mope"))
        .then(pl.lit("diverged"))
        .otherwise(pl.col("status"))
        .alias("status")
    ).filter(~((pl.col("seed") == 3) & (pl.col("variant") == "ega")))  # seed 3's ega trial never ran
    res = interaction_contrast(df, rng=0)
    assert res.n_seeds == 3 and res.n_dropped == 2 and res.dropped_seeds == (1, 3)
    assert res.seeds == (0, 2, 4)
    assert "dropped 2 incomplete seed block" in res.message
    # a main effect that does not involve mope keeps seed 1
    assert main_effect(df, "ega-mope", rng=0).n_seeds == 5


def test_zero_complete_blocks_is_a_message_not_an_error() -> None:
    df = _factorial({"baseline": [1.5, 1.5], "ega": [1.4, 1.4]}).with_columns(
        pl.when(pl.col("variant") == "ega").then(pl.lit("failed")).otherwise(pl.lit("finished")).alias("status")
    )
    res = main_effect(df, "ega", rng=0)
    assert res.n_seeds == 0 and math.isnan(res.estimate) and res.confidence_interval is None
    assert "no complete seed block" in res.message and res.n_dropped == 2


@pytest.mark.parametrize(
    ("call", "needle"),
    [
        (lambda df: interaction_contrast(df, ab="ega-rope"), "ega-rope"),
        (lambda df: main_effect(df, "alibi"), "alibi"),
        (lambda df: interaction_contrast(df, metric="val_los"), "val_los"),
        (lambda df: interaction_contrast(df.head(0)), "empty"),
        (lambda df: interaction_contrast(df.drop("seed")), "seed"),
        (lambda df: interaction_contrast(df.with_columns(pl.col("val_loss").cast(pl.String))), "numeric"),
        (lambda df: interaction_contrast(df, confidence=95), "confidence"),
        (lambda df: interaction_contrast(pl.concat([df, df])), "duplicate"),
    ],
)
def test_bad_input_raises_input_error_naming_it(make_study, call, needle) -> None:
    df = make_study(seeds=3)
    with pytest.raises(InputError, match=needle):
        call(df)
    assert issubclass(InputError, ValueError)


def test_calibration_95_percent_t_intervals_cover_the_truth() -> None:
    """400 simulated studies, 5 seeds each, true interaction +0.03 under a strong shared
    seed effect plus independent trial noise: the 95 % t-interval must cover 92-98 %."""
    gen = np.random.default_rng(20260601)
    n_studies, n_seeds = 400, 5
    mu = np.array([1.50, 1.42, 1.51, 1.40])  # baseline, ega, mope, ega-mope
    truth = mu[1] + mu[2] - mu[0] - mu[3]
    seed_effect = gen.normal(0.0, 0.05, (n_studies, n_seeds, 1))
    losses = mu + seed_effect + gen.normal(0.0, 0.01, (n_studies, n_seeds, 4))  # (studies, seeds, variants)
    study = np.repeat(np.arange(n_studies), n_seeds * 4)
    table = pl.DataFrame(
        {
            "dataset": study.astype(str),  # one cell per simulated study
            "variant": np.tile(np.array(["baseline", "ega", "mope", "ega-mope"]), n_studies * n_seeds),
            "seed": np.tile(np.repeat(np.arange(n_seeds), 4), n_studies),
            "val_loss": losses.ravel(),
        }
    )
    covered = 0
    for cell in table.partition_by("dataset", maintain_order=True):
        ci = interaction_contrast(cell, rng=0, n_resamples=99).confidence_interval
        covered += ci.low <= truth <= ci.high
    assert 0.92 <= covered / n_studies <= 0.98, covered / n_studies


def test_several_cells_are_averaged_within_seed(make_study) -> None:
    df = make_study(seeds=4, contexts=(128, 256), rng=2)
    pooled = interaction_contrast(df, rng=0)
    per_cell = [interaction_contrast(d, rng=0) for d in df.partition_by("context_length", maintain_order=True)]
    assert pooled.n_cells == 2 and "averaged over 2 cells" in pooled.message
    assert_allclose(pooled.per_seed, (per_cell[0].per_seed + per_cell[1].per_seed) / 2, atol=1e-12)


def test_linear_contrast_generalises_main_effect(make_study) -> None:
    df = make_study(seeds=4)
    a = linear_contrast(df, {"baseline": 1.0, "ega": -1.0}, rng=0)
    b = main_effect(df, "ega", rng=0)
    assert_allclose(a.per_seed, b.per_seed)
    assert a.confidence_interval == b.confidence_interval


def test_effects_table_holm_matches_statsmodels(make_study) -> None:
    from statsmodels.stats.multitest import multipletests

    df = make_study(seeds=4, contexts=(64, 128, 256), rng=5)
    table = effects_table(df, rng=0, n_resamples=199)
    assert table.height == 3 * 4  # 3 cells x (3 main effects + interaction)
    assert set(table.get_column("context_length").to_list()) == {64, 128, 256}
    p = table.get_column("pvalue").to_numpy()
    reject, adjusted, _, _ = multipletests(p, alpha=0.05, method="holm")
    assert_allclose(table.get_column("pvalue_holm").to_numpy(), adjusted)
    assert table.get_column("reject_holm").to_list() == reject.tolist()
    # per-effect families: each effect adjusted across its 3 cells only
    fam = effects_table(df, rng=0, n_resamples=199, holm_family="effect")
    sub = fam.filter(pl.col("kind") == "interaction")
    assert_allclose(
        sub.get_column("pvalue_holm").to_numpy(), multipletests(sub.get_column("pvalue").to_numpy(), method="holm")[1]
    )
    # each row equals the contrast computed on its cell alone
    cell = df.filter(pl.col("context_length") == 128)
    row = table.filter((pl.col("context_length") == 128) & (pl.col("kind") == "interaction"))
    assert row["estimate"][0] == pytest.approx(interaction_contrast(cell, rng=0).estimate)


def test_multi_bootstrap_over_seeds_and_windows() -> None:
    gen = np.random.default_rng(8)
    n_seeds, n_windows = 10, 40
    mu = {"baseline": 1.50, "ega": 1.42, "mope": 1.51, "ega-mope": 1.40}
    window_difficulty = gen.normal(0, 0.3, n_windows)
    rows = []
    for s in range(n_seeds):
        u = gen.normal(0, 0.03)
        for v, m in mu.items():
            for w in range(n_windows):
                rows.append(
                    {"variant": v, "seed": s, "window": w, "loss": m + u + window_difficulty[w] + gen.normal(0, 0.05)}
                )
    windows = pl.DataFrame(rows)
    res = multi_bootstrap(windows, rng=0)
    per_seed_means = windows.group_by("variant", "seed").agg(pl.col("loss").mean().alias("val_loss"))
    seed_only = interaction_contrast(per_seed_means, rng=0)
    assert res.estimate == pytest.approx(seed_only.estimate)
    assert_allclose(res.per_seed, seed_only.per_seed, atol=1e-12)
    assert res.confidence_interval.low < res.estimate < res.confidence_interval.high
    # with no window-level noise in the contrast, resampling windows adds nothing: same width as seeds alone
    flat = windows.with_columns(pl.col("loss").mean().over("variant", "seed"))
    narrow = multi_bootstrap(flat, rng=0)
    wide_width = res.confidence_interval.high - res.confidence_interval.low
    assert narrow.confidence_interval.high - narrow.confidence_interval.low < wide_width
    gain = multi_bootstrap(windows, treatment="ega", rng=0)
    assert gain.estimate == pytest.approx(0.08, abs=0.03)
    with pytest.raises(InputError, match="one cell"):
        multi_bootstrap(windows.with_columns(pl.col("seed").mod(2).alias("context_length")))
    # below 10 seeds no interval: resampling seeds under-covers there, windows or not
    few = multi_bootstrap(windows.filter(pl.col("seed") < 6), rng=0)
    assert few.confidence_interval is None and "no bootstrap interval below 10 seeds" in few.message
    assert few.estimate == pytest.approx(interaction_contrast(per_seed_means.filter(pl.col("seed") < 6)).estimate)


def test_trend_recovers_a_known_slope_and_matches_pooled_ols(make_study) -> None:
    import statsmodels.api as sm

    df = make_study(seeds=8, contexts=(128, 256, 512, 1024), ega_context_slope=0.02, noise_sd=0.005, rng=9)
    res = effect_trend(df, against="context_length", treatment="ega")
    per_doubling = 0.02 * np.log(2.0)  # the study's slope is per e-fold; the trend's unit is a doubling
    assert res.confidence_interval.low < per_doubling < res.confidence_interval.high
    assert res.verdict.startswith("effect grows with context")
    # balanced design: mean of per-seed slopes == pooled OLS slope
    wide = df.pivot(on="variant", index=["seed", "context_length"], values="val_loss")
    y = (wide["baseline"] - wide["ega"]).to_numpy()
    x = np.log2(wide["context_length"].to_numpy().astype(float))
    ols = sm.OLS(y, sm.add_constant(x)).fit()
    assert res.estimate == pytest.approx(ols.params[1], rel=1e-10)
    cluster = effect_trend(df, against="context_length", treatment="ega", method="cluster")
    assert cluster.estimate == pytest.approx(ols.params[1], rel=1e-10)
    assert cluster.confidence_interval.low < per_doubling < cluster.confidence_interval.high
    flat = effect_trend(df, against="context_length")  # the interaction has no trend here
    assert flat.confidence_interval.low < 0 < flat.confidence_interval.high
    assert flat.verdict == "slope against context not distinguishable from 0"


def test_trend_against_params_uses_log_parameter_count(make_study) -> None:
    df = make_study(seeds=4, sizes=(("nano", 10_000), ("small", 100_000), ("paper", 1_000_000)), rng=2)
    res = effect_trend(df, against="params", treatment="ega")
    assert_allclose(res.x_values, [10_000, 100_000, 1_000_000])
    assert res.n_seeds == 4
    with pytest.raises(InputError, match="2 distinct"):
        effect_trend(make_study(seeds=3), against="context_length")


def test_seeds_needed_matches_statsmodels_power() -> None:
    from statsmodels.stats.power import TTestPower

    for effect, sd in ((0.02, 0.03), (0.059, 0.05), (0.005, 0.02)):
        res = seeds_needed(effect=effect, sd=sd, power=0.8, alpha=0.05)
        expected = math.ceil(TTestPower().solve_power(effect_size=effect / sd, power=0.8, alpha=0.05))
        assert res.n_seeds == max(expected, 2)
        power = TTestPower().power(effect_size=effect / sd, nobs=res.n_seeds, alpha=0.05)
        assert power >= 0.8
    assert seeds_needed(effect=0.0, sd=0.1).n_seeds is None
    contrast = main_effect(_factorial({"baseline": [1.5, 1.52, 1.49], "ega": [1.45, 1.5, 1.46]}), "ega", rng=0)
    from_result = seeds_needed(contrast)
    assert from_result.sd == pytest.approx(contrast.sd) and from_result.effect == pytest.approx(contrast.estimate)
    with pytest.raises(InputError, match="sd"):
        seeds_needed(interaction_contrast(PAPER))
