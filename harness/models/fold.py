"""Folding a per-key logit bias into the dot product: the widths and columns every fold shares.

A bias b_j added to the score of key j becomes extra columns of q and k, q'_i = [q_i, c],
k'_j = [k_j, b_j / (c scale)], so that q'_i.k'_j scale = q_i.k_j scale + b_j and one fused
SDPA call computes the biased attention (:func:`harness.models.attention.key_biased_attention`).

**Precision: the bias in pieces.** In fp32 the column holds b_j to fp32's precision. In bf16
(the mixed-precision plan) one column would round b_j / scale to 3 significant digits: ALiBi's
slope column m_h (j - c) / scale reaches ~1,400 at T = 1024 and would be off by several units,
a log g of -20 by 0.2. So in bf16 (and fp16) the column is split into three pieces,
b = b_hi + b_mid + b_lo, each the rounding of what the previous ones left (:func:`fold_columns`):
three 8-bit significands hold fp32's 24, and the kernels multiply them by q's constant c
exactly (a product of two bf16 numbers is exact in fp32) and add them up in fp32, as every
fused attention kernel accumulates q.k. The biased scores are then as precise as fp32's, and
the only bf16 error left is that of q and k themselves. The gradient of b reaches it through
the first piece (the others are remainders, constants to autograd): it is the kernel's
gradient of that column, rounded once to bf16 like every gradient of k.
"""

from __future__ import annotations

import torch
from torch import Tensor

#: The constant c in q's folded columns.
FOLD_CONSTANT = 1.0
#: Pieces of a folded bias column by the dtype the attention computes in (:func:`fold_columns`).
FOLD_PIECES = {torch.float32: 1, torch.float64: 1, torch.bfloat16: 3, torch.float16: 3}


def round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def fold_width(head_dim: int, device_type: str, columns: int = 1) -> int:
    """Last dimension of the folded q, k, v: head_dim + ``columns``, rounded up to a multiple
    of 8 on CUDA (its fused kernels want multiples of 8). On CPU the flash kernel only needs
    q, k and v to share their last dimension; rounding 33 up to 40 there cost about 20 % more
    attention memory and time in our measurements (``harness bench attention``), so CPU uses
    head_dim + columns."""
    return round_up(head_dim + columns, 8 if device_type == "cuda" else 1)


def attention_dtype(t: Tensor) -> torch.dtype:
    """The dtype the attention computes in for inputs like ``t``: autocast's when it is on for
    t's device, else t's own."""
    device = t.device.type
    if torch.is_autocast_enabled(device):
        return torch.get_autocast_dtype(device)
    return t.dtype


def fold_pieces(dtype: torch.dtype) -> int:
    """Columns one folded bias takes in ``dtype``: 1 in fp32, 3 in bf16 and fp16 (module docstring)."""
    return FOLD_PIECES.get(dtype, 1)


def fold_columns(bias: Tensor, dtype: torch.dtype) -> Tensor:
    """``bias`` (...) as the folded column(s) of k in ``dtype``: (..., n), n = :func:`fold_pieces`,
    whose sum is ``bias`` to fp32's precision (b_hi = dtype(b), b_mid = dtype(b - b_hi),
    b_lo = dtype(b - b_hi - b_mid), each remainder exact in fp32). The gradient flows through b_hi."""
    bias = bias.float()
    if fold_pieces(dtype) == 1:
        return bias.to(dtype).unsqueeze(-1)
    hi = bias.to(dtype)
    rest = bias.detach() - hi.detach().float()  # exact: the rounding error of b_hi
    mid = rest.to(dtype)
    lo = (rest - mid.float()).to(dtype)
    return torch.stack([hi, mid, lo], dim=-1)


def append_columns(t: Tensor, columns: Tensor, width: int) -> Tensor:
    """[t, columns, 0..] along the last dim: t (B, H, T, hd), columns (B, H, T, n) -> (B, H, T, width),
    concatenated in the (B, T, H, .) layout (SDPA's output then has it too)."""
    B, H, T, hd = t.shape
    n = columns.size(-1)
    zeros = t.new_zeros((1, 1, 1, width - hd - n)).expand(B, T, H, width - hd - n)
    return torch.cat([t.transpose(1, 2), columns.transpose(1, 2).to(t.dtype), zeros], dim=-1).transpose(1, 2)
