"""Attention over a seed axis: the seeds of a seed-batched model folded into the batch of SDPA.

Seed-batched training (:mod:`harness.training.seed_batch`) runs S copies of a model, one per
seed, as one model: ``torch.func.vmap`` over :func:`torch.func.functional_call` with the
parameters stacked along a leading seed axis, so every linear layer is one batched matmul.
Under ``vmap`` SDPA's CPU flash kernel has no batching rule: torch calls it once per seed
(its "performance drop" fallback). :func:`attention` is ``F.scaled_dot_product_attention``
everywhere except there: for a vmapped call on CPU without dropout it goes through
:class:`SeedFoldedAttention`, whose vmap rule reshapes the seed axis into the batch,
(S, B, H, T, d) -> (S B, H, T, d), and calls the flash kernel and its backward once for every
seed. Outside ``vmap`` nothing changes (the same call, the same kernel, the same numbers).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

_FLASH = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default
_FLASH_BACKWARD = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward.default


def _is_vmapped(t: Tensor) -> bool:
    """Whether ``t`` is a tensor inside ``torch.func.vmap`` (a batched wrapper); never while
    torch.compile traces (the seed-batched step runs eager; the check would break the graph)."""
    return not torch.compiler.is_compiling() and torch._C._functorch.is_batchedtensor(t)


def attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
) -> Tensor:
    """``F.scaled_dot_product_attention(q, k, v, ...)`` (B, H, T, d) -> (B, H, T, d_v); under
    ``vmap`` on CPU without dropout, with a mask (if any) that is neither vmapped nor learned,
    one flash call for every seed (module docstring)."""
    folds = (
        _is_vmapped(q)
        and q.device.type == "cpu"
        and dropout_p == 0.0
        and (attn_mask is None or not (attn_mask.requires_grad or _is_vmapped(attn_mask)))
    )
    if folds:
        return SeedFoldedAttention.apply(q, k, v, attn_mask, is_causal, scale)[0]
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale
    )


class SeedFoldedAttention(torch.autograd.Function):
    """SDPA's CPU flash kernel as an autograd function with a vmap rule that folds the seed axis
    into the batch: ``apply(q, k, v, attn_mask, is_causal, scale)`` -> (output, log-sum-exp),
    q, k, v (B, H, T, d), attn_mask broadcasting against (B, H, T, T) or None (no gradient)."""

    generate_vmap_rule = False

    @staticmethod
    def forward(
        q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None, is_causal: bool, scale: float | None
    ) -> tuple[Tensor, Tensor]:
        out, lse = _FLASH(q, k, v, 0.0, is_causal, attn_mask=attn_mask, scale=scale)[:2]
        return out, lse

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
        q, k, v, attn_mask, ctx.is_causal, ctx.scale = inputs
        ctx.save_for_backward(q, k, v, attn_mask, *output)
        ctx.mark_non_differentiable(output[1])

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor, _grad_lse: Tensor | None) -> tuple[Tensor | None, ...]:
        q, k, v, attn_mask, out, lse = ctx.saved_tensors
        dq, dk, dv = _FLASH_BACKWARD(
            grad_out, q, k, v, out, lse, 0.0, ctx.is_causal, attn_mask=attn_mask, scale=ctx.scale
        )[:3]
        return dq, dk, dv, None, None, None

    @staticmethod
    def vmap(info: Any, in_dims: tuple[Any, ...], q, k, v, attn_mask, is_causal, scale) -> tuple[Any, Any]:
        """The vmapped axis (size S) of q, k, v folded into their batch: (S, B, ...) -> (S B, ...);
        the mask (never vmapped here) broadcasts as it did."""
        S = info.batch_size
        q, k, v = (
            (t.movedim(d, 0) if d is not None else t.expand(S, *t.shape))
            for t, d in zip((q, k, v), in_dims[:3], strict=True)
        )  # (S, B, H, T, d) each
        B = q.size(1)
        folded = [t.expand(S, B, *t.shape[2:]).reshape(S * B, *t.shape[2:]) for t in (q, k, v)]  # (S B, H, T, d)
        out, lse = SeedFoldedAttention.apply(*folded, attn_mask, is_causal, scale)
        return (out.unflatten(0, (S, B)), lse.unflatten(0, (S, B))), (0, 0)
