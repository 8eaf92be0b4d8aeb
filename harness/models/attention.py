"""One causal self-attention that composes the three slots around ONE fused SDPA call.

    x (B, T, d) --qkv--> q, k, v (B, H, T, hd)
    log g = gate(x, k)                      key gate: per-key logit bias (B, H, T), or none
    q, k  = position.rotate(q, k)           RoPE, relative MOPE (identity otherwise)
    k     = scoring(k)                      lagged keys (identity for dot)
    y     = softmax(q.k^T scale + log g_j [- m_h (i-j)] [- gamma_h (i-j)^2], causal) v   fused SDPA
    y     = y * output_gate(x)              head-wise output gate (gated-output only)
    out   = proj(y)

The per-key bias is folded into the dot product (:func:`key_biased_attention`), so a gate
never builds a T x T tensor and SDPA keeps its flash kernel. Inside the layer the fold
avoids copies: q and v are projected straight into the folded width (weights padded with
zero rows, q's constant column from the projection bias), only k is concatenated with
its bias column, and the output projection reads the folded width (weight padded with
zero columns), so a gated layer holds about the tensors of a plain one, (hd + 1) / hd
times wider, plus the gate's O(B H T) statistics.

Relative MOPE's Gaussian lag envelope -gamma_h (i - j)^2 and ALiBi's slope -m_h (i - j) are
folded too, as two more columns or one (:func:`lag_penalised_attention`): pairwise biases,
yet no T x T tensor, in query chunks centred on themselves.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from harness.models.gates import KeyGate, OutputGate
from harness.models.positional import PositionalEncoding

FOLD_CONSTANT = 1.0


#: Lag fold: queries per chunk at least LAG_CHUNK_MIN; at most LAG_CHUNK_SIGMAS sigma_h for a Gaussian
#: envelope, at most LAG_SLOPE_SPAN / m_h for a linear (ALiBi) slope: the folded columns then stay small
#: enough around the chunk's centre for fp32 (module docstring of :func:`lag_penalised_attention`).
LAG_CHUNK_MIN = 64
LAG_CHUNK_SIGMAS = 32
LAG_SLOPE_SPAN = 512.0
#: A key whose logit lies this far below the query's own has weight exactly 0 in fp32 (exp underflows
#: below -104; the margin covers the rounding of the logits themselves).
LAG_UNDERFLOW = 120.0
#: Logit of the padding keys in front of the first window: exp() of it is exactly 0 in fp32, and it is
#: finite, so that 0 x logit stays 0 in the backward pass.
PAD_LOGIT = -1.0e4
#: Heads per SDPA call of the lag fold: each call's folded copies are recomputed in the backward pass, so
#: the fewer heads per call, the less memory at once (two: about 1/4 of the layer's q, k, v).
LAG_GROUP_HEADS = 2


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def fold_width(head_dim: int, device_type: str, columns: int = 1) -> int:
    """Last dimension of the folded q, k, v: head_dim + ``columns``, rounded up to a multiple
    of 8 on CUDA (its fused kernels want multiples of 8). On CPU the flash kernel only needs
    q, k and v to share their last dimension; rounding 33 up to 40 there cost about 20 % more
    attention memory and time in our measurements (``harness bench attention``), so CPU uses
    head_dim + columns."""
    return _round_up(head_dim + columns, 8 if device_type == "cuda" else 1)


def key_biased_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_bias: Tensor | None = None,
    *,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    scale: float | None = None,
) -> Tensor:
    """Causal attention with an additive per-key logit bias, in one fused SDPA call.

        out_i = sum_{j<=i} softmax_j(q_i.k_j scale + key_bias_j [+ attn_mask_ij]) v_j

    q, k, v: (B, H, T, hd); key_bias: (B, H, T) (or broadcastable to it), e.g. log g_j;
    attn_mask: optional additive (..., T, T) float mask that already contains causality
    (a position's ``attention_bias``); without it SDPA runs with ``is_causal=True``.

    The bias is folded into the dot product: with a constant c,

        q'_i = [q_i, c, 0..0],  k'_j = [k_j, key_bias_j / (c scale), 0..0],  v'_j = [v_j, 0..0]

    gives q'_i.k'_j scale = q_i.k_j scale + key_bias_j. q', k' and v' share one last
    dimension (:func:`fold_width`): the fused kernels need equal last dimensions for q, k
    and v (on CPU, SDPA otherwise silently takes its slow math path, which builds T x T
    weights). Each is built by one ``cat`` in the (B, T, H, .) layout the projections
    produce; v's padding is sliced off the output. Extra cost: one more column in the dot
    products and O(B H T hd) copies; no T x T tensor. key_bias is cast to k's dtype (exact
    in fp32; in bf16 it carries bf16's ~3 significant digits).
    """
    hd = q.size(-1)
    scale = 1.0 / math.sqrt(hd) if scale is None else scale
    is_causal = attn_mask is None
    if key_bias is None:
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale
        )
    width = fold_width(hd, q.device.type)
    B, H, T, _ = q.shape
    pad = width - hd - 1
    bias = (
        (key_bias / (FOLD_CONSTANT * scale)).to(k.dtype).expand(B, H, T).transpose(1, 2).unsqueeze(-1)
    )  # (B, T, H, 1)
    const = q.new_full((1, 1, 1, 1), FOLD_CONSTANT).expand(B, T, H, 1)
    zeros = q.new_zeros((1, 1, 1, pad + 1)).expand(B, T, H, pad + 1)
    # cat in (B, T, H, .) layout (a free view of the qkv projection), then back to (B, H, T, width).
    q2 = torch.cat([q.transpose(1, 2), const, zeros[..., :pad]], dim=-1).transpose(1, 2)  # (B, H, T, width)
    k2 = torch.cat([k.transpose(1, 2), bias, zeros[..., :pad]], dim=-1).transpose(1, 2)  # (B, H, T, width)
    v2 = torch.cat([v.transpose(1, 2), zeros], dim=-1).transpose(1, 2)  # (B, H, T, width)
    y = F.scaled_dot_product_attention(
        q2, k2, v2, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale
    )
    return y[..., :hd]


def lag_chunk_size(gamma: Tensor, T: int, slope: Tensor | None = None) -> int:
    """Queries per chunk of :func:`lag_penalised_attention` for heads of curvature ``gamma`` and
    slope ``slope``: the largest chunk over which the fold stays precise, T when it is precise
    over the whole window. For the envelope, max(LAG_CHUNK_MIN, LAG_CHUNK_SIGMAS sigma_min)
    (sigma_min = 1 / (2 sqrt(gamma_max))); for the slope, max(LAG_CHUNK_MIN, LAG_SLOPE_SPAN /
    m_max); the smaller of the two, rounded down to a multiple of LAG_CHUNK_MIN."""
    limits = [float(T)]
    gamma_max = float(gamma.detach().max()) if gamma.numel() else 0.0
    if gamma_max > 0.0:
        limits.append(LAG_CHUNK_SIGMAS * 0.5 / math.sqrt(gamma_max))
    slope_max = float(slope.detach().abs().max()) if slope is not None and slope.numel() else 0.0
    if slope_max > 0.0:
        limits.append(LAG_SLOPE_SPAN / slope_max)
    limit = min(limits)
    if limit >= T:
        return T
    return min(T, max(LAG_CHUNK_MIN, int(limit) // LAG_CHUNK_MIN * LAG_CHUNK_MIN))


def slope_fits_window(slope: float, T: int) -> bool:
    """Whether one fold over a window of T keys stays precise for a head of slope m: m T <=
    LAG_SLOPE_SPAN, i.e. :func:`lag_chunk_size` returns T for it (the columns, centred on the
    window, stay within LAG_SLOPE_SPAN / 2)."""
    return abs(slope) * T <= LAG_SLOPE_SPAN


def lag_reach(
    q: Tensor, k: Tensor, key_bias: Tensor, gamma: Tensor, scale: float, slope: Tensor | None = None
) -> list[int]:
    """Per head, a lag beyond which every key's attention weight is exactly 0 in fp32.

    Key j's logit against query i's own key is at most 2 scale max|q| max|k| + (max - min
    of key_bias) - gamma_h L^2 - m_h L at lag L = i - j (Cauchy-Schwarz; a rotation keeps
    norms). Once that is below -LAG_UNDERFLOW, exp() of it underflows to 0 (below -104 in
    fp32): the key adds nothing to the output or to any gradient, so skipping it changes
    nothing. With b = LAG_UNDERFLOW + 2 scale max|q| max|k| + spread, the lag solves
    gamma L^2 + m L = b: L = 2 b / (m + sqrt(m^2 + 4 gamma b)) (b / m without envelope,
    sqrt(b / gamma) without slope), rounded up to a multiple of LAG_CHUNK_MIN (T: no such lag).
    """
    with torch.no_grad():
        q_norm = q.norm(dim=-1).amax(dim=(0, 2))  # (H,)
        k_norm = k.norm(dim=-1).amax(dim=(0, 2))  # (H,)
        spread = key_bias.amax(dim=(0, -1)) - key_bias.amin(dim=(0, -1))  # (H,) or (1,)
        bound = LAG_UNDERFLOW + 2.0 * scale * q_norm * k_norm + spread
        m = torch.zeros_like(bound) if slope is None else slope.detach().float().clamp_min(0.0)
        root = m + torch.sqrt(m * m + 4.0 * gamma.detach().clamp_min(0.0) * bound)
        lag = 2.0 * bound / root.clamp_min(1e-30)
    T = q.size(-2)
    return [min(T, _round_up(math.ceil(x), LAG_CHUNK_MIN)) if math.isfinite(x) else T for x in lag.tolist()]


#: How a group of heads runs (:func:`lag_plan`): ("whole", T, T), ("window", chunk, reach) or ("loop", chunk, reach).
LagPlan = tuple[str, int, int]


def lag_plan(chunk: int, reach: int, T: int) -> LagPlan:
    """One call over the whole window when the fold is precise over it; batched windows when a
    chunk and its reach cover at most half the window (each query chunk sees chunk + reach keys:
    cheaper than causal attention's T / 2 on average); else a few chunks, each against the keys
    from ``start - reach`` (the first a plain causal square)."""
    if chunk >= T:
        return ("whole", T, T)
    if chunk + reach <= T // 2:
        return ("window", chunk, reach)
    return ("loop", chunk, reach)


def _heads(t: Tensor, heads: list[int]) -> Tensor:
    """Heads ``heads`` of t (B, H, ...): a view for a contiguous run, else a copy."""
    if heads == list(range(heads[0], heads[-1] + 1)):
        return t[:, heads[0] : heads[-1] + 1]
    return t.index_select(1, torch.tensor(heads, device=t.device))


@torch.compiler.disable  # data-dependent chunks and reach: eager, never recompiled per step
def lag_penalised_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_bias: Tensor | None,
    lag_curvature: Tensor | None,
    *,
    lag_slope: Tensor | None = None,
    dropout_p: float = 0.0,
    scale: float | None = None,
    chunk: int | None = None,
    skip_far_keys: bool = True,
    recompute: bool = True,
    rotate: Callable[[Tensor, Tensor, list[int]], tuple[Tensor, Tensor]] | None = None,
) -> Tensor:
    """Causal attention with a per-key bias and a lag penalty per head (Gaussian envelope and/or
    ALiBi's linear slope), fused:

        out_i = sum_{j<=i} softmax_j(q_i.k_j scale + key_bias_j - gamma_h (i - j)^2 - m_h (i - j)) v_j

    q, k, v: (B, H, T, hd); key_bias: (B, H, T) or None; lag_curvature gamma: (H,) >= 0 or
    None (relative MOPE: gamma_h = 1 / (4 sigma_h^2)); lag_slope m: (H,) >= 0 or None (ALiBi).

    **The fold.** Neither penalty is a rank-1 bias, but both are polynomials in i - j: for
    any centre c,

        -gamma (i - j)^2 - m (i - j) = [-gamma (i - c)^2 - m (i - c)]
                                       + 2 gamma (i - c)(j - c) + [-gamma (j - c)^2 + m (j - c)]

    and the first bracket depends on the query only, so it cancels in the softmax over j.
    What is left is one rank-1 product and one per-key bias, i.e. two more columns (one
    without envelope):

        q'_i = [q_i, 1, (i - c)],   k'_j = [k_j, (key_bias_j - gamma (j - c)^2 + m (j - c)) / scale,
                                             2 gamma (j - c) / scale]

    so q'_i.k'_j scale is the score above plus a per-query constant; exact in exact
    arithmetic, one fused SDPA call per group of heads (flash kernel on CPU), no T x T tensor.

    **Precision: chunks centred on their queries.** The folded columns grow as
    gamma (j - c)^2 and m |j - c|, and fp32 rounds a logit of size x to ~6e-8 x, while
    the keys that matter lie within a few sigma (or a few 1 / m) of their query. So the
    queries go in chunks of :func:`lag_chunk_size` (at most 32 sigma_h, at most 512 / m_h,
    at least 64), each centred on its own queries: the output error is then ~2e-5, 1e-4
    for a head with sigma = 1 (plain fp32 SDPA: 3e-6). One fold centred on a long window
    would lose ~1e-2 at T = 1024, sigma = 1 (ALiBi's steepest head, m = 1/2: ~1e-4 at T = 4096).

    **Far keys are skipped: local heads cost sliding-window attention.** Keys beyond
    :func:`lag_reach` (about 23 sigma, or 150 / m, for unit-scale scores) have weights that are
    exactly 0 in fp32; with ``skip_far_keys`` a chunk attends to the keys from ``start - reach``
    on only. Each head gets a plan (:func:`lag_plan`), and heads with the same plan run together:

    - ``whole``: the fold is precise over the whole window: one causal call (wide heads);
    - ``window``: the queries in chunks of C, each against the C + R keys before its end,
      all chunks in ONE call: the keys are padded in front with R keys of logit PAD_LOGIT
      (weight exactly 0) and cut into overlapping windows of C + R with stride C, so that
      every window has the same relative positions (j - c = s - R - (C - 1) / 2 for slot s),
      the same folded columns and the same boolean lower-right causal mask (C, C + R);
    - ``loop``: chunks one call each, against the keys from ``start - reach``, the first a
      causal square (heads whose chunk and reach cover more than half the window).

    **Memory.** Heads of one plan run LAG_GROUP_HEADS at a time, one call each. With
    ``recompute`` (and gradients on) each call is recomputed in the backward pass (activation
    checkpointing): the layer keeps q, k, v and the output, and the folded copies and windows
    of one call live at a time. That pays when q, k, v are kept anyway (relative MOPE: the
    rotation's backward keeps the projections, and the rotated q, k are new tensors). Without
    it the folded copies are kept instead of q, k, v, which then nothing holds (ALiBi: q, k, v
    are views of the projection, freed once folded): about the memory of plain attention,
    and no second forward pass. ``rotate(q, k, heads)``, when given, is a rotation of the heads'
    queries and keys (relative MOPE's) applied inside each call, so that it too is recomputed
    and no rotated copy of q and k is kept (it keeps norms: :func:`lag_reach` reads q and k as
    they come). The fold runs in fp32 even
    under autocast (bf16's 4e-3 rounding of gamma (j - c)^2 would swamp the envelope), which
    on CUDA means SDPA's fp32 memory-efficient kernel; under ``torch.compile`` this function
    runs eager (its plans depend on the data).
    """
    B, H, T, hd = q.shape
    scale = 1.0 / math.sqrt(hd) if scale is None else scale
    out_dtype = v.dtype
    with torch.autocast(device_type=q.device.type, enabled=False):
        q, k, v = q.float(), k.float(), v.float()
        quadratic = lag_curvature is not None
        gamma = lag_curvature.float() if quadratic else q.new_zeros(H)
        slope = q.new_zeros(H) if lag_slope is None else lag_slope.to(device=q.device, dtype=torch.float32)
        key_bias = q.new_zeros((B, H, T)) if key_bias is None else key_bias.float().expand(B, H, T)
        reach = lag_reach(q, k, key_bias, gamma, scale, slope) if skip_far_keys else [T] * H
        gamma_host, slope_host = gamma.detach().cpu(), slope.detach().cpu()  # one device-to-host copy each
        plans: dict[LagPlan, list[int]] = {}
        for h in range(H):
            if chunk is None:
                size = lag_chunk_size(gamma_host[h : h + 1], T, slope_host[h : h + 1])
            else:
                size = max(1, min(int(chunk), T))
            plans.setdefault(lag_plan(size, reach[h], T), []).append(h)
        width = fold_width(hd, q.device.type, columns=2 if quadratic else 1)
        recompute = recompute and torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v, key_bias, gamma))
        outputs, order = [], []
        runs = [
            (plan, heads[a : a + LAG_GROUP_HEADS])
            for plan, heads in plans.items()
            for a in range(0, len(heads), LAG_GROUP_HEADS)
        ]
        for plan, heads in runs:
            parts = (*(_heads(t, heads) for t in (q, k, v, key_bias)), gamma[heads], slope[heads])
            args = (*parts, plan, quadratic, width, dropout_p, scale, rotate, heads)
            outputs.append(checkpoint(_lag_group, *args, use_reentrant=False) if recompute else _lag_group(*args))
            order += heads
        y = _in_head_order(outputs, order)  # (B, H, T, hd)
    return y.to(out_dtype)


def _lag_group(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_bias: Tensor,
    gamma: Tensor,
    slope: Tensor,
    plan: LagPlan,
    quadratic: bool,
    width: int,
    dropout_p: float,
    scale: float,
    rotate: Callable[[Tensor, Tensor, list[int]], tuple[Tensor, Tensor]] | None = None,
    heads: list[int] | None = None,
) -> Tensor:
    """Heads ``heads`` sharing one plan (:func:`lag_plan`), rotated first by ``rotate`` if given -> (B, h, T, hd)."""
    if rotate is not None:
        q, k = rotate(q, k, heads)
    kind, chunk, reach = plan
    T, hd = q.size(-2), q.size(-1)
    fold = (gamma, slope, quadratic, width, dropout_p, scale)
    if kind == "window":
        return _lag_windows(q, k, v, key_bias, *fold, chunk, reach)[..., :hd]
    windows = [(start, min(T, start + chunk), max(0, start - reach)) for start in range(0, T, chunk)]
    outputs = [_lag_chunk(q, k, v, key_bias, *fold, start, stop, first) for start, stop, first in windows]
    return (outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=2))[..., :hd]  # (B, h, T, hd)


def _fold_lag(
    q: Tensor,
    k: Tensor,
    key_bias: Tensor,
    i: Tensor,
    j: Tensor,
    gamma: Tensor,
    slope: Tensor,
    quadratic: bool,
    width: int,
    scale: float,
) -> tuple[Tensor, Tensor]:
    """q' = [q, c, (i - centre), 0..] (..., C, width) and k' = [k, (key_bias - gamma j^2 + m j) / (c scale),
    2 gamma j / scale, 0..] (..., S, width); the envelope's columns only when ``quadratic``.

    q (..., C, hd), k (..., S, hd) and key_bias (..., S) share their leading dimensions
    (B, h) or (B, h, n windows); i (C,) and j (S,) are the positions relative to the centre;
    gamma and slope (h,)."""
    g = gamma.view(-1, *([1] * (key_bias.dim() - 2)))  # (h, 1) or (h, 1, 1): against key_bias's (B, h, [n,] S)
    m = slope.view_as(g)
    bias = (key_bias - g * j * j + m * j) / (FOLD_CONSTANT * scale)  # (..., S)
    q_columns, k_columns = [torch.full_like(i, FOLD_CONSTANT)], [bias]
    if quadratic:
        q_columns.append(i)
        k_columns.append((2.0 * g * j / scale).expand_as(bias))
    n_columns = len(q_columns)
    pad = width - q.size(-1) - n_columns
    lead_q, lead_k = q.shape[:-1], k.shape[:-1]
    q2 = torch.cat(
        [q, torch.stack(q_columns, -1).expand(*lead_q, n_columns), q.new_zeros(1).expand(*lead_q, pad)], -1
    )  # (..., C, width)
    k2 = torch.cat([k, torch.stack(k_columns, -1), k.new_zeros(1).expand(*lead_k, pad)], -1)  # (..., S, width)
    return q2, k2


def _lag_chunk(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_bias: Tensor,
    gamma: Tensor,
    slope: Tensor,
    quadratic: bool,
    width: int,
    dropout_p: float,
    scale: float,
    start: int,
    stop: int,
    first: int,
) -> Tensor:
    """Queries start..stop-1 against keys first..stop-1, centred on the chunk's middle
    -> (B, h, stop - start, width)."""
    hd = q.size(-1)
    centre = 0.5 * (start + stop - 1)
    i = torch.arange(start, stop, device=q.device, dtype=torch.float32) - centre  # (C,)
    j = torch.arange(first, stop, device=q.device, dtype=torch.float32) - centre  # (S,)
    q2, k2 = _fold_lag(
        q[:, :, start:stop], k[:, :, first:stop], key_bias[..., first:stop], i, j, gamma, slope, quadratic, width, scale
    )
    v2 = F.pad(v[:, :, first:stop], (0, width - hd))  # (B, h, S, width)
    if first == start:  # a square block: plain causal
        return F.scaled_dot_product_attention(q2, k2, v2, dropout_p=dropout_p, is_causal=True, scale=scale)
    allowed = torch.ones(i.numel(), j.numel(), dtype=torch.bool, device=q.device).tril(start - first)  # j <= i
    return F.scaled_dot_product_attention(q2, k2, v2, attn_mask=allowed, dropout_p=dropout_p, scale=scale)


def _lag_windows(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_bias: Tensor,
    gamma: Tensor,
    slope: Tensor,
    quadratic: bool,
    width: int,
    dropout_p: float,
    scale: float,
    chunk: int,
    reach: int,
) -> Tensor:
    """Every chunk of C queries against the C + R keys before its end, in ONE SDPA call
    -> (B, h, T, width).

    Queries are padded at the end to n C (their outputs are dropped), keys in front with R
    keys of logit PAD_LOGIT and at the end like the queries; window n holds keys
    nC - R .. nC + C - 1, so slot s of every window sits at j - c = s - R - (C - 1) / 2 from
    its chunk's centre c, and one boolean mask (C, C + R), s <= p + R, is the causal one."""
    B, h, T, hd = q.shape
    C, R = chunk, reach
    n = -(-T // C)
    W, tail = C + R, n * C - T
    centre = 0.5 * (C - 1)
    i = torch.arange(C, device=q.device, dtype=torch.float32) - centre  # (C,): query p of any chunk
    j = torch.arange(W, device=q.device, dtype=torch.float32) - R - centre  # (W,): key slot s of any window
    q_chunks = F.pad(q, (0, 0, 0, tail)).view(B, h, n, C, hd)  # (B, h, n, C, hd)
    k_windows = F.pad(k, (0, 0, R, tail)).unfold(2, W, C).transpose(-1, -2)  # (B, h, n, W, hd), a view
    bias_windows = F.pad(key_bias, (R, tail), value=PAD_LOGIT).unfold(-1, W, C)  # (B, h, n, W), a view
    v_windows = F.pad(v, (0, width - hd, R, tail)).unfold(2, W, C).transpose(-1, -2)  # (B, h, n, W, width)
    q2, k2 = _fold_lag(q_chunks, k_windows, bias_windows, i, j, gamma, slope, quadratic, width, scale)
    allowed = torch.ones(C, W, dtype=torch.bool, device=q.device).tril(R)  # slot s <= query p + R
    y = F.scaled_dot_product_attention(
        q2.view(B, h * n, C, width),  # (B, h n, C, width)
        k2.view(B, h * n, W, width),  # (B, h n, W, width)
        v_windows.reshape(B, h * n, W, width),  # (B, h n, W, width): a copy of the windows
        attn_mask=allowed,
        dropout_p=dropout_p,
        scale=scale,
    )
    return y.view(B, h, n * C, width)[:, :, :T]  # (B, h, T, width)


#: Pairwise path: queries per chunk such that one chunk's scores (B, H, C, T) hold about this many floats.
PAIR_BLOCK_ELEMENTS = 2**22
PAIR_CHUNK_MIN = 16


def pair_chunk_size(B: int, H: int, T: int) -> int:
    """Queries per chunk of :func:`pairwise_biased_attention`: PAIR_BLOCK_ELEMENTS / (B H T),
    between PAIR_CHUNK_MIN and T, a multiple of PAIR_CHUNK_MIN below T."""
    chunk = max(PAIR_CHUNK_MIN, PAIR_BLOCK_ELEMENTS // (B * H * T) // PAIR_CHUNK_MIN * PAIR_CHUNK_MIN)
    return min(T, chunk)


@torch.compiler.disable  # a Python loop over chunks: eager, never recompiled per step
def pairwise_biased_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    pair_bias: Callable[[int, int], Tensor],
    *,
    dropout_p: float = 0.0,
    scale: float | None = None,
    chunk: int | None = None,
) -> Tensor:
    """Causal attention with a pairwise additive bias that folds into nothing, in query chunks:

        out_i = sum_{j<=i} softmax_j(q_i.k_j scale + b_ij) v_j

    q, k, v: (B, H, T, hd); ``pair_bias(start, stop)`` returns b_ij for queries start..stop-1
    and keys 0..stop-1, broadcastable to (B, H, stop - start, stop) (j > i included: masked
    here). Each chunk of queries (:func:`pair_chunk_size`: about PAIR_BLOCK_ELEMENTS scores)
    is ONE SDPA call against its keys 0..stop-1, with the bias block (causal mask folded in
    as -inf) as a float ``attn_mask``. The bias needs its gradient (learned kernel, per-query
    gates), which CPU SDPA computes on its math path, so a chunk holds its scores (B, H, C,
    stop): never T x T, and each chunk is recomputed in the backward pass (activation
    checkpointing) so that one chunk's scores live at a time. Cost: about T^2 / 2 scores
    through the math path, which is several times plain flash attention (``harness bench
    attention``).
    """
    B, H, T, hd = q.shape
    scale = 1.0 / math.sqrt(hd) if scale is None else scale
    size = pair_chunk_size(B, H, T) if chunk is None else max(1, min(int(chunk), T))
    recompute = torch.is_grad_enabled()
    outputs = []
    for start in range(0, T, size):
        args = (q, k, v, pair_bias, start, min(T, start + size), dropout_p, scale)
        outputs.append(checkpoint(_pair_chunk, *args, use_reentrant=False) if recompute else _pair_chunk(*args))
    return outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=2)  # (B, H, T, hd)


def _pair_chunk(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    pair_bias: Callable[[int, int], Tensor],
    start: int,
    stop: int,
    dropout_p: float,
    scale: float,
) -> Tensor:
    """Queries start..stop-1 against keys 0..stop-1 -> (B, H, stop - start, hd)."""
    allowed = torch.ones(stop - start, stop, dtype=torch.bool, device=q.device).tril(start)  # key j <= query i
    bias = pair_bias(start, stop).to(q.dtype).masked_fill(~allowed, float("-inf"))  # (B or 1, H, C, stop)
    return F.scaled_dot_product_attention(
        q[:, :, start:stop], k[:, :, :stop], v[:, :, :stop], attn_mask=bias, dropout_p=dropout_p, scale=scale
    )


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention with a key-gate, scoring and output-gate slot.

    The position component is passed to :meth:`forward` (it is owned by the model and
    shared by every layer), together with its precomputed attention bias if any. Without a
    key gate this is standard attention (qkv projection, one SDPA call at the head
    dimension, output projection); with one, the folded path of :meth:`_gated`; with a lag
    penalty (relative MOPE, ALiBi), :meth:`_lag_penalised`; with a pairwise gate or
    position bias (``ega-qnorm``, ``mope-bias``), the query chunks of :meth:`_pairwise`.
    """

    def __init__(
        self,
        d_model: int,
        n_head: int,
        *,
        gate: KeyGate | None,
        scoring: nn.Module,
        output_gate: OutputGate | None = None,
        dropout: float = 0.0,
        attention_dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.n_head = n_head
        self.head_dim = d_model // n_head
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.gate = gate
        self.scoring = scoring
        self.output_gate = output_gate
        self.attention_dropout = attention_dropout
        self.resid_dropout = nn.Dropout(dropout)

    def forward(
        self, x: Tensor, position: PositionalEncoding, attn_bias: Tensor | None = None
    ) -> tuple[Tensor, Tensor | None]:
        """x: (B, T, d) normalised layer input -> (output (B, T, d), log g (B, H, T) or None)."""
        if position.pairwise or (self.gate is not None and self.gate.pairwise):
            return self._pairwise(x, position)
        gamma, slope = position.lag_curvature(), position.lag_slope()
        fixed = position.fixed_lag_slope()
        if gamma is None and fixed is not None and not position.transforms_qk and _fold_in_fp32(x):
            return self._slope_folded(x, slope, fixed)
        if gamma is not None or slope is not None:
            return self._lag_penalised(x, position, gamma, slope)
        if self.gate is None:
            return self._plain(x, position, attn_bias), None
        return self._gated(x, position, attn_bias)

    def _heads(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Plain q, k, v projections, each (B, H, T, hd)."""
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        return tuple(t.view(B, T, self.n_head, self.head_dim).transpose(1, 2) for t in (q, k, v))  # (B, H, T, hd)

    def _finish(self, y: Tensor, x: Tensor, proj_weight: Tensor) -> Tensor:
        """Output gate, merge heads and project: y (B, H, T, w) -> (B, T, d)."""
        if self.output_gate is not None:
            y = y * self.output_gate(x)
        B, H, T, w = y.shape
        y = y.transpose(1, 2).reshape(B, T, H * w)  # (B, T, H w); free when SDPA's output is (B, T, H, w)-major
        return self.resid_dropout(F.linear(y, proj_weight, self.proj.bias))

    def _plain(self, x: Tensor, position: PositionalEncoding, attn_bias: Tensor | None) -> Tensor:
        q, k, v = self._heads(x)
        q, k = position.rotate(q, k)
        k = self.scoring(k)
        dropout_p = self.attention_dropout if self.training else 0.0
        y = key_biased_attention(q, k, v, attn_mask=attn_bias, dropout_p=dropout_p)  # (B, H, T, hd)
        return self._finish(y, x, self.proj.weight)

    def _lag_penalised(
        self, x: Tensor, position: PositionalEncoding, gamma: Tensor | None, slope: Tensor | None
    ) -> tuple[Tensor, Tensor | None]:
        """Relative MOPE and ALiBi: rotation (MOPE), then the lag penalty -gamma_h (i - j)^2 - m_h (i - j)
        and the gate's log g folded into SDPA by :func:`lag_penalised_attention` (its own fold, so plain
        projections here)."""
        q, k, v = self._heads(x)
        log_g = self.gate(x, k) if self.gate is not None else None  # (B, H, T) or None
        rotate = None
        if position.transforms_qk and not self.scoring.transforms_keys:
            rotate = position.rotate_heads  # in each call, recomputed with it: no rotated copy of q, k kept
        else:
            q, k = position.rotate(q, k)
            k = self.scoring(k)
        dropout_p = self.attention_dropout if self.training else 0.0
        y = lag_penalised_attention(
            q, k, v, log_g, gamma, lag_slope=slope, dropout_p=dropout_p, recompute=position.transforms_qk, rotate=rotate
        )  # (B, H, T, hd); recomputed in the backward pass when the rotation keeps q, k, v anyway
        return self._finish(y, x, self.proj.weight), log_g

    def _pairwise(self, x: Tensor, position: PositionalEncoding) -> tuple[Tensor, Tensor | None]:
        """A pairwise gate (per-query z-normalisation) or position bias (additive Morlet kernel):
        the score of (i, j) gains

            b_ij = log g_ij (or log g_j) + pair_bias(i, j) - gamma_h (i - j)^2 - m_h (i - j)

        added block by block in query chunks (:func:`pairwise_biased_attention`)."""
        q, k, v = self._heads(x)
        gate = self.gate
        moments = gate.moments(x) if gate is not None and gate.pairwise else None  # 3 x (B, H, T)
        log_g = gate(x, k) if gate is not None else None  # (B, H, T): per key, or the last query's row
        q, k = position.rotate(q, k)
        k = self.scoring(k)
        gamma, slope = position.lag_curvature(), position.lag_slope()

        def pair_bias(start: int, stop: int) -> Tensor:
            """b_ij for queries start..stop-1, keys 0..stop-1: (B or 1, H, C, stop)."""
            i = torch.arange(start, stop, device=x.device, dtype=torch.float32)  # (C,)
            j = torch.arange(stop, device=x.device, dtype=torch.float32)  # (S,)
            lag = i[:, None] - j[None, :]  # (C, S)
            bias = x.new_zeros((), dtype=torch.float32)
            if moments is not None:
                bias = bias + gate.pair_log_gate(moments, start, stop)  # (B, H, C, S)
            elif log_g is not None:
                bias = bias + log_g[..., None, :stop]  # (B, H, 1, S)
            if position.pairwise:
                bias = bias + position.pair_bias(i, j)  # (H, C, S)
            if gamma is not None:
                bias = bias - gamma[:, None, None] * lag * lag
            if slope is not None:
                bias = bias - slope[:, None, None] * lag
            return bias

        dropout_p = self.attention_dropout if self.training else 0.0
        y = pairwise_biased_attention(q, k, v, pair_bias, dropout_p=dropout_p)  # (B, H, T, hd)
        return self._finish(y, x, self.proj.weight), log_g

    def _gated(self, x: Tensor, position: PositionalEncoding, attn_bias: Tensor | None) -> tuple[Tensor, Tensor]:
        """The folded form of :func:`key_biased_attention` with as few copies as possible.

        q and v are projected straight into the folded width (projection weights padded
        with zero rows; q's extra column gets the constant c through the projection bias),
        so they need no copy; k is projected plainly and folded with one ``cat`` (its extra
        column depends on x through the gate); q too when RoPE rotates it. Everything is
        kept in the (B, T, H, .) layout of the projections, so that SDPA's output is too
        and merging the heads for the output projection is free. Nothing is modified in place.
        """
        hd = self.head_dim
        width = fold_width(hd, x.device.type)
        scale = 1.0 / math.sqrt(hd)
        fold_q = not position.transforms_qk
        q_full = self._project(x, 0, width if fold_q else None, constant=FOLD_CONSTANT)
        k = self._project(x, 1, None)
        v2 = self._project(x, 2, width)
        q = q_full[..., :hd]

        log_g = self.gate(x, k)  # (B, H, T)
        q, k = position.rotate(q, k)
        k = self.scoring(k)
        key_bias = (log_g / (FOLD_CONSTANT * scale)).to(k.dtype)  # (B, H, T)
        k2 = _fold_column(k, key_bias, width)  # [k, log g / (c scale), 0..]
        q2 = q_full if fold_q else _fold_column(q, torch.full_like(key_bias, FOLD_CONSTANT), width)  # [q, c, 0..]

        dropout_p = self.attention_dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(
            q2, k2, v2, attn_mask=attn_bias, dropout_p=dropout_p, is_causal=attn_bias is None, scale=scale
        )  # (B, H, T, width)
        return self._finish(y, x, self._folded_proj_weight(width)), log_g

    def _project(self, x: Tensor, i: int, width: int | None, constant: float = 0.0) -> Tensor:
        """Projection i (0 = q, 1 = k, 2 = v) of x (B, T, d) -> (B, H, T, width, else hd), a view of the
        (B, T, H, .) layout. With a width the weight gets zero rows for the columns hd.. (no copy of the
        output to fold it), and ``constant`` puts c in column hd through the bias (0 . x + c)."""
        B, T, C = x.shape
        H, hd = self.n_head, self.head_dim
        wi, bi = self.qkv.weight.view(3, H, hd, C)[i], self.qkv.bias.view(3, H, hd)[i]  # (H, hd, C), (H, hd)
        if width is not None:
            wi = F.pad(wi, (0, 0, 0, width - hd))  # (H, width, C)
            bi = F.pad(bi, (0, width - hd))  # (H, width)
            if constant:
                bi = bi + _constant_column(bi, hd, constant)
        return F.linear(x, wi.reshape(-1, C), bi.reshape(-1)).view(B, T, H, -1).transpose(1, 2)

    def _folded_proj_weight(self, width: int) -> Tensor:
        """The output projection over the folded width: zero weight columns for v's padding (d, H width)."""
        C, H, hd = self.proj.weight.size(0), self.n_head, self.head_dim
        return F.pad(self.proj.weight.view(C, H, hd), (0, width - hd)).view(C, H * width)

    def _slope_folded(self, x: Tensor, slope: Tensor, slope_values: tuple[float, ...]) -> tuple[Tensor, Tensor | None]:
        """ALiBi (and a key gate with it) folded as :meth:`_gated` folds a gate: one SDPA call for
        every head whose slope is shallow enough for one fold over the whole window, none of
        q, k, v copied but k (one ``cat``).

            score_ij = q_i.k_j scale + log g_j - m_h (i - j)
                     = q_i.k_j scale + [log g_j + m_h (j - c)] - m_h (i - c)

        The last term depends on the query only and cancels in the softmax, so k's fold column is
        (log g_j + m_h (j - c)) / (c_fold scale) with c = (T - 1) / 2, of size at most m_h T / 2
        <= LAG_SLOPE_SPAN / 2 for the heads that qualify (:func:`slope_fits_window`): fp32 keeps
        the logits to ~2e-5. Steeper heads (ALiBi's first ones at T > LAG_SLOPE_SPAN / m) take
        :func:`lag_penalised_attention`'s windows on views of the same projections, recomputed in
        the backward pass so that their windows live one call at a time."""
        B, T, _ = x.shape
        H, hd = self.n_head, self.head_dim
        width = fold_width(hd, x.device.type)
        scale = 1.0 / math.sqrt(hd)
        q2 = self._project(x, 0, width, constant=FOLD_CONSTANT)  # (B, H, T, width): [q, c, 0..]
        k = self._project(x, 1, None)  # (B, H, T, hd)
        v2 = self._project(x, 2, width)  # (B, H, T, width): [v, 0..]
        log_g = self.gate(x, k) if self.gate is not None else None  # (B, H, T) or None
        k = self.scoring(k)
        slopes = slope.to(device=x.device, dtype=torch.float32)
        j = torch.arange(T, device=x.device, dtype=torch.float32) - 0.5 * (T - 1)  # (T,): j - c
        key_bias = slopes[:, None] * j  # (H, T): m_h (j - c)
        key_bias = key_bias if log_g is None else log_g + key_bias  # (B or 1, H, T)
        k2 = _fold_column(k, (key_bias / (FOLD_CONSTANT * scale)).expand(B, H, T), width)  # (B, H, T, width)
        steep = [h for h, m in enumerate(slope_values) if not slope_fits_window(m, T)]  # Python: no graph break
        shallow = [h for h in range(H) if h not in steep]
        dropout_p = self.attention_dropout if self.training else 0.0
        outputs = []
        if steep:
            y = lag_penalised_attention(
                *(_heads(t, steep)[..., :hd] for t in (q2, k, v2)),
                None if log_g is None else _heads(log_g.expand(B, H, T), steep),
                None,
                lag_slope=slopes[steep],
                dropout_p=dropout_p,
                scale=scale,
                recompute=True,
            )  # (B, steep, T, hd)
            outputs.append(F.pad(y, (0, width - hd)))
        if shallow:
            parts = (_heads(t, shallow) for t in (q2, k2, v2))
            outputs.append(F.scaled_dot_product_attention(*parts, dropout_p=dropout_p, is_causal=True, scale=scale))
        y = _in_head_order(outputs, steep + shallow)  # (B, H, T, width)
        return self._finish(y, x, self._folded_proj_weight(width)), log_g


def _in_head_order(outputs: list[Tensor], order: list[int]) -> Tensor:
    """Outputs of calls over groups of heads, (B, h_i, T, .) each, holding heads ``order`` in turn
    -> (B, H, T, .) with head h at index h."""
    y = outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=1)
    if order != list(range(len(order))):
        y = y.index_select(1, torch.tensor(order, device=y.device).argsort())
    return y


def _fold_in_fp32(x: Tensor) -> bool:
    """Whether the layer computes in fp32 (no autocast): a fold column of size up to
    LAG_SLOPE_SPAN / 2 needs fp32's precision (bf16 would round it to ~1)."""
    return x.dtype == torch.float32 and not torch.is_autocast_enabled(x.device.type)


def _constant_column(like: Tensor, column: int, value: float) -> Tensor:
    """Zeros shaped like ``like`` (H, width) with ``value`` in ``column``."""
    const = torch.zeros_like(like)
    const[:, column] = value
    return const


def _fold_column(t: Tensor, column: Tensor, width: int) -> Tensor:
    """[t, column, 0..] along the last dim: (B, H, T, hd), (B, H, T) -> (B, H, T, width),
    concatenated in the (B, T, H, .) layout (SDPA's output then has it too)."""
    B, H, T, hd = t.shape
    zeros = t.new_zeros((1, 1, 1, width - hd - 1)).expand(B, T, H, width - hd - 1)
    parts = [t.transpose(1, 2), column.transpose(1, 2).unsqueeze(-1).to(t.dtype), zeros]
    return torch.cat(parts, dim=-1).transpose(1, 2)  # (B, H, T, width)
