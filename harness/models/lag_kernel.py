"""The lag fold's query chunks on CPU as one autograd function: nothing recomputed, nothing copied per chunk.

:func:`~harness.models.chunked_attention.lag_penalised_attention` splits the queries into chunks
of a few dozen (each centred on itself, for fp32's precision) and lets every chunk attend to every
key before its end. Written with autograd, each chunk builds its own folded keys and values
(copies of up to T keys), the backward pass fills a zero tensor of the whole window per chunk and
input, and, to keep the copies from piling up, each group of heads is recomputed in the backward
pass: at T = 4096 relative MOPE cost 2.3 times plain attention's time and 3.2 times its memory.

:class:`LagChunkAttention` computes the same numbers with SDPA's CPU flash kernel and its backward
called directly:

- per group of heads, one buffer each for q' = [q, c, (i - centre)], k' = [k, bias column,
  envelope column] and v' = [v, 0], built once; per chunk only the two columns of k' (and one of
  q') are rewritten in place, and the chunk is a view of the buffers: no copy of the keys;
- the forward pass keeps the chunks' outputs and log-sum-exps (what the flash backward needs),
  so the backward pass rebuilds the buffers (O(T hd) per group) instead of recomputing the
  attention (O(T^2 hd)), and adds each chunk's key and value gradients into one buffer in place;
- a rotation of q and k (relative MOPE's) given by its cos and sin is applied inside, when the
  buffers are built, so no rotated copy of q and k is kept either.

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
import torch.nn.functional as F
from torch import Tensor

from harness.models.fold import FOLD_CONSTANT

_FLASH = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default
_FLASH_BACKWARD = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward.default


#: Heads per group of :class:`LagChunkAttention`: each group's folded buffers and gradient
#: accumulators live one group at a time, (B, h, T, hd + 2) each.
LAG_KERNEL_GROUP_HEADS = 1


@dataclass(frozen=True)
class LagPlan:
    """How :class:`LagChunkAttention` runs: ``groups`` of ``(chunk size, first head, end head)``
    (consecutive heads sharing a chunk size), the folded ``width`` (head dimension + 1 column,
    + 1 more with an envelope: ``quadratic``) and the scale."""

    groups: tuple[tuple[int, int, int], ...]
    quadratic: bool
    width: int
    scale: float


def lag_plan(sizes: list[int], *, quadratic: bool, width: int, scale: float) -> LagPlan:
    """The plan of heads whose chunk sizes are ``sizes``: runs of consecutive heads of one size,
    at most :data:`LAG_KERNEL_GROUP_HEADS` a group."""
    groups: list[tuple[int, int, int]] = []
    for h, size in enumerate(sizes):
        if groups and groups[-1][0] == size and groups[-1][2] == h and h - groups[-1][1] < LAG_KERNEL_GROUP_HEADS:
            groups[-1] = (size, groups[-1][1], h + 1)
        else:
            groups.append((size, h, h + 1))
    return LagPlan(tuple(groups), quadratic, width, scale)


def fused_lag_applies(q: Tensor, dropout_p: float) -> bool:
    """Whether :class:`LagChunkAttention` computes the lag fold here: on CPU without dropout."""
    return q.device.type == "cpu" and dropout_p == 0.0


class _Group:
    """The folded buffers q', k', v' (B, h, T, width) of heads a..b-1 and their per-head inputs."""

    def __init__(self, inputs: tuple[Tensor | None, ...], a: int, b: int, plan: LagPlan) -> None:
        q, k, v, self.key_bias, self.gamma, self.slope, cos, sin = (None if t is None else t[:, a:b] for t in inputs)
        self.q, self.k, self.rotation = q, k, None if cos is None else (cos, sin)
        B, h, T, hd = q.shape
        self.hd, self.plan = hd, plan
        if self.rotation is not None:
            q, k = rotate_pairs_complex(q, *self.rotation), rotate_pairs_complex(k, *self.rotation)
        self.q2, self.k2, self.v2 = (q.new_empty(B, h, T, plan.width) for _ in range(3))
        for buffer, t in ((self.q2, q), (self.k2, k), (self.v2, v)):
            buffer[..., :hd] = t
            buffer[..., hd:] = 0.0  # the fold's columns (set chunk by chunk) and v's padding: no full fill
        self.q2[..., hd] = FOLD_CONSTANT

    def chunk(self, start: int, stop: int) -> tuple[Tensor, Tensor]:
        """Set the fold's columns for the chunk of queries start..stop-1 (keys 0..stop-1, centred on
        the chunk's middle); returns the key positions j - centre (stop,) and the chunk's q' (a view)."""
        hd, scale = self.hd, self.plan.scale
        j = torch.arange(stop, device=self.q2.device, dtype=torch.float32) - 0.5 * (start + stop - 1)  # (S,)
        g, m = self.gamma[..., None], self.slope[..., None]  # (1 or B, h, 1)
        self.k2[:, :, :stop, hd] = (self.key_bias[..., :stop] + j * (m - g * j)) / (FOLD_CONSTANT * scale)
        if self.plan.quadratic:
            self.k2[:, :, :stop, hd + 1] = (2.0 / scale) * g * j
            self.q2[:, :, start:stop, hd + 1] = j[start:]
        return j, self.q2[:, :, start:stop]

    def blocks(self, start: int, stop: int) -> list[tuple[slice, Tensor, Tensor, bool]]:
        """The chunk's keys in blocks, ``(keys, k', v', causal)``: those before the chunk, every one
        allowed, and the chunk's own, a causal square; so no mask is needed (a chunk at the start
        has only the square)."""
        spans = [(0, stop, True)] if start == 0 else [(0, start, False), (start, stop, True)]
        return [(slice(a, b), self.k2[:, :, a:b], self.v2[:, :, a:b], causal) for a, b, causal in spans]


def _chunks(T: int, size: int) -> list[tuple[int, int]]:
    return [(start, min(T, start + size)) for start in range(0, T, size)]


def _merge(parts: list[tuple[Tensor, Tensor]]) -> tuple[Tensor, Tensor]:
    """The attention over the union of key blocks from each block's output and log-sum-exp:
    lse = log(sum_b exp(lse_b)), out = sum_b out_b exp(lse_b - lse)."""
    if len(parts) == 1:
        return parts[0]
    (o1, m1), (o2, m2) = parts
    m = torch.logaddexp(m1, m2)  # (B, h, C)
    return o1 * (m1 - m).exp()[..., None] + o2 * (m2 - m).exp()[..., None], m


class LagChunkAttention(torch.autograd.Function):
    """The lag fold of :func:`~harness.models.chunked_attention.lag_penalised_attention` on CPU
    (module docstring): ``apply(q, k, v, key_bias, gamma, slope, cos, sin, plan)`` -> the output
    (B, H, T, hd), laid out (B, T, H, hd) so that merging the heads is free, and the log-sum-exp
    (B, H, T) of each query, which the backward pass reads (no gradient).

    q, k, v (B, H, T, hd) and key_bias (B, H, T) in fp32; gamma and slope (1 or B, H); cos and
    sin (1 or B, H, T, 1 or hd / 2) or None: the rotation of each pair of dimensions of q and k.
    """

    generate_vmap_rule = False

    @staticmethod
    def forward(
        q: Tensor,
        k: Tensor,
        v: Tensor,
        key_bias: Tensor,
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
        for size, a, b in plan.groups:
            group = _Group(inputs, a, b, plan)
            for start, stop in _chunks(T, size):
                _, q2 = group.chunk(start, stop)
                blocks = group.blocks(start, stop)
                o, m = _merge([_FLASH(q2, k2, v2, 0.0, causal, scale=plan.scale)[:2] for _, k2, v2, causal in blocks])
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
        for size, a, b in ctx.plan.groups:
            _group_backward(_Group(tuple(inputs), a, b, ctx.plan), (grad_y, y, lse), size, grads, (a, b))
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


def _group_backward(
    group: _Group,
    saved: tuple[Tensor, Tensor, Tensor],
    size: int,
    grads: list[Tensor | None],
    heads: tuple[int, int],
) -> None:
    """Add the gradients of heads a..b-1 (``heads``) into ``grads`` (q, k, v, key_bias, gamma, slope,
    cos, sin; None where not needed), chunk by chunk through the flash backward; ``saved``: the
    output's gradient, the output and the log-sum-exp.

    Each block's k' and v' gradients are added, at the folded width, into one contiguous buffer each
    (:class:`_FoldedGrads`) and cut to the head dimension once at the end: these additions over every
    earlier key, chunk after chunk, are the backward pass's largest cost after the flash kernel."""
    a, b = heads
    plan, pad = group.plan, group.plan.width - group.hd
    g_y, y, lse = (t[:, a:b] for t in saved)
    dq, dk, dv, dbias, dgamma, dslope, dcos, dsin = (None if g is None else g[:, a:b] for g in grads)
    rotated = group.rotation is not None
    if rotated and dcos is not None:  # q's and k's gradients in the rotated frame, rotated back at the end
        dq, dk = (torch.zeros_like(x) if d is None else d for d, x in ((dq, group.q), (dk, group.k)))
    folded = _FoldedGrads(group.k2, (dq, dk, dv, dbias), (dgamma, dslope))
    for start, stop in _chunks(y.size(2), size):
        j, q2 = group.chunk(start, stop)
        rows = slice(start, stop)
        g_rows, y_rows = F.pad(g_y[:, :, rows], (0, pad)), F.pad(y[:, :, rows], (0, pad))  # (B, h, C, width)
        for keys, k2, v2, causal in group.blocks(start, stop):
            d_q, d_k, d_v = _FLASH_BACKWARD(g_rows, q2, k2, v2, y_rows, lse[:, :, rows], 0.0, causal, scale=plan.scale)[
                :3
            ]  # the whole chunk's output and log-sum-exp: each block's exact share of the gradients
            folded.add(rows, keys, (d_q, d_k, d_v), j[keys], plan)
    folded.finish(group.hd, plan)
    group.q2 = group.k2 = group.v2 = None  # the buffers are done with: free them before rotating back
    if rotated:
        _rotate_back(group, dq, dk, dcos, dsin)


class _FoldedGrads:
    """The gradients of one group's folded k' and v' (B, h, T, width), accumulated block by block
    (q's go straight to q's gradient: a chunk's rows get only its own two blocks' share),
    and of gamma and slope, which reach the keys through the fold's columns at each chunk's own
    centre. Per block, with D_bias and D_env the gradients of k''s bias and envelope columns
    (B, h, S) and j the keys' positions relative to the centre:

        dgamma += sum_j [2 j D_env / scale - j^2 D_bias / (c scale)],   dslope += sum_j j D_bias / (c scale)

    (a product of a column with a vector of positions each). key_bias's gradient is the bias
    column's, the same at every centre: read from the accumulated k' gradient once (:meth:`finish`)."""

    def __init__(
        self, like: Tensor, wanted: tuple[Tensor | None, ...], per_head: tuple[Tensor | None, Tensor | None]
    ) -> None:
        self.dq, self.dk, self.dv, self.dbias = wanted
        dk, dv, dbias = self.dk, self.dv, self.dbias
        needs = (dk is not None or dbias is not None, dv is not None)
        self.dk2, self.dv2 = (torch.zeros_like(like) if need else None for need in needs)
        self.dgamma, self.dslope = per_head

    def add(self, rows: slice, keys: slice, d_qkv: tuple[Tensor, Tensor, Tensor], j: Tensor, plan: LagPlan) -> None:
        """Add one block's flash gradients (queries ``rows``, keys ``keys`` at positions ``j``)."""
        d_q, d_k, d_v = d_qkv
        if self.dq is not None:
            self.dq[:, :, rows] += d_q[..., : self.dq.size(-1)]
        for buffer, value in ((self.dk2, d_k), (self.dv2, d_v)):
            if buffer is not None:
                buffer[:, :, keys] += value
        if self.dgamma is None and self.dslope is None:
            return
        hd = d_k.size(-1) - (2 if plan.quadratic else 1)
        d_bias = d_k[..., hd]  # (B, h, S): the bias column's gradient, times c scale
        if self.dgamma is not None:
            d_g = -(d_bias @ (j * j)) / (FOLD_CONSTANT * plan.scale)  # (B, h)
            if plan.quadratic:
                d_g = d_g + (d_k[..., hd + 1] @ j) * (2.0 / plan.scale)
            self.dgamma += _to_batch(d_g, self.dgamma)
        if self.dslope is not None:
            self.dslope += _to_batch((d_bias @ j) / (FOLD_CONSTANT * plan.scale), self.dslope)

    def finish(self, hd: int, plan: LagPlan) -> None:
        """Add the accumulated gradients, cut to the head dimension, into k's and v's, and the bias
        column's into key_bias's."""
        for grad, buffer in ((self.dk, self.dk2), (self.dv, self.dv2)):
            if grad is not None:
                grad += buffer[..., :hd]
        if self.dbias is not None:
            self.dbias += self.dk2[..., hd] / (FOLD_CONSTANT * plan.scale)


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
