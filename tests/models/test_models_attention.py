"""The folded key-bias attention against a naive oracle (explicit weights x gate, renormalised)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from harness_support import round_trip_fold

from harness.models.attention import (
    CausalSelfAttention,
    key_biased_attention,
    lag_chunk_size,
    lag_penalised_attention,
)
from harness.models.gates import EnergyGate
from harness.models.positional import ALiBiPositionalEncoding, NoPositionalEncoding
from harness.models.scoring import DotScoring


def naive_gated_attention(q, k, v, gate, extra_bias=None):
    """Oracle: causal softmax weights w_ij, multiplied by g_j (gate (B, H, T)) or by g_ij (gate
    (B, H, T, T): a pairwise gate), renormalised over j, times v."""
    T, hd = q.size(-2), q.size(-1)
    scores = q @ k.transpose(-1, -2) / math.sqrt(hd)  # (B, H, T, T)
    if extra_bias is not None:
        scores = scores + extra_bias
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    w = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
    gw = w * (gate if gate.dim() == 4 else gate[..., None, :])  # weight of key j times g_j (or g_ij)
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


def alibi_mask(slopes: torch.Tensor, T: int) -> torch.Tensor:
    """ALiBi as the paper writes it: an explicit (H, T, T) bias -m_h (i - j), -inf above the diagonal."""
    pos = torch.arange(T, dtype=slopes.dtype)
    distance = pos[:, None] - pos[None, :]  # (T, T): i - j
    return (-slopes[:, None, None] * distance).masked_fill(distance < 0, float("-inf"))


def test_folded_attention_with_an_explicit_mask_equals_naive():
    q, k, v, log_g = _inputs(2, H=4)
    mask = alibi_mask(ALiBiPositionalEncoding(4).lag_slope(), q.size(-2))
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


def naive_query_normalised_gate(gate, x):
    """g_ij of ega-qnorm by its definition, with explicit loops: query i z-normalises the energies
    of keys 0..i by their mean and variance -> (B, H, T, T) (zero above the diagonal)."""
    e = gate.energy(x)  # (B, H, T): e_j = w.x_j + b
    T = e.size(-1)
    g = torch.zeros(*e.shape, T)
    for i in range(T):
        prefix = e[..., : i + 1]
        z = (prefix - prefix.mean(-1, keepdim=True)) / torch.sqrt(prefix.var(-1, unbiased=False, keepdim=True) + 1e-5)
        g[..., i, : i + 1] = torch.sigmoid(gate.alpha[:, None] * (z - gate.tau[:, None]))
    return g


def naive_morlet_bias(position, T):
    """a_h exp(-(i - j)^2 / (4 sigma_h^2)) cos(omega_h (i - j)) as an explicit (H, T, T) bias."""
    pos = torch.arange(T, dtype=torch.float32)
    lag = pos[:, None] - pos[None, :]
    sigma, omega, a = position.sigma[:, None, None], position.omega[:, None, None], position.amplitude[:, None, None]
    return a * torch.exp(-(lag**2) / (4 * sigma**2)) * torch.cos(omega * lag)


def _naive_layer(attn: CausalSelfAttention, x, position, attn_bias):
    """The layer assembled by hand: plain projections, the components, explicit gated weights."""
    B, T, C = x.shape
    H, hd = attn.n_head, attn.head_dim
    q, k, v = attn.qkv(x).split(C, dim=2)
    q, k, v = (t.view(B, T, H, hd).transpose(1, 2) for t in (q, k, v))
    if attn.gate is not None and attn.gate.pairwise:
        gate = naive_query_normalised_gate(attn.gate, x)
    else:
        gate = attn.gate(x, k).exp() if attn.gate is not None else torch.ones(B, H, T)
    q, k = position.rotate(q, k)
    k = attn.scoring(k)
    gamma, slope = position.lag_curvature(), position.lag_slope()
    if gamma is not None:  # relative MOPE: its envelope as an explicit T x T bias
        attn_bias = lag_envelope(gamma, T)
    if slope is not None:  # ALiBi: its slope as an explicit T x T bias
        attn_bias = alibi_mask(slope, T)
    if position.pairwise:  # the additive Morlet kernel as an explicit T x T bias
        attn_bias = naive_morlet_bias(position, T)
    y = naive_gated_attention(q, k, v, gate, extra_bias=attn_bias)
    if attn.output_gate is not None:
        y = y * attn.output_gate(x)
    return attn.proj(y.transpose(1, 2).reshape(B, T, C))


@pytest.mark.parametrize("position_name", ["none", "rope", "alibi", "mope-rel", "mope-bias"])
@pytest.mark.parametrize("scoring_name", ["dot", "lagged"])
@pytest.mark.parametrize(
    "gate_name",
    [
        "none",
        "ega",
        "ega-4",
        "ega-4-pc",
        "ega-2-prod",
        "ega-qnorm",
        "db4",
        "db4-dir",
        "morlet-param",
        "flux",
        "phase",
        "ega-leaky",
    ],
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
    if position_name in ("mope-rel", "mope-bias"):  # a narrow head (sigma 1.5: chunks of 19 queries) and a wide one
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
    those of the float64 oracle ``ref``: relative 1e-4, gamma's 2e-3 (its gradient sums
    (j - c)^2-weighted terms over every pair in fp32, the far keys' included (with weight 0):
    1.4e-3 measured for a sigma = 4 head, whichever the order of the sums)."""
    grads = torch.autograd.grad((out * up).sum(), inputs)
    ref_grads = torch.autograd.grad((ref * up.double()).sum(), inputs)
    for name, got, want in zip("q k v key_bias gamma".split(), grads, ref_grads, strict=True):
        rtol = 2e-3 if name == "gamma" else 1e-4
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


def _keep(q, k, heads):
    """A rotation that rotates nothing: it sends lag_penalised_attention down its autograd path
    (the fold's, as on a GPU or with attention dropout)."""
    return q, k


def test_lag_fold_stays_precise_at_long_context_thanks_to_the_chunks():
    """T = 1024, sigma = 1, the autograd path's fold: one fold centred on the window loses ~1e-2 to
    rounding; the default chunks (each centred on its own queries) stay within a few 1e-5 of the
    float64 oracle. The CPU kernel (the penalty as a mask, no fold) is within 1e-5 at any chunk size."""
    q, k, v, key_bias, gamma = (t.detach() for t in _lag_inputs(3, (1.0, 4.0), B=1, T=1024, hd=32))
    ref = naive_lag_attention(q, k, v, key_bias, gamma)

    def error(**options) -> float:
        return float((lag_penalised_attention(q, k, v, key_bias, gamma, **options).double() - ref).abs().max())

    assert lag_chunk_size(1024, curvature=True) == 64
    assert error(rotate=_keep) < 1e-4 < 1e-3 < error(rotate=_keep, chunk=1024)
    assert error() < 1e-5 and error(chunk=1024) < 1e-5


def test_far_keys_of_narrow_heads_weigh_nothing_and_the_fold_matches_the_oracle():
    """Every chunk attends to every key before its end: far keys of a narrow head get logits of
    -gamma (j - c)^2 (about -4e4 here), weight exactly 0 in fp32, no NaN in the backward pass;
    narrow and wide heads within the float64 oracle, output and gradients."""
    q, k, v, key_bias, gamma = _lag_inputs(6, (1.5, 4.0, 300.0), B=1, T=700, hd=32)
    up = torch.randn(q.shape, generator=torch.Generator().manual_seed(7))
    inputs = (q, k, v, key_bias, gamma)
    out = lag_penalised_attention(q, k, v, key_bias, gamma)
    ref = naive_lag_attention(*inputs)
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=5e-5)
    _assert_lag_grads_match(out, ref, inputs, up, atol=2e-4)


def test_lag_chunk_sizes_are_python_numbers_of_the_window_and_the_fixed_slopes():
    """Known before the forward pass: a learned envelope gets the fixed small chunks, a fixed
    slope m at most 512 / m (rounded down to a multiple of 64), a slope not known in advance the
    smallest chunks; a window that fits is one call."""
    assert lag_chunk_size(256, curvature=True) == 64 and lag_chunk_size(64, curvature=True) == 64
    assert lag_chunk_size(40, curvature=True) == 40
    assert lag_chunk_size(512, curvature=False) == 512
    assert [lag_chunk_size(4096, curvature=False, slope=m) for m in (0.5, 0.25, 0.125)] == [1024, 2048, 4096]
    assert lag_chunk_size(4096, curvature=False, slope=0.3) == 1664  # 512 / 0.3 = 1706, down to 64 x 26
    assert lag_chunk_size(4096, curvature=False, slope=math.inf) == 64
    assert lag_chunk_size(4096, curvature=True, slope=0.125) == 64


def test_lag_attention_runs_in_fp32_under_bf16_autocast():
    q, k, v, key_bias, gamma = (t.detach() for t in _lag_inputs(4, (2.0, 30.0), T=200))
    reference = lag_penalised_attention(q, k, v, key_bias, gamma)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = lag_penalised_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), key_bias, gamma)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), reference, rtol=0.02, atol=0.03)  # bf16 inputs, fp32 fold


def test_lag_attention_chunks_use_the_flash_kernel_forward_and_backward():
    """T = 600 in chunks of 64 (ten chunks), one head a group: one flash call per chunk (its queries
    against every key before its end, the penalty and the causal edge as a strided mask), 10 calls
    a head; the backward pass calls the flash backward once per forward call and recomputes
    nothing; never the math path."""
    q, k, v, key_bias, gamma = _lag_inputs(5, (1.0, 1.0), T=600, hd=32)
    flash = "aten::_scaled_dot_product_flash_attention_for_cpu"
    calls = 2 * 10  # two heads
    with torch.no_grad(), torch.profiler.profile() as prof:
        lag_penalised_attention(q, k, v, key_bias, gamma)
    assert [e.name for e in prof.events()].count(flash) == calls
    with torch.profiler.profile() as prof:
        lag_penalised_attention(q, k, v, key_bias, gamma).sum().backward()
    names = [event.name for event in prof.events()]
    assert names.count(flash) == calls  # the forward pass's only
    assert names.count(f"{flash}_backward") == calls
    assert "aten::_scaled_dot_product_attention_math" not in names


def test_the_lag_kernel_mask_is_a_view_of_one_penalty_row_per_head():
    """The mask of a chunk against every key before its end is a strided view of the head's penalty
    row, never a C x T tensor, and it equals the explicit penalty -gamma (i - j)^2 - m (i - j)
    against the reversed keys, -inf for the future."""
    from harness.models.lag_kernel import chunk_mask, lag_penalties

    T = 200
    gamma, slope = torch.tensor([[0.25, 0.01]]), torch.tensor([[0.0, 0.5]])
    penalty = lag_penalties(gamma, slope, T, 64)
    assert penalty.shape == (1, 2, 63 + T)
    for start, stop in ((0, 64), (64, 128), (192, 200)):
        mask = chunk_mask(penalty, 64, start, stop)
        assert mask.shape == (1, 2, stop - start, stop) and mask.stride()[-2:] == (1, 1)
        assert mask.untyped_storage().data_ptr() == penalty.untyped_storage().data_ptr()
        lag = torch.arange(start, stop)[:, None] - torch.arange(stop - 1, -1, -1)[None, :]  # keys reversed
        want = -(gamma[0, :, None, None] * lag + slope[0, :, None, None]) * lag
        torch.testing.assert_close(mask[0], want.masked_fill(lag < 0, float("-inf")))


# -- ALiBi, folded as a per-key bias in chunks ---------------------------------------------------


def naive_alibi_attention(q, k, v, key_bias, slopes):
    """Oracle in float64: explicit T x T scores + key bias - m_h (i - j), causal softmax, times v."""
    q, k, v, key_bias, slopes = (t.double() for t in (q, k, v, key_bias, slopes))
    hd = q.size(-1)
    scores = q @ k.transpose(-1, -2) / math.sqrt(hd) + key_bias[..., None, :] + alibi_mask(slopes, q.size(-2))
    return torch.softmax(scores, dim=-1) @ v


@pytest.mark.parametrize("T", [300, 1100])
def test_alibi_fold_equals_the_float64_oracle_forward_and_gradients(T):
    """ALiBi's 8 heads (slopes 1/2 .. 1/256): at T = 1100 the two steep heads run in chunks of
    1024 (512 / m rounded down to 64s), the gentle ones in one call; every plan stays within
    1e-4 of the float64 oracle, output and gradients."""
    g = torch.Generator().manual_seed(11)
    B, H, hd = 1, 8, 32
    q, k, v = (torch.randn(B, H, T, hd, generator=g, requires_grad=True) for _ in range(3))
    key_bias = F.logsigmoid(2.0 * torch.randn(B, H, T, generator=g)).detach().requires_grad_(True)
    position = ALiBiPositionalEncoding(H)
    slopes = position.lag_slope()
    out = lag_penalised_attention(q, k, v, key_bias, None, lag_slope=slopes, slope_values=position.fixed_lag_slope())
    ref = naive_alibi_attention(q, k, v, key_bias, slopes)
    assert (out.double() - ref).abs().max() < 1e-4
    up = torch.randn(q.shape, generator=torch.Generator().manual_seed(12))
    grads = torch.autograd.grad((out * up).sum(), (q, k, v, key_bias))
    ref_grads = torch.autograd.grad((ref * up.double()).sum(), (q, k, v, key_bias))
    for name, got, want in zip("q k v key_bias".split(), grads, ref_grads, strict=True):
        torch.testing.assert_close(
            got.double(), want.double(), rtol=1e-4, atol=1e-4, msg=lambda m, name=name: f"grad {name}: {m}"
        )


@pytest.mark.parametrize("gate_name", ["none", "ega"])
@pytest.mark.parametrize("T", [1024, *(pytest.param(t, marks=pytest.mark.slow) for t in (2048, 2100))])  # chunks: slow
def test_alibi_layer_folds_every_head_within_the_float64_oracle(T, gate_name):
    """The layer's ALiBi path (CausalSelfAttention._slope_folded): at T = 1024 every head's slope
    folds over the whole window (m_h T <= LAG_SLOPE_SPAN), one SDPA call; at T = 2100 the two
    steepest heads take the chunks (at T = 2048 the steepest shallow head folds at the limit, m_h T =
    LAG_SLOPE_SPAN). Output and gradients within 1e-4 of the layer in float64."""
    import copy

    from harness.models.gates import build_gate
    from harness.models.scoring import build_scoring

    torch.manual_seed(15)
    d, H = 64, 8
    attn = CausalSelfAttention(
        d, H, gate=build_gate(gate_name, d_model=d, n_head=H, tau_init=0.3), scoring=build_scoring("dot", n_head=H)
    )
    position = ALiBiPositionalEncoding(H)
    x = torch.randn(1, T, d, requires_grad=True)
    out, _ = attn(x, position, None)
    attn64, x64 = copy.deepcopy(attn).double(), x.detach().double().requires_grad_(True)
    ref = _naive_layer(attn64, x64, ALiBiPositionalEncoding(H).double(), None)
    scale = float(ref.detach().abs().max())
    assert float((out.detach().double() - ref.detach()).abs().max()) < 1e-4 * scale
    up = torch.randn(out.shape)
    (grad_x,) = torch.autograd.grad((out * up).sum(), (x,))
    (ref_x,) = torch.autograd.grad((ref * up.double()).sum(), (x64,))
    assert float((grad_x.double() - ref_x).abs().max()) < 1e-4 * float(ref_x.abs().max())


@pytest.mark.parametrize("with_envelope", [False, True])
def test_a_learned_slope_gets_the_float64_oracles_gradient(with_envelope):
    """A slope that requires a gradient (a user's learned ALiBi; the zoo's are fixed), alone or
    beside an envelope: the CPU kernel's mask carries it, the bias column's moments give its
    gradient, within 1e-4 of the float64 oracle, as every other input's (gamma's 2e-3)."""
    g = torch.Generator().manual_seed(13)
    B, H, T, hd = 2, 3, 150, 16
    q, k, v = (torch.randn(B, H, T, hd, generator=g, requires_grad=True) for _ in range(3))
    slopes = torch.tensor([0.5, 0.05, 0.005], requires_grad=True)
    gamma = torch.tensor([0.1, 0.01, 0.0], requires_grad=True) if with_envelope else None
    out = lag_penalised_attention(q, k, v, None, gamma, lag_slope=slopes)
    lag = torch.arange(T)[:, None] - torch.arange(T)[None, :]
    envelope = 0.0 if gamma is None else -gamma.double()[:, None, None] * lag**2
    scores = q.double() @ k.double().mT / math.sqrt(hd) + alibi_mask(slopes.double(), T) + envelope
    ref = torch.softmax(scores, dim=-1) @ v.double()
    assert (out.double() - ref).abs().max() < 1e-5
    up = torch.randn(q.shape, generator=g)
    inputs = (q, k, v, slopes) + (() if gamma is None else (gamma,))
    grads = torch.autograd.grad((out * up).sum(), inputs)
    ref_grads = torch.autograd.grad((ref * up.double()).sum(), inputs)
    for name, got, want in zip(("q", "k", "v", "slope", "gamma"), grads, ref_grads, strict=False):
        message = lambda m, name=name: f"grad {name}: {m}"  # noqa: E731
        rtol = 2e-3 if name == "gamma" else 1e-4  # gamma's: as _assert_lag_grads_match says
        torch.testing.assert_close(got.double(), want.double(), rtol=rtol, atol=1e-5, msg=message)


def test_alibi_chunks_follow_the_fixed_slopes():
    slopes = ALiBiPositionalEncoding(8).fixed_lag_slope()
    chunks = [lag_chunk_size(4096, curvature=False, slope=m) for m in slopes]
    assert chunks == [1024, 2048] + [4096] * 6


# -- pairwise terms that fold into nothing, in query chunks ----------------------------------------


@pytest.mark.parametrize("chunk", [None, 16, 7])
def test_pairwise_biased_attention_equals_naive_forward_and_gradients(chunk):
    from harness.models.attention import pairwise_biased_attention

    g = torch.Generator().manual_seed(14)
    B, H, T, hd = 2, 3, 45, 16
    q, k, v = (torch.randn(B, H, T, hd, generator=g, requires_grad=True) for _ in range(3))
    full = torch.randn(B, H, T, T, generator=g).requires_grad_(True)  # an arbitrary learned pairwise bias

    def block(start, stop):
        return full[:, :, start:stop, :stop]

    up = torch.randn(q.shape, generator=g)
    out = pairwise_biased_attention(q, k, v, block, chunk=chunk)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    scores = q @ k.transpose(-1, -2) / math.sqrt(hd) + full
    ref = torch.softmax(scores.masked_fill(~causal, float("-inf")), -1) @ v
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    grads = torch.autograd.grad((out * up).sum(), (q, k, v, full))
    ref_grads = torch.autograd.grad((ref * up).sum(), (q, k, v, full))
    for name, got, want in zip("q k v bias".split(), grads, ref_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5, msg=lambda m, name=name: f"grad {name}: {m}")


def test_pairwise_layers_never_build_a_t_by_t_tensor():
    """ega-qnorm and mope-bias at T = 512, B = 4, H = 8: every bias block is a chunk of queries
    (32 x 512 here), never 512 x 512."""
    from harness.models.attention import pair_chunk_size
    from harness.models.gates import build_gate
    from harness.models.positional import build_position

    T, d, H = 512, 64, 8
    assert pair_chunk_size(4, H, T) < T
    x = torch.randn(4, T, d, requires_grad=True)
    for gate, position in (("ega-qnorm", "none"), ("none", "mope-bias")):
        attn = CausalSelfAttention(d, H, gate=build_gate(gate, d_model=d, n_head=H), scoring=DotScoring())
        pos = build_position(position, d_model=d, n_head=H, block_size=T)
        with torch.profiler.profile(profile_memory=True, record_shapes=True) as prof:
            attn(x, pos)[0].sum().backward()
        shapes = [s for e in prof.events() for s in (e.input_shapes or []) if len(s) == 4]
        assert shapes and not any(s[-2] == T and s[-1] == T for s in shapes), gate


# -- bf16: the bias in three pieces keeps fp32's precision -----------------------------------------


def _bf16_floor(q, k, v, bias):
    """The oracle's output with q, k, v rounded to bf16 and the bias exact (float64): the error
    bf16 attention cannot avoid."""
    qb, kb, vb = (t.detach().bfloat16().double() for t in (q, k, v))
    T, hd = q.size(-2), q.size(-1)
    scores = qb @ kb.transpose(-1, -2) / math.sqrt(hd) + bias.detach().double()[..., None, :]
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    return torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1) @ vb


def test_the_bf16_fold_adds_no_error_to_bf16_attention(monkeypatch):
    """Under bf16 autocast the folded bias (here log g plus an ALiBi-sized slope m (j - c), up to
    ~30 nats) is as precise as fp32's: the output is as close to the float64 oracle as bf16
    attention with an exact bias and a bf16 output; one bf16 column would be ~6 times further off."""
    from harness.models import fold

    q, k, v, log_g = (t.detach() for t in _inputs(21, B=2, H=4, T=256, hd=32))
    bias = log_g + 0.25 * (torch.arange(256.0) - 127.5)  # (B, H, T)
    ref = naive_gated_attention(q.double(), k.double(), v.double(), bias.double().exp())
    floor = float((_bf16_floor(q, k, v, bias).bfloat16().double() - ref).abs().max())

    def error() -> float:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = key_biased_attention(q, k, v, bias)
        assert out.dtype == torch.bfloat16
        return float((out.double() - ref).abs().max())

    assert error() <= 1.05 * floor
    pieces = fold.fold_columns(bias / 32**-0.5, torch.bfloat16)
    assert pieces.shape == (2, 4, 256, 3)
    exact = (bias / 32**-0.5).double()  # the fp32 column, up to ~180
    assert float((pieces.double().sum(-1) - exact).abs().max()) < 1e-7  # the pieces hold all of it
    monkeypatch.setitem(fold.FOLD_PIECES, torch.bfloat16, 1)
    assert error() > 3 * floor


def test_the_fold_compiled_by_inductor_sums_to_its_bias(monkeypatch):
    """Compiled by Inductor on CPU (``torch.compile``'s default backend, the training step's), the
    three bf16 pieces still sum to the bias exactly, as eager; a fold by round trips collapses
    under the same compiler (its middle piece 0), and :func:`fold_error` says so."""
    from harness.models import fold

    bias = (torch.linspace(-1400.0, 1400.0, 4097) * 1.2345).view(1, 17, 241)
    pieces = torch.compile(fold.fold_columns, backend="inductor", dynamic=False)(bias, torch.bfloat16)
    assert pieces.dtype == torch.bfloat16 and pieces.shape == (1, 17, 241, 3)
    assert torch.equal(pieces.double().sum(-1), bias.double())
    assert pieces[..., 1].abs().max() > 0  # the middle piece carries bits
    assert fold.fold_error(compiled=True) <= fold.FOLD_ERROR_LIMIT
    monkeypatch.setattr(fold, "fold_columns", round_trip_fold)
    assert fold.fold_error(compiled=False) <= fold.FOLD_ERROR_LIMIT  # eager, the round trip holds
    assert fold.fold_error(compiled=True) > 1e-4  # compiled, it collapses: the gpu_check threshold fails it


def test_the_fold_pieces_are_exact_and_carry_the_gradient():
    """Each piece is a bf16 (fp16) number exactly and the three sum to the fp32 bias bit for bit,
    tiny, huge and negative values alike; the gradient reaches the bias through the first piece."""
    from harness.models import fold

    bias = torch.tensor([0.0, 1e-30, -3.3e-5, 1.0, -1.0 / 3.0, 123.456, -1399.99, 3.0e8], requires_grad=True)
    in_fp16_range = bias[[0, 3, 5, 6]]  # fp16's exponents end at 6e-8: the last piece of 1/3 underflows
    for dtype, values in ((torch.bfloat16, bias), (torch.float16, in_fp16_range)):
        pieces = fold.fold_columns(values, dtype)
        assert torch.equal(pieces.double().sum(-1), values.detach().double()), dtype
    up = torch.tensor([2.0, 3.0, 5.0])
    (grad,) = torch.autograd.grad((fold.fold_columns(bias, torch.bfloat16).float() * up).sum(), bias)
    assert torch.equal(grad, torch.full_like(bias, 2.0))


def test_the_gradient_of_log_g_in_bf16_is_the_fp32_gradient_rounded_once():
    """The gradient reaches log g through the first piece: within bf16's rounding of the fp32
    gradient (relative to its largest entry), and exactly zero through the other two."""
    q, k, v, log_g = _inputs(22, B=2, H=2, T=128, hd=32)
    up = torch.randn(q.shape, generator=torch.Generator().manual_seed(23))
    (want,) = torch.autograd.grad((key_biased_attention(q, k, v, log_g) * up).sum(), (log_g,))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = key_biased_attention(q, k, v, log_g)
    (got,) = torch.autograd.grad((out.float() * up).sum(), (log_g,))
    assert got.dtype == torch.float32
    assert float((got - want).abs().max()) < 0.03 * float(want.abs().max())


@pytest.mark.parametrize("gate_name", ["none", "ega"])
def test_alibi_layer_under_bf16_folds_into_one_flash_call(gate_name):
    """ALiBi under bf16 autocast takes EGA's fold with the slope in three bf16 pieces: one bf16
    flash call for every head (no fp32 fallback), within bf16's error of the float64 layer."""
    import copy

    from harness.models.gates import build_gate
    from harness.models.scoring import build_scoring

    torch.manual_seed(24)
    d, H, T = 64, 8, 1024
    attn = CausalSelfAttention(
        d, H, gate=build_gate(gate_name, d_model=d, n_head=H, tau_init=0.3), scoring=build_scoring("dot", n_head=H)
    )
    x = torch.randn(1, T, d)
    with torch.no_grad(), torch.profiler.profile() as prof, torch.autocast("cpu", dtype=torch.bfloat16):
        out, _ = attn(x, ALiBiPositionalEncoding(H), None)
    flash = [e for e in prof.events() if e.name == "aten::_scaled_dot_product_flash_attention_for_cpu"]
    assert len(flash) == 1 and out.dtype == torch.bfloat16
    with torch.no_grad():
        ref = _naive_layer(copy.deepcopy(attn).double(), x.double(), ALiBiPositionalEncoding(H).double(), None)
        fp32, _ = attn(x, ALiBiPositionalEncoding(H), None)
    scale = float(ref.abs().max())
    assert float((out.double() - ref).abs().max()) < 3e-2 * scale  # bf16 projections and attention
    assert float((fp32.double() - ref).abs().max()) < 1e-4 * scale
