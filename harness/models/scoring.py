"""Scoring rules: the *scoring* slot of the attention (how keys enter q.k).

- ``dot``: plain scaled dot product, score_ij = q_i . k_j / sqrt(hd);
- ``lagged``: "convolution attention", attention extended to non-negative lags: each key
  is replaced by a causal convolution of the keys over L lags with learned per-head weights,

      k'_j = sum_{l=0}^{L-1} a_{h,l} k_{j-l}     (k_{j-l} = 0 before the start)
      score_ij = q_i . k'_j / sqrt(hd) = sum_l a_{h,l} q_i . k_{j-l} / sqrt(hd)

  so query i scores key j also by its match with the l tokens before j. a_{h,0} = 1 and
  a_{h,l>0} = 0 at initialisation (the model starts as ``dot``). Causal because l >= 0
  and j <= i. Applied after RoPE (each lagged key keeps its own rotation). L H parameters
  per layer, O(L T hd) work per head, no T x T tensor; the convolution is recomputed in
the backward pass (activation checkpointing) so that only k is kept, not L shifted copies.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from harness.errors import InputError
from harness.models.slots import SCORINGS


class Scoring(nn.Module):
    """The contract of the *scoring* slot: the keys as the scores read them,
    ``forward(k)`` (B, H, T, hd) -> (B, H, T, hd), and score_ij = q_i . forward(k)_j / sqrt(hd).

    The harness guarantees around it: k is each layer's keys after projection, the gate
    and the position's rotation (RoPE); the output's row j must depend on rows <= j only
    (``harness zoo check`` and every study naming a user component refuse one that does
    not); construction is by keyword, with the slot's arguments that ``__init__`` takes (all
    of them when it takes ``**kwargs``): ``n_head``, ``d_model``, and ``lags`` when the
    variant sets that option (then required); this base takes ``n_head`` and ``d_model`` and keeps
    them, so a subclass needs no ``__init__`` of its own. Every ``nn.Linear`` in the model, a
    component's included, is re-initialised by the shared recipe; ``nn.Parameter`` values
    are the component's own. :attr:`transforms_keys` is False only for the identity (the
    attention then skips the call on some paths).
    """

    transforms_keys = True
    #: True when the variant option ``lags`` sets this rule's number of lags.
    takes_lags = False

    def __init__(self, n_head: int | None = None, d_model: int | None = None) -> None:
        # Takes the slot's keywords (and keeps them), so that a subclass needs no __init__ of its own.
        super().__init__()
        self.n_head = n_head
        self.d_model = d_model

    @classmethod
    def from_shape(cls, *, n_head: int, lags: int) -> Scoring:
        """The rule for a model of ``n_head`` heads (the zoo's, registered in
        :data:`harness.models.slots.SCORINGS`); ``lags`` for a rule that :attr:`takes_lags`."""
        return cls(n_head=n_head)

    def forward(self, k: Tensor) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} must implement forward(k) -> k' (B, H, T, hd)")


@SCORINGS.register("dot")
class DotScoring(Scoring):
    """Plain dot-product scoring: keys unchanged."""

    transforms_keys = False

    def forward(self, k: Tensor) -> Tensor:
        return k


@SCORINGS.register("lagged")
class LaggedScoring(Scoring):
    """Keys causally convolved over ``lags`` non-negative lags (see the module docstring)."""

    transforms_keys = True
    takes_lags = True

    def __init__(self, n_head: int, lags: int = 4) -> None:
        super().__init__()
        if lags < 1:
            raise InputError(f"lagged scoring needs lags >= 1, got {lags}")
        self.lags = lags
        weight = torch.zeros(n_head, lags)
        weight[:, 0] = 1.0
        self.lag_weight = nn.Parameter(weight)  # (H, L)

    @classmethod
    def from_shape(cls, *, n_head: int, lags: int) -> Scoring:
        return cls(n_head, lags)

    def forward(self, k: Tensor) -> Tensor:
        if torch.is_grad_enabled():  # keep only k for the backward pass, not the L shifted copies
            return checkpoint(self._convolve, k, use_reentrant=False)
        return self._convolve(k)

    def _convolve(self, k: Tensor) -> Tensor:
        T = k.size(-2)
        w = self.lag_weight.to(k.dtype)
        out = k * w[:, 0, None, None]
        for lag in range(1, min(self.lags, T)):
            shifted = F.pad(k[..., : T - lag, :], (0, 0, lag, 0))  # k_{j-lag}, (B, H, T, hd)
            out = out + shifted * w[:, lag, None, None]
        return out


def build_scoring(name: str, *, n_head: int, lags: int = 4) -> Scoring:
    """Instantiate the scoring component ``name`` of the registry."""
    return SCORINGS.get(name).from_shape(n_head=n_head, lags=lags)
