"""Selecting and reordering attention heads without index tensors.

A head list is Python data. Turned into an index tensor inside a forward pass, it would be
copied from the host to the device at every call (on a GPU a copy the host waits for, and a
graph break under ``torch.compile``). Here a list becomes its runs of consecutive heads,
each a slice (a view); several runs are concatenated. The common cases (every head, one
contiguous group) cost nothing at all.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


def head_runs(heads: Sequence[int]) -> list[tuple[int, int]]:
    """``heads`` as runs ``(start, stop)`` of consecutive indices, in order: [0, 1, 2, 5, 6] ->
    [(0, 3), (5, 7)]."""
    runs: list[tuple[int, int]] = []
    for h in heads:
        if runs and runs[-1][1] == h:
            runs[-1] = (runs[-1][0], h + 1)
        else:
            runs.append((h, h + 1))
    return runs


def select_heads(t: Tensor, heads: Sequence[int], dim: int = 1) -> Tensor:
    """Heads ``heads`` of ``t`` along ``dim`` (1 for (B, H, ...), 0 for per-head parameters (H,)):
    a view for one run of consecutive heads, else the runs' slices concatenated."""
    runs = head_runs(heads)
    if runs == [(0, t.size(dim))]:  # every head in order: t itself (a narrow's gradient would be a copy)
        return t
    parts = [t.narrow(dim, start, stop - start) for start, stop in runs]
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=dim)


def split_heads(t: Tensor, groups: Sequence[Sequence[int]], dim: int = 1) -> list[Tensor]:
    """The heads of each group of ``t`` along ``dim``. Groups that are runs of consecutive heads, one
    after the other from head 0 to the last, are one ``split`` (views, whose gradients autograd puts
    together with one ``cat``); other groups are :func:`select_heads` each (a slice's gradient is a
    zero tensor of all heads, one per group)."""
    if [h for g in groups for h in g] == list(range(t.size(dim))) and all(groups):
        return list(t.split([len(g) for g in groups], dim=dim))
    return [select_heads(t, g, dim=dim) for g in groups]


def in_head_order(outputs: Sequence[Tensor], order: Sequence[int], dim: int = 1) -> Tensor:
    """Outputs of calls over groups of heads, (B, h_i, ...) each, holding heads ``order`` in turn
    -> (B, H, ...) with head h at index h."""
    y = outputs[0] if len(outputs) == 1 else torch.cat(list(outputs), dim=dim)
    position = {h: i for i, h in enumerate(order)}
    return select_heads(y, [position[h] for h in range(len(order))], dim=dim)
