"""One LightningModule for every variant of the zoo.

Training: next-character cross-entropy, AdamW (betas 0.9/0.99, weight decay on every
parameter with ``dim >= 2`` as nanoGPT does: linear and embedding matrices, the EGA
projection; none on biases, norms, gate tau/alpha, MOPE omega/sigma, lag weights),
linear warmup then cosine decay to ``min_lr`` at ``max_steps`` (:func:`learning_rate`).
How a step computes (precision, the fused optimizer, clipping, the padded output layer) is
the run's :class:`~harness.training.device_plan.DevicePlan`; the module clips the gradients
itself (:meth:`CharLMModule.configure_gradient_clipping`), so that clipping works with the
fused optimizer of the mixed-precision plan.

Determinism: the dropout masks of step k come from generators seeded with
``step_seed(seed, k)`` at the start of the step (:func:`reseed_dropout`), and batch k is
a pure function of ``(seed, k)`` (:mod:`harness.training.data`); the optimizer and
schedule states are in the checkpoint. So a run resumed from a checkpoint saved after step k
draws exactly what an uninterrupted run draws. On CPU in fp32 with the same thread
count this gives bit-identical losses. It does not hold across machines or thread counts
(different reduction orders), nor on GPU in general: bf16 autocast, TF32 matmuls,
``torch.compile`` kernel choices and atomic adds in some backward kernels (e.g. the
embedding gradient) make GPU runs reproducible only up to float noise.

Evaluation (the validation loop, every ``eval_every`` steps and at the end): the loss of
every fixed window of the periodic set of the validation and training splits, gate
parameters and open-gate fractions, MOPE summaries. The last evaluation also reads the final
set of every split (the whole validation split by default, the test split where it exists:
:mod:`harness.training.data`): the ``final/*`` metrics, the per-window losses and the gate
readings at the end rest on it, while ``val/loss`` stays the periodic set's, so that every
point of a curve is read on the same windows (what one evaluation reads is an
:class:`~harness.training.evaluation_pass.EvaluationPass`). All metrics of
an evaluation go through :meth:`CharLMModule.record_metrics`: ``self.log`` (so
``trainer.callback_metrics`` holds them at ``on_validation_end``, where a Ray Tune
callback reports them) and :attr:`CharLMModule.eval_metrics` (full-precision floats, read
by the MLflow callback and by ``train``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from lightning.pytorch import LightningModule
from torch import Tensor

from harness.errors import InputError
from harness.mlflow_client import redact_uri
from harness.models.transformer import CharTransformer, build_model
from harness.models.variants import Variant
from harness.training.config import TrainConfig
from harness.training.data import FINAL, PERIODIC
from harness.training.device_plan import DevicePlan, choose_device_plan
from harness.training.evaluation_pass import EvaluationPass

#: Format of the ``harness`` entry of a checkpoint (bump on incompatible changes).
CHECKPOINT_FORMAT = 1
_LN2 = math.log(2.0)


def learning_rate(step: int, config: TrainConfig) -> float:
    """nanoGPT's schedule at optimizer step ``step`` (0-based).

    lr(k) = lr (k+1)/(W+1) for k < W (linear warmup over W = warmup_steps steps);
    lr(k) = min_lr + (lr - min_lr) (1 + cos(pi r)) / 2 with r = (k - W)/(max_steps - W),
    cosine decay to min_lr at max_steps; min_lr beyond.
    """
    warmup, total = config.warmup_steps, config.max_steps
    if step < warmup:
        return config.lr * (step + 1) / (warmup + 1)
    if step >= total:
        return config.min_lr
    ratio = (step - warmup) / max(1, total - warmup)
    return config.min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (config.lr - config.min_lr)


def step_seed(seed: int, step: int) -> int:
    """A 63-bit seed for step ``step`` of run ``seed`` (splitmix64 of the pair): the dropout
    randomness of a step depends on (seed, step) only, never on what ran before."""
    mask = (1 << 64) - 1
    z = (seed * 0x9E3779B97F4A7C15 + step + 0x632BE59BD9B4E019) & mask
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
    return (z ^ (z >> 31)) & ((1 << 63) - 1)


def reseed_dropout(seed: int, step: int, device: torch.device) -> None:
    """Seed the generators dropout draws from with :func:`step_seed` (``torch.manual_seed``
    would do, but it visits every device type: 60 us against 1 us here)."""
    s = step_seed(seed, step)
    torch.default_generator.manual_seed(s)
    if device.type == "cuda":
        torch.cuda.manual_seed(s)  # the current device's generator


def resolve_variant(config: TrainConfig) -> Variant:
    """The :class:`harness.models.Variant` a config names (:meth:`TrainConfig.variant_spec`)."""
    return config.variant_spec()


def build_char_model(config: TrainConfig, vocab_size: int, *, variant: Variant | None = None) -> CharTransformer:
    """The model of ``config`` (initialised from the global torch RNG: seed it first).
    ``variant`` is the config's resolved variant when the caller holds it (a run's plan
    resolved it once), else resolved here (:func:`resolve_variant`)."""
    overrides: dict[str, Any] = {}
    if config.tau_init is not None:
        overrides["tau_init"] = config.tau_init
    return build_model(
        resolve_variant(config) if variant is None else variant,
        size=config.model_size(),
        vocab_size=vocab_size,
        block_size=config.context_length,
        dropout=config.dropout,
        attention_dropout=config.attention_dropout,
        component_dir=config.component_dir,
        **overrides,
    )


def optimizer_groups(model: torch.nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """AdamW parameter groups: decay on matrices (``dim >= 2``: linear and embedding
    weights, the EGA projection), none on vectors (biases, LayerNorm, gate tau/alpha, MOPE
    omega/log-sigma) nor on what the model lists in ``no_weight_decay_parameter_names()``
    (the lag weights of lagged scoring). Tied parameters appear once."""
    exempt = (
        set(model.no_weight_decay_parameter_names()) if hasattr(model, "no_weight_decay_parameter_names") else set()
    )
    decay, no_decay = [], []
    for name, p in model.named_parameters():  # named_parameters() lists a tied weight once
        if not p.requires_grad:
            continue
        (decay if p.dim() >= 2 and name not in exempt else no_decay).append(p)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def model_telemetry(model: torch.nn.Module) -> dict[str, float]:
    """The learned gate, Morlet and MOPE parameters of ``model`` as metrics (see
    :meth:`CharLMModule.parameter_telemetry`)."""
    metrics: dict[str, float] = {}
    for name, values in model.gate_parameters().items():
        values = values.detach().float().cpu()  # (L, H)
        for (layer, head), v in np.ndenumerate(values.numpy().reshape(values.shape[0], -1)):
            metrics[f"gate/{name}/l{layer}h{head}"] = float(v)
        metrics[f"gate/{name}_mean"] = float(values.mean())
    for name, values in model.wavelet_parameters().items():  # (L,): one filter per layer
        for layer, v in enumerate(values.detach().float().cpu().tolist()):
            metrics[f"gate/morlet_{name}/l{layer}"] = float(v)
    for name, values in model.mope_parameters().items():
        values = values.detach().float().cpu()
        metrics[f"mope/{name}_mean"] = float(values.mean())
        metrics[f"mope/{name}_min"] = float(values.min())
        metrics[f"mope/{name}_max"] = float(values.max())
    return metrics


def final_metrics(
    model: torch.nn.Module,
    val: float,
    train: float,
    losses: Mapping[str, Tensor],
    gate_summary: Mapping[str, float],
    val_by_position: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """The ``final/*`` metrics of the last evaluation, read on the final window set: losses (val,
    train, test when looked at), the generalisation gap, bits per character (loss / ln 2), the
    number of validation windows they rest on, the validation loss by position bucket
    (``final/val_loss_first64``, ``final/val_loss_after64``: ``val_by_position``), the parameter
    count, tau's mean and the gate's readings at the end."""
    final = {
        "final/val_loss": val,
        "final/train_loss": train,
        "final/gen_gap": val - train,
        "final/val_bpc": val / _LN2,
        "final/val_windows": float(len(losses["val"])),
        "num_parameters": float(model.num_parameters()),
    }
    if "test" in losses:
        final["final/test_loss"] = float(losses["test"].mean())
    for bucket, value in (val_by_position or {}).items():
        final[f"final/val_loss_{bucket}"] = value
    tau = model.gate_parameters().get("tau")
    if tau is not None:
        final["final/tau_mean"] = float(tau.detach().float().mean())
    for key in ("open_fraction", "content_precision", "content_recall", "content_auc", "pc1_cosine"):
        if f"gate/{key}" in gate_summary:
            final[f"final/{key}"] = gate_summary[f"gate/{key}"]
    return final


class CharLMModule(LightningModule):
    """Character language model training for any zoo variant.

    Parameters
    ----------
    config
        The run's :class:`TrainConfig` (kept as a plain dict in checkpoints).
    vocab_size
        Size of the corpus vocabulary.
    model
        The :class:`harness.models.CharTransformer` (built by :func:`build_char_model`).
    device_plan
        How a step computes (default: the plan ``config`` gets on this machine).
    """

    def __init__(
        self, config: TrainConfig, *, vocab_size: int, model: torch.nn.Module, device_plan: DevicePlan | None = None
    ) -> None:
        super().__init__()
        self.config = config
        self.vocab_size = vocab_size
        self.model = model
        if device_plan is None:
            cuda = torch.cuda.is_available()
            bf16 = cuda and torch.cuda.is_bf16_supported()
            device_plan = choose_device_plan(config, cuda_available=cuda, bf16_supported=bf16, cpus=1)
        self.device_plan = device_plan
        # Gate readings (open fraction, content precision, energy direction) exist for sigmoid key
        # gates only (harness.models.KeyGate); a user's plain per-key bias has none.
        self.has_gate = bool(model.key_gates()) if hasattr(model, "key_gates") else False
        self.best_val_loss = math.inf
        self.mlflow_run_id: str | None = None
        self.eval_metrics: dict[str, float] = {}
        self.window_losses: dict[str, np.ndarray] = {}  # per-window losses of the last evaluation
        self.final_metrics: dict[str, float] = {}
        self._final_eval = False
        self._force_final = False
        self._evaluation: EvaluationPass | None = None  # the evaluation under way, or the last one
        # The training step's compiled forward (harness.training.compile.CompiledForward, not a
        # Module: the state dict stays the model's), or None for eager; evaluation runs eager.
        self.compiled_forward: Any = None

    # -- training ------------------------------------------------------------------
    def forward(self, idx: Tensor) -> Tensor:
        return self.model(idx)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, y = batch
        reseed_dropout(self.config.seed, self.global_step, x.device)  # dropout masks = f(seed, step)
        forward = self.model if self.compiled_forward is None else self.compiled_forward
        multiple = self.device_plan.vocab_multiple
        logits = forward(x) if multiple == 1 else forward(x, vocab_multiple=multiple)  # (B, T, V), V padded
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), y.reshape(-1))

    def configure_optimizers(self) -> dict[str, Any]:
        config = self.config
        fused = {"fused": True} if self.device_plan.fused_optimizer else {}
        optimizer = torch.optim.AdamW(
            optimizer_groups(self.model, config.weight_decay),
            lr=config.lr,
            betas=(config.beta1, config.beta2),
            **fused,
        )
        # LambdaLR multiplies the base lr; a closure (not a callable object) keeps the
        # scheduler's state dict free of pickled code.
        base = config.lr
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda k: learning_rate(k, config) / base)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step", "frequency": 1}}

    def configure_gradient_clipping(
        self, optimizer: Any, gradient_clip_val: float | None = None, gradient_clip_algorithm: str | None = None
    ) -> None:
        """Clip the global gradient norm to the plan's ``clip_grad_norm`` (``clip_grad_norm_`` over
        the optimizer's parameters in its group order, as Lightning's own clipping does: the same
        numbers on the fp32 plan). Lightning calls this after the backward pass and, under
        ``16-mixed``, after its gradient scaler unscaled the gradients; Lightning's clipping is
        off (``Trainer(gradient_clip_val=None)``) because it refuses the fused optimizer."""
        max_norm = self.device_plan.clip_grad_norm
        if max_norm:
            parameters = [p for group in optimizer.param_groups for p in group["params"]]
            torch.nn.utils.clip_grad_norm_(parameters, max_norm)

    # -- metrics -------------------------------------------------------------------
    def record_metrics(self, metrics: Mapping[str, float], *, prog_bar: tuple[str, ...] = ()) -> None:
        """Record evaluation metrics: ``self.log`` (-> ``trainer.callback_metrics``) and
        :attr:`eval_metrics` (float64, for MLflow and the result)."""
        for name, value in metrics.items():
            value = float(value)
            self.eval_metrics[name] = value
            self.log(name, value, prog_bar=name in prog_bar, on_step=False, on_epoch=True, batch_size=1)

    # -- evaluation ------------------------------------------------------------------
    @property
    def is_final_evaluation(self) -> bool:
        return self._final_eval

    def request_final_evaluation(self) -> None:
        """Make the next evaluation the final one (used when training stops off the
        evaluation grid: ``max_steps`` not a multiple of ``eval_every``)."""
        self._force_final = True

    def on_validation_start(self) -> None:
        self._final_eval = self._force_final or self.global_step >= self.config.max_steps
        self.eval_metrics = {}
        self._evaluation = EvaluationPass(
            self.model, self.trainer.datamodule, final=self._final_eval, has_gate=self.has_gate
        )

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        self._evaluation.read_batch(batch)

    def on_validation_epoch_end(self) -> None:
        read = self._evaluation.read_losses()
        losses = read[PERIODIC]
        val = float(losses["val"].mean())
        train = float(losses["train"].mean())
        self.best_val_loss = min(self.best_val_loss, val)
        metrics: dict[str, float] = {
            "step": float(self.global_step),
            "val/loss": val,
            "val/bpc": val / _LN2,
            "train/loss": train,
            "gen_gap": val - train,
            "best/val_loss": self.best_val_loss,
        }
        metrics.update(self.parameter_telemetry())
        gate_summary = self._evaluation.gate_summary()
        metrics.update(gate_summary)
        kept = read[FINAL] if self._final_eval else losses  # the per-window losses the run keeps
        self.window_losses = {s: v.numpy().copy() for s, v in kept.items()}
        if self._final_eval:
            val_final, train_final = float(kept["val"].mean()), float(kept["train"].mean())
            by_position = self._evaluation.position_losses("val")
            final = final_metrics(self.model, val_final, train_final, kept, gate_summary, by_position)
            metrics.update(final)
            self.final_metrics = dict(final)
        self.record_metrics(metrics, prog_bar=("val/loss",))

    @torch.no_grad()
    def parameter_telemetry(self) -> dict[str, float]:
        """Gate parameters per layer and head (``gate/tau/l0h3``, ``gate/alpha/l0h3``, ...,
        their means ``gate/tau_mean``), the learned Morlet gate filter per layer
        (``gate/morlet_omega/l0``, ``gate/morlet_sigma/l0``), MOPE omega/sigma summaries
        (``mope/omega_mean`` ...)."""
        return model_telemetry(self.model)

    # -- checkpoints -------------------------------------------------------------------
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:

        config = self.config.model_dump(mode="json")
        # Plain containers only: the checkpoint must load with torch.load(weights_only=True).
        checkpoint["harness"] = {
            "format": CHECKPOINT_FORMAT,
            # A checkpoint travels (copied, uploaded, shared): no password of the tracking URI.
            "config": {
                **config,
                "tracking_uri": redact_uri(config["tracking_uri"]) if config["tracking_uri"] else None,
            },
            "best_val_loss": float(self.best_val_loss),
            "mlflow_run_id": self.mlflow_run_id,
            "vocab_size": int(self.vocab_size),
        }

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        meta = checkpoint.get("harness")
        if not isinstance(meta, dict):
            raise InputError("checkpoint has no 'harness' entry: not written by harness.training")
        self.best_val_loss = float(meta.get("best_val_loss", math.inf))
