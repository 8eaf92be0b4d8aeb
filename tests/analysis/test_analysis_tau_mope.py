"""tau's equivalence test against a hand computation, heterogeneity against scipy, the
open fraction against 1 - Phi(tau), and the clustering of MOPE widths."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from numpy.testing import assert_allclose
from scipy import stats

from harness.analysis import mope_scales, open_fraction_analysis, tau_heterogeneity, tau_stability, tost_pvalue
from harness.errors import InputError


def test_tost_equals_hand_computation() -> None:
    x = np.array([0.31, 0.36, 0.34, 0.38, 0.33, 0.35, 0.37])
    n, m, se = len(x), x.mean(), x.std(ddof=1) / math.sqrt(len(x))
    p_low = stats.t.sf((m - 0.30) / se, n - 1)  # H0: mean <= 0.30
    p_high = stats.t.cdf((m - 0.40) / se, n - 1)  # H0: mean >= 0.40
    assert tost_pvalue(x, 0.30, 0.40) == pytest.approx(max(p_low, p_high), rel=1e-12)
    df = pl.DataFrame({"seed": list(range(n)), "tau_mean": x})
    res = tau_stability(df, reference=0.35, margin=0.05)
    assert res.tost_pvalue == pytest.approx(max(p_low, p_high), rel=1e-12)
    half = stats.t.ppf(0.975, n - 1) * se
    assert_allclose(res.confidence_interval, [m - half, m + half], rtol=1e-12)
    assert res.equivalent and "equivalent" in res.verdict and "TOST p=" in res.verdict
    # the (1 - 2 alpha) interval that goes with TOST: 90 % for alpha 0.05, inside the band
    half90 = stats.t.ppf(0.95, n - 1) * se
    assert_allclose(res.equivalence_interval, [m - half90, m + half90], rtol=1e-12)
    assert 0.30 < res.equivalence_interval.low and res.equivalence_interval.high < 0.40


def test_tau_far_from_reference_is_not_equivalent(make_study) -> None:
    df = make_study(seeds=6, tau_mean=0.12, tau_sd=0.03)
    res = tau_stability(df)
    assert not res.equivalent and not res.stable
    # two gated variants per seed (ega, ega-mope): one prediction interval per variant
    assert res.verdict.startswith("not stable: in cell ega") and "a new seed's run falls in [" in res.verdict
    assert "mean not shown equivalent to 0.35 ± 0.05 (TOST p=" in res.verdict
    assert res.tost_pvalue > 0.5 and res.pvalue < 1e-3
    # seeds are the units: 6 seeds, 12 gated runs (ega and ega-mope)
    assert res.n_seeds == 6 and res.n_runs == 12
    expected = df.filter(pl.col("tau_mean").is_not_null()).group_by("seed").agg(pl.col("tau_mean").mean()).sort("seed")
    assert_allclose(res.per_seed, expected["tau_mean"].to_numpy())


def test_one_seed_gives_a_message_and_wide_margin_is_needed() -> None:
    res = tau_stability(pl.DataFrame({"seed": [0], "tau_mean": [0.35]}))
    assert res.confidence_interval is None and res.tost_pvalue is None and not res.equivalent
    assert "needs at least 2 seeds" in res.message and res.verdict == "no test possible (1 seed)"
    assert res.prediction_interval is None and not res.stable


def test_unfinished_gated_runs_are_dropped(make_study) -> None:
    df = make_study(seeds=4).with_columns(
        pl.when((pl.col("variant") == "ega") & (pl.col("seed") == 0))
        .then(pl.lit("diverged"))
        .otherwise(pl.col("status"))
        .alias("status")
    )
    res = tau_stability(df)
    assert res.n_dropped == 1 and res.n_runs == 7


def test_heterogeneity_nested_matches_scipy_and_detects_dependence_on_init() -> None:
    """Each seed runs one initial value (nested): one-way ANOVA on the per-seed means."""
    gen = np.random.default_rng(3)
    rows = [
        {"seed": 10 * k + s, "tau_init": init, "variant": v, "tau_mean": 0.35 + 0.2 * init + gen.normal(0, 0.02)}
        for k, init in enumerate((0.0, 0.5, 1.0))
        for s in range(5)
        for v in ("ega", "ega-mope")
    ]
    df = pl.DataFrame(rows)
    res = tau_heterogeneity(df, "tau_init")
    seed_means = df.group_by("tau_init", "seed").agg(pl.col("tau_mean").mean())
    groups = [seed_means.filter(pl.col("tau_init") == i)["tau_mean"].to_numpy() for i in (0.0, 0.5, 1.0)]
    assert res.design == "nested" and res.levels == ("0.0", "0.5", "1.0") and res.group_sizes == (5, 5, 5)
    assert res.pvalue == pytest.approx(stats.f_oneway(*groups).pvalue)
    assert res.rank_pvalue == pytest.approx(stats.kruskal(*groups).pvalue)
    assert res.pvalue < 1e-4 and res.verdict.startswith("differs across tau_init (ANOVA on seed means p=")
    stab = tau_stability(df)
    assert [h.factor for h in stab.heterogeneity] == ["tau_init", "variant"]


def test_mean_reads_the_reference_initial_value_when_tau_starts_at_several() -> None:
    """Runs started at -0.5, 0 and 0.7 that end at -0.15, 0.2 and 1.0: pooled, their mean
    (0.35) sits in the band though no run does; the mean reads tau_init = 0 (as the contrasts
    do) and stability still looks at every initial value."""
    gen = np.random.default_rng(5)
    ends = {-0.5: -0.15, 0.0: 0.2, 0.7: 1.0}
    rows = [
        {"seed": s, "tau_init": init, "variant": "ega", "tau_mean": end + gen.normal(0, 0.01)}
        for s in range(6)
        for init, end in ends.items()
    ]
    res = tau_stability(pl.DataFrame(rows))
    at_zero = [r["tau_mean"] for r in rows if r["tau_init"] == 0.0]
    assert res.mean_tau_init == 0.0 and res.n_seeds == 6 and res.n_runs == 18
    assert res.estimate == pytest.approx(np.mean(at_zero))
    assert not res.equivalent and not res.stable and len(res.cells) == 3
    assert "at tau_init = 0" in res.method
    one_start = tau_stability(pl.DataFrame([r for r in rows if r["tau_init"] == 0.0]))
    assert one_start.mean_tau_init is None and one_start.estimate == pytest.approx(res.estimate)


def test_open_fraction_against_gaussian_tail_and_content_fraction(make_study) -> None:
    df = make_study(seeds=8, rng=4)  # open fraction = 1 - Phi(tau) + zero-mean noise
    res = open_fraction_analysis(df, content_fraction={"tinyshakespeare": 0.41})
    tails = stats.norm.sf(df.filter(pl.col("tau_mean").is_not_null())["tau_mean"].to_numpy())
    assert res.gaussian_tail == pytest.approx(tails.mean())
    assert res.difference_interval.low < 0 < res.difference_interval.high
    assert res.content_fraction == pytest.approx(0.41)
    assert "consistent with the Gaussian tail" in res.verdict
    # a gate that tracks content (open = 0.45 whatever tau) is told apart from the tail
    content = df.with_columns(
        pl.when(pl.col("tau_mean").is_not_null()).then(0.45).alias("open_fraction"),
        pl.lit(0.45).alias("salient_fraction"),
    )
    res2 = tau_stability(content).open_fraction
    assert res2.difference_interval.low > 0 and res2.ground_truth == pytest.approx(0.45)
    assert "differs from the Gaussian tail" in res2.verdict


def test_tau_bad_input() -> None:
    with pytest.raises(InputError, match="tau_mean"):
        tau_stability(pl.DataFrame({"seed": [0, 1], "val_loss": [1.0, 1.1]}))
    with pytest.raises(InputError, match="no finished run has a learned tau"):
        tau_stability(
            pl.DataFrame({"seed": [0, 1], "tau_mean": [None, None]}, schema={"seed": pl.Int64, "tau_mean": pl.Float64})
        )
    with pytest.raises(InputError, match="empty"):
        tau_stability(pl.DataFrame(schema={"tau_mean": pl.Float64}))
    with pytest.raises(InputError, match="margin"):
        tau_stability(pl.DataFrame({"tau_mean": [0.3, 0.4]}), margin=0.0)


def test_mope_scales_finds_the_planted_clusters() -> None:
    gen = np.random.default_rng(0)
    true_centres = np.array([1.0, 5.0, 40.0, 120.0])
    log_sigma = np.concatenate([gen.normal(np.log(c), 0.12, 40) for c in true_centres])
    res = mope_scales(
        np.exp(log_sigma), rng=0, corpus_lengths={"character": 1, "word": 5.5, "clause": 35, "sentence": 110}
    )
    assert res.k == 4 and res.criterion == "bic"
    assert_allclose(np.log(res.centres), np.log(true_centres), atol=0.1)
    assert res.nearest_scale == ("character", "word", "clause", "sentence")
    assert min(res.scores, key=res.scores.get) == 4
    one = mope_scales(pl.DataFrame({"sigma": np.exp(gen.normal(2.0, 0.1, 60))}), rng=0)
    assert one.k == 1
    with pytest.raises(InputError, match="positive"):
        mope_scales([1.0, -2.0])
    with pytest.raises(InputError, match="empty"):
        mope_scales([])


def test_corpus_info_from_the_shared_corpora(shared_data_dir) -> None:
    pytest.importorskip("harness.datasets")
    from harness.analysis import corpus_info_for
    from harness.datasets import corpus_stats_for

    info = corpus_info_for(["tinyshakespeare", "no-such-corpus"], data_dir=str(shared_data_dir))
    assert set(info) == {"tinyshakespeare"}  # an unreadable corpus is left out, not fatal
    expected = corpus_stats_for("tinyshakespeare", split="val", data_dir=str(shared_data_dir), download=False)
    assert info["tinyshakespeare"]["content_fraction"] == pytest.approx(expected.content_word_fraction)
    assert info["tinyshakespeare"]["mean_word_length"] == pytest.approx(expected.mean_word_length)
