"""The seed-batched step a CUDA graph can capture (issue 40, item 5), checked on CPU: no host
read from the forward pass to the updated weights, and its gradient half one graph for Dynamo."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from harness.bench.host_syncs import HostReadRefused, HostReads
from harness.training.device_step import record_divergence
from harness.training.plan import prepare_run
from harness.training.seed_batch import SeedBatch

#: One layer of nano's width and heads: the components of ega-mope (the gate's fold, MOPE), the smallest graph.
SHAPE = dict(size="l1", n_layer=1, n_head=2, d_model=64)


def _seed_batch(tiny_config, *, capturable: bool, **fields) -> tuple[SeedBatch, torch.Tensor, torch.Tensor]:
    """Two seeds of ega-mope under the mixed plan on CPU (bf16 autocast, fused AdamW, clipping;
    or the plan of ``fields``' precision), the step capturable or not; one step taken (the
    optimizer's state made, as a CUDA graph's warm-up before capture does), and the next batches."""
    fields = {"precision": "bf16-mixed", **SHAPE, **fields}
    configs = [tiny_config(seed=s, **fields) for s in (0, 1)]
    plan = prepare_run(configs[0], None, progress=False, compile_sharing=2)
    plan = replace(plan, device=replace(plan.device, capturable_step=capturable))
    batch = SeedBatch(configs, plan)
    batch.step(0)
    xs, ys = (torch.stack(t) for t in zip(*(next(s) for s in batch.streams), strict=True))
    return batch, xs, ys


def test_the_capturable_step_reads_nothing_on_the_host_and_the_plain_one_does(tiny_config) -> None:
    """Forward, backward, clipping, divergence flags, the fused capturable AdamW update and the
    schedule's next rate run with every host read refused; the same step with CPU's fp32 plan
    (``train``'s for-each AdamW: its step count read on the host every step) is refused."""
    batch, xs, ys = _seed_batch(tiny_config, capturable=True)
    lr = batch.optimizer.param_groups[0]["lr"]
    assert isinstance(lr, torch.Tensor) and batch.optimizer.defaults["capturable"]
    before = {n: p.detach().clone() for n, p in batch.params.items()}
    with HostReads(refuse=True):
        losses = batch.device_step(xs, ys)
        batch.scheduler.step()
    assert losses.shape == (2,) and torch.isfinite(losses).all()
    assert all(not torch.equal(before[n], p) for n, p in batch.params.items() if p.requires_grad)
    assert int(batch.steps_done) == 2 and batch.divergence() == {}
    assert float(lr) == pytest.approx(batch.scheduler.get_last_lr()[0])

    plain, xs, ys = _seed_batch(tiny_config, capturable=False, precision="32-true")
    assert not plain.plan.device.fused_optimizer
    with pytest.raises(HostReadRefused), HostReads(refuse=True):
        plain.device_step(xs, ys)


def test_the_step_before_the_optimizer_compiles_as_one_graph(tiny_config) -> None:
    """``torch.compile(fullgraph=True)`` on AOTAutograd raises at any graph break (a host read, a
    branch on a tensor): the forward, backward, gate gradients, per-seed clipping and divergence
    flags trace as one graph, dropout included, and give the eager step's losses. (The fused
    AdamW update is one kernel that Dynamo does not trace, by torch's choice; the test above
    checks it reads nothing.)"""
    batch, xs, ys = _seed_batch(tiny_config, capturable=True, dropout=0.1)
    torch._dynamo.reset()
    compiled = torch.compile(batch.gradients, fullgraph=True, backend="aot_eager")
    with torch._dynamo.config.patch(trace_autograd_ops=True):
        losses = compiled(xs, ys)
    assert losses.shape == (2,) and torch.isfinite(losses).all()
    assert int(batch.steps_done) == 2 and batch.divergence() == {}


def test_divergence_is_recorded_at_the_first_non_finite_step_on_the_device() -> None:
    diverged_at = torch.zeros(3, dtype=torch.int64)
    steps = [
        torch.tensor([1.0, 2.0, 3.0]),
        torch.tensor([1.0, float("nan"), 3.0]),
        torch.tensor([float("inf"), 2.0, 1.0]),
    ]
    counts = [torch.tensor(k) for k in (1, 2, 3)]  # 1-based steps, made before the refusing block
    with HostReads(refuse=True):
        for losses, k in zip(steps, counts, strict=True):
            record_divergence(diverged_at, losses, k)
    assert diverged_at.tolist() == [3, 2, 0]
