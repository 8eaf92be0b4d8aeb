"""What the key gates did during one evaluation: the open fraction per head and, on a corpus
with content labels (synthetic-salience), how well the gate picks the content keys.

Per layer ``l`` and head ``h``, over the keys of every window read:

    open_fraction[l, h] = #{g > 0.5} / #keys
    content_precision   = #{g > 0.5 and content} / #{g > 0.5}
    content_recall      = #{g > 0.5 and content} / (#content * L * H)
    content_auc         = P(g_content > g_other) + P(tie) / 2

The AUC is read from histograms of gate values (:data:`AUC_BINS` bins per head), so that an
evaluation keeps a fixed amount of state whatever its number of windows.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

#: Histogram bins of gate values for the content AUC.
AUC_BINS = 1024


def auc_from_histograms(pos: Tensor, neg: Tensor) -> Tensor:
    """ROC AUC P(g_pos > g_neg) + P(tie)/2 from histograms ``[..., bins]`` of the scores of
    positives and negatives (ties within a bin count one half)."""
    pos, neg = pos.double(), neg.double()
    neg_below = torch.cumsum(neg, dim=-1) - neg  # negatives in lower bins
    wins = (pos * neg_below).sum(-1) + 0.5 * (pos * neg).sum(-1)
    return wins / (pos.sum(-1) * neg.sum(-1)).clamp_min(1.0)


class GateReadings:
    """Accumulates gate values ``(L, N, H, T)`` batch by batch; :meth:`summary` gives the
    ``gate/*`` metrics of the evaluation."""

    def __init__(self, n_layer: int, n_head: int) -> None:
        self.open = torch.zeros(n_layer, n_head, dtype=torch.float64)
        self.keys = 0
        self.true_positives = torch.zeros(n_layer, n_head, dtype=torch.float64)
        self.positives = 0
        self.hist_pos: Tensor | None = None  # (L, H, AUC_BINS)
        self.hist_neg: Tensor | None = None

    def add(self, gates: Tensor, content: Tensor | None) -> None:
        """Add one batch: ``gates`` (L, N, H, T) in [0, 1], ``content`` (N, T) bool or None."""
        is_open = gates > 0.5  # (L, N, H, T)
        self.open += is_open.sum(dim=(1, 3)).double().cpu()  # (L, H)
        self.keys += gates.shape[1] * gates.shape[3]
        if content is None:
            return
        L, _, H, _ = gates.shape
        c = content[None, :, None, :].expand_as(gates)  # (L, N, H, T)
        self.true_positives += (is_open & c).sum(dim=(1, 3)).double().cpu()
        self.positives += int(content.sum())
        # Histograms of gate values for positives / negatives, per head: (L*H, bins).
        bins = (gates * AUC_BINS).long().clamp_(0, AUC_BINS - 1)
        head = torch.arange(L * H, device=gates.device).view(L, 1, H, 1).expand_as(gates)
        flat = (head * AUC_BINS + bins).reshape(-1)
        c_flat = c.reshape(-1)
        n = L * H * AUC_BINS
        hist_pos = torch.bincount(flat[c_flat], minlength=n).view(L, H, AUC_BINS).cpu()
        hist_neg = torch.bincount(flat[~c_flat], minlength=n).view(L, H, AUC_BINS).cpu()
        self.hist_pos = hist_pos if self.hist_pos is None else self.hist_pos + hist_pos
        self.hist_neg = hist_neg if self.hist_neg is None else self.hist_neg + hist_neg

    def summary(self) -> dict[str, float]:
        """``gate/open_fraction`` (and per head ``gate/open_fraction/l0h3``), and with content
        labels ``gate/content_precision``, ``_recall``, ``_auc``, ``_auc_best_head``; empty when
        no gate was read."""
        if not self.keys:
            return {}
        per_head = self.open / self.keys  # (L, H)
        metrics = {"gate/open_fraction": float(per_head.mean())}
        for (layer, head), v in np.ndenumerate(per_head.numpy()):
            metrics[f"gate/open_fraction/l{layer}h{head}"] = float(v)
        if self.hist_pos is not None and self.hist_neg is not None:
            n_open = float(self.open.sum())
            tp = float(self.true_positives.sum())
            positives = self.positives * per_head.numel()
            metrics["gate/content_precision"] = tp / n_open if n_open else math.nan
            metrics["gate/content_recall"] = tp / positives if positives else math.nan
            pos, neg = self.hist_pos, self.hist_neg
            metrics["gate/content_auc"] = float(auc_from_histograms(pos.sum(dim=(0, 1)), neg.sum(dim=(0, 1))))
            metrics["gate/content_auc_best_head"] = float(auc_from_histograms(pos, neg).max())
        return metrics
