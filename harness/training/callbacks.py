"""Lightning callbacks of a training run: throughput, divergence, MLflow, checkpoints.

Every per-step hook here costs a few microseconds and launches at most one small fp32 kernel
(a clock read, a reference to the loss kept, one copy of the gate gradients); the sums over
steps are taken at evaluation time, and anything that talks to the outside (MLflow, the
disk) runs at evaluation or checkpoint time only, so the training loop pays almost nothing
for telemetry and waits for the device only where a plan says so.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.trainer.states import TrainerFn

from harness.training.plan import LAST_CHECKPOINT
from harness.training.tracking import TrackedRun


class TrainingDiverged(RuntimeError):
    """Raised inside the training loop when the loss is not finite; ``train`` turns it into
    ``status="diverged"`` (never propagated to the caller)."""

    def __init__(self, step: int, loss: float) -> None:
        super().__init__(f"training loss is {loss} at step {step}")
        self.step = step
        self.loss = loss


class TokenThroughput(Callback):
    """Training tokens per second, evaluation time excluded.

    The clock runs between consecutive ``on_train_batch_end`` calls (data, forward,
    backward, optimizer, Lightning's own work: the real cost of a step) and restarts after
    each evaluation; the first step (compilation, allocator warm-up) is not counted. At each
    evaluation it records ``throughput/tokens_per_s`` (since the previous evaluation) and
    keeps the whole-run figure in :attr:`tokens_per_s`.
    """

    def __init__(self, tokens_per_step: int) -> None:
        self.tokens_per_step = tokens_per_step
        self._last: float | None = None
        self._window_time = 0.0
        self._window_steps = 0
        self._total_time = 0.0
        self._total_steps = 0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step * self._total_steps / self._total_time if self._total_time > 0 else math.nan

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        now = time.perf_counter()
        if self._last is not None:
            self._window_time += now - self._last
            self._window_steps += 1
        self._last = now

    def on_validation_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._total_time += self._window_time
        self._total_steps += self._window_steps
        metrics: dict[str, float] = {}
        if self._window_time > 0:
            metrics["throughput/tokens_per_s"] = self.tokens_per_step * self._window_steps / self._window_time
        if pl_module.is_final_evaluation and self._total_time > 0:
            metrics["final/tokens_per_s"] = self.tokens_per_s
        if metrics:
            pl_module.record_metrics(metrics)
        self._window_time, self._window_steps = 0.0, 0

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._last = time.perf_counter() if self._last is not None else None  # evaluation time is not step time


class BatchLossMonitor(Callback):
    """Stops the run when the training loss is not finite and records the mean batch loss.

    Each step's loss is kept as it is (a reference to the 0-dim tensor: no kernel, no host
    sync); every ``check_every`` steps the losses not yet tested are tested together (one
    kernel and one wait for the device), so no bad step is missed, it is only seen up to
    ``check_every - 1`` steps late. Raises :class:`TrainingDiverged`. At each evaluation
    records ``train/batch_loss``, the mean loss of the training batches since the previous
    evaluation (with dropout, unlike ``train/loss`` on the fixed windows), summed in float64
    on the host in step order.
    """

    def __init__(self, check_every: int = 1) -> None:
        self.check_every = check_every
        self._losses: list[torch.Tensor] = []
        self._checked = 0

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        self._losses.append(loss.detach())
        if len(self._losses) - self._checked >= self.check_every:
            self.check(trainer)

    def check(self, trainer: Trainer) -> None:
        """Test the losses not yet tested now (before a checkpoint is written, say)."""
        pending = self._losses[self._checked :]
        self._checked = len(self._losses)
        if pending and not bool(torch.isfinite(torch.stack(pending)).all()):
            raise TrainingDiverged(trainer.global_step, math.fsum(torch.stack(pending).float().tolist()))

    def on_validation_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not self._losses:
            return
        total = 0.0
        for value in torch.stack(self._losses).float().tolist():  # float64 in step order: one host copy
            total += value
        mean = total / len(self._losses)
        if not math.isfinite(mean):
            raise TrainingDiverged(trainer.global_step, mean)
        pl_module.record_metrics({"train/batch_loss": mean})
        self._losses, self._checked = [], 0


class GateGradientNorms(Callback):
    """How hard the loss pulls on the key gates' tau and alpha: their gradient norms at each evaluation.

    After every backward pass (before gradient clipping: the loss's own gradient) the
    gradients of tau and alpha (L layers x H heads) are copied into one fp32 tensor on the
    device (one kernel, no host sync). At each evaluation, over the K training steps since the
    previous one, in float64:

        gate/tau_grad_norm       = sqrt(mean_k ||grad_k tau||^2)     RMS over steps, norm over layers and heads
        gate/tau_grad_norm/l<i>  = the same for layer i
        gate/tau_grad_mean_norm  = ||mean_k grad_k tau||             what persists from step to step (drift)
        gate/alpha_grad_norm, gate/alpha_grad_mean_norm              likewise for alpha

    A mean-gradient norm far below the RMS norm means the steps pull tau back and forth (Adam
    then moves it by much less than lr per step). docs/training.md ("What moves tau") derives the
    gradient: tau moves only through the attention-weighted covariance between a key's
    use to the query and 1 - g_j, because a uniform shift of log g cancels in the softmax.
    """

    PARAMETERS = ("tau", "alpha")

    def __init__(self) -> None:
        self._steps: list[torch.Tensor] = []  # per step: (P, L, H) gradients of PARAMETERS, fp32

    def on_before_optimizer_step(self, trainer: Trainer, pl_module: LightningModule, optimizer: Any) -> None:
        gates = pl_module.model.key_gates()
        grads = [getattr(g, name).grad for name in self.PARAMETERS for g in gates]  # P x L of (H,)
        if not gates or any(grad is None for grad in grads):
            return
        self._steps.append(torch.stack(grads).detach().float().view(len(self.PARAMETERS), len(gates), -1))

    def on_validation_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not self._steps:
            return
        grads = torch.stack(self._steps).double().cpu()  # (K, P, L, H)
        mean_sq = (grads * grads).sum(dim=-1).mean(dim=0)  # (P, L): mean over steps of per-layer squared norms
        mean = grads.mean(dim=0)  # (P, L, H)
        metrics: dict[str, float] = {}
        for i, name in enumerate(self.PARAMETERS):
            metrics[f"gate/{name}_grad_norm"] = math.sqrt(float(mean_sq[i].sum()))
            metrics[f"gate/{name}_grad_mean_norm"] = float(mean[i].norm())
            if name == "tau":
                for layer, value in enumerate(mean_sq[i].tolist()):
                    metrics[f"gate/tau_grad_norm/l{layer}"] = math.sqrt(value)
        pl_module.record_metrics(metrics)
        self._steps = []


class MlflowMetrics(Callback):
    """Logs the metrics of each evaluation to an MLflow run, one ``log_batch`` per evaluation,
    at the global step (``step`` itself is the MLflow step, not a metric)."""

    def __init__(self, run: TrackedRun) -> None:
        self.run = run

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.sanity_checking:
            return
        metrics = {k: v for k, v in pl_module.eval_metrics.items() if k != "step"}
        self.run.log_metrics(metrics, step=trainer.global_step)


class EvaluationLog(Callback):
    """Every evaluation's metrics in order (:attr:`~harness.training.module.CharLMModule.eval_metrics`,
    ``step`` an int): the run's curve as a study's reports hold it, for a caller that trains
    without Ray Tune or MLflow (the device runner, :mod:`harness.studies.device`)."""

    def __init__(self) -> None:
        self.evaluations: list[dict[str, float]] = []

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.sanity_checking:
            return
        metrics: dict[str, float] = dict(pl_module.eval_metrics)
        metrics["step"] = int(trainer.global_step)
        self.evaluations.append(metrics)


class RollingCheckpoint(Callback):
    """One checkpoint file per run, ``<dirpath>/last.ckpt``, replaced atomically.

    Saved after every evaluation (``every_n_steps=None``) or every ``every_n_steps``
    training steps, and at the end of training; never after a non-finite loss (``guard``).
    Written to a temporary file first and renamed, so a crash while saving never leaves a
    corrupt checkpoint behind. The file
    holds tensors and plain containers only (``torch.load(..., weights_only=True)``).
    """

    def __init__(
        self, dirpath: str | os.PathLike[str], every_n_steps: int | None = None, guard: BatchLossMonitor | None = None
    ) -> None:
        self.dirpath = Path(dirpath)
        self.every_n_steps = every_n_steps
        self.guard = guard  # tested before each save: never checkpoint a diverged model
        self.last_path: Path | None = None
        self._saved_step = -1

    @property
    def path(self) -> Path:
        return self.dirpath / LAST_CHECKPOINT

    def save(self, trainer: Trainer) -> None:
        if trainer.global_step == self._saved_step:
            return
        if self.guard is not None:
            self.guard.check(trainer)
        self.dirpath.mkdir(parents=True, exist_ok=True)
        tmp = self.dirpath / f".{LAST_CHECKPOINT}.tmp"
        trainer.save_checkpoint(tmp)
        os.replace(tmp, self.path)
        self.last_path = self.path
        self._saved_step = trainer.global_step

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self.every_n_steps and trainer.global_step % self.every_n_steps == 0:
            self.save(trainer)

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.every_n_steps is None and trainer.state.fn == TrainerFn.FITTING and not trainer.sanity_checking:
            self.save(trainer)

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.save(trainer)
