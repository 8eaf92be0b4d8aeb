"""The folded key-bias attention against a naive oracle (explicit weights x gate, renormalised)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from harness.models.attention import (
    CausalSelfAttention,
    key_biased_attention,
    lag_chunk_size,
    lag_penalised_attention,
    lag_reach,
)
from harness.models.gates import EnergyGate
from harness.models.positional import ALiBiPositionalEncoding, NoPositionalEncoding
from harness.models.scoring import DotScoring


def naive_gated_attention(q, k, v, gate, extra_bias=None):
    """Oracle: causal softmax weights w_ij, multiplied by g_j, renormalised over j, times v."""
    T, hd = q.size(-2), q.size(-1)
    scores = q @ k.transpose(-1, -2) / math.sqrt(hd)  # (B, H, T, T)
    if extra_bias is not None:
        scores = scores + extra_bias
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    w = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
    gw = w * gate[..., None, :]  # weight of key j times g_j
    return (gw / gw.sum(-1, keepdim=True)) @ v


def _inputs(seed, B=2, H=3, T=37, hd=32, bias_scale=3.0):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, H, T, hd, generator=g, requires_grad=True) for _ in range(3))
    log_g = F.logsigmoid(bias_scale * torch.randn(B, H, T, generator=g)).detach().requires_grad_(True)
    return q, k, v, log_g


@pytest.mark.parametrize("hd", [32, 20, 7])
@pytest.mark.parametrize("bias_scale", [1.0, 8.0])
def test_folded_attention_equals_naive_forward_and_gradients(hd, bias_scale):
    q, k, v, log_g = _inputs(0, hd=hd, bias_scale=bias_scale)
    up = torch.randn(q.shape[:-1] + (hd,), generator=torch.Generator().manual_seed(1))

    out = key_biased_attention(q, k, v, log_g)
    grads = torch.autograd.grad((out * up).sum(), (q, k, v, log_g))
    ref = naive_gated_attention(q, k, v, log_g.exp())
    ref_grads = torch.autograd.grad((ref * up).sum(), (q, k, v, log_g))

    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    for name, got, want in zip("q k v log_g".split(), grads, ref_grads, strict=False):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4, msg=lambda m, name=name: f"grad {name}: {m}")


def test_folded_attention_with_alibi_mask_equals_naive():
    q, k, v, log_g = _inputs(2, H=4)
    mask = ALiBiPositionalEncoding(4).attention_bias(q.size(-2), q.device, q.dtype)
    out = key_biased_attention(q, k, v, log_g, attn_mask=mask)
    ref = naive_gated_attention(q, k, v, log_g.exp(), extra_bias=mask)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    g_out = torch.autograd.grad(out.sum(), log_g)[0]
    g_ref = torch.autograd.grad(ref.sum(), log_g)[0]
    torch.testing.assert_close(g_out, g_ref, rtol=1e-4, atol=1e-4)


def test_no_bias_is_plain_causal_sdpa():
    q, k, v, _ = _inputs(3)
    torch.testing.assert_close(
        key_biased_attention(q, k, v), naive_gated_attention(q, k, v, torch.ones(q.shape[:-1])), rtol=1e-5, atol=1e-5
    )


def test_folded_attention_uses_the_flash_kernel_forward_and_backward():
    """The padding makes q, k, v equal width: SDPA must not fall back to its math path."""
    q, k, v, log_g = _inputs(4, hd=32)
    with torch.profiler.profile() as prof:
        key_biased_attention(q, k, v, log_g).sum().backward()
    names = {event.name for event in prof.events()}
    assert "aten::_scaled_dot_product_flash_attention_for_cpu" in names
    assert "aten::_scaled_dot_product_flash_attention_for_cpu_backward" in names
    assert "aten::_scaled_dot_product_attention_math" not in names


def _naive_ega_layer(attn: CausalSelfAttention, x: torch.Tensor) -> torch.Tensor:
    """EGA-1 attention layer written from the paper's formulas with explicit loops over positions."""
    B, T, C = x.shape
    H, hd = attn.n_head, attn.head_dim
    q, k, v = attn.qkv(x).split(C, dim=2)
    q, k, v = (t.view(B, T, H, hd).transpose(1, 2) for t in (q, k, v))
    gate = attn.gate
    e = (x @ gate.weight.T + gate.bias).transpose(1, 2)  # (B, H, T): e_j = w.x_j + b
    z = []
    for j in range(T):
        prefix = e[..., : j + 1]
        mean = prefix.mean(-1)
        var = prefix.var(-1, unbiased=False)
        z.append((e[..., j] - mean) / torch.sqrt(var + 1e-5))
    z = torch.stack(z, dim=-1)
    g = torch.sigmoid(gate.alpha[:, None] * (z - gate.tau[:, None]))
    y = naive_gated_attention(q, k, v, g)
    return attn.proj(y.transpose(1, 2).reshape(B, T, C))


def test_ega_attention_layer_equals_naive_paper_formula():
    torch.manual_seed(5)
    d, H, T = 32, 4, 23
    attn = CausalSelfAttention(d, H, gate=EnergyGate(d, H, tau_init=0.35, alpha_init=2.0), scoring=DotScoring())
    with torch.no_grad():
        attn.gate.weight.normal_()  # a spread of energies, not just the init's small ones
        attn.gate.tau.copy_(torch.tensor([0.35, -0.5, 1.0, 0.0]))
    x = torch.randn(2, T, d, requires_grad=True)
    out, _ = attn(x, NoPositionalEncoding())
    ref = _naive_ega_layer(attn, x)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    params = [x, attn.gate.weight, attn.gate.tau, attn.gate.alpha, attn.qkv.weight]
    got = torch.autograd.grad(out.square().sum(), params)
    want = torch.autograd.grad(ref.square().sum(), params)
    for p_got, p_want in zip(got, want, strict=False):
        torch.testing.assert_close(p_got, p_want, rtol=1e-4, atol=1e-5)


def lag_envelope(gamma: torch.Tensor, T: int) -> torch.Tensor:
    """The Gaussian lag envelope as an explicit (H, T, T) bias: -gamma_h (i - j)^2."""
    pos = torch.arange(T, dtype=gamma.dtype)
    return -gamma[:, None, None] * (pos[:, None] - pos[None, :]) ** 2


def _naive_layer(attn: CausalSelfAttention, x, position, attn_bias):
    """The layer assembled by hand: plain projections, the components, explicit gated weights."""
    B, T, C = x.shape
    H, hd = attn.n_head, attn.head_dim
    q, k, v = attn.qkv(x).split(C, dim=2)
    q, k, v = (t.view(B, T, H, hd).transpose(1, 2) for t in (q, k, v))
    gate = attn.gate(x, k).exp() if attn.gate is not None else torch.ones(B, H, T)
    q, k = position.rotate(q, k)
    k = attn.scoring(k)
    gamma = position.lag_curvature()
    if gamma is not None:  # relative MOPE: its envelope as an explicit T x T bias
        attn_bias = lag_envelope(gamma, T)
    y = naive_gated_attention(q, k, v, gate, extra_bias=attn_bias)
    if attn.output_gate is not None:
        y = y * attn.output_gate(x)
    return attn.proj(y.transpose(1, 2).reshape(B, T, C))


@pytest.mark.parametrize("position_name", ["none", "rope", "alibi", "mope-rel"])
@pytest.mark.parametrize("scoring_name", ["dot", "lagged"])
@pytest.mark.parametrize(
    "gate_name", ["none", "ega", "ega-4", "ega-4-pc", "db4", "db4-dir", "morlet-param", "flux", "phase", "ega-leaky"]
)
def test_attention_layer_equals_naive_assembly(gate_name, scoring_name, position_name):
    from harness.models.gates import OutputGate, build_gate
    from harness.models.positional import build_position
    from harness.models.scoring import build_scoring

    torch.manual_seed(6)
    d, H, T = 32, 2, 19
    attn = CausalSelfAttention(
        d,
        H,
        gate=build_gate(gate_name, d_model=d, n_head=H, tau_init=0.3, alpha_init=2.0),
        scoring=build_scoring(scoring_name, n_head=H, lags=3),
        output_gate=OutputGate(d, H) if gate_name == "ega" else None,
    )
    with torch.no_grad():
        for p in attn.parameters():
            p.add_(0.3 * torch.randn_like(p))
    position = build_position(position_name, d_model=d, n_head=H, block_size=T, mope_init="scales")
    if position_name == "mope-rel":  # a narrow head (sigma 1.5: several chunks of 19 queries) and a wide one
        with torch.no_grad():
            position.log_sigma.copy_(torch.log(torch.tensor([1.5, 40.0])))
            position.omega.copy_(torch.tensor([0.7, -0.2]))
    bias = position.attention_bias(T, torch.device("cpu"), torch.float32)
    x = torch.randn(2, T, d, requires_grad=True)
    out, log_g = attn(x, position, bias)
    ref = _naive_layer(attn, x, position, bias)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5 * float(ref.detach().abs().max()))
    named = [("x", x), *attn.named_parameters(), *(("position." + n, p) for n, p in position.named_parameters())]
    params = [p for _, p in named]
    got = torch.autograd.grad(out.square().sum(), params, allow_unused=True)
    want = torch.autograd.grad(ref.square().sum(), params, allow_unused=True)
    grad_scale = max(float(g.abs().max()) for g in want if g is not None)
    for (name, _), p_got, p_want in zip(named, got, want, strict=False):
        if p_want is None:
            assert p_got is None or not p_got.any(), name
            continue
        # atol relative to the largest gradient: EGA's bias b cancels under the z-normalisation (true gradient 0)
        torch.testing.assert_close(
            p_got, p_want, rtol=1e-4, atol=1e-5 * grad_scale, msg=lambda m, name=name: f"grad {name}: {m}"
        )
    assert (log_g is None) == (gate_name == "none")


def test_a_constant_gate_changes_nothing():
    """alpha = 0 makes g_j = 1/2 for every key: renormalisation must cancel it exactly."""
    torch.manual_seed(7)
    gated = CausalSelfAttention(32, 4, gate=EnergyGate(32, 4, alpha_init=0.0), scoring=DotScoring())
    plain = CausalSelfAttention(32, 4, gate=None, scoring=DotScoring())
    plain.load_state_dict({k: v for k, v in gated.state_dict().items() if not k.startswith("gate.")})
    x = torch.randn(2, 29, 32)
    torch.testing.assert_close(
        gated(x, NoPositionalEncoding())[0], plain(x, NoPositionalEncoding())[0], rtol=1e-5, atol=1e-6
    )


@pytest.mark.parametrize(
    "variant", ["ega", "ega-mope-lagged", "phase-mope", "ega-db4", "mope-rel", "ega-mope-rel-scale-init", "ega-4-pc"]
)
def test_gated_model_uses_the_flash_kernel(variant):
    from harness.models import build_model, make_variant

    model = build_model(variant, vocab_size=7, block_size=32)
    rope_ega = build_model(make_variant("rope-ega", position="rope", gate="ega"), vocab_size=7, block_size=32)
    idx = torch.randint(0, 7, (2, 32))
    for m in (model, rope_ega):
        with torch.profiler.profile() as prof:
            m(idx).sum().backward()
        names = {event.name for event in prof.events()}
        assert "aten::_scaled_dot_product_flash_attention_for_cpu_backward" in names
        assert "aten::_scaled_dot_product_attention_math" not in names


# -- relative MOPE's Gaussian lag envelope, folded ---------------------------------------------


def naive_lag_attention(q, k, v, key_bias, gamma):
    """Oracle in float64: explicit T x T scores + key bias - gamma_h (i - j)^2, causal softmax, times v."""
    q, k, v, key_bias, gamma = (t.double() for t in (q, k, v, key_bias, gamma))
    T, hd = q.size(-2), q.size(-1)
    scores = q @ k.transpose(-1, -2) / math.sqrt(hd) + key_bias[..., None, :] + lag_envelope(gamma, T)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    return torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1) @ v


def _lag_inputs(seed, sigmas, B=2, T=45, hd=16):
    g = torch.Generator().manual_seed(seed)
    H = len(sigmas)
    q, k, v = (torch.randn(B, H, T, hd, generator=g, requires_grad=True) for _ in range(3))
    key_bias = F.logsigmoid(3.0 * torch.randn(B, H, T, generator=g)).detach().requires_grad_(True)
    gamma = (0.25 / torch.tensor(sigmas) ** 2).requires_grad_(True)
    return q, k, v, key_bias, gamma


def _assert_lag_grads_match(out, ref, inputs, up, *, atol):
    """The gradients of (out * up).sum() with respect to (q, k, v, key_bias, gamma) match
    those of the float64 oracle ``ref``: relative 1e-4, gamma's 1e-3 (its gradient sums
    (i - j)^2-weighted terms over every pair: fp32 accumulation)."""
    grads = torch.autograd.grad((out * up).sum(), inputs)
    ref_grads = torch.autograd.grad((ref * up.double()).sum(), inputs)
    for name, got, want in zip("q k v key_bias gamma".split(), grads, ref_grads, strict=True):
        rtol = 1e-3 if name == "gamma" else 1e-4
        torch.testing.assert_close(
            got.double(), want.double(), rtol=rtol, atol=atol, msg=lambda m, name=name: f"grad {name}: {m}"
        )


@pytest.mark.parametrize("chunk", [None, 45, 16, 7, 1])
@pytest.mark.parametrize("sigmas", [(1.5, 6.0, 200.0), (0.7, 0.7, 3.0)])
def test_lag_penalised_attention_equals_naive_forward_and_gradients(chunk, sigmas):
    q, k, v, key_bias, gamma = _lag_inputs(0, sigmas)
    up = torch.randn(q.shape, generator=torch.Generator().manual_seed(1))
    out = lag_penalised_attention(q, k, v, key_bias, gamma, chunk=chunk)
    ref = naive_lag_attention(q, k, v, key_bias, gamma)
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=2e-5)
    _assert_lag_grads_match(out, ref, (q, k, v, key_bias, gamma), up, atol=1e-4)


def test_lag_penalised_attention_without_key_bias_and_with_zero_curvature_is_plain_attention():
    q, k, v, _, _ = _lag_inputs(2, (1.0, 1.0))
    zero = torch.zeros(2)
    torch.testing.assert_close(lag_penalised_attention(q, k, v, None, zero), key_biased_attention(q, k, v))


def test_lag_fold_stays_precise_at_long_context_thanks_to_the_chunks():
    """T = 1024, sigma = 1: one fold centred on the window loses ~1e-2 to rounding; the default
    chunks (each centred on its own queries) stay within a few 1e-5 of the float64 oracle."""
    q, k, v, key_bias, gamma = (t.detach() for t in _lag_inputs(3, (1.0, 4.0), B=1, T=1024, hd=32))
    ref = naive_lag_attention(q, k, v, key_bias, gamma)
    chunked = (lag_penalised_attention(q, k, v, key_bias, gamma).double() - ref).abs().max()
    one_call = (lag_penalised_attention(q, k, v, key_bias, gamma, chunk=1024).double() - ref).abs().max()
    assert lag_chunk_size(gamma, 1024) == 64
    assert chunked < 1e-4 < 1e-3 < one_call


def test_skipping_the_keys_beyond_the_reach_changes_nothing():
    """Narrow heads attend only to keys within lag_reach (their weights beyond are exactly 0 in
    fp32): the output equals the one over every key, and output and gradients match the
    float64 oracle as closely as the fold over every key does."""
    q, k, v, key_bias, gamma = _lag_inputs(6, (1.5, 4.0, 300.0), B=1, T=700, hd=32)
    reach = lag_reach(q, k, key_bias, gamma, 32**-0.5)
    assert reach[0] < reach[1] < 700 == reach[2]  # the narrow heads really skip keys
    up = torch.randn(q.shape, generator=torch.Generator().manual_seed(7))
    inputs = (q, k, v, key_bias, gamma)
    skipped = lag_penalised_attention(q, k, v, key_bias, gamma)
    every = lag_penalised_attention(q, k, v, key_bias, gamma, skip_far_keys=False)
    ref = naive_lag_attention(*inputs)
    torch.testing.assert_close(skipped, every, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(skipped.double(), ref, rtol=1e-5, atol=5e-5)
    _assert_lag_grads_match(skipped, ref, inputs, up, atol=2e-4)


def test_lag_reach_grows_with_sigma_and_with_the_score_scale():
    q, k, v, key_bias, gamma = (t.detach() for t in _lag_inputs(8, (1.0, 4.0, 16.0), B=1, T=4000, hd=32))
    reach = lag_reach(q, k, key_bias, gamma, 32**-0.5)
    assert reach == sorted(reach) and all(r % 64 == 0 for r in reach) and reach[0] >= 64
    # the bound: gamma reach^2 >= 120 + 2 scale max|q| max|k| + spread of the key bias
    bound = 120 + 2 * 32**-0.5 * q.norm(dim=-1).max() * k.norm(dim=-1).max()
    assert all(float(g) * r**2 >= float(bound) for g, r in zip(gamma, reach, strict=True))
    assert lag_reach(3 * q, k, key_bias, gamma, 32**-0.5)[2] > reach[2]


def test_lag_chunk_size_follows_the_narrowest_head():
    def gamma(*sigmas):
        return 0.25 / torch.tensor(sigmas) ** 2

    assert lag_chunk_size(gamma(1000.0, 50.0), 256) == 256  # 32 sigma_min >= T: one call
    assert lag_chunk_size(gamma(1000.0, 5.0), 256) == 128  # 32 x 5 = 160, down to a multiple of 64
    assert lag_chunk_size(gamma(1000.0, 0.3), 4096) == 64  # never below 64
    assert lag_chunk_size(torch.zeros(3), 512) == 512


def test_lag_attention_runs_in_fp32_under_bf16_autocast():
    q, k, v, key_bias, gamma = (t.detach() for t in _lag_inputs(4, (2.0, 30.0), T=200))
    reference = lag_penalised_attention(q, k, v, key_bias, gamma)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = lag_penalised_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), key_bias, gamma)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), reference, rtol=0.02, atol=0.03)  # bf16 inputs, fp32 fold


def test_lag_attention_chunks_use_the_flash_kernel_forward_and_backward():
    q, k, v, key_bias, gamma = _lag_inputs(5, (1.0, 1.0), T=200, hd=32)
    with torch.profiler.profile() as prof:
        lag_penalised_attention(q, k, v, key_bias, gamma).sum().backward()
    names = [event.name for event in prof.events()]
    assert names.count("aten::_scaled_dot_product_flash_attention_for_cpu") == 4  # 200 queries in chunks of 64
    assert "aten::_scaled_dot_product_flash_attention_for_cpu_backward" in names
    assert "aten::_scaled_dot_product_attention_math" not in names
