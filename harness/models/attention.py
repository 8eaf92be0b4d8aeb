"""One causal self-attention that composes the three slots around ONE fused SDPA call.

    x (B, T, d) --qkv--> q, k, v (B, H, T, hd)
    log g = gate(x, k)                      key gate: per-key logit bias (B, H, T), or none
    q, k  = position.rotate(q, k)           RoPE, relative MOPE (identity otherwise)
    k     = scoring(k)                      lagged keys (identity for dot)
    y     = softmax(q.k^T scale + log g_j [+ ALiBi bias] [- gamma_h (i-j)^2], causal) v   one SDPA call
    y     = y * output_gate(x)              head-wise output gate (gated-output only)
    out   = proj(y)

The per-key bias is folded into the dot product (:func:`key_biased_attention`), so a gate
never builds a T x T tensor and SDPA keeps its flash kernel. Inside the layer the fold
avoids copies: q and v are projected straight into the folded width (weights padded with
zero rows, q's constant column from the projection bias), only k is concatenated with
its bias column, and the output projection reads the folded width (weight padded with
zero columns), so a gated layer holds about the tensors of a plain one, (hd + 1) / hd
times wider, plus the gate's O(B H T) statistics.

Relative MOPE's Gaussian lag envelope -gamma_h (i - j)^2 is folded too, as two more
columns (:func:`lag_penalised_attention`): a pairwise bias, yet no T x T tensor.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from harness.models.gates import KeyGate, OutputGate
from harness.models.positional import PositionalEncoding

FOLD_CONSTANT = 1.0


#: Lag-envelope fold: queries per chunk at least LAG_CHUNK_MIN, else at most LAG_CHUNK_SIGMAS sigma_min.
LAG_CHUNK_MIN = 64
LAG_CHUNK_SIGMAS = 32
#: A key whose logit lies this far below the query's own has weight exactly 0 in fp32 (exp underflows
#: below -104; the margin covers the rounding of the logits themselves).
LAG_UNDERFLOW = 120.0


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
    (ALiBi); without it SDPA runs with ``is_causal=True``.

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


def lag_chunk_size(gamma: Tensor, T: int) -> int:
    """Queries per chunk of :func:`lag_penalised_attention` for heads of curvature ``gamma``:
    T (one call) when the fold is precise over the whole window (T <= LAG_CHUNK_SIGMAS
    sigma_min), else max(LAG_CHUNK_MIN, LAG_CHUNK_SIGMAS sigma_min) rounded down to a
    multiple of LAG_CHUNK_MIN (sigma_min = 1 / (2 sqrt(gamma_max)))."""
    gamma_max = float(gamma.detach().max())
    if gamma_max <= 0.0:
        return T
    sigma_min = 0.5 / math.sqrt(gamma_max)
    chunk = max(LAG_CHUNK_MIN, int(LAG_CHUNK_SIGMAS * sigma_min) // LAG_CHUNK_MIN * LAG_CHUNK_MIN)
    return min(T, chunk)


def lag_reach(q: Tensor, k: Tensor, key_bias: Tensor, gamma: Tensor, scale: float) -> list[int]:
    """Per head, a lag beyond which every key's attention weight is exactly 0 in fp32.

    Key j's logit against query i's own key is at most 2 scale max|q| max|k| + (max - min
    of key_bias) - gamma_h (i - j)^2 (Cauchy-Schwarz; a rotation keeps norms). Once that is
    below -LAG_UNDERFLOW, exp() of it underflows to 0 (below -104 in fp32): the key adds
    nothing to the output or to any gradient, so skipping it changes nothing. Returns
    ceil(sqrt(bound / gamma_h)) rounded up to a multiple of LAG_CHUNK_MIN (T: no such lag).
    """
    with torch.no_grad():
        q_norm = q.norm(dim=-1).amax(dim=(0, 2))  # (H,)
        k_norm = k.norm(dim=-1).amax(dim=(0, 2))  # (H,)
        spread = key_bias.amax(dim=(0, -1)) - key_bias.amin(dim=(0, -1))  # (H,) or (1,)
        bound = LAG_UNDERFLOW + 2.0 * scale * q_norm * k_norm + spread
        lag = torch.sqrt(bound / gamma.detach().clamp_min(1e-30))
    T = q.size(-2)
    return [min(T, _round_up(math.ceil(x), LAG_CHUNK_MIN)) if math.isfinite(x) else T for x in lag.tolist()]


@torch.compiler.disable  # data-dependent chunks and reach: eager, never recompiled per step
def lag_penalised_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_bias: Tensor | None,
    lag_curvature: Tensor,
    *,
    dropout_p: float = 0.0,
    scale: float | None = None,
    chunk: int | None = None,
    skip_far_keys: bool = True,
) -> Tensor:
    """Causal attention with a per-key bias and a Gaussian lag envelope per head, fused:

        out_i = sum_{j<=i} softmax_j(q_i.k_j scale + key_bias_j - gamma_h (i - j)^2) v_j

    q, k, v: (B, H, T, hd); key_bias: (B, H, T) or None; lag_curvature gamma: (H,), >= 0.

    **The fold.** A Gaussian in i - j is not a rank-1 bias, but its logarithm is a quadratic:
    for any centre m,

        -gamma (i - j)^2 = -gamma (i - m)^2  +  2 gamma (i - m)(j - m)  -  gamma (j - m)^2

    and the first term depends on the query only, so it cancels in the softmax over j.
    What is left is one rank-1 product and one per-key bias, i.e. two more columns:

        q'_i = [q_i, c, (i - m), 0..],   k'_j = [k_j, (key_bias_j - gamma (j - m)^2) / (c scale),
                                                 2 gamma (j - m) / scale, 0..]

    so q'_i.k'_j scale is the score above plus a per-query constant; exact in exact
    arithmetic, in fused SDPA calls (flash kernel on CPU, O(T) memory, no T x T tensor).

    **Precision.** The folded terms grow as gamma (j - m)^2 while the scores that matter (keys
    within a few sigma of the query) are small, so fp32 rounding of those columns costs
    ~ 6e-8 gamma (|i - m| + |j - m|)^2 in the logits. One fold centred on a long window would
    lose ~1e-2 at T = 1024, sigma = 1 (measured against a float64 oracle). So the queries go
    in chunks (``chunk``, default per head :func:`lag_chunk_size`: T when T <= 32 sigma,
    else max(64, 32 sigma)), each centred on its own queries, against the keys up to the end
    of the chunk, with a boolean lower-right causal mask (no grad: SDPA stays on its flash
    kernel). The output error is then ~ 2e-8 (chunk / sigma)^2: about 2e-5 at the default,
    1e-4 for a head with sigma = 1 and 4e-4 at sigma = 0.5 (chunks of 64), against 3e-6 for
    plain fp32 SDPA.

    **Narrow heads cost O(T sigma).** Keys beyond :func:`lag_reach` (about 20 sigma for unit
    scale scores) have weights that are exactly 0 in fp32; with ``skip_far_keys`` a chunk
    attends to keys from ``start - reach`` on only. So a local head costs sliding-window
    attention, not T^2 / 2. Heads are grouped by (chunk, reach), one group per plan.

    **Cost and memory.** Each chunk copies its keys into the folded width; when the copies
    of a group would exceed twice its keys, they are recomputed in the backward pass
    (activation checkpointing), so memory stays O(B H T hd): nothing T x T is held. The
    fold runs in fp32 even under autocast (bf16's 4e-3 rounding of gamma (j - m)^2 would
    swamp the envelope), which on CUDA means SDPA's fp32 memory-efficient kernel; under
    ``torch.compile`` this function runs eager (its chunks depend on the data).
    """
    B, H, T, hd = q.shape
    scale = 1.0 / math.sqrt(hd) if scale is None else scale
    out_dtype = v.dtype
    with torch.autocast(device_type=q.device.type, enabled=False):
        q, k, v = q.float(), k.float(), v.float()
        gamma = lag_curvature.float()
        key_bias = q.new_zeros((B, H, T)) if key_bias is None else key_bias.float().expand(B, H, T)
        reach = lag_reach(q, k, key_bias, gamma, scale) if skip_far_keys else [T] * H
        plans: dict[tuple[int, int], list[int]] = {}
        gamma_host = gamma.detach().cpu()  # one device-to-host copy, not one sync per head
        for h in range(H):
            size = lag_chunk_size(gamma_host[h : h + 1], T) if chunk is None else max(1, min(int(chunk), T))
            plans.setdefault((size, reach[h]), []).append(h)
        width = fold_width(hd, q.device.type, columns=2)
        v2 = F.pad(v, (0, width - hd))  # (B, H, T, width)
        outputs, order = [], []
        for (size, far), heads in plans.items():
            if len(plans) == 1:  # one plan for every head: no copies
                parts = (q, k, v2, key_bias, gamma[:, None])
            else:
                index = torch.tensor(heads, device=q.device)
                parts = (*(t.index_select(1, index) for t in (q, k, v2, key_bias)), gamma[index][:, None])
            outputs.append(_lag_group(*parts, size, far, dropout_p, scale))
            order += heads
        y = outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=1)  # (B, H, T, width), heads in `order`
        if order != list(range(H)):
            y = y.index_select(1, torch.tensor(order, device=q.device).argsort())
    return y[..., :hd].to(out_dtype)


def _lag_group(
    q: Tensor,
    k: Tensor,
    v2: Tensor,
    key_bias: Tensor,
    gamma: Tensor,
    chunk: int,
    reach: int,
    dropout_p: float,
    scale: float,
) -> Tensor:
    """Heads sharing one plan: query chunks of ``chunk``, each against keys from ``start - reach``
    to the chunk's end -> (B, h, T, width)."""
    T = q.size(-2)
    windows = [(start, min(T, start + chunk), max(0, start - reach)) for start in range(0, T, chunk)]
    recompute = sum(stop - first for _, stop, first in windows) > 2 * T and torch.is_grad_enabled()
    outputs = []
    for start, stop, first in windows:
        args = (q, k, v2, key_bias, gamma, start, stop, first, dropout_p, scale)
        outputs.append(checkpoint(_lag_chunk, *args, use_reentrant=False) if recompute else _lag_chunk(*args))
    return outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=2)  # (B, h, T, width)


def _lag_chunk(
    q: Tensor,
    k: Tensor,
    v2: Tensor,
    key_bias: Tensor,
    gamma: Tensor,
    start: int,
    stop: int,
    first: int,
    dropout_p: float,
    scale: float,
) -> Tensor:
    """Queries start..stop-1 against keys first..stop-1, centre m at the chunk's middle
    -> (B, h, stop - start, width)."""
    B, H, T, hd = q.shape
    width = v2.size(-1)
    centre = 0.5 * (start + stop - 1)
    i = torch.arange(start, stop, device=q.device, dtype=torch.float32) - centre  # (C,)
    j = torch.arange(first, stop, device=q.device, dtype=torch.float32) - centre  # (S,)
    C, S = i.numel(), j.numel()
    bias = (key_bias[..., first:stop] - gamma * j * j) / (FOLD_CONSTANT * scale)  # (B, h, S)
    slope = (2.0 * gamma * j / scale).expand(B, H, S)  # (B, h, S)
    q_columns = torch.stack([torch.full_like(i, FOLD_CONSTANT), i], dim=-1).expand(B, H, C, 2)
    q2 = torch.cat([q[:, :, start:stop], q_columns, q.new_zeros(1, 1, 1, 1).expand(B, H, C, width - hd - 2)], -1)
    zeros = k.new_zeros(1, 1, 1, 1).expand(B, H, S, width - hd - 2)
    k2 = torch.cat([k[:, :, first:stop], bias.unsqueeze(-1), slope.unsqueeze(-1), zeros], -1)  # (B, h, S, width)
    v2 = v2[:, :, first:stop]
    if first == start:  # a square block: plain causal
        return F.scaled_dot_product_attention(q2, k2, v2, dropout_p=dropout_p, is_causal=True, scale=scale)
    allowed = torch.ones(C, S, dtype=torch.bool, device=q.device).tril(start - first)  # key j <= query i
    return F.scaled_dot_product_attention(q2, k2, v2, attn_mask=allowed, dropout_p=dropout_p, scale=scale)


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention with a key-gate, scoring and output-gate slot.

    The position component is passed to :meth:`forward` (it is owned by the model and
    shared by every layer), together with its precomputed attention bias (ALiBi) if any.
    Without a key gate this is standard attention (qkv projection, one SDPA call at the
    head dimension, output projection); with one, the folded path of :meth:`_gated`.
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
        gamma = position.lag_curvature()
        if gamma is not None:
            return self._lag_penalised(x, position, gamma)
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

    def _lag_penalised(self, x: Tensor, position: PositionalEncoding, gamma: Tensor) -> tuple[Tensor, Tensor | None]:
        """Relative MOPE: rotation, then the envelope -gamma_h (i - j)^2 and the gate's log g folded
        into SDPA by :func:`lag_penalised_attention` (its own fold, so plain projections here)."""
        q, k, v = self._heads(x)
        log_g = self.gate(x, k) if self.gate is not None else None  # (B, H, T) or None
        q, k = position.rotate(q, k)
        k = self.scoring(k)
        dropout_p = self.attention_dropout if self.training else 0.0
        y = lag_penalised_attention(q, k, v, log_g, gamma, dropout_p=dropout_p)  # (B, H, T, hd)
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
        B, T, C = x.shape
        H, hd = self.n_head, self.head_dim
        width = fold_width(hd, x.device.type)
        scale = 1.0 / math.sqrt(hd)
        fold_q = not position.transforms_qk
        w = self.qkv.weight.view(3, H, hd, C)
        b = self.qkv.bias.view(3, H, hd)

        def project(i: int, padded: bool, constant: float = 0.0) -> Tensor:
            """Projection i (0 = q, 1 = k, 2 = v) -> (B, H, T, width if padded else hd), a (B, T, H, .) view."""
            wi, bi = w[i], b[i]  # (H, hd, C), (H, hd)
            if padded:
                wi = F.pad(wi, (0, 0, 0, width - hd))  # (H, width, C): zero rows for columns hd..
                bi = F.pad(bi, (0, width - hd))  # (H, width)
                if constant:
                    bi = bi + _constant_column(bi, hd, constant)  # column hd = 0 . x + c
            return F.linear(x, wi.reshape(-1, C), bi.reshape(-1)).view(B, T, H, -1).transpose(1, 2)

        q_full = project(0, padded=fold_q, constant=FOLD_CONSTANT)
        k = project(1, padded=False)
        v2 = project(2, padded=True)
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
        # Output projection over the folded width: zero weight columns for v's padding.
        proj_weight = F.pad(self.proj.weight.view(C, H, hd), (0, width - hd)).view(C, H * width)
        return self._finish(y, x, proj_weight), log_g


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
