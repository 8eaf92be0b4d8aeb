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
times wider, plus the gate's O(B H T) statistics. Under bf16 autocast the bias takes three
columns instead of one, so that it keeps fp32's precision (:mod:`harness.models.fold`).

ALiBi's slope -m_h (i - j) folds the same way, as a per-key bias m_h (j - c)
(:meth:`CausalSelfAttention._slope_folded`), in fp32 and bf16 alike. Relative MOPE's
Gaussian lag envelope -gamma_h (i - j)^2 folds too, as two more columns
(:func:`~harness.models.chunked_attention.lag_penalised_attention`): a pairwise bias, yet
no T x T tensor, in query chunks centred on themselves.

No forward pass reads a tensor on the host: every call is planned from Python numbers
(shapes, ALiBi's fixed slopes), heads are picked by slices (:mod:`harness.models.heads`),
and nothing is built from Python data, so a GPU never waits inside a step and the whole
forward traces into one compiled graph (``tests/models/test_models_host_syncs.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from harness.models.chunked_attention import (
    LAG_CHUNK_MIN,
    LAG_CURVATURE_CHUNK,
    LAG_GROUP_HEADS,
    LAG_SLOPE_SPAN,
    PAIR_BLOCK_ELEMENTS,
    lag_chunk_size,
    lag_penalised_attention,
    pair_chunk_size,
    pairwise_biased_attention,
    slope_fits_window,
)
from harness.models.fold import (
    FOLD_CONSTANT,
    append_columns,
    attention_dtype,
    fold_columns,
    fold_pieces,
    fold_width,
)
from harness.models.gates import KeyGate, OutputGate
from harness.models.heads import in_head_order, select_heads, split_heads
from harness.models.positional import PositionalEncoding
from harness.models.seed_axis import attention as sdpa

__all__ = [
    "FOLD_CONSTANT",
    "LAG_CHUNK_MIN",
    "LAG_CURVATURE_CHUNK",
    "LAG_GROUP_HEADS",
    "LAG_SLOPE_SPAN",
    "PAIR_BLOCK_ELEMENTS",
    "CausalSelfAttention",
    "fold_width",
    "key_biased_attention",
    "lag_chunk_size",
    "lag_penalised_attention",
    "pair_chunk_size",
    "pairwise_biased_attention",
    "slope_fits_window",
    "slope_folded_attention",
]


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
    products and O(B H T hd) copies; no T x T tensor. In bf16 (inputs, or autocast) the bias
    takes three columns, [c, c, c] against its three pieces, which keep it to fp32's precision
    (:func:`harness.models.fold.fold_columns`).
    """
    hd = q.size(-1)
    scale = 1.0 / math.sqrt(hd) if scale is None else scale
    is_causal = attn_mask is None
    if key_bias is None:
        return sdpa(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale)
    dtype = attention_dtype(k)
    n = fold_pieces(dtype)
    width = fold_width(hd, q.device.type, columns=n)
    B, H, T, _ = q.shape
    bias = fold_columns((key_bias / (FOLD_CONSTANT * scale)).expand(B, H, T), dtype)  # (B, H, T, n)
    q2 = append_columns(q, q.new_full((1, 1, 1, n), FOLD_CONSTANT).expand(B, H, T, n), width)  # (B, H, T, width)
    k2 = append_columns(k, bias, width)  # (B, H, T, width)
    v2 = append_columns(v, v.new_zeros((1, 1, 1, n)).expand(B, H, T, n), width)  # (B, H, T, width): zeros
    y = sdpa(q2, k2, v2, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale)
    return y[..., :hd]


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
        if gamma is None and fixed is not None and not position.transforms_qk:
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
        rotate, rotation = None, None
        if position.transforms_qk and not self.scoring.transforms_keys:
            # inside the call: no rotated copy of q, k kept (by cos and sin where the encoding gives them)
            rotation = position.pair_rotation(x.size(1), x.device)
            rotate = position.rotate_heads if rotation is None else None
        else:
            q, k = position.rotate(q, k)
            k = self.scoring(k)
        dropout_p = self.attention_dropout if self.training else 0.0
        y = lag_penalised_attention(
            q,
            k,
            v,
            log_g,
            gamma,
            lag_slope=slope,
            slope_values=position.fixed_lag_slope(),
            dropout_p=dropout_p,
            recompute=position.transforms_qk,
            rotate=rotate,
            rotation=rotation,
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
        pair_bias = _pair_bias(x, position, gate, moments, log_g)
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
        Under bf16 autocast log g takes three columns (:func:`harness.models.fold.fold_columns`).
        """
        hd = self.head_dim
        dtype = attention_dtype(x)
        n = fold_pieces(dtype)
        width = fold_width(hd, x.device.type, columns=n)
        scale = 1.0 / math.sqrt(hd)
        fold_q = not position.transforms_qk
        q_full = self._project(x, 0, width if fold_q else None, constant=FOLD_CONSTANT, columns=n)
        k = self._project(x, 1, None)
        v2 = self._project(x, 2, width)
        q = q_full[..., :hd]

        log_g = self.gate(x, k)  # (B, H, T)
        q, k = position.rotate(q, k)
        k = self.scoring(k)
        k2 = append_columns(
            k, fold_columns(log_g / (FOLD_CONSTANT * scale), dtype), width
        )  # [k, log g / (c scale), 0..]
        if not fold_q:
            q2 = append_columns(
                q, q.new_full((1, 1, 1, n), FOLD_CONSTANT).expand(*q.shape[:-1], n), width
            )  # [q, c, 0..]
        else:
            q2 = q_full

        dropout_p = self.attention_dropout if self.training else 0.0
        y = sdpa(
            q2, k2, v2, attn_mask=attn_bias, dropout_p=dropout_p, is_causal=attn_bias is None, scale=scale
        )  # (B, H, T, width)
        return self._finish(y, x, self._folded_proj_weight(width)), log_g

    def _project(self, x: Tensor, i: int, width: int | None, constant: float = 0.0, columns: int = 1) -> Tensor:
        """Projection i (0 = q, 1 = k, 2 = v) of x (B, T, d) -> (B, H, T, width, else hd), a view of the
        (B, T, H, .) layout. With a width the weight gets zero rows for the columns hd.. (no copy of the
        output to fold it), and ``constant`` puts c in columns hd .. hd + columns - 1 through the bias
        (0 . x + c)."""
        B, T, C = x.shape
        H, hd = self.n_head, self.head_dim
        wi, bi = self.qkv.weight.view(3, H, hd, C)[i], self.qkv.bias.view(3, H, hd)[i]  # (H, hd, C), (H, hd)
        if width is not None:
            wi = F.pad(wi, (0, 0, 0, width - hd))  # (H, width, C)
            bi = F.pad(bi, (0, width - hd))  # (H, width)
            if constant:
                bi = bi + _constant_columns(bi, hd, columns, constant)
        return F.linear(x, wi.reshape(-1, C), bi.reshape(-1)).view(B, T, H, -1).transpose(1, 2)

    def _folded_proj_weight(self, width: int) -> Tensor:
        """The output projection over the folded width: zero weight columns for v's padding (d, H width)."""
        C, H, hd = self.proj.weight.size(0), self.n_head, self.head_dim
        return F.pad(self.proj.weight.view(C, H, hd), (0, width - hd)).view(C, H * width)

    def _slope_folded(self, x: Tensor, slope: Tensor, slope_values: tuple[float, ...]) -> tuple[Tensor, Tensor | None]:
        """ALiBi (and a key gate with it) folded as :meth:`_gated` folds a gate, by
        :func:`slope_folded_attention`: q and v projected straight into the folded width, k
        plainly (its fold column depends on the slope and the gate), none of them copied but k."""
        hd = self.head_dim
        dtype = attention_dtype(x)
        n = fold_pieces(dtype)
        width = fold_width(hd, x.device.type, columns=n)
        q2 = self._project(x, 0, width, constant=FOLD_CONSTANT, columns=n)  # (B, H, T, width): [q, c, 0..]
        k = self._project(x, 1, None)  # (B, H, T, hd)
        v2 = self._project(x, 2, width)  # (B, H, T, width): [v, 0..]
        log_g = self.gate(x, k) if self.gate is not None else None  # (B, H, T) or None
        k = self.scoring(k)
        dropout_p = self.attention_dropout if self.training else 0.0
        y = slope_folded_attention(q2, k, v2, log_g, slope, slope_values, dtype=dtype, dropout_p=dropout_p)
        return self._finish(y, x, self._folded_proj_weight(width)), log_g


def slope_folded_attention(
    q2: Tensor,
    k: Tensor,
    v2: Tensor,
    log_g: Tensor | None,
    slope: Tensor,
    slope_values: tuple[float, ...],
    *,
    dtype: torch.dtype,
    dropout_p: float = 0.0,
) -> Tensor:
    """Causal attention with ALiBi's slopes (and a per-key log g) in one SDPA call for every head
    whose slope is shallow enough for one fold over the whole window.

        score_ij = q_i.k_j scale + log g_j - m_h (i - j)
                 = q_i.k_j scale + [log g_j + m_h (j - c)] - m_h (i - c)

    The last term depends on the query only and cancels in the softmax, so k's fold column is
    (log g_j + m_h (j - c)) / (c_fold scale) with c = (T - 1) / 2, of size at most m_h T / 2
    <= LAG_SLOPE_SPAN / 2 for the heads that qualify (:func:`slope_fits_window`): fp32 keeps
    the logits to ~2e-5, and under bf16 autocast the column's three pieces keep fp32's
    precision (:func:`harness.models.fold.fold_columns`), so the bf16 call is flash-eligible
    like plain attention. Steeper heads (ALiBi's first ones at T > LAG_SLOPE_SPAN / m) take
    :func:`lag_penalised_attention`'s chunks on views of the same projections, recomputed in
    the backward pass so that their folded copies live one call at a time.

    q2 and v2: (B, H, T, width), already folded ([q, c, 0..] and [v, 0..], :meth:`CausalSelfAttention._project`);
    k: (B, H, T, hd); log_g: (B, H, T) or None; slope: (H,), ``slope_values`` its values as Python
    numbers; ``dtype`` the attention's (:func:`~harness.models.fold.attention_dtype`) -> (B, H, T, width).
    """
    B, H, T, width = q2.shape
    hd = k.size(-1)
    scale = 1.0 / math.sqrt(hd)
    slopes = slope.to(device=q2.device, dtype=torch.float32)
    j = torch.arange(T, device=q2.device, dtype=torch.float32) - 0.5 * (T - 1)  # (T,): j - c
    key_bias = slopes[:, None] * j  # (H, T): m_h (j - c)
    key_bias = key_bias if log_g is None else log_g + key_bias  # (B or 1, H, T)
    k2 = append_columns(k, fold_columns((key_bias / (FOLD_CONSTANT * scale)).expand(B, H, T), dtype), width)
    steep = [h for h, m in enumerate(slope_values) if not slope_fits_window(m, T)]  # Python numbers
    shallow = [h for h in range(H) if h not in steep]
    groups = [g for g in (steep, shallow) if g]
    # one split per tensor (its backward is one cat), not a slice per group (a zero-filled gradient each)
    q_parts, k_parts, v_parts, k2_parts = (split_heads(t, groups) for t in (q2, k, v2, k2))
    outputs = []
    if steep:
        y = lag_penalised_attention(
            *(t[0][..., :hd] for t in (q_parts, k_parts, v_parts)),
            None if log_g is None else select_heads(log_g.expand(B, H, T), steep),
            None,
            lag_slope=select_heads(slopes, steep, dim=0),
            slope_values=[slope_values[h] for h in steep],
            dropout_p=dropout_p,
            scale=scale,
            recompute=True,
        )  # (B, steep, T, hd)
        outputs.append(F.pad(y, (0, width - hd)))
    if shallow:
        parts = (t[-1] for t in (q_parts, k2_parts, v_parts))
        outputs.append(sdpa(*parts, dropout_p=dropout_p, is_causal=True, scale=scale))
    # put together in the (B, T, H, width) layout, so that merging the heads for the projection is free
    return in_head_order([o.transpose(1, 2) for o in outputs], steep + shallow, dim=2).transpose(1, 2)


def _pair_bias(
    x: Tensor, position: PositionalEncoding, gate: KeyGate | None, moments: Any, log_g: Tensor | None
) -> Callable[[int, int], Tensor]:
    """The additive bias of :meth:`CausalSelfAttention._pairwise` for a chunk of queries:

    b_ij = log g_ij (or log g_j) + pair_bias(i, j) - gamma_h (i - j)^2 - m_h (i - j)"""
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

    return pair_bias


def _constant_columns(like: Tensor, column: int, count: int, value: float) -> Tensor:
    """Zeros shaped like ``like`` (H, width) with ``value`` in columns column .. column + count - 1."""
    const = torch.zeros_like(like)
    const[:, column : column + count] = value
    return const
