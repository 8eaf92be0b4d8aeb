"""The pieces of a training step that a CUDA graph can capture (issue 40, item 5).

A CUDA graph replays the kernels of one captured step; it captures only work that never waits
for the host: no ``.item()``, ``.tolist()`` or ``if loss.isnan():`` (a Python branch on a
tensor reads it), no Python number that changes from step to step baked into a kernel. The
seed-batched trainer (:mod:`harness.training.seed_batch`, what the device runner trains a
study's groups with) builds its step from the pieces here, so that on a GPU the step from the
forward pass to the updated weights is such work:

* **AdamW** (:func:`step_optimizer`) fused, with ``capturable=True`` and the learning rate a
  tensor on the device. The for-each AdamW (CPU's fp32 plan) reads its step count on the host
  every step (its bias corrections 1 - beta^k are Python numbers); the fused one keeps k on the
  device but takes a float learning rate as a kernel argument, which a graph would replay
  frozen at the captured step's value. The schedule (:func:`~harness.training.module.learning_rate`, by ``LambdaLR``)
  writes each step's rate into that tensor in place, on the host side, between two steps: a
  fill, not a read.
* **Clipping** per seed on the device (:func:`clip_per_seed`): every seed's norm and scale
  min(1, c / (||g|| + 1e-6)) are tensors multiplied in, never ``if norm > c``.
* **Divergence** (:func:`record_divergence`): the step at which each seed's loss first went
  non-finite, kept in a device tensor, instead of a test of the loss; the loop reads it every
  ``loss_check_every`` steps (the plan's: every step on CPU's fp32 plan, every 10 mixed) and
  before each evaluation, outside the step.

Where it holds: the seed-batched path only. ``train``'s Lightning loop reads the loss on the host
(its progress bar and logging), steps the scheduler with Python floats and tests divergence
with a host read every ``loss_check_every`` steps (:class:`~harness.training.callbacks.BatchLossMonitor`),
so its step is not capturable however the optimizer is built. On CPU the plan keeps the
for-each AdamW with a float learning rate (``DevicePlan.capturable_step`` is a GPU's), so
CPU numbers stay those of ``train``; the fast test runs the capturable step on CPU under
:class:`~harness.bench.host_syncs.HostReads` (refusing) and compiles its gradient half with
``torch.compile(fullgraph=True, backend="aot_eager")``, which fails on any graph break.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

__all__ = ["clip_per_seed", "record_divergence", "step_optimizer"]


def step_optimizer(
    groups: list[dict[str, Any]],
    *,
    lr: float,
    betas: tuple[float, float],
    fused: bool,
    capturable: bool,
    device: torch.device,
) -> torch.optim.AdamW:
    """AdamW over ``groups``: with ``capturable``, fused with ``capturable=True`` and the learning
    rate a 0-dim fp32 tensor on ``device`` shared by every group (the schedule fills it in place);
    else the plan's AdamW (``fused`` or for-each) with a float learning rate, ``train``'s."""
    if not capturable:
        return torch.optim.AdamW(groups, lr=lr, betas=betas, **({"fused": True} if fused else {}))
    rate = torch.tensor(lr, dtype=torch.float32, device=device)
    return torch.optim.AdamW(groups, lr=rate, betas=betas, fused=True, capturable=True)


def clip_per_seed(grads: Sequence[Tensor], max_norm: float) -> Tensor:
    """Clip each seed's global gradient norm in place: grads are (S, ...) each; returns the
    norms (S,). ||g_s|| = ||(||g_s^(p)||)_p||, g_s <- g_s min(1, max_norm / (||g_s|| + 1e-6)):
    ``clip_grad_norm_``'s rule per seed, all on the device (no host read, no branch)."""
    S = grads[0].size(0)
    norms = torch.stack([g.reshape(S, -1).norm(dim=1) for g in grads]).norm(dim=0)  # (S,)
    coef = (max_norm / (norms + 1e-6)).clamp(max=1.0)  # (S,)
    for g in grads:
        g.mul_(coef.view(S, *[1] * (g.dim() - 1)))
    return norms


def record_divergence(diverged_at: Tensor, losses: Tensor, step: Tensor) -> None:
    """Record, in place and on the device, the first step at which each seed's loss was not finite.

    ``diverged_at`` (S,) int64 holds 0 while seed s's losses have all been finite, else the
    (1-based) step of its first NaN or inf; ``losses`` (S,) are this step's, ``step`` a 0-dim
    int64 tensor (this step, 1-based):

        d_s <- d_s    if d_s > 0 or loss_s is finite,
               step   otherwise.
    """
    diverged_at.copy_(torch.where((diverged_at > 0) | torch.isfinite(losses), diverged_at, step))
