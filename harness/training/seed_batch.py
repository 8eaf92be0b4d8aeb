"""The seeds of one variant trained as one model with stacked weights: S runs as one experiment.

:func:`train_seed_batch` takes S configs that differ only in ``seed`` and returns what
:func:`harness.training.run.train` returns for each (losses, curves, window losses, metrics),
computing the S runs as one:

* **Initialisation.** Each seed's model is built exactly as ``train`` builds it
  (``torch.manual_seed(seed)``, then :func:`~harness.training.module.build_char_model`), and
  its parameters are stacked along a leading seed axis (``torch.func.stack_module_state``):
  parameter p of shape (...) becomes one leaf of shape (S, ...). Buffers equal in every seed
  (the zoo's fixed tables) stay shared; a buffer that differs is stacked too.
* **Forward.** ``vmap`` over ``functional_call`` of one copy of the model: every linear layer
  is one batched matmul over the seed axis, and attention is called once on (S B, H, T, d),
  the seeds folded into its batch (:mod:`harness.models.seed_axis`,
  :class:`~harness.models.lag_kernel.LagChunkAttention`'s vmap rule).
  The loss is sum_s L_s, so the gradient of seed s's weights is dL_s/dw_s alone.
* **Data order.** Seed s reads the batches ``train`` would (:class:`~harness.training.data.TrainBatchStream`
  with its seed), stacked (S, B, T).
* **Clipping** of each seed's own global gradient norm: g_s <- g_s min(1, c / (||g_s|| + 1e-6)),
  ``clip_grad_norm_``'s rule per seed, computed on the device (no host read).
* **Optimizer.** One AdamW over the stacked leaves with ``train``'s groups and schedule: AdamW
  is elementwise, so its state and update for seed s are those of seed s's own optimizer. On a
  GPU it is fused and capturable with a tensor learning rate, and divergence is a device flag
  read every ``loss_check_every`` steps: the step from forward to update reads nothing on the
  host, as a CUDA graph needs (:mod:`harness.training.device_step`).
* **Dropout.** ``vmap(randomness="different")``: each seed draws its own masks, from a stream
  seeded by (first seed, step); not the masks a separate run would draw (a separate run's
  results are equal only without dropout: the test compares with dropout 0).
* **Evaluation** every ``eval_every`` steps and at the end: each seed's weights are copied
  into its own model and evaluated by :class:`~harness.training.module.CharLMModule`'s own
  code (the same windows, metrics, gate readings and final metrics as ``train``).

What it does not do (``train`` does): MLflow logging, checkpoints and resuming, compilation.
Callbacks get ``on_train_batch_end(state, module, outputs, batch, step)`` with ``state``
having ``global_step`` and a ``should_stop`` they may set (what the device runner's deadline
uses); no other hook is called. A divergent seed stops (status ``diverged``, as ``train``
reports it) while the others go on: no seed's numbers reach another's.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F
from lightning.pytorch import Trainer
from torch import Tensor
from torch.func import functional_call, stack_module_state, vmap

from harness.errors import InputError
from harness.training.callbacks import BatchLossMonitor, GateGradientNorms, TokenThroughput
from harness.training.config import TrainConfig
from harness.training.data import TrainBatchStream
from harness.training.device_step import clip_per_seed, record_divergence, step_optimizer
from harness.training.module import (
    CharLMModule,
    build_char_model,
    learning_rate,
    optimizer_groups,
    reseed_dropout,
)
from harness.training.plan import as_train_config, prepare_run
from harness.training.run import TrainResult, run_datamodule, run_runtime, train, train_result

__all__ = ["UNSTACKABLE", "SeedBatch", "train_seed_batch"]

#: Zoo variants whose seeds train as separate runs (:func:`train_seed_batch` falls back to
#: :func:`~harness.training.run.train` for them), and why: under ``vmap`` they fail
#: (``tests/training/test_seed_batch.py`` checks that exactly these do).
UNSTACKABLE: dict[str, str] = {
    "ega-mope-lagged": "lagged scoring fails under vmap (functorch: a tensor escapes the vmapped function)",
    "phase-mope": "its position component fails under vmap (functorch: a tensor escapes the vmapped function)",
    "mope-bias": "its Morlet bias fails under vmap (functorch: a tensor escapes the vmapped function)",
    "ega-mope-bias": "a learned attention mask: under vmap SDPA's CPU flash kernel cannot differentiate it",
    "ega-qnorm": "a learned attention mask: under vmap SDPA's CPU flash kernel cannot differentiate it",
}


class _SeedModule(CharLMModule):
    """One seed's model, evaluated by :class:`CharLMModule`'s code at the batch's step."""

    batch_step = 0

    @property
    def global_step(self) -> int:  # read by the evaluation (final or not, the logged step)
        return self.batch_step


@dataclass
class _LoopState:
    """What callbacks see in place of a Lightning trainer (module docstring)."""

    global_step: int = 0
    should_stop: bool = False
    sanity_checking: bool = False


def _check_group(configs: Sequence[TrainConfig]) -> None:
    if not configs:
        raise InputError("train_seed_batch needs at least one config")
    first = configs[0].model_dump(exclude={"seed"})
    for c in configs[1:]:
        if c.model_dump(exclude={"seed"}) != first:
            differ = sorted(k for k, v in c.model_dump(exclude={"seed"}).items() if first.get(k) != v)
            raise InputError(
                f"seed-batched configs must differ only in seed; these differ: {', '.join(differ)}; "
                "train them as separate runs (harness.training.run.train)"
            )
    seeds = [c.seed for c in configs]
    if len(set(seeds)) != len(seeds):
        raise InputError(f"seed-batched configs repeat a seed ({seeds}); give each run its own seed")


class SeedBatch:
    """The S models, their stacked weights, optimizer, data streams and evaluators."""

    def __init__(self, configs: Sequence[TrainConfig], plan: Any) -> None:
        self.configs, self.plan, config = list(configs), plan, configs[0]
        self.models = []
        for c in configs:
            torch.manual_seed(c.seed)  # initialisation = f(seed), as train's
            self.models.append(build_char_model(c, plan.corpus.vocab_size, variant=plan.variant))
        self.base = self.models[0]
        params, _ = stack_module_state(self.models)  # (S, ...) leaves, tied weights listed once
        self.params: dict[str, Tensor] = params
        self.buffers, self.buffer_dims = self._buffers()
        self.device = torch.device("cuda" if plan.device.accelerator == "gpu" else "cpu")
        groups = optimizer_groups(self.base, config.weight_decay)
        name_of = {id(p): n for n, p in self.base.named_parameters()}
        stacked = [{**g, "params": [self.params[name_of[id(p)]] for p in g["params"]]} for g in groups]
        self.optimizer = step_optimizer(
            stacked,
            lr=config.lr,
            betas=(config.beta1, config.beta2),
            fused=plan.device.fused_optimizer,
            capturable=plan.device.capturable_step,
            device=self.device,
        )
        # The step count and each seed's first non-finite step (0: none), on the device.
        self.steps_done = torch.zeros((), dtype=torch.int64, device=self.device)
        self.diverged_at = torch.zeros(len(configs), dtype=torch.int64, device=self.device)
        base = config.lr  # the schedule as train's LambdaLR computes it (the same rounding)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda k: learning_rate(k, config) / base)
        self.streams = self._streams()
        self.data = run_datamodule(config, plan)  # the evaluation windows (the same for every seed)
        self.modules = [
            _SeedModule(c, vocab_size=plan.corpus.vocab_size, model=m, device_plan=plan.device)
            for c, m in zip(configs, self.models, strict=True)
        ]
        self.evaluations: list[list[dict[str, float]]] = [[] for _ in configs]
        # train's metric callbacks, one set per seed, fed by hand each step and run by the evaluation
        tokens = config.batch_size * config.context_length
        self.hooks = [
            [TokenThroughput(tokens), BatchLossMonitor(check_every=2**62)]  # divergence: tested by the loop
            + ([GateGradientNorms()] if plan.variant.has_key_gate else [])
            for _ in configs
        ]

    def _streams(self) -> list[Any]:
        """Each seed's training batches from the first, as train reads them."""
        return [
            iter(
                TrainBatchStream(
                    self.plan.corpus.train, block_size=c.context_length, batch_size=c.batch_size, seed=c.seed
                )
            )
            for c in self.configs
        ]

    def probe(self) -> None:
        """One forward and backward pass of every seed on the first batches, nothing updated and
        the streams restarted: raises where this model cannot be stacked (say, a component that
        fails under vmap, or a kernel on this device without a batching rule)."""
        self.base.train()
        xs, ys = (torch.stack(t).to(self.device) for t in zip(*(next(s) for s in self.streams), strict=True))
        losses = vmap(self._loss, in_dims=(0, self.buffer_dims, 0, 0), randomness="different")(
            self.params, self.buffers, xs, ys
        )  # (S,)
        losses.sum().backward()
        self.optimizer.zero_grad(set_to_none=True)
        self.streams = self._streams()

    def _buffers(self) -> tuple[dict[str, Tensor], dict[str, int | None]]:
        """Buffers equal in every seed shared (vmap in_dim None), others stacked (in_dim 0)."""
        buffers, dims = {}, {}
        for name, b in self.base.named_buffers():
            each = [dict(m.named_buffers())[name] for m in self.models]
            same = all(torch.equal(b, other) for other in each[1:])
            buffers[name], dims[name] = (b, None) if same else (torch.stack(each), 0)
        return buffers, dims

    def to_device(self) -> None:
        if self.device.type == "cpu":
            return
        for m in self.models:
            m.to(self.device)
        for name in self.params:
            self.params[name].data = self.params[name].data.to(self.device)
        self.buffers = {n: b.to(self.device) for n, b in self.buffers.items()}

    def _loss(self, params: dict[str, Tensor], buffers: dict[str, Tensor], x: Tensor, y: Tensor) -> Tensor:
        """One seed's mean next-character cross-entropy (inside vmap: x, y (B, T))."""
        multiple = self.plan.device.vocab_multiple
        kwargs = {} if multiple == 1 else {"vocab_multiple": multiple}
        logits = functional_call(self.base, (params, buffers), (x,), kwargs)  # (B, T, V)
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), y.reshape(-1))

    def step(self, step: int) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """One optimizer step of every seed: the losses (S,) and the batch (S, B, T) each. The
        host's part (the batches, the dropout seeds, the next learning rate) around
        :meth:`device_step`."""
        xs, ys = (
            torch.stack(t).to(self.device, non_blocking=True)
            for t in zip(*(next(s) for s in self.streams), strict=True)
        )
        reseed_dropout(self.configs[0].seed, step, self.device)  # dropout = f(first seed, step), per seed apart
        losses = self.device_step(xs, ys)
        self.scheduler.step()  # the next rate, into the optimizer's lr (in place when a tensor)
        return losses, (xs, ys)

    def device_step(self, xs: Tensor, ys: Tensor) -> Tensor:
        """Forward, backward, clipping, divergence flags and the AdamW update of every seed on
        (S, B, T) batches; the losses (S,). No host read and no branch on a tensor
        (:mod:`harness.training.device_step`), given a capturable optimizer (a GPU's plan)."""
        losses = self.gradients(xs, ys)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return losses

    def gradients(self, xs: Tensor, ys: Tensor) -> Tensor:
        """The losses (S,) and every seed's clipped gradients; the step count and divergence
        flags advanced (the step's half before the optimizer)."""
        self.base.train()
        mixed = self.plan.device.precision == "bf16-mixed"
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=mixed):
            losses = vmap(self._loss, in_dims=(0, self.buffer_dims, 0, 0), randomness="different")(
                self.params, self.buffers, xs, ys
            )  # (S,)
        losses.sum().backward()  # seed s's weights get dL_s/dw_s
        self._gate_gradients()
        if self.plan.device.clip_grad_norm:
            grads = [p.grad for g in self.optimizer.param_groups for p in g["params"] if p.grad is not None]
            clip_per_seed(grads, self.plan.device.clip_grad_norm)
        self.steps_done.add_(1)
        record_divergence(self.diverged_at, losses.detach(), self.steps_done)
        return losses.detach()

    def _gate_gradients(self) -> None:
        """Each seed's gate gradients (before clipping) to its GateGradientNorms, through its model's
        parameters' ``grad`` set to views of the stacked gradients for the call."""
        if len(self.hooks[0]) < 3:
            return
        name_of = {id(p): n for n, p in self.base.named_parameters()}
        names = [name_of[id(getattr(g, a))] for g in self.base.key_gates() for a in GateGradientNorms.PARAMETERS]
        for s, (module, hooks) in enumerate(zip(self.modules, self.hooks, strict=True)):
            own = dict(module.model.named_parameters())
            for name in names:
                own[name].grad = self.params[name].grad[s]
            hooks[2].on_before_optimizer_step(None, module, self.optimizer)
            for name in names:
                own[name].grad = None

    def after_step(self, state: Any, losses: Tensor, step: int) -> None:
        """Each seed's step loss and clock to its own metric callbacks."""
        for s, (module, hooks) in enumerate(zip(self.modules, self.hooks, strict=True)):
            for hook in hooks[:2]:
                hook.on_train_batch_end(state, module, losses[s], None, step)

    def divergence(self) -> dict[int, int]:
        """Each diverged seed's first non-finite step (1-based): one host read of the flags."""
        return {s: k for s, k in enumerate(self.diverged_at.tolist()) if k > 0}

    @torch.no_grad()
    def unstack(self, s: int) -> None:
        """Seed s's stacked weights into its own model."""
        own = dict(self.models[s].named_parameters())
        for name, p in self.params.items():
            own[name].copy_(p[s])

    def evaluate(self, s: int, step: int, *, final: bool) -> None:
        """Evaluate seed s at ``step`` with its module's own code; its metrics into its curve."""
        self.unstack(s)
        module = self.modules[s]
        module.batch_step = step
        if final:
            module.request_final_evaluation()
        validator = Trainer(
            accelerator=self.plan.device.accelerator,
            devices=1,
            precision=self.plan.device.precision,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            callbacks=self.hooks[s],
        )
        validator.validate(module, datamodule=self.data, verbose=False)
        self.evaluations[s].append({**module.eval_metrics, "step": step})


def train_seed_batch(
    configs: Sequence[TrainConfig | Mapping[str, Any]], *, callbacks: Sequence[Any] = (), progress_bar: bool = True
) -> list[TrainResult]:
    """Train the runs of ``configs`` (differing only in seed) as one seed-batched model (module
    docstring); one :class:`~harness.training.run.TrainResult` per config, in order, as
    :func:`~harness.training.run.train` with ``mlflow_logging=False`` would return it. One
    config, or a variant of :data:`UNSTACKABLE`, trains as separate runs with ``train``.

    Raises
    ------
    InputError
        Configs that differ in more than their seed, repeat a seed, or that ``train`` refuses.
    """
    started = time.perf_counter()
    configs = [as_train_config(c) for c in configs]
    _check_group(configs)
    if len(configs) == 1 or configs[0].variant in UNSTACKABLE:
        return [train(c, callbacks=callbacks, mlflow_logging=False, progress_bar=progress_bar) for c in configs]
    plan = prepare_run(configs[0], None, progress=progress_bar, compile_sharing=len(configs))
    with run_runtime(plan, progress_bar):
        batch: SeedBatch | None = SeedBatch(configs, plan)
        batch.to_device()
        try:
            batch.probe()
        except RuntimeError as exc:  # a lease must not lose the group: the same runs, one by one
            warnings.warn(
                f"{configs[0].variant} cannot be seed-batched here ({exc}); training its seeds one by one", stacklevel=2
            )
            batch = None
        if batch is not None:
            steps, diverged = _loop(batch, callbacks, progress_bar)
            return [_seed_result(batch, s, steps, diverged, time.perf_counter() - started) for s in range(len(configs))]
    return [train(c, callbacks=callbacks, mlflow_logging=False, progress_bar=progress_bar) for c in configs]


def _seed_result(batch: SeedBatch, s: int, steps: int, diverged: dict[int, int], wall_time: float) -> TrainResult:
    """Seed s's TrainResult, as train builds it (its module's metrics, its own curve)."""
    config, S = batch.configs[s], len(batch.configs)
    result = train_result(
        config,
        status="diverged" if s in diverged else "finished",
        module=batch.modules[s],
        steps=diverged.get(s, steps),
        tokens_per_s=batch.hooks[s][0].tokens_per_s,
        run_id=None,
        checkpoint=None,
        wall_time=wall_time,
    )
    return replace(
        result,
        evaluations=tuple(batch.evaluations[s]),
        compiled=False,
        compile_reason=f"seed-batched ({S} seeds): eager",
        device_plan=f"{batch.plan.device.describe()}, {S} seeds batched",
    )


def _loop(batch: SeedBatch, callbacks: Sequence[Any], progress_bar: bool) -> tuple[int, dict[int, int]]:
    """Train every seed to ``max_steps`` (or until the callbacks stop it or every seed diverged),
    evaluating every ``eval_every`` steps and at the end; returns the steps taken, the step each
    diverged seed stopped at. The divergence flags (and the progress bar's loss) are read on the
    host every ``loss_check_every`` steps and before each evaluation, outside the step: a seed's
    first non-finite step is exact, only seen up to ``loss_check_every - 1`` steps late (its
    weights, NaN from then on, reach no other seed's)."""
    config, S = batch.configs[0], len(batch.configs)
    state, diverged = _LoopState(), {}
    check_every = batch.plan.device.loss_check_every
    bar = None
    if progress_bar:
        from tqdm.auto import tqdm

        bar = tqdm(total=config.max_steps, desc=f"{config.variant} x{S} seeds")
    step = 0
    while step < config.max_steps and not state.should_stop and len(diverged) < S:
        losses, seen = batch.step(step)
        step += 1
        state.global_step = step
        batch.after_step(state, losses, step - 1)
        for callback in callbacks:
            hook = getattr(callback, "on_train_batch_end", None)
            if hook is not None:
                hook(state, None, losses, seen, step - 1)
        evaluating = step % config.eval_every == 0 or step == config.max_steps
        if step % check_every == 0 or evaluating:
            diverged = batch.divergence()  # the host's read of the flags
            if bar is not None:
                bar.set_postfix(loss=f"{losses.nanmean().item():.3f}")
        if bar is not None:
            bar.update(1)
        if evaluating:
            for s in range(S):
                if s not in diverged:
                    batch.evaluate(s, step, final=step == config.max_steps)
    diverged = batch.divergence()
    for s in range(S):  # stopped off the evaluation grid: the last evaluation is the final one, as train's
        if s not in diverged and not batch.modules[s].final_metrics:
            batch.evaluate(s, step, final=True)
    if bar is not None:
        bar.close()
    return step, diverged
