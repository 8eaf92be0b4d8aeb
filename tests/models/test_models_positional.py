"""Positional encodings: the MOPE -> sinusoidal limit, pair conventions, RoPE's relativity, ALiBi."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from harness.errors import InputError
from harness.models import build_model
from harness.models.positional import (
    LINGUISTIC_SCALES,
    ALiBiPositionalEncoding,
    MorletPositionalEncoding,
    MorletRelativePositionalEncoding,
    RotaryPositionalEncoding,
    SinusoidalPositionalEncoding,
    alibi_slopes,
)


def test_sinusoidal_is_cos_at_even_and_sin_at_odd_dimensions():
    d, T = 16, 50
    pe = SinusoidalPositionalEncoding(d).embedding(T, torch.device("cpu")).numpy()
    b = np.arange(T)[:, None]
    omega = 10000.0 ** (-np.arange(0, d, 2) / d)
    np.testing.assert_allclose(pe[:, 0::2], np.cos(b * omega), atol=1e-5)
    np.testing.assert_allclose(pe[:, 1::2], np.sin(b * omega), atol=1e-5)


def test_mope_formula():
    mope = MorletPositionalEncoding(8)
    with torch.no_grad():
        mope.omega.copy_(torch.tensor([0.1, 0.5, 1.0, 2.0]))
        mope.log_sigma.copy_(torch.log(torch.tensor([1.0, 5.0, 20.0, 100.0])))
    b = np.arange(30)[:, None]
    env = np.exp(-(b**2) / (2 * np.array([1.0, 5.0, 20.0, 100.0]) ** 2))
    pe = mope.embedding(30, torch.device("cpu")).detach().numpy()
    np.testing.assert_allclose(pe[:, 0::2], np.cos(b * [0.1, 0.5, 1.0, 2.0]) * env, atol=1e-5)
    np.testing.assert_allclose(pe[:, 1::2], np.sin(b * [0.1, 0.5, 1.0, 2.0]) * env, atol=1e-5)


def test_mope_with_infinite_sigma_and_sinusoidal_frequencies_is_the_baseline_encoding():
    d, T = 64, 300
    mope = MorletPositionalEncoding(d)
    baseline = SinusoidalPositionalEncoding(d)
    with torch.no_grad():
        mope.omega.copy_(baseline.omega)
        mope.log_sigma.fill_(40.0)  # sigma = e^40: the envelope is 1 to float precision
    torch.testing.assert_close(mope.embedding(T, torch.device("cpu")), baseline.embedding(T, torch.device("cpu")))


def test_mope_model_in_the_limit_equals_the_baseline_model():
    torch.manual_seed(0)
    base = build_model("baseline", vocab_size=11, block_size=32)
    mope = build_model("mope", vocab_size=11, block_size=32)
    state = {k: v for k, v in mope.state_dict().items() if not k.startswith("position.")}
    base.load_state_dict(state, strict=True)
    with torch.no_grad():
        mope.position.omega.copy_(base.position.omega)
        mope.position.log_sigma.fill_(40.0)
    idx = torch.randint(0, 11, (2, 32))
    torch.testing.assert_close(mope(idx), base(idx))


def test_mope_random_init_spans_a_wide_range_of_scales():
    torch.manual_seed(0)
    mope = MorletPositionalEncoding(256)
    omega, sigma = mope.omega.detach(), mope.sigma.detach()
    assert 1e-4 <= omega.min() and omega.max() <= 1.0 and omega.max() / omega.min() > 100
    assert 1.0 <= sigma.min() and sigma.max() <= 1e4 and sigma.max() / sigma.min() > 100


def test_mope_scale_init_uses_the_four_linguistic_scales():
    mope = MorletPositionalEncoding(32, init="scales")  # 16 pairs: four groups of four
    sigma = mope.sigma.detach().view(4, 4)
    for group, s in zip(sigma, LINGUISTIC_SCALES.values(), strict=False):
        assert group.min() >= s / math.sqrt(2) - 1e-4 and group.max() <= s * math.sqrt(2) + 1e-4
        torch.testing.assert_close(group.prod() ** 0.25, torch.tensor(s), rtol=1e-4, atol=0)  # geometric centre s
    torch.testing.assert_close(mope.omega.detach(), 2 * math.pi / mope.sigma.detach())
    model = build_model("ega-mope-scale-init", vocab_size=5, block_size=8)
    assert model.position.init == "scales"


def test_rope_scores_depend_on_relative_position_only():
    rope = RotaryPositionalEncoding(8)
    q1, k1 = torch.randn(1, 1, 1, 8), torch.randn(1, 1, 1, 8)
    q = q1.expand(1, 1, 20, 8)
    k = k1.expand(1, 1, 20, 8)
    rq, rk = rope.rotate(q, k)
    scores = (rq @ rk.transpose(-1, -2))[0, 0]  # (T, T)
    for offset in range(-5, 6):
        diag = torch.diagonal(scores, offset)
        torch.testing.assert_close(diag, diag[:1].expand_as(diag), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(rq[..., 0, :], q[..., 0, :])  # position 0 is not rotated
    torch.testing.assert_close(rq.norm(dim=-1), q.norm(dim=-1))


def test_alibi_slopes_and_lag_slope_hook():
    torch.testing.assert_close(alibi_slopes(8), torch.tensor([2.0 ** -(i + 1) for i in range(8)]))
    assert len(alibi_slopes(6)) == 6 and bool((alibi_slopes(6) > 0).all())
    alibi = ALiBiPositionalEncoding(2)
    torch.testing.assert_close(alibi.lag_slope(), torch.tensor([2.0**-4, 2.0**-8]))  # H = 2
    assert alibi.attention_bias(4, torch.device("cpu"), torch.float32) is None  # folded: no T x T mask
    assert alibi.lag_curvature() is None and not list(alibi.parameters())


def _rotation(theta: float, hd: int) -> torch.Tensor:
    """Block-diagonal hd x hd rotation by theta of every pair (2p, 2p+1)."""
    c, s = math.cos(theta), math.sin(theta)
    return torch.block_diag(*[torch.tensor([[c, -s], [s, c]], dtype=torch.float64)] * (hd // 2))


def test_mope_rel_score_is_q_rotated_by_omega_times_lag_and_the_envelope():
    """With explicit rotation matrices: R(omega i) q_i . R(omega j) k_j = q_i^T R(omega (j - i)) k_j,
    a function of the lag only; the envelope's curvature is 1 / (4 sigma^2)."""
    torch.manual_seed(0)
    mope = MorletRelativePositionalEncoding(n_head=2, head_dim=6)
    with torch.no_grad():
        mope.omega.copy_(torch.tensor([0.3, -1.1]))
        mope.log_sigma.copy_(torch.log(torch.tensor([2.0, 7.0])))
    T = 9
    q, k = torch.randn(1, 2, T, 6), torch.randn(1, 2, T, 6)
    rq, rk = mope.rotate(q, k)
    scores = (rq @ rk.transpose(-1, -2))[0].double()  # (H, T, T)
    for h, omega in enumerate((0.3, -1.1)):
        for i in range(T):
            for j in range(T):
                want = q[0, h, i].double() @ _rotation(omega * (j - i), 6) @ k[0, h, j].double()
                torch.testing.assert_close(scores[h, i, j], want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(mope.lag_curvature(), 1.0 / (4.0 * torch.tensor([2.0, 7.0]) ** 2))
    torch.testing.assert_close(rq.norm(dim=-1), q.norm(dim=-1))  # rotations keep norms


def test_mope_rel_scale_init_puts_the_heads_at_the_linguistic_scales():
    mope = MorletRelativePositionalEncoding(n_head=8, head_dim=32, init="scales")
    sigma = mope.sigma.detach().view(4, 2)  # two heads per scale
    for group, s in zip(sigma, LINGUISTIC_SCALES.values(), strict=True):
        torch.testing.assert_close(group, torch.tensor([s / math.sqrt(2), s * math.sqrt(2)]), rtol=1e-5, atol=0)
    torch.testing.assert_close(mope.omega.detach(), 2 * math.pi / mope.sigma.detach())
    model = build_model("ega-mope-rel-scale-init", size="paper", vocab_size=5, block_size=8)
    assert model.position.init == "scales" and model.mope_parameters()["sigma"].shape == (8,)


def test_mope_rel_random_init_spans_the_mope_range_per_head():
    torch.manual_seed(0)
    mope = MorletRelativePositionalEncoding(n_head=64, head_dim=8)
    omega, sigma = mope.omega.detach(), mope.sigma.detach()
    assert omega.shape == sigma.shape == (64,)
    assert 1e-4 <= omega.min() and omega.max() <= 1.0 and sigma.min() >= 1.0 and sigma.max() <= 1e4
    assert sigma.max() / sigma.min() > 100


def test_mope_rel_model_in_the_limit_equals_the_nope_model():
    """omega = 0 and sigma -> infinity: no rotation, no envelope, i.e. NoPE."""
    torch.manual_seed(0)
    nope = build_model("nope", vocab_size=11, block_size=32)
    rel = build_model("mope-rel", vocab_size=11, block_size=32)
    nope.load_state_dict({k: v for k, v in rel.state_dict().items() if not k.startswith("position.")}, strict=True)
    with torch.no_grad():
        rel.position.omega.zero_()
        rel.position.log_sigma.fill_(40.0)
    idx = torch.randint(0, 11, (2, 32))
    torch.testing.assert_close(rel(idx), nope(idx))


def test_mope_rel_needs_an_even_head_dimension():
    with pytest.raises(InputError, match="relative Morlet.*even head dimension.*got 11"):
        build_model("mope-rel", vocab_size=5, block_size=8, d_model=66, n_head=6)
