"""The folded key-bias attention against a naive oracle (explicit weights x gate, renormalised)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from harness.models.attention import CausalSelfAttention, key_biased_attention
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


def _naive_layer(attn: CausalSelfAttention, x, position, attn_bias):
    """The layer assembled by hand: plain projections, the components, explicit gated weights."""
    B, T, C = x.shape
    H, hd = attn.n_head, attn.head_dim
    q, k, v = attn.qkv(x).split(C, dim=2)
    q, k, v = (t.view(B, T, H, hd).transpose(1, 2) for t in (q, k, v))
    gate = attn.gate(x, k).exp() if attn.gate is not None else torch.ones(B, H, T)
    q, k = position.rotate(q, k)
    k = attn.scoring(k)
    y = naive_gated_attention(q, k, v, gate, extra_bias=attn_bias)
    if attn.output_gate is not None:
        y = y * attn.output_gate(x)
    return attn.proj(y.transpose(1, 2).reshape(B, T, C))


@pytest.mark.parametrize("position_name", ["none", "rope", "alibi"])
@pytest.mark.parametrize("scoring_name", ["dot", "lagged"])
@pytest.mark.parametrize("gate_name", ["none", "ega", "ega-4", "db4", "morlet-param", "flux", "phase"])
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
    position = build_position(position_name, d_model=d, n_head=H, block_size=T)
    bias = position.attention_bias(T, torch.device("cpu"), torch.float32)
    x = torch.randn(2, T, d, requires_grad=True)
    out, log_g = attn(x, position, bias)
    ref = _naive_layer(attn, x, position, bias)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5 * float(ref.detach().abs().max()))
    params = [x, *attn.parameters()]
    got = torch.autograd.grad(out.square().sum(), params, allow_unused=True)
    want = torch.autograd.grad(ref.square().sum(), params, allow_unused=True)
    grad_scale = max(float(g.abs().max()) for g in want if g is not None)
    for (name, _), p_got, p_want in zip([("x", x), *attn.named_parameters()], got, want, strict=False):
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


@pytest.mark.parametrize("variant", ["ega", "ega-mope-lagged", "phase-mope", "ega-db4"])
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
