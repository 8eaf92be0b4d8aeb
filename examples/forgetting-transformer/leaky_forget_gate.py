"""A forget gate with a mistake the harness refuses: its logits are standardised over the
sequence (mean and spread of w . x_l over l = 0..T-1, "for stable gates"), so the gate of
key j depends on every later token, and so does every earlier output. ``harness zoo check``
and ``harness run`` name the first position that leaks and start nothing
(docs/own-mechanism.md, "When a component reads the future")."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from harness.models import KeyBias


class StandardisedForgetGate(KeyBias):
    """The forget gate of ``forget_gate.py`` with its logits standardised over the whole sequence."""

    def __init__(self, d_model: int, n_head: int) -> None:
        super().__init__()
        self.proj = nn.Linear(d_model, n_head)

    def key_bias(self, x: Tensor, k: Tensor | None) -> Tensor:
        logits = self.proj(x).transpose(1, 2)  # (B, H, T)
        z = (logits - logits.mean(-1, keepdim=True)) / (logits.std(-1, keepdim=True) + 1e-5)  # reads l > j
        return -torch.cumsum(F.logsigmoid(z), dim=-1)
