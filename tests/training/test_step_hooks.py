"""The per-step hooks of the training callbacks launch no float64 kernel and wait for nothing;
their sums, taken at evaluation time, equal a direct float64 computation."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from harness.models import build_model
from harness.training.callbacks import BatchLossMonitor, GateGradientNorms, TrainingDiverged
from harness.training.data import TrainBatchStream


class OpDtypes(TorchDispatchMode):
    """The ops run inside the block and the dtypes of their tensor outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple[str, torch.dtype]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.ops.append((str(func), t.dtype))
        return out


class Recorder:
    """A stand-in for the LightningModule: what record_metrics received."""

    def __init__(self, model=None) -> None:
        self.model = model
        self.metrics: dict[str, float] = {}

    def record_metrics(self, metrics) -> None:
        self.metrics.update(metrics)


def test_the_loss_monitor_keeps_losses_without_kernels_and_sums_them_in_float64() -> None:
    monitor = BatchLossMonitor(check_every=4)
    trainer = SimpleNamespace(global_step=0)
    losses = [torch.tensor(v, dtype=torch.float32) for v in np.random.default_rng(0).uniform(1, 4, 10)]
    with OpDtypes() as seen:
        for k, loss in enumerate(losses[:3]):  # below check_every: nothing is tested yet
            trainer.global_step = k + 1
            monitor.on_train_batch_end(trainer, None, {"loss": loss}, None, k)
    assert [op for op, _ in seen.ops if "detach" not in op] == []  # only references kept
    for k, loss in enumerate(losses[3:], start=3):
        monitor.on_train_batch_end(trainer, None, {"loss": loss}, None, k)
    module = Recorder()
    monitor.on_validation_epoch_end(trainer, module)
    expected = 0.0
    for loss in losses:
        expected += float(loss)  # float64, in step order
    assert module.metrics["train/batch_loss"] == expected / len(losses)


def test_the_loss_monitor_finds_a_nan_at_its_next_check() -> None:
    monitor = BatchLossMonitor(check_every=3)
    trainer = SimpleNamespace(global_step=0)
    monitor.on_train_batch_end(trainer, None, torch.tensor(float("nan")), None, 0)
    monitor.on_train_batch_end(trainer, None, torch.tensor(1.0), None, 1)
    with pytest.raises(TrainingDiverged):
        monitor.on_train_batch_end(trainer, None, torch.tensor(1.0), None, 2)


def test_gate_gradient_norms_copy_fp32_per_step_and_match_a_float64_oracle() -> None:
    torch.manual_seed(0)
    model = build_model("ega", size="nano", vocab_size=11, block_size=16)
    callback, module = GateGradientNorms(), Recorder(model)
    per_step = []
    for _ in range(5):
        model.zero_grad(set_to_none=True)
        model(torch.randint(11, (2, 16))).square().mean().backward()
        gates = model.key_gates()
        per_step.append({n: np.stack([getattr(g, n).grad.double().numpy() for g in gates]) for n in ("tau", "alpha")})
        with OpDtypes() as seen:
            callback.on_before_optimizer_step(None, module, None)
        assert seen.ops and all(dtype == torch.float32 for _, dtype in seen.ops), seen.ops
    callback.on_validation_epoch_end(None, module)
    for name in ("tau", "alpha"):
        grads = np.stack([s[name] for s in per_step])  # (K, L, H)
        rms = math.sqrt(float((grads**2).sum(axis=2).mean(axis=0).sum()))
        assert module.metrics[f"gate/{name}_grad_norm"] == pytest.approx(rms, rel=1e-12)
        drift = float(np.linalg.norm(grads.mean(axis=0)))
        assert module.metrics[f"gate/{name}_grad_mean_norm"] == pytest.approx(drift, rel=1e-12)
    per_layer = np.sqrt((np.stack([s["tau"] for s in per_step]) ** 2).sum(axis=2).mean(axis=0))
    for layer, value in enumerate(per_layer):
        assert module.metrics[f"gate/tau_grad_norm/l{layer}"] == pytest.approx(value, rel=1e-12)


def test_training_batches_are_contiguous() -> None:
    """Cut from one (B, T + 1) array, x and y would be views with row stride T + 1; a GPU run
    pins them and copies them without waiting only when they are contiguous."""
    tokens = np.arange(1000, dtype=np.uint16) % 50
    x, y = next(iter(TrainBatchStream(tokens, block_size=256, batch_size=4, seed=0)))
    assert x.is_contiguous() and y.is_contiguous() and x.stride() == (256, 1)
    assert torch.equal(x[:, 1:], y[:, :-1])
