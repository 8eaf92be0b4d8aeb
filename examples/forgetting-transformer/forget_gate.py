"""The Forgetting Transformer's forget gate as a gate of the harness: a per-key logit bias.

Lin, Nikishin, He and Courville, "Forgetting Transformer: Softmax Attention with a Forget
Gate", ICLR 2025 (arXiv 2503.02130), equations 5-7. Per head h and position l, a scalar
forget gate f_l = sigmoid(w_h . x_l + b_h), and the attention

    o_i = sum_{j<=i} F_ij exp(q_i . k_j) v_j / sum_{j<=i} F_ij exp(q_i . k_j),
    F_ij = prod_{l=j+1}^{i} f_l,

i.e. the score of (i, j) gains D_ij = log F_ij = sum_{l=j+1}^{i} log f_l = c_i - c_j with
c_j = sum_{l<=j} log f_l. The paper writes D as a T x T matrix; but c_i is the same for every
key j of query i, so it cancels in the softmax, and what is left is a bias per key:

    b_j = -c_j = -sum_{l<=j} log f_l  (>= 0, growing with j: older keys are down-weighted)

which is what the gate slot takes (``harness.models.KeyBias``): the harness folds it into its
one fused attention call, as it folds EGA's log g, with no T x T tensor. Causal: b_j reads
f_0..f_j only. Not a sigmoid gate of a normalised signal, so it subclasses ``KeyBias`` rather
than ``KeyGate`` (no tau, no alpha, no open fraction).

Parameters: the paper's ``fgate_proj``, a Linear(d, H) with bias: H (d + 1) per layer. The
harness initialises every Linear N(0, 0.02^2) with a zero bias, as the paper's code does, so
f starts near 1/2 (b_j near 0.69 j).

Range: b_j grows with j, about 88 at j = 128 when f = 1/2. Exact in fp32 (CPU); under a GPU's
bf16 autocast the folded column would round the steps between neighbouring keys away at long
contexts, so run this gate in fp32 there (the paper's kernel subtracts c_i inside the kernel
instead; a fold per key cannot).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from harness.models import KeyBias


class ForgetGate(KeyBias):
    """b_j = -sum_{l<=j} log sigmoid(w_h . x_l + b_h), per head h (see the module docstring)."""

    def __init__(self, d_model: int, n_head: int) -> None:
        super().__init__()
        self.proj = nn.Linear(d_model, n_head)  # the forget gate's logits, one per head

    def key_bias(self, x: Tensor, k: Tensor | None) -> Tensor:
        log_f = F.logsigmoid(self.proj(x)).transpose(1, 2)  # log f_l, (B, H, T)
        return -torch.cumsum(log_f, dim=-1)  # b_j = -c_j, (B, H, T)
