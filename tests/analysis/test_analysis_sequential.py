"""The anytime-valid confidence sequence: its closed form against a numerical integration
of the mixture it comes from, its time-uniform error under peeking (simulated, with the
naive t-interval's rate beside it), scale-freeness, shrinking, and its edge cases."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
from scipy import integrate, optimize, stats

from harness.analysis import confidence_sequence
from harness.analysis.results_types import NOT_DISTINGUISHABLE, NOT_TESTABLE, SETTLED
from harness.analysis.sequential import (
    confidence_sequence_path,
    half_width_factor,
    log_mixture_martingale,
    mixture_precision_for,
    sequential_verdict,
    sequential_verdict_kind,
    t_interval_path,
)
from harness.errors import InputError


def _mixture_by_quadrature(y: np.ndarray, c: float) -> float:
    """M_n(0) straight from its definition: the likelihood of N(theta sigma, sigma^2)
    mixed over theta ~ N(0, 1/c) and sigma ~ d sigma / sigma, over the same without theta.
    With u = 1/sigma the Haar measure is du/u and the Gaussian factors become:"""
    n, s, q = len(y), float(np.sum(y)), float(np.sum(y * y))

    def alternative(theta: float, u: float) -> float:
        return (
            u ** (n - 1)
            * math.exp(-q * u * u / 2 + theta * s * u - n * theta * theta / 2)
            * stats.norm.pdf(theta, scale=1 / math.sqrt(c))
        )

    def null(u: float) -> float:
        return u ** (n - 1) * math.exp(-q * u * u / 2)

    scale = 1 / math.sqrt(q / n)  # where the integrands live
    num, _ = integrate.dblquad(alternative, 0, 12 * scale, -12 / math.sqrt(c) - 12, 12 / math.sqrt(c) + 12)
    den, _ = integrate.quad(null, 0, 12 * scale)
    return num / den


@pytest.mark.parametrize("c", [0.3, 1.0, 4.0])
def test_closed_form_matches_the_mixture_integral(c: float) -> None:
    y = np.array([0.8, -0.1, 1.3, 0.4, 0.9])
    assert math.exp(log_mixture_martingale(y, 0.0, c)) == pytest.approx(_mixture_by_quadrature(y, c), rel=1e-5)
    assert log_mixture_martingale(y[:1], 0.0, c) == 0.0  # M_1 = 1: the first seed only sets the scale


def test_the_interval_is_where_the_martingale_crosses_one_over_alpha() -> None:
    x = np.array([0.021, 0.034, 0.012, 0.027, 0.030, 0.018, 0.025])
    res = confidence_sequence(x, tightest_at=6)
    excess = lambda m: log_mixture_martingale(x, m, res.mixture_precision) - math.log(1 / 0.05)  # noqa: E731
    low = optimize.brentq(excess, res.estimate - 1.0, res.estimate)
    high = optimize.brentq(excess, res.estimate, res.estimate + 1.0)
    assert (res.low, res.high) == pytest.approx((low, high), rel=1e-9)
    # the anytime-valid p-value: below alpha exactly when the interval excludes the null
    assert res.pvalue < 0.05 and res.low > 0
    shifted = confidence_sequence(x, tightest_at=6, popmean=res.low + 1e-9)
    assert shifted.pvalue == pytest.approx(0.05, rel=1e-5)


def test_error_under_peeking_after_every_seed_stays_below_alpha() -> None:
    """20,000 null studies peeked at after every seed from 2 to 40: how often does some
    interval exclude the true mean? The CS: at most 5 %; the fixed-n t-interval: far more."""
    rng = np.random.default_rng(20260613)
    values = rng.normal(0.3, 2.0, size=(20_000, 40))  # any mean, any scale
    cs = confidence_sequence_path(values, tightest_at=10)
    naive = t_interval_path(values)
    error_cs = float(np.mean(np.any((cs.low[:, 1:] > 0.3) | (cs.high[:, 1:] < 0.3), axis=1)))
    error_t = float(np.mean(np.any((naive.low[:, 1:] > 0.3) | (naive.high[:, 1:] < 0.3), axis=1)))
    print(f"\nerror rate when peeking after every seed, n = 2..40: confidence sequence {error_cs:.3f}, t {error_t:.3f}")
    assert error_cs <= 0.05 - 2 * math.sqrt(0.05 * 0.95 / 20_000)  # clear of Monte-Carlo noise
    assert error_t > 0.2  # the peeking problem is real: several times the nominal 5 %
    # ... and for the batches of a sequential study (3, 5, ..., 19, 20 seeds), tuned as the study tunes it
    looks = [2, 4, 6, 8, 10, 12, 14, 16, 18, 19]
    cs = confidence_sequence_path(values[:, :20], tightest_at=math.sqrt(3 * 20))
    error_cs = float(np.mean(np.any((cs.low[:, looks] > 0.3) | (cs.high[:, looks] < 0.3), axis=1)))
    error_t = float(np.mean(np.any((naive.low[:, looks] > 0.3) | (naive.high[:, looks] < 0.3), axis=1)))
    print(f"error rate for batches 3, 5, ..., 19, 20 seeds: confidence sequence {error_cs:.3f}, t {error_t:.3f}")
    assert error_cs <= 0.05 and error_t > 0.12


def test_path_equals_the_one_shot_interval_at_every_prefix() -> None:
    x = np.random.default_rng(3).normal(size=15)
    path = confidence_sequence_path(x, tightest_at=5)
    for k in range(2, 16):
        one = confidence_sequence(x[:k], tightest_at=5)
        assert (path.low[k - 1], path.high[k - 1]) == pytest.approx((one.low, one.high), rel=1e-9)


def test_scale_free_and_shift_equivariant() -> None:
    x = np.random.default_rng(4).normal(size=9)
    base = confidence_sequence(x)
    scaled = confidence_sequence(1e-3 * x - 7.0, popmean=1e-3 * 0.0 - 7.0)
    assert scaled.low == pytest.approx(1e-3 * base.low - 7.0, rel=1e-9)
    assert scaled.high == pytest.approx(1e-3 * base.high - 7.0, rel=1e-9)
    assert scaled.pvalue == pytest.approx(base.pvalue, rel=1e-9)
    assert confidence_sequence(-x).low == pytest.approx(-base.high, rel=1e-12)


def test_shrinks_as_seeds_accumulate_and_costs_width_against_the_fixed_n_interval() -> None:
    c = mixture_precision_for(10.0, 0.05)
    n = np.arange(2, 201)
    factor = half_width_factor(n, c, 0.05)
    finite = factor[np.isfinite(factor)]
    assert np.all(np.diff(finite) < 0) and finite[-1] < 0.25  # strictly shrinking, towards 0
    assert np.isinf(factor[0])  # 2 seeds never bound an anytime-valid interval at 95 %
    t_factor = stats.t.ppf(0.975, n - 1) / np.sqrt(n)
    ratio = factor / t_factor
    assert np.all(ratio[np.isfinite(ratio)] > 1.0)  # the price of validity under stopping
    # on data: the expected width falls with n (once every simulated study is bounded)
    path = confidence_sequence_path(np.random.default_rng(5).normal(size=(4000, 30)))
    widths = np.mean(path.high - path.low, axis=0)[6:]
    assert np.all(np.isfinite(widths)) and np.all(np.diff(widths) < 0)


def test_tightest_at_moves_where_the_interval_is_narrowest() -> None:
    early, late = mixture_precision_for(4.0, 0.05), mixture_precision_for(20.0, 0.05)
    assert half_width_factor(4, early, 0.05) < half_width_factor(4, late, 0.05)
    assert half_width_factor(20, late, 0.05) < half_width_factor(20, early, 0.05)
    grid = np.exp(np.linspace(-6, 4, 400))
    assert half_width_factor(20, late, 0.05) <= min(half_width_factor(20, g, 0.05) for g in grid) + 1e-9


def test_no_interval_without_two_seeds_or_spread() -> None:
    one = confidence_sequence([0.1])
    assert one.low is None and one.confidence_interval is None and "needs at least 2 seeds" in one.message
    flat = confidence_sequence([0.2, 0.2, 0.2, 0.2])
    assert flat.low is None and "zero spread" in flat.message
    early = confidence_sequence([0.1, 0.3], tightest_at=10)
    assert early.low == -math.inf and early.high == math.inf and not early.bounded and "unbounded" in early.message
    assert confidence_sequence([0.1, 0.3, 0.2, 0.25, 0.22, 0.18]).method.startswith("anytime-valid t-mixture")
    with pytest.raises(InputError, match="finite"):
        confidence_sequence([0.1, math.nan, 0.2])
    with pytest.raises(InputError, match="confidence"):
        confidence_sequence([0.1, 0.2, 0.3], confidence=1.5)
    with pytest.raises(InputError, match="tightest_at"):
        confidence_sequence([0.1, 0.2, 0.3], tightest_at=1)


def test_the_verdict_kind_is_read_off_the_same_anytime_interval_as_its_words() -> None:
    assert sequential_verdict_kind(confidence_sequence([0.1])) == NOT_TESTABLE
    assert sequential_verdict_kind(confidence_sequence([0.1, 0.3], tightest_at=10)) == NOT_DISTINGUISHABLE  # unbounded
    # A fixed-n t-interval would settle these 3 seeds (p = 0.02); the anytime interval does not.
    few = confidence_sequence([0.9, 1.0, 1.1])
    assert stats.ttest_1samp([0.9, 1.0, 1.1], 0.0).pvalue < 0.05 and few.low < 0 < few.high
    assert sequential_verdict_kind(few) == NOT_DISTINGUISHABLE
    rng = np.random.default_rng(5)
    kinds = set()
    for _ in range(300):
        n, shift = int(rng.integers(2, 30)), float(rng.choice([0.0, 0.02, 1.0, -1.0]))
        cs = confidence_sequence(shift + 0.1 * rng.standard_normal(n))
        for margin in (None, 0.1):
            words, kind = sequential_verdict("interaction", cs, margin), sequential_verdict_kind(cs, margin)
            settled_words = "excludes 0" in words or "inside the margin" in words
            assert (kind == SETTLED) == settled_words, (words, kind)
            kinds.add(kind)
    assert kinds == {SETTLED, NOT_DISTINGUISHABLE}


def test_the_report_summarises_a_sequential_study_without_loading_ray() -> None:
    """``harness report`` builds the sequential summary from harness.studies.tune.sequential, which
    does not import Ray (the searcher's module does)."""
    code = (
        "import sys\n"
        "import harness.studies.cli\n"
        "from harness.studies.tune.sequential import Decision, DecisionLog, SequentialDesign, summary_from_log\n"
        "design = SequentialDesign(3, 20, 2, 'precision', 0.01, None, 0.95)\n"
        "stop = Decision(0, 3, 3, 0.1, 0.09, 0.11, 'stop', 'precision', 'precision reached')\n"
        "text = '{\"design\": {}}\\n' + __import__('json').dumps(__import__('dataclasses').asdict(stop))\n"
        "summary = summary_from_log(design, DecisionLog.parse_decisions(text))\n"
        "assert summary.stopped_by == 'precision' and summary.seeds_scheduled == 3, summary\n"
        "assert 'ray' not in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
