"""Folding a per-key logit bias into the dot product: the widths and columns every fold shares.

A bias b_j added to the score of key j becomes extra columns of q and k, q'_i = [q_i, c],
k'_j = [k_j, b_j / (c scale)], so that q'_i.k'_j scale = q_i.k_j scale + b_j and one fused
SDPA call computes the biased attention (:func:`harness.models.attention.key_biased_attention`).

**Precision: the bias in pieces.** In fp32 the column holds b_j to fp32's precision. In bf16
(the mixed-precision plan) one column would round b_j / scale to 3 significant digits: ALiBi's
slope column m_h (j - c) / scale reaches ~1,400 at T = 1024 and would be off by several units,
a log g of -20 by 0.2. So in bf16 (and fp16) the column is split into three pieces,
b = b_hi + b_mid + b_lo (:func:`fold_columns`): b_hi is b with the low bits of its fp32
significand cleared (the first 8 significant bits: a bf16 number exactly), b_mid the same of
what is left, b_lo the rest. Three 8-bit significands hold fp32's 24, every piece is exact in
bf16 and their sum is b exactly; the kernels multiply them by q's constant c exactly (a product
of two bf16 numbers is exact in fp32) and add them up in fp32, as every fused attention kernel
accumulates q.k. The biased scores are then as precise as fp32's, and the only bf16 error left
is that of q and k themselves. The gradient of b reaches it through the first piece (the others
are remainders, constants to autograd): it is the kernel's gradient of that column, rounded once
to bf16 like every gradient of k.

**Why bit masks, not a bf16 round trip.** Splitting by rounding (b_hi = bf16(b), then
b - fp32(b_hi)) relies on the round trip through bf16 being computed. ``torch.compile``'s
Inductor removes such round trips by default (``emulate_precision_casts=False``): b - fp32(bf16(b))
becomes 0, the middle piece vanishes, and a bias of 100 is off by 0.25 (ALiBi at the papers'
width: 0.0218 against float64 compiled, 0.0026 eager). Clearing bits of the integer view is
no cast, so no compiler can drop it; :func:`fold_error` measures the pieces, eager or compiled.
"""

from __future__ import annotations

from collections.abc import Callable

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


#: Bits of an fp32 number's integer view that keep its sign, exponent and the first significant
#: bits a piece holds exactly: 8 (bf16: the high 16 bits), 11 (fp16: all but the low 13).
_PIECE_MASKS = {torch.bfloat16: -(1 << 16), torch.float16: -(1 << 13)}


def _head_bits(x: Tensor, mask: int) -> Tensor:
    """x (fp32) with the low bits of its significand cleared (``mask`` on its integer view): its
    first significant bits, rounded toward zero; exact in the piece's dtype. No cast, so a
    compiler cannot fold it away (module docstring)."""
    return (x.view(torch.int32) & mask).view(torch.float32)


def fold_columns(bias: Tensor, dtype: torch.dtype) -> Tensor:
    """``bias`` (...) as the folded column(s) of k in ``dtype``: (..., n), n = :func:`fold_pieces`,
    whose sum is ``bias``'s fp32 value exactly: b_hi = head(b), b_mid = head(b - b_hi),
    b_lo = b - b_hi - b_mid, head clearing the low significand bits the dtype cannot hold (each
    difference exact in fp32, each piece exact in ``dtype``: in fp16 within its exponent range,
    whose smallest numbers, 6e-8, round the last piece of a bias below ~1). The gradient flows
    through b_hi."""
    bias = bias.float()
    if fold_pieces(dtype) == 1:
        return bias.to(dtype).unsqueeze(-1)
    mask = _PIECE_MASKS[dtype]
    exact = bias.detach()
    head = _head_bits(exact, mask)
    rest = exact - head  # exact: the bits head left
    mid = _head_bits(rest, mask)
    lo = rest - mid  # exact, and within the dtype's significand
    hi = bias + (head - exact)  # head's value, bias's gradient (head - exact is exact: Sterbenz)
    return torch.stack([hi, mid, lo], dim=-1).to(dtype)


def append_columns(t: Tensor, columns: Tensor, width: int) -> Tensor:
    """[t, columns, 0..] along the last dim: t (B, H, T, hd), columns (B, H, T, n) -> (B, H, T, width),
    concatenated in the (B, T, H, .) layout (SDPA's output then has it too)."""
    B, H, T, hd = t.shape
    n = columns.size(-1)
    zeros = t.new_zeros((1, 1, 1, width - hd - n)).expand(B, T, H, width - hd - n)
    return torch.cat([t.transpose(1, 2), columns.transpose(1, 2).to(t.dtype), zeros], dim=-1).transpose(1, 2)


#: The largest :func:`fold_error` of a fold that holds its bias (every piece exact: 0 in practice);
#: a fold whose middle piece a compiler dropped is off by up to 2^-9 of the bias (~2e-3).
FOLD_ERROR_LIMIT = 1e-6


def fold_error(
    compiled: bool,
    *,
    device: str = "cpu",
    dtype: torch.dtype = torch.bfloat16,
    fold: Callable[[Tensor, torch.dtype], Tensor] | None = None,
) -> float:
    """How far the folded pieces of a bias are from it: max |sum of pieces - b| / max |b| over
    biases like the ones the fold carries (ALiBi's slope columns m (j - c) / scale at T = 1024 and
    head dimension 32, up to ~1,400, plus log g down to -20), with ``fold`` (default
    :func:`fold_columns`; ``fold(bias, dtype) -> (..., pieces)``) run eager or compiled by
    Inductor (``torch.compile``'s default backend, the training step's).

    A fold that holds its bias gives 0 (each piece exact, their sum b exactly), at most
    :data:`FOLD_ERROR_LIMIT`; one whose middle piece the compiler removed (a bf16 round trip
    folded away, ``emulate_precision_casts=False``) about 1e-3. ``benchmarks/gpu_check.py``'s bf16
    phase judges the device's compiled fold by it
    (:func:`harness.bench.gpu_device_phases.judge_fold_pieces`)."""
    fold = fold_columns if fold is None else fold
    g = torch.Generator().manual_seed(0)
    j = torch.arange(1024, dtype=torch.float32) - 511.5  # (T,): j - c
    slopes = torch.tensor([2.0**-k for k in range(1, 9)])[:, None]  # (8, 1): ALiBi's, 8 heads
    log_g = torch.nn.functional.logsigmoid(8.0 * torch.randn(8, 1024, generator=g))  # down to ~-20
    bias = ((slopes * j + log_g) * 32**0.5).to(device)  # (8, T): the column, / (c scale)
    run = torch.compile(fold, backend="inductor", dynamic=False) if compiled else fold
    pieces = run(bias, dtype)  # (8, T, 3)
    return float((pieces.double().sum(-1) - bias.double()).abs().max() / bias.double().abs().max())
