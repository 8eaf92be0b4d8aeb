"""The paired tests as objects (harness.analysis.paired_tests) against oracles: the t-test and
TOST computed by hand, the sign flip enumerated over all 2^n patterns, scipy's bootstrap and
Shapiro-Wilk; one object for one study and for a batch; a contrast keeps the tests it ran and
reads its old flat names off them."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import polars as pl
import pytest
from numpy.testing import assert_allclose
from scipy import stats

from harness.analysis import TOST, BCa, ContrastResult, Shapiro, SignFlip, TestResult, TTest, main_effect
from harness.analysis.paired_tests import PairedTest
from harness.analysis.results_types import BCA_TEST, BOOTSTRAP_SMALL_N, SHAPE_CHECK, SIGN_FLIP_TEST, T_TEST
from harness.analysis.shape import SHAPE_ALPHA, shape_check

DIFFS = np.array([0.031, -0.004, 0.022, 0.017, 0.040, 0.009, -0.012])


def test_every_test_is_a_frozen_paired_test_returning_a_frozen_result() -> None:
    for test in (TTest(), SignFlip(), BCa(), TOST(0.0, 0.05), Shapiro()):
        assert isinstance(test, PairedTest)
        result = test.run(DIFFS, rng=0)
        assert isinstance(result, TestResult) and result.method
        with pytest.raises(dataclasses.FrozenInstanceError):
            result.note = "changed"  # type: ignore[misc]
        with pytest.raises(dataclasses.FrozenInstanceError):
            test.x = 1  # type: ignore[attr-defined]


def test_t_test_equals_hand_computation() -> None:
    n, mean, sd = len(DIFFS), DIFFS.mean(), DIFFS.std(ddof=1)
    half = stats.t.ppf(0.95, n - 1) * sd / math.sqrt(n)
    res = TTest(confidence=0.9).run(DIFFS)
    assert_allclose([res.estimate, *res.interval], [mean, mean - half, mean + half], rtol=1e-12)
    assert res.p_value == pytest.approx(2 * stats.t.sf(abs(mean / (sd / math.sqrt(n))), n - 1), rel=1e-10)
    assert res.rejects(0.5) == (res.p_value < 0.5)


def test_sign_flip_equals_enumeration_of_every_sign_pattern() -> None:
    observed = abs(DIFFS.mean())
    flips = [np.mean(DIFFS * np.array(signs)) for signs in itertools.product((-1, 1), repeat=len(DIFFS))]
    expected = np.mean(np.abs(flips) >= observed - 1e-15)
    res = SignFlip().run(DIFFS)
    assert res.p_value == pytest.approx(expected) and res.interval is None
    assert "exact" in res.method and res.note == ""
    assert SignFlip().run(DIFFS[:4]).note == "4 seeds: the smallest possible sign-flip p-value is 0.125"


def test_bca_is_scipys_bootstrap_and_none_below_ten_seeds() -> None:
    values = np.random.default_rng(3).normal(0.02, 0.01, 12)
    res = BCa(n_resamples=999).run(values, rng=5)
    ref = stats.bootstrap((values,), np.mean, n_resamples=999, method="BCa", rng=5).confidence_interval
    assert_allclose(res.interval, [ref.low, ref.high], rtol=1e-12)
    small = BCa().run(DIFFS, rng=0)
    assert small.interval is None and small.note == BOOTSTRAP_SMALL_N


def test_tost_equals_two_one_sided_t_tests() -> None:
    values = np.random.default_rng(1).normal(0.35, 0.02, 12)
    res = TOST(0.35, 0.05, confidence=0.95).run(values)
    p_low = stats.ttest_1samp(values, 0.30, alternative="greater").pvalue
    p_high = stats.ttest_1samp(values, 0.40, alternative="less").pvalue
    assert res.p_value == pytest.approx(max(p_low, p_high), rel=1e-12)
    ninety = stats.ttest_1samp(values, 0.35).confidence_interval(confidence_level=0.9)
    assert_allclose(res.interval, [ninety.low, ninety.high], rtol=1e-12)
    assert res.rejects(0.05) and res.interval.inside(0.30, 0.40)


def test_shapiro_is_the_shape_check() -> None:
    skewed = np.array([0.0, 0.01, 0.02, 0.01, 0.0, 0.5, 0.02, 0.01, 0.0, 0.01])
    res, check = Shapiro().run(skewed), shape_check(skewed)
    assert (res.p_value, res.estimate) == (check.pvalue, check.skewness) and res.note == check.words
    assert Shapiro().fires(skewed) == check.fires == (check.pvalue < SHAPE_ALPHA)
    assert Shapiro().run(DIFFS[:2]).p_value is None and not Shapiro().fires(DIFFS[:2])


def test_one_object_runs_one_study_and_a_batch_alike() -> None:
    batch = np.random.default_rng(2).normal(0.0, 1.0, (6, 8))
    for test in (TTest(), SignFlip(n_resamples=64), TOST(0.0, 0.5), Shapiro()):
        together = test.run(batch, rng=0)
        for i, study in enumerate(batch):
            alone = test.run(study, rng=0)
            if alone.p_value is not None and "random" not in alone.method:
                assert together.p_value[i] == pytest.approx(alone.p_value, rel=1e-12)
            if alone.interval is not None:
                assert_allclose([together.interval.low[i], together.interval.high[i]], alone.interval, rtol=1e-12)
    assert Shapiro().fires(batch[:, :2]).tolist() == [False] * 6


def test_a_contrast_holds_the_tests_it_ran_and_reads_its_old_names_off_them() -> None:
    gen = np.random.default_rng(4)
    rows = [
        {"variant": v, "seed": s, "val_loss": 1.4 + u - (0.02 if v == "ega" else 0.0) + gen.normal(0, 0.01)}
        for s, u in enumerate(gen.normal(0, 0.03, 11))
        for v in ("baseline", "ega")
    ]
    res = main_effect(pl.DataFrame(rows), "ega", rng=0)
    assert isinstance(res, ContrastResult) and set(res.tests) == {T_TEST, BCA_TEST, SIGN_FLIP_TEST, SHAPE_CHECK}
    assert res.confidence_interval == res.tests[T_TEST].interval and res.pvalue == res.tests[T_TEST].p_value
    assert res.bootstrap_interval == res.tests[BCA_TEST].interval and res.bootstrap_method == "BCa"
    assert res.permutation_pvalue == res.tests[SIGN_FLIP_TEST].p_value
    assert res.shape == shape_check(res.per_seed)
    assert res.tests[T_TEST] == TTest().run(res.per_seed)
    with pytest.raises(TypeError):
        res.tests["t"] = res.tests[BCA_TEST]  # type: ignore[index]
    one = main_effect(pl.DataFrame(rows[:2]), "ega")
    assert one.tests == {} and one.confidence_interval is None and one.shape is None
