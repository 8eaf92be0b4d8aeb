"""The lag penalty's query chunks on CPU as one autograd function: the penalty as a Toeplitz mask.

:func:`~harness.models.chunked_attention.lag_penalised_attention` computes causal attention with
a per-key bias and a lag penalty -gamma_h (i - j)^2 - m_h (i - j). Written with autograd (the GPU
and dropout path), it folds the penalty into two more columns of q and k, centred on chunks of a
few dozen queries for fp32's precision; each chunk needs its own rewritten columns and two flash
calls (the keys before it and its own causal square), and at T = 4096 relative MOPE cost about
1.3 times plain attention's time.

:class:`LagChunkAttention` computes the same attention on CPU with SDPA's flash kernel and its
backward called directly, and the penalty as the kernel's additive mask:

- the penalty depends on the lag i - j only, so with the keys stored in reverse order the mask of
  a chunk of queries against every key before its end is a **strided view of one row per head**
  (lags -(C - 1) .. T - 1, -inf for the future): ``as_strided`` with strides (1, 1), no C x T
  tensor; each chunk is then one flash call over its keys, exact to fp32's rounding of the penalty
  itself at any chunk size (no centring, no precision limit on the chunks);
- q' = [q, c, (i - centre)], k' = [k, key_bias / (c scale), 0] and v' = [v, 0, 0] per group of
  heads, built once: the bias column adds the key bias; the last column, zero in k', only carries
  the gradients the mask cannot give (the flash backward returns none for it): k''s column
  gradients are sum_i dS_ij and sum_i dS_ij (i - centre), from which gamma's and the slope's follow
  (:class:`_FoldedGrads`). The forward pass uses only the columns the scores need (plain
  attention's width for relative MOPE or ALiBi without a key bias), the backward the ones the
  wanted gradients need;
- the forward pass keeps the output and the log-sum-exp (what the flash backward needs), so the
  backward pass rebuilds the buffers (O(T hd) per group) instead of recomputing the attention
  (O(T^2 hd)), and adds each chunk's key and value gradients into one buffer in place;
- a rotation of q and k (relative MOPE's) given by its cos and sin is applied inside, when the
  buffers are built, so no rotated copy of q and k is kept either.

A chunk's call computes its C x (keys before its end) scores in full (the kernel skips no masked
block without ``is_causal``): chunks are at most :data:`LAG_KERNEL_CHUNK` queries, so that the
wasted half of each chunk's own square stays a few per cent of the work.

It runs when the attention computes on CPU without dropout (the flash kernel has none on CPU);
elsewhere the autograd form stays (:func:`fused_lag_applies`). Chunk sizes and head groups are
Python numbers planned before the call (:class:`LagPlan`): no host read, and the loops trace
into a compiled graph. Under ``torch.func.vmap`` (seed-batched training) the vmapped axis is
folded into the batch: one call for every seed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from harness.models.fold import FOLD_CONSTANT

_FLASH = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default
_FLASH_BACKWARD = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward.default


#: Heads per group of :class:`LagChunkAttention`: each group's folded buffers and gradient
#: accumulators live one group at a time, (B, h, T, hd + 2) each.
LAG_KERNEL_GROUP_HEADS = 1
#: Queries per chunk at most. The mask keeps every chunk size exact; gamma's gradient sums
#: (j - centre)^2-weighted column gradients, whose fp32 rounding grows with the chunk, and each
#: chunk computes its own square in full: 64 keeps gamma's gradient as precise as the fold's
#: chunks were and the wasted work at 1.6 % of a T = 4096 window.
LAG_KERNEL_CHUNK = 64


@dataclass(frozen=True)
class LagPlan:
    """How :class:`LagChunkAttention` runs: ``groups`` of ``(chunk size, first head, end head)``
    (consecutive heads sharing a chunk size), the buffers' ``width`` (head dimension + the bias
    column, + the envelope's gradient column with an envelope: ``quadratic``) and the scale."""

    groups: tuple[tuple[int, int, int], ...]
    quadratic: bool
    width: int
    scale: float


def lag_plan(sizes: list[int], *, quadratic: bool, width: int, scale: float) -> LagPlan:
    """The plan of heads whose chunk sizes are ``sizes`` (each capped at :data:`LAG_KERNEL_CHUNK`):
    runs of consecutive heads of one size, at most :data:`LAG_KERNEL_GROUP_HEADS` a group."""
    groups: list[tuple[int, int, int]] = []
    for h, size in enumerate(min(size, LAG_KERNEL_CHUNK) for size in sizes):
        if groups and groups[-1][0] == size and groups[-1][2] == h and h - groups[-1][1] < LAG_KERNEL_GROUP_HEADS:
            groups[-1] = (size, groups[-1][1], h + 1)
        else:
            groups.append((size, h, h + 1))
    return LagPlan(tuple(groups), quadratic, width, scale)


def fused_lag_applies(q: Tensor, dropout_p: float) -> bool:
    """Whether :class:`LagChunkAttention` computes the lag fold here: on CPU without dropout."""
    return q.device.type == "cpu" and dropout_p == 0.0


class _Group:
    """The buffers q' (B, h, T, width) and, keys in reverse order, k' and v' of heads a..b-1, in
    chunks of ``size`` queries (``heads``: ``(size, a, b)``, one of the plan's groups), the lag
    penalty of each head per lag, and their per-head inputs."""

    def __init__(self, inputs: tuple[Tensor | None, ...], heads: tuple[int, int, int], plan: LagPlan) -> None:
        size, a, b = self.heads = heads
        q, k, v, key_bias, gamma, slope, cos, sin = (None if t is None else t[:, a:b] for t in inputs)
        self.q, self.k, self.rotation = q, k, None if cos is None else (cos, sin)
        B, h, T, hd = q.shape
        self.hd, self.plan, self.has_bias = hd, plan, key_bias is not None
        if self.rotation is not None:
            q, k = rotate_pairs_complex(q, *self.rotation), rotate_pairs_complex(k, *self.rotation)
        self.q2, self.k2, self.v2 = (q.new_empty(B, h, T, plan.width) for _ in range(3))
        for buffer, t in ((self.q2, q), (self.k2, k.flip(2)), (self.v2, v.flip(2))):  # k' and v': keys reversed
            buffer[..., :hd] = t
            buffer[..., hd:] = 0.0
        self.q2[..., hd] = FOLD_CONSTANT
        if key_bias is not None:
            self.k2[..., hd] = key_bias.flip(-1) / (FOLD_CONSTANT * plan.scale)  # c x this x scale = the key bias
        if plan.quadratic:  # each query's position relative to its own chunk's centre, for every chunk at once
            positions = torch.arange(T, device=q.device, dtype=torch.float32)  # (T,)
            start = torch.div(positions, size, rounding_mode="floor") * size  # (T,)
            self.q2[..., hd + 1] = positions - 0.5 * (start + (start + size).clamp(max=T) - 1)
        self.penalty = lag_penalties(gamma, slope, T, size)

    def mask(self, start: int, stop: int) -> Tensor:
        """The chunk start..stop-1's mask against the reversed keys (:func:`chunk_mask`)."""
        return chunk_mask(self.penalty, self.heads[0], start, stop)

    def keys(self, stop: int, width: int) -> tuple[Tensor, Tensor]:
        """k' and v' of the keys stop-1..0 (in that order), ``width`` columns."""
        T = self.k2.size(2)
        return self.k2[:, :, T - stop :, :width], self.v2[:, :, T - stop :, :width]


def lag_penalties(gamma: Tensor, slope: Tensor, T: int, size: int) -> Tensor:
    """Each head's penalty per lag d = -(size - 1) .. T - 1 for chunks of ``size`` queries in a
    window of T: -(gamma d + m) d, and -inf for a future key (d < 0); gamma and slope (1 or B, h)
    -> (1 or B, h, size - 1 + T)."""
    lags = torch.arange(1 - size, T, device=gamma.device, dtype=torch.float32)  # (size - 1 + T,)
    penalty = -(gamma[..., None] * lags + slope[..., None]) * lags
    return penalty.masked_fill(lags < 0, float("-inf")).contiguous()


def chunk_mask(penalty: Tensor, size: int, start: int, stop: int) -> Tensor:
    """The penalty of the chunk of queries start..stop-1 against the keys stop-1..0 (reversed),
    (1 or B, h, C, stop), from :func:`lag_penalties`' rows: query r and reversed key u are
    d = r + u - (C - 1) apart, so row r is the penalty row from lag -(C - 1) + r on, a view with
    strides (1, 1): no C x stop tensor."""
    count = stop - start
    n, h, length = penalty.shape
    offset = size - count  # the penalty row's index of lag -(C - 1)
    return penalty.as_strided((n, h, count, stop), (h * length, length, 1, 1), penalty.storage_offset() + offset)


def _chunks(T: int, size: int) -> list[tuple[int, int]]:
    return [(start, min(T, start + size)) for start in range(0, T, size)]


class LagChunkAttention(torch.autograd.Function):
    """The lag-penalised attention of :func:`~harness.models.chunked_attention.lag_penalised_attention`
    on CPU (module docstring): ``apply(q, k, v, key_bias, gamma, slope, cos, sin, plan)`` -> the
    output (B, H, T, hd), laid out (B, T, H, hd) so that merging the heads is free, and the
    log-sum-exp (B, H, T) of each query, which the backward pass reads (no gradient).

    q, k, v (B, H, T, hd) and key_bias (B, H, T) or None in fp32; gamma and slope (1 or B, H); cos
    and sin (1 or B, H, T, 1 or hd / 2) or None: the rotation of each pair of dimensions of q and k.
    """

    generate_vmap_rule = False

    @staticmethod
    def forward(
        q: Tensor,
        k: Tensor,
        v: Tensor,
        key_bias: Tensor | None,
        gamma: Tensor,
        slope: Tensor,
        cos: Tensor | None,
        sin: Tensor | None,
        plan: LagPlan,
    ) -> tuple[Tensor, Tensor]:
        B, H, T, hd = q.shape
        y = q.new_empty(B, T, H, hd).transpose(1, 2)  # (B, H, T, hd) in (B, T, H, hd) memory
        lse = q.new_empty(B, H, T)
        inputs = (q, k, v, key_bias, gamma, slope, cos, sin)
        width = hd + (key_bias is not None)  # the columns the scores need: the bias column's only with a bias
        for size, a, b in plan.groups:
            group = _Group(inputs, (size, a, b), plan)
            for start, stop in _chunks(T, size):
                k2, v2 = group.keys(stop, width)
                o, m = _FLASH(
                    group.q2[:, :, start:stop, :width],
                    k2,
                    v2,
                    0.0,
                    False,
                    attn_mask=group.mask(start, stop),
                    scale=plan.scale,
                )[:2]
                y[:, a:b, start:stop] = o[..., :hd]
                lse[:, a:b, start:stop] = m
        return y, lse

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
        *tensors, plan = inputs
        ctx.plan = plan
        ctx.save_for_backward(*tensors, *output)
        ctx.mark_non_differentiable(output[1])

    @staticmethod
    def backward(ctx: Any, grad_y: Tensor, _grad_lse: Tensor | None) -> tuple[Tensor | None, ...]:
        *inputs, y, lse = ctx.saved_tensors
        grads = [
            torch.zeros_like(t) if t is not None and need else None
            for t, need in zip(inputs, ctx.needs_input_grad, strict=False)
        ]  # q, k, v, key_bias, gamma, slope, cos, sin
        for heads in ctx.plan.groups:
            _group_backward(_Group(tuple(inputs), heads, ctx.plan), (grad_y, y, lse), grads)
        return (*grads, None)

    @staticmethod
    def vmap(info: Any, in_dims: tuple[Any, ...], *args: Any) -> tuple[tuple[Tensor, Tensor], tuple[int, int]]:
        """Under ``torch.func.vmap`` (the seeds of a seed-batched model): the vmapped axis folded into
        the batch, every per-head parameter repeated over the batch, one call for every seed."""
        *tensors, plan = args
        q, dim = tensors[0], in_dims[0]
        S, B = info.batch_size, q.size(0) if dim is None else q.movedim(dim, 0).size(1)
        folded = [_fold_seeds(t, d, S, B) for t, d in zip(tensors, in_dims, strict=False)]
        y, lse = LagChunkAttention.apply(*folded, plan)
        return (y.unflatten(0, (S, B)), lse.unflatten(0, (S, B))), (0, 0)


def _fold_seeds(t: Tensor | None, dim: int | None, S: int, B: int) -> Tensor | None:
    """A tensor under vmap (logical leading dimension B, or 1 for a parameter the batch shares) as
    a plain one with the S seeds folded into the batch: (S B, ...)."""
    if t is None:
        return None
    t = t.movedim(dim, 0) if dim is not None else t.expand(S, *t.shape)  # (S, B or 1, ...)
    return t.expand(S, B, *t.shape[2:]).reshape(S * B, *t.shape[2:])  # (S B, ...)


def _group_backward(group: _Group, saved: tuple[Tensor, Tensor, Tensor], grads: list[Tensor | None]) -> None:
    """Add the gradients of the group's heads into ``grads`` (q, k, v, key_bias, gamma, slope, cos,
    sin; None where not needed), chunk by chunk through the flash backward; ``saved``: the output's
    gradient, the output and the log-sum-exp.

    Each chunk's k' and v' gradients are added into one contiguous buffer each
    (:class:`_FoldedGrads`) and cut to the head dimension once at the end: these additions over every
    earlier key, chunk after chunk, are the backward pass's largest cost after the flash kernel."""
    size, a, b = group.heads
    plan = group.plan
    g_y, y, lse = (t[:, a:b] for t in saved)
    dq, dk, dv, dbias, dgamma, dslope, dcos, dsin = (None if g is None else g[:, a:b] for g in grads)
    rotated = group.rotation is not None
    if rotated and dcos is not None:  # q's and k's gradients in the rotated frame, rotated back at the end
        dq, dk = (torch.zeros_like(x) if d is None else d for d, x in ((dq, group.q), (dk, group.k)))
    folded = _FoldedGrads(group, (dq, dk, dv, dbias), (dgamma, dslope))
    rows_of = _PaddedRows(g_y, y, size, folded.width)
    for start, stop in _chunks(y.size(2), size):
        rows = slice(start, stop)
        g_rows, y_rows = rows_of.chunk(rows)  # (B, h, C, width) each
        k2, v2 = group.keys(stop, folded.width)
        d_qkv = _FLASH_BACKWARD(
            g_rows,
            group.q2[:, :, rows, : folded.width],
            k2,
            v2,
            y_rows,
            lse[:, :, rows],
            0.0,
            False,
            attn_mask=group.mask(start, stop),
            scale=plan.scale,
        )[:3]
        folded.add(rows, d_qkv)
    folded.finish()
    group.q2 = group.k2 = group.v2 = None  # the buffers are done with: free them before rotating back
    if rotated:
        _rotate_back(group, dq, dk, dcos, dsin)


class _PaddedRows:
    """A chunk's rows of the output's gradient and of the output (B, h, T, hd), padded with zeros to
    the backward's width as the flash backward wants them, in two buffers (B, h, size, width) zeroed
    once: per chunk only the head dimensions are copied in (nothing at all at plain width)."""

    def __init__(self, grad: Tensor, out: Tensor, size: int, width: int) -> None:
        self.grad, self.out = grad, out
        B, h, _, hd = out.shape
        self.buffers = None if width == hd else tuple(out.new_zeros(B, h, size, width) for _ in range(2))

    def chunk(self, rows: slice) -> tuple[Tensor, Tensor]:
        if self.buffers is None:
            return self.grad[:, :, rows], self.out[:, :, rows]
        count = rows.stop - rows.start
        padded = []
        for buffer, t in zip(self.buffers, (self.grad, self.out), strict=True):
            buffer[:, :, :count, : t.size(-1)] = t[:, :, rows]
            padded.append(buffer[:, :, :count])
        return padded[0], padded[1]


class _FoldedGrads:
    """The gradients of one group's k' and v' (B, h, T, width, keys reversed), accumulated chunk by
    chunk (q's go straight to q's gradient: a chunk's rows get only its own call's share), and of
    gamma and slope, which the mask carries and the flash backward does not differentiate: they
    come from the gradients of k''s two extra columns, D_bias = c scale sum_i dS_ij and
    D_env = scale sum_i dS_ij (i - centre) (q' holds c and i - centre there), since
    dS/dgamma = -(i - j)^2 and dS/dm = -(i - j), and each row of dS sums to 0:

        dgamma = sum_j [2 j D_env / scale - j^2 D_bias / (c scale)],   dslope = sum_j j D_bias / (c scale)

    with j the key's position relative to its chunk's centre. Each chunk adds its columns' moments
    against (j^2, j) in one product (:meth:`add`), and the sums above are read from them once
    (:meth:`finish`). key_bias's gradient is the bias column's: read from the accumulated k'
    gradient once too. The backward's ``width``: the head dimension, + the bias column when the
    scores have it or a gradient needs it, + the envelope's when gamma's is wanted."""

    def __init__(self, group: _Group, wanted: tuple[Tensor | None, ...], per_head: tuple[Tensor | None, ...]) -> None:
        self.hd, self.plan, self.size = group.hd, group.plan, group.heads[0]
        self.dq, self.dk, self.dv, self.dbias = wanted
        self.dgamma, self.dslope = per_head
        needs_bias_column = group.has_bias or any(g is not None for g in (self.dbias, self.dgamma, self.dslope))
        self.width = self.hd + (2 if self.dgamma is not None else 1 if needs_bias_column else 0)
        B, h, self.T, _ = group.k2.shape
        needs = (self.dk is not None or self.dbias is not None, self.dv is not None)
        self.dk2, self.dv2 = (group.k2.new_zeros(B, h, self.T, self.width) if need else None for need in needs)
        wanted_moments = self.dgamma is not None or self.dslope is not None
        self.moments = group.k2.new_zeros(B, h, 2, self.width - self.hd) if wanted_moments else None
        self.weights = _weights(self.size, self.T, group.k2) if wanted_moments else None  # a full chunk's: (T, 2)

    def add(self, rows: slice, d_qkv: tuple[Tensor, Tensor, Tensor]) -> None:
        """Add one chunk's flash gradients (queries ``rows``, the keys before its end reversed)."""
        d_q, d_k, d_v = d_qkv
        keys, T = d_k.size(2), self.T
        if self.dq is not None:
            self.dq[:, :, rows].add_(d_q[..., : self.hd])
        for buffer, value in ((self.dk2, d_k), (self.dv2, d_v)):
            if buffer is not None:
                buffer[:, :, T - keys :].add_(value)
        if self.moments is not None:
            count = rows.stop - rows.start
            weights = self.weights[:keys] if count == self.size else _weights(count, keys, d_k)
            self.moments.add_(weights.mT @ d_k[..., self.hd :])  # (2, S) @ (B, h, S, columns)

    def finish(self) -> None:
        """Add the accumulated gradients, cut to the head dimension and back in order, into k's and
        v's, the bias column's into key_bias's, and gamma's and the slope's from the moments."""
        hd, plan = self.hd, self.plan
        for grad, buffer in ((self.dk, self.dk2), (self.dv, self.dv2)):
            if grad is not None:
                grad += buffer[..., :hd].flip(2)
        unit = FOLD_CONSTANT * plan.scale
        if self.dbias is not None:
            self.dbias += self.dk2[..., hd].flip(-1) / unit
        if self.moments is None:
            return
        bias_j2, bias_j = self.moments[..., 0, 0], self.moments[..., 1, 0]  # (B, h) each
        if self.dgamma is not None:
            env_j = self.moments[..., 1, 1]  # the envelope column's sum of j D_env
            d_g = -bias_j2 / unit + env_j * (2.0 / plan.scale)
            self.dgamma += _to_batch(d_g, self.dgamma)
        if self.dslope is not None:
            self.dslope += _to_batch(bias_j / unit, self.dslope)


def _weights(count: int, keys: int, like: Tensor) -> Tensor:
    """(j^2, j) of the first ``keys`` reversed keys of a chunk of ``count`` queries, j the key's
    position relative to the chunk's centre: j = (count - 1) / 2 - u for reversed key u -> (keys, 2)."""
    j = 0.5 * (count - 1) - torch.arange(keys, device=like.device, dtype=torch.float32)
    return torch.stack((j * j, j), -1)


def _to_batch(value: Tensor, like: Tensor) -> Tensor:
    """A per-(batch, head) gradient (B, h) summed over the batch when the parameter is shared (1, h)."""
    return value.sum(0, keepdim=True) if like.size(0) < value.size(0) else value


def _rotate_back(group: _Group, dq: Tensor | None, dk: Tensor | None, dcos: Tensor | None, dsin: Tensor | None) -> None:
    """Rotate q's and k's gradients, accumulated in the rotated frame, back in place, and add cos's
    and sin's (:func:`rotate_pairs_back_complex`)."""
    for d_rot, x in ((dq, group.q), (dk, group.k)):
        if d_rot is None:
            continue
        dx, d_cos, d_sin = rotate_pairs_back_complex(d_rot, x, *group.rotation)
        d_rot.copy_(dx)
        if dcos is not None:
            dcos += d_cos.sum_to_size(dcos.shape)
            dsin += d_sin.sum_to_size(dsin.shape)


def rotate_pairs_complex(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """:func:`~harness.models.positional.rotate_pairs` (the same numbers, bit for bit) as one complex
    product, (x_2p + i x_2p+1)(cos + i sin): x (B, h, T, hd) fp32, cos and sin broadcasting against
    (B, h, T, hd / 2). On CPU the complex kernel is about 13 times faster than the strided even and
    odd slices (fp32, T = 4096); the general form stays for every other dtype and device."""
    pairs = torch.view_as_complex(x.unflatten(-1, (-1, 2)))  # (B, h, T, hd / 2)
    return torch.view_as_real(pairs * torch.complex(cos, sin)).flatten(-2)  # (B, h, T, hd)


def rotate_pairs_back_complex(grad: Tensor, x: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`~harness.models.positional.rotate_pairs_backward` as complex products: x's gradient is
    the output's rotated back, g conj(cos + i sin); cos's and sin's per pair are the real and
    imaginary parts of g conj(x) (g, x: the pairs as complex numbers) -> (B, h, T, hd), and two
    (B, h, T, hd / 2)."""
    g = torch.view_as_complex(grad.unflatten(-1, (-1, 2)))  # (B, h, T, hd / 2)
    dx = torch.view_as_real(g * torch.complex(cos, -sin)).flatten(-2)  # (B, h, T, hd)
    per_pair = g * torch.view_as_complex(x.unflatten(-1, (-1, 2))).conj()
    return dx, per_pair.real, per_pair.imag
