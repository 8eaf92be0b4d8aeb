"""Attention in query chunks: the lag fold (relative MOPE, ALiBi) and pairwise biases.

Both run as a few fused SDPA calls over chunks of queries, never a T x T tensor. Every chunk
size is a Python number known before the forward pass (from T, the head count and ALiBi's
fixed slopes), never read from a tensor: no forward pass waits for the device, and under
``torch.compile`` both trace into the model's graph (no graph break, nothing recompiled per
step). ``tests/models/test_models_attention.py`` holds float64 oracles for both;
``tests/models/test_models_host_syncs.py`` runs every variant's forward and backward with
every host read refused.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from harness.models.fold import FOLD_CONSTANT, fold_width
from harness.models.heads import in_head_order, select_heads
from harness.models.lag_kernel import LagChunkAttention, LagPlan, fused_lag_applies, lag_plan
from harness.models.positional import rotate_pairs

#: Lag fold: queries per chunk at least LAG_CHUNK_MIN; exactly LAG_CURVATURE_CHUNK with a Gaussian
#: envelope (its width is learned, so no chunk size read from it could be known in advance), at most
#: LAG_SLOPE_SPAN / m_h for a linear (ALiBi) slope: the folded columns then stay small enough around
#: the chunk's centre for fp32 (docstring of :func:`lag_penalised_attention`).
LAG_CHUNK_MIN = 64
LAG_CURVATURE_CHUNK = 64
LAG_SLOPE_SPAN = 512.0
#: Heads per SDPA call of the lag fold: each call's folded copies are recomputed in the backward pass, so
#: the fewer heads per call, the less memory at once (two: about 1/4 of the layer's q, k, v).
LAG_GROUP_HEADS = 2


def lag_chunk_size(T: int, *, curvature: bool, slope: float | None = None) -> int:
    """Queries per chunk of :func:`lag_penalised_attention` for one head: T when the fold is precise
    over the whole window, else the largest multiple of LAG_CHUNK_MIN within the limits:
    LAG_CURVATURE_CHUNK with a Gaussian envelope (``curvature``), LAG_SLOPE_SPAN / m with a slope
    m (``slope``: a Python number; ``math.inf`` for a slope not known in advance, which gets the
    smallest chunk)."""
    limit = float(T)
    if curvature:
        limit = min(limit, LAG_CURVATURE_CHUNK)
    if slope:
        limit = min(limit, LAG_SLOPE_SPAN / abs(slope))
    if limit >= T:
        return T
    return min(T, max(LAG_CHUNK_MIN, int(limit) // LAG_CHUNK_MIN * LAG_CHUNK_MIN))


def slope_fits_window(slope: float, T: int) -> bool:
    """Whether one fold over a window of T keys stays precise for a head of slope m: when
    :func:`lag_chunk_size` (the one slope rule, m T <= LAG_SLOPE_SPAN) gives it the whole window
    (the columns, centred on the window, stay within LAG_SLOPE_SPAN / 2)."""
    return lag_chunk_size(T, curvature=False, slope=slope) == T


def lag_penalised_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_bias: Tensor | None,
    lag_curvature: Tensor | None,
    *,
    lag_slope: Tensor | None = None,
    slope_values: Sequence[float] | None = None,
    dropout_p: float = 0.0,
    scale: float | None = None,
    chunk: int | None = None,
    recompute: bool = True,
    rotate: Callable[[Tensor, Tensor, list[int]], tuple[Tensor, Tensor]] | None = None,
    rotation: tuple[Tensor, Tensor] | None = None,
) -> Tensor:
    """Causal attention with a per-key bias and a lag penalty per head (Gaussian envelope and/or
    ALiBi's linear slope), fused:

        out_i = sum_{j<=i} softmax_j(q_i.k_j scale + key_bias_j - gamma_h (i - j)^2 - m_h (i - j)) v_j

    q, k, v: (B, H, T, hd); key_bias: (B, H, T) or None; lag_curvature gamma: (H,) >= 0 or
    None (relative MOPE: gamma_h = 1 / (4 sigma_h^2)); lag_slope m: (H,) >= 0 or None (ALiBi),
    with ``slope_values`` its values as Python numbers when they are fixed (they set the chunks).

    **The fold.** Neither penalty is a rank-1 bias, but both are polynomials in i - j: for any centre c,

        -gamma (i - j)^2 - m (i - j) = [-gamma (i - c)^2 - m (i - c)]
                                       + 2 gamma (i - c)(j - c) + [-gamma (j - c)^2 + m (j - c)]

    and the first bracket depends on the query only, so it cancels in the softmax over j. What is left is one rank-1
    product and one per-key bias, i.e. two more columns (one without envelope):

        q'_i = [q_i, 1, (i - c)],   k'_j = [k_j, (key_bias_j - gamma (j - c)^2 + m (j - c)) / scale,
                                             2 gamma (j - c) / scale]

    so q'_i.k'_j scale is the score above plus a per-query constant; exact in exact arithmetic, one fused SDPA call
    per chunk (flash kernel on CPU), no T x T tensor.

    **Precision: chunks centred on their queries.** The folded columns grow as gamma (j - c)^2 and m |j - c|, and
    fp32 rounds a logit of size x to ~6e-8 x, while the keys that matter lie within a few sigma (or a few 1 / m) of
    their query. So the queries go in chunks of :func:`lag_chunk_size` (LAG_CURVATURE_CHUNK = 64 with an envelope,
    at most 512 / m_h with a slope), each centred on its own queries and attending to every key before its end: the
    output error is then ~2e-5, 1e-4 for a head with sigma = 1 (plain fp32 SDPA: 3e-6). One fold centred on a long
    window would lose ~1e-2 at T = 1024, sigma = 1. Keys far before a chunk get large negative logits; their weights
    are exactly 0, as they should be. The chunk sizes never depend on a tensor (sigma is learned, so its chunks are
    the small fixed ones): a forward pass never waits for the device to plan its calls.

    **Rotation.** ``rotation``, the cos and sin (H, T, 1 or hd/2) of a rotation of each pair of
    dimensions of q and k (relative MOPE's: :meth:`~harness.models.positional.PositionalEncoding.pair_rotation`),
    or ``rotate(q, k, heads)``, a rotation of the heads' queries and keys, is applied to the given
    q and k inside the call, so that no rotated copy of them is kept.

    **Cost.** On CPU without dropout the chunks run as :class:`~harness.models.lag_kernel.LagChunkAttention`, which
    needs no fold: the penalty depends on i - j only, so with the keys stored in reverse it is an additive mask that is
    a strided view of one row per head, one flash call per chunk (at most 64 queries), exact to fp32's rounding of
    the penalty at any chunk size; the fold's columns stay only to carry gamma's and the slope's gradients. Its
    buffers are built once per group of heads, nothing is recomputed or copied per chunk: about the time and memory
    of plain causal attention (``harness bench attention``; ``tests/models/test_models_attention_cost.py`` guards the
    memory). Elsewhere (a GPU, attention dropout) each chunk is an autograd SDPA call on its own folded copies;
    heads with the same chunk size run LAG_GROUP_HEADS at a time and, with ``recompute`` (and gradients on), each
    group is recomputed in the backward pass (activation checkpointing), so that the folded copies of one group live
    at a time. The fold runs in fp32 even under autocast (bf16's 4e-3 rounding of gamma (j - c)^2 would swamp the
    envelope), which on CUDA means SDPA's fp32 memory-efficient kernel (the chunks carry a boolean mask).
    """
    B, H, T, hd = q.shape
    scale = 1.0 / math.sqrt(hd) if scale is None else scale
    quadratic = lag_curvature is not None
    sizes = _chunk_sizes(T, H, quadratic, lag_slope, slope_values, chunk)
    width = fold_width(hd, q.device.type, columns=2 if quadratic else 1)
    with torch.autocast(device_type=q.device.type, enabled=False):
        operands = _fp32_operands(q, k, v, key_bias, lag_curvature, lag_slope)  # q, k, v, key_bias, gamma, slope
        if fused_lag_applies(operands[0], dropout_p) and rotate is None:
            y = _fused_lag(operands, rotation, lag_plan(sizes, quadratic=quadratic, width=width, scale=scale))
        else:
            rotate = _rotation_by(rotation) if rotation is not None else rotate
            y = _lag_groups(operands, sizes, (quadratic, width, dropout_p, scale, rotate), recompute)
    return y.to(v.dtype)  # (B, H, T, hd)


def _fused_lag(operands: tuple[Tensor | None, ...], rotation: tuple[Tensor, Tensor] | None, plan: LagPlan) -> Tensor:
    """The CPU path of :func:`lag_penalised_attention`: :class:`~harness.models.lag_kernel.LagChunkAttention`
    on the fp32 ``operands`` (q, k, v, key_bias or None, gamma, slope), rotated inside by
    ``rotation``'s cos and sin -> (B, H, T, hd)."""
    q, k, v, key_bias, gamma, slope = operands
    cos, sin = (None, None) if rotation is None else (t.float()[None] for t in rotation)  # (1, H, T, .)
    y, _ = LagChunkAttention.apply(q, k, v, key_bias, gamma[None], slope[None], cos, sin, plan)
    return y


def _fp32_operands(
    q: Tensor, k: Tensor, v: Tensor, key_bias: Tensor | None, lag_curvature: Tensor | None, lag_slope: Tensor | None
) -> tuple[Tensor, Tensor, Tensor, Tensor | None, Tensor, Tensor]:
    """q, k, v, the key bias (B, H, T) or None, gamma and the slope (H,) in fp32, zeros for a
    missing penalty (the fold runs in fp32: :func:`lag_penalised_attention`)."""
    B, H, T, _ = q.shape
    q, k, v = q.float(), k.float(), v.float()
    gamma = q.new_zeros(H) if lag_curvature is None else lag_curvature.float()
    slope = q.new_zeros(H) if lag_slope is None else lag_slope.to(device=q.device, dtype=torch.float32)
    key_bias = None if key_bias is None else key_bias.float().expand(B, H, T)
    return q, k, v, key_bias, gamma, slope


def _lag_groups(
    operands: tuple[Tensor | None, ...],
    sizes: list[int],
    fold: tuple[bool, int, float, float, Callable[[Tensor, Tensor, list[int]], tuple[Tensor, Tensor]] | None],
    recompute: bool,
) -> Tensor:
    """The autograd path of :func:`lag_penalised_attention` on the fp32 ``operands`` (q, k, v,
    key_bias or None (the fold's bias column then holds zeros), gamma, slope): each group of heads
    (:func:`_head_groups`) in its own chunks by :func:`_lag_group`, recomputed in the backward pass
    when ``recompute`` and a gradient is wanted; ``fold`` is (quadratic, width, dropout_p, scale,
    rotate) -> (B, H, T, hd)."""
    q, k, v, key_bias, gamma, slope = operands
    key_bias = q.new_zeros(q.shape[:3]) if key_bias is None else key_bias  # (B, H, T)
    recompute = recompute and torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v, key_bias, gamma))
    outputs, order = [], []
    for size, heads in _head_groups(sizes):
        parts = (
            *(select_heads(t, heads) for t in (q, k, v, key_bias)),
            *(select_heads(t, heads, 0) for t in (gamma, slope)),
        )
        args = (*parts, size, *fold, heads)
        outputs.append(checkpoint(_lag_group, *args, use_reentrant=False) if recompute else _lag_group(*args))
        order += heads
    return in_head_order(outputs, order)  # (B, H, T, hd)


def _rotation_by(rotation: tuple[Tensor, Tensor]) -> Callable[[Tensor, Tensor, list[int]], tuple[Tensor, Tensor]]:
    """``rotate(q, k, heads)`` of a rotation given by its cos and sin (H, T, .)."""

    def rotate(q: Tensor, k: Tensor, heads: list[int]) -> tuple[Tensor, Tensor]:
        cos, sin = (select_heads(t, heads, dim=0).to(q.dtype) for t in rotation)
        return rotate_pairs(q, cos, sin), rotate_pairs(k, cos, sin)

    return rotate


def _chunk_sizes(
    T: int,
    H: int,
    quadratic: bool,
    lag_slope: Tensor | None,
    slope_values: Sequence[float] | None,
    chunk: int | None,
) -> list[int]:
    """Queries per chunk of every head, from Python numbers only (:func:`lag_chunk_size`); ``chunk``
    when given. A slope given without its values (a learned one) gets the smallest chunks."""
    if chunk is not None:
        return [max(1, min(int(chunk), T))] * H
    if lag_slope is None:
        slopes: Sequence[float | None] = [None] * H
    elif slope_values is None:
        slopes = [math.inf] * H
    else:
        slopes = list(slope_values)
    return [lag_chunk_size(T, curvature=quadratic, slope=m) for m in slopes]


def _head_groups(sizes: list[int]) -> list[tuple[int, list[int]]]:
    """Heads with the same chunk size, LAG_GROUP_HEADS at a time: ``(chunk size, heads)``."""
    by_size: dict[int, list[int]] = {}
    for h, size in enumerate(sizes):
        by_size.setdefault(size, []).append(h)
    return [
        (size, heads[a : a + LAG_GROUP_HEADS])
        for size, heads in by_size.items()
        for a in range(0, len(heads), LAG_GROUP_HEADS)
    ]


def _lag_group(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_bias: Tensor,
    gamma: Tensor,
    slope: Tensor,
    chunk: int,
    quadratic: bool,
    width: int,
    dropout_p: float,
    scale: float,
    rotate: Callable[[Tensor, Tensor, list[int]], tuple[Tensor, Tensor]] | None = None,
    heads: list[int] | None = None,
) -> Tensor:
    """Heads ``heads`` sharing one chunk size, rotated first by ``rotate`` if given -> (B, h, T, hd):
    the queries in chunks of ``chunk``, each against the keys up to its end (the first a causal square)."""
    if rotate is not None:
        q, k = rotate(q, k, heads)
    T, hd = q.size(-2), q.size(-1)
    fold = (gamma, slope, quadratic, width, dropout_p, scale)
    outputs = [_lag_chunk(q, k, v, key_bias, *fold, start, min(T, start + chunk)) for start in range(0, T, chunk)]
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
    """q' = [q, c, (i - centre), 0..] (B, h, C, width) and k' = [k, (key_bias - gamma j^2 + m j) / (c scale),
    2 gamma j / scale, 0..] (B, h, S, width); the envelope's columns only when ``quadratic``.

    q (B, h, C, hd), k (B, h, S, hd) and key_bias (B, h, S); i (C,) and j (S,) are the positions
    relative to the centre; gamma and slope (h,)."""
    g = gamma.view(-1, 1)  # (h, 1) against key_bias's (B, h, S)
    m = slope.view_as(g)
    bias = (key_bias - g * j * j + m * j) / (FOLD_CONSTANT * scale)  # (B, h, S)
    q_columns, k_columns = [torch.full_like(i, FOLD_CONSTANT)], [bias]
    if quadratic:
        q_columns.append(i)
        k_columns.append((2.0 * g * j / scale).expand_as(bias))
    n_columns = len(q_columns)
    pad = width - q.size(-1) - n_columns
    lead_q, lead_k = q.shape[:-1], k.shape[:-1]
    q2 = torch.cat(
        [q, torch.stack(q_columns, -1).expand(*lead_q, n_columns), q.new_zeros(1).expand(*lead_q, pad)], -1
    )  # (B, h, C, width)
    k2 = torch.cat([k, torch.stack(k_columns, -1), k.new_zeros(1).expand(*lead_k, pad)], -1)  # (B, h, S, width)
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
) -> Tensor:
    """Queries start..stop-1 against keys 0..stop-1, centred on the chunk's middle
    -> (B, h, stop - start, width)."""
    hd = q.size(-1)
    centre = 0.5 * (start + stop - 1)
    i = torch.arange(start, stop, device=q.device, dtype=torch.float32) - centre  # (C,)
    j = torch.arange(0, stop, device=q.device, dtype=torch.float32) - centre  # (S,)
    q2, k2 = _fold_lag(
        q[:, :, start:stop], k[:, :, :stop], key_bias[..., :stop], i, j, gamma, slope, quadratic, width, scale
    )
    v2 = F.pad(v[:, :, :stop], (0, width - hd))  # (B, h, S, width)
    if start == 0:  # a square block: plain causal
        return F.scaled_dot_product_attention(q2, k2, v2, dropout_p=dropout_p, is_causal=True, scale=scale)
    allowed = torch.ones(stop - start, stop, dtype=torch.bool, device=q.device).tril(start)  # key j <= query i
    return F.scaled_dot_product_attention(q2, k2, v2, attn_mask=allowed, dropout_p=dropout_p, scale=scale)


#: Pairwise path: queries per chunk such that one chunk's scores (B, H, C, T) hold about this many floats.
PAIR_BLOCK_ELEMENTS = 2**22
PAIR_CHUNK_MIN = 16


def pair_chunk_size(B: int, H: int, T: int) -> int:
    """Queries per chunk of :func:`pairwise_biased_attention`: PAIR_BLOCK_ELEMENTS / (B H T),
    between PAIR_CHUNK_MIN and T, a multiple of PAIR_CHUNK_MIN below T."""
    chunk = max(PAIR_CHUNK_MIN, PAIR_BLOCK_ELEMENTS // (B * H * T) // PAIR_CHUNK_MIN * PAIR_CHUNK_MIN)
    return min(T, chunk)


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
    attention``). The chunks follow from the shapes alone, so the loop traces into a compiled
    graph like any other Python loop.
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
