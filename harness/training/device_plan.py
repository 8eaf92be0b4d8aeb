"""The training plan of a device: how a run computes, chosen in one place.

:func:`choose_device_plan` turns a config and what the machine has into a frozen
:class:`DevicePlan`; ``train`` builds the trainer from it and the LightningModule its
optimizer, clipping and output layer. Two plans, by precision:

- **fp32** (CPU by default): ``32-true``, the plain (for-each) AdamW, one torch thread per
  CPU given, a checkpoint at every evaluation, the divergence test after every step. The
  reference: a seed gives bit-identical numbers (the golden curve pins them).
- **mixed** (a GPU by default; ``--precision bf16-mixed`` runs it on CPU, whose autocast
  has bf16 and whose AdamW has the fused kernel, so the fast tests exercise it on every
  change): ``bf16-mixed`` (``16-mixed`` where the GPU has no bf16), the fused AdamW,
  gradients clipped by the module (:meth:`~harness.training.module.CharLMModule.configure_gradient_clipping`
  calls ``clip_grad_norm_``: Lightning's own clipping refuses a fused optimizer under mixed
  precision, "AdamW does not allow for gradient clipping because it performs unscaling of
  gradients internally"; bf16 needs no gradient scaler, so the gradients it clips are the
  true ones), the tied output layer padded to :data:`VOCAB_MULTIPLE` rows with the padding's
  logits masked to -inf, the divergence test every :data:`LOSS_CHECK_EVERY_MIXED` steps
  (each test waits for the device).

Where the device and not the precision decides: a GPU pins its host batches, lets fp32
matmuls left outside autocast use TF32, and checkpoints :data:`CHECKPOINTS_PER_RUN_GPU`
times a run by default (a ~57 MB checkpoint saved and uploaded at each of 21 evaluations
costs more than the training itself at the papers' size on one H200); a CPU run
checkpoints at every evaluation. ``checkpoint_every`` in the config overrides either.

``16-mixed`` keeps the unfused AdamW: its gradient scaler must unscale the gradients before
they are clipped, which a fused optimizer does only inside its step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from harness.errors import InputError
from harness.training.config import TrainConfig

Precision = Literal["32-true", "bf16-mixed", "16-mixed"]

#: Rows of the tied output layer in the mixed plan: the vocabulary rounded up to a multiple of
#: 64, so that the logits matmul is aligned for the tensor cores (a 65-character vocabulary
#: otherwise misaligns every row of the output).
VOCAB_MULTIPLE = 64
#: Steps between two tests of the training loss for non-finite values in the mixed plan.
LOSS_CHECK_EVERY_MIXED = 10
#: Checkpoints per run on a GPU when the config does not say (the last one at the end).
CHECKPOINTS_PER_RUN_GPU = 4


@dataclass(frozen=True)
class DevicePlan:
    """How one run computes (never what: the resume contract does not include it)."""

    accelerator: Literal["cpu", "gpu"]
    precision: Precision
    #: AdamW's fused kernel (one kernel for every parameter) instead of the for-each one.
    fused_optimizer: bool
    #: Global gradient norm clipped to this by the module (``clip_grad_norm_``); None: no clipping.
    clip_grad_norm: float | None
    #: Steps between checkpoints; None: at every evaluation.
    checkpoint_every: int | None
    #: Steps between two tests of the training loss for NaN or inf (each one waits for the device).
    loss_check_every: int
    #: Rows of the tied output layer rounded up to a multiple of this (1: the vocabulary's own).
    vocab_multiple: int
    #: Pinned host batches (copied to the device without waiting).
    pin_memory: bool
    #: ``torch.set_float32_matmul_precision``: ``high`` lets fp32 matmuls use TF32 on a GPU.
    matmul_precision: Literal["highest", "high"]
    #: torch threads (CPU) and Inductor's compile workers: the CPUs given to the run.
    threads: int
    #: The seed-batched step is one a CUDA graph can capture (:mod:`harness.training.device_step`:
    #: AdamW fused and capturable with a tensor learning rate): a GPU's, except under ``16-mixed``,
    #: whose gradient scaler needs the unfused AdamW.
    capturable_step: bool = False

    @property
    def mixed(self) -> bool:
        return self.precision != "32-true"

    def describe(self) -> str:
        """One line for logs and tags: ``cpu, 32-true, AdamW (for-each), clip 1.0, checkpoint every evaluation``."""
        clip = f"clip {self.clip_grad_norm:g}" if self.clip_grad_norm else "no clipping"
        every = f"every {self.checkpoint_every} steps" if self.checkpoint_every else "at every evaluation"
        optimizer = "AdamW (fused)" if self.fused_optimizer else "AdamW (for-each)"
        return f"{self.accelerator}, {self.precision}, {optimizer}, {clip}, checkpoint {every}"


def choose_device_plan(config: TrainConfig, *, cuda_available: bool, bf16_supported: bool, cpus: int) -> DevicePlan:
    """The plan of ``config`` on a machine with (or without) a CUDA device; ``bf16_supported``:
    whether that GPU has bf16; ``cpus``: the CPUs given to the run. A pure function, so the GPU
    plan can be asked for (and tested) on a machine without one.

    Raises :class:`~harness.errors.InputError` for ``accelerator: gpu`` without a CUDA device
    and for ``16-mixed`` on CPU (CPU autocast has bf16; fp16 there would need a gradient scaler
    for nothing).
    """
    if config.accelerator == "gpu" and not cuda_available:
        raise InputError("accelerator 'gpu' requested but no CUDA device is available; use --accelerator cpu or auto")
    gpu = config.accelerator == "gpu" or (config.accelerator == "auto" and cuda_available)
    precision = _precision(config, gpu=gpu, bf16_supported=bf16_supported)
    mixed = precision != "32-true"
    return DevicePlan(
        accelerator="gpu" if gpu else "cpu",
        precision=precision,
        fused_optimizer=precision == "bf16-mixed",
        clip_grad_norm=config.grad_clip or None,
        checkpoint_every=config.checkpoint_every or (default_gpu_checkpoint_every(config) if gpu else None),
        loss_check_every=LOSS_CHECK_EVERY_MIXED if mixed else 1,
        vocab_multiple=VOCAB_MULTIPLE if mixed else 1,
        pin_memory=gpu,
        matmul_precision="high" if gpu else "highest",
        threads=max(1, config.num_threads or cpus),
        capturable_step=gpu and precision != "16-mixed",
    )


def _precision(config: TrainConfig, *, gpu: bool, bf16_supported: bool) -> Precision:
    if config.precision == "auto":
        if not gpu:
            return "32-true"
        return "bf16-mixed" if bf16_supported else "16-mixed"
    if config.precision == "16-mixed" and not gpu:
        raise InputError("precision '16-mixed' needs a GPU; on CPU use bf16-mixed (or 32-true)")
    if config.precision == "bf16-mixed" and gpu and not bf16_supported:
        raise InputError("this GPU has no bf16; use --precision 16-mixed (or auto)")
    return config.precision


def default_gpu_checkpoint_every(config: TrainConfig) -> int:
    """Steps between checkpoints on a GPU: :data:`CHECKPOINTS_PER_RUN_GPU` per run, each at an
    evaluation (a multiple of ``eval_every``, so that a study reports it with that evaluation)."""
    every = math.ceil(config.max_steps / CHECKPOINTS_PER_RUN_GPU)
    return max(config.eval_every, math.ceil(every / config.eval_every) * config.eval_every)
