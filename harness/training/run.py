"""``train(config) -> TrainResult``: one training run from a config, start to finish.

Order of work, so that bad input never leaves anything half-done: validate the config,
the accelerator, the dataset (loaded), the resume checkpoint and the model (built);
check the tracking store; only then create the MLflow run. From there on, whatever
happens the run ends: ``FINISHED`` (tag ``status=finished`` or ``status=diverged``),
``KILLED`` on an interrupt, ``FAILED`` on any other error (which propagates).

Reproducibility: on CPU (fp32, same thread count) a seed gives bit-identical results and a
resumed run ends exactly where an uninterrupted one does; on GPU only up to float noise
(bf16 autocast, TF32, compiled kernels, atomic adds in some backward kernels): see
:mod:`harness.training.module`.

Inside a Ray Tune trial, the studies runner calls
``train(config, callbacks=[report_callback], mlflow_logging=False, resume_from=ckpt,
progress_bar=False)``: ``trainer.callback_metrics`` holds every metric of
:mod:`harness.training.module` at ``on_validation_end`` (0-dim tensors), ``step``
included, and the last evaluation of a run that reaches ``max_steps`` carries the
``final/...`` metrics as well.

``compile`` (``auto``, true, false): :mod:`harness.training.compile` says what is compiled,
when ``auto`` compiles and where the compiled graphs are cached.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import tempfile
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import TQDMProgressBar

from harness.mlflow_client import harness_git_commit
from harness.models.numerics import flush_denormals
from harness.models.variants import DIAGNOSTIC_LABEL, Variant
from harness.results_schema import RESULT_COLUMNS, head_taus, shape_columns
from harness.training.callbacks import (
    BatchLossMonitor,
    EvaluationLog,
    GateGradientNorms,
    MlflowMetrics,
    RollingCheckpoint,
    TokenThroughput,
    TrainingDiverged,
)
from harness.training.compile import CompiledForward, begin_compiled_run, use_shared_cache
from harness.training.config import TrainConfig
from harness.training.data import CharDataModule
from harness.training.description import trial_description
from harness.training.module import CharLMModule, build_char_model
from harness.training.plan import RunPlan, as_train_config, prepare_run
from harness.training.tracking import TrackedRun, TrackingTarget, prepare_tracking


@dataclass(frozen=True)
class TrainResult:
    """What one run produced.

    Losses are mean next-character cross-entropies in nats over the fixed evaluation
    windows (``val_bpc`` in bits); ``tau_mean``/``open_fraction`` are ``None`` for variants
    without a key gate, ``pc1_cosine`` (|cos| of the energy projection with the first principal
    component of the gate's input, :mod:`harness.training.energy_probe`) for gates it does not
    probe, ``final_test_loss`` where the corpus has no test split. A diverged run has
    ``status="diverged"`` and NaN final losses. ``window_losses`` maps a split to the loss of
    each window of the final evaluation's set (``val_windows`` of them in the validation split);
    ``metrics`` holds every metric of the final
    evaluation by its logged name.
    """

    config: TrainConfig
    status: Literal["finished", "diverged"]
    steps: int
    final_val_loss: float
    final_test_loss: float | None
    best_val_loss: float
    final_train_loss: float
    gen_gap: float
    val_bpc: float
    tau_mean: float | None
    open_fraction: float | None
    tokens_per_s: float
    num_parameters: int
    window_losses: dict[str, np.ndarray] = field(repr=False)
    metrics: dict[str, float] = field(repr=False)
    mlflow_run_id: str | None
    checkpoint_path: str | None
    wall_time_s: float
    #: Whether the training step ran compiled, and why (``compile: auto`` weighs cost and saving).
    compiled: bool = False
    compile_reason: str = ""
    pc1_cosine: float | None = None
    #: How many validation windows the final losses rest on (the final evaluation's set).
    val_windows: int | None = None
    #: The final validation loss over positions 0..63 and over 64..T-1 (None: T <= 64).
    val_loss_first64: float | None = None
    val_loss_after64: float | None = None
    #: How the run computed (:meth:`harness.training.device_plan.DevicePlan.describe`).
    device_plan: str = ""
    #: Every evaluation's metrics in order (its curve), ``step`` included: what a study's
    #: reports hold (:class:`~harness.training.callbacks.EvaluationLog`).
    evaluations: tuple[dict[str, float], ...] = field(default=(), repr=False)
    #: The vocabulary the model was built with (None: not known).
    vocab_size: int | None = None


def run_datamodule(config: TrainConfig, plan: RunPlan, *, start_step: int = 0) -> CharDataModule:
    """The run's data: batch k a function of ``(config.seed, k)`` from ``start_step`` on, and the
    evaluation windows the config asks for (the same for every seed and variant)."""
    return CharDataModule(
        plan.corpus,
        block_size=config.context_length,
        batch_size=config.batch_size,
        seed=config.seed,
        eval_windows=config.eval_windows,
        eval_batch_size=config.eval_batch_size,
        final_eval_windows=config.final_eval_windows,
        start_step=start_step,
        pin_memory=plan.device.pin_memory,
    )


@contextlib.contextmanager
def run_runtime(plan: RunPlan, progress_bar: bool) -> Iterator[None]:
    """Threads, matmul precision, RNG, compiler state and log levels for the run; restored afterwards."""
    saved_threads = torch.get_num_threads()
    saved_precision = torch.get_float32_matmul_precision()
    quiet = ("lightning.pytorch", "lightning.fabric", "lightning.pytorch.utilities.rank_zero")
    saved_levels = {name: logging.getLogger(name).level for name in quiet}
    gpu = plan.device.accelerator == "gpu"
    devices = [torch.cuda.current_device()] if gpu else []
    try:
        flush_denormals()  # before any parallel operation, so torch's worker threads inherit it
        if not gpu:
            torch.set_num_threads(plan.device.threads)
        if plan.compile.compile:
            use_shared_cache()  # the node's cache, for this process from now on
            begin_compiled_run(plan.device.threads)  # a reused worker's earlier runs must not count
        torch.set_float32_matmul_precision(plan.device.matmul_precision)  # "high": TF32 outside autocast
        if gpu:
            torch.backends.cudnn.allow_tf32 = True
        for name in quiet:  # "GPU available: ...", "max_steps reached": noise in a study log
            logging.getLogger(name).setLevel(logging.WARNING)
        with torch.random.fork_rng(devices=devices), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*does not have many workers.*")
            warnings.filterwarnings("ignore", message=".*LeafSpec.*")  # Lightning 2.6 on torch 2.13
            yield
    finally:
        torch.set_flush_denormal(False)  # torch's default (it has no getter to save)
        torch.set_num_threads(saved_threads)
        torch.set_float32_matmul_precision(saved_precision)
        for name, level in saved_levels.items():
            logging.getLogger(name).setLevel(level)


def run_name(config: TrainConfig) -> str:
    """Human name of a run: ``ega-mope-tinyshakespeare-nano-T64-s3``; a custom shape appears
    as its tag (``learned-pe-tinyshakespeare-L4H4d128-T64-s0``)."""
    return f"{config.variant}-{config.dataset}-{config.model_size().tag}-T{config.context_length}-s{config.seed}"


def run_params(config: TrainConfig, variant: Variant | None = None) -> dict[str, Any]:
    """The MLflow params of a run: every setting as used (:meth:`TrainConfig.run_params`;
    ``variant``: the config's resolved variant, when the caller holds it)."""
    return config.run_params(variant=variant)


def run_tags(config: TrainConfig, variant: Variant) -> dict[str, str]:
    """The tags every training run carries (``status`` is added by the tracker)."""
    return {
        "variant": config.variant,
        "position": variant.position,
        "gate": variant.gate,
        "scoring": variant.scoring,
        "dataset": config.dataset,
        "size": config.size,
        "context_length": str(config.context_length),
        "seed": str(config.seed),
        "harness.git_commit": harness_git_commit(),
    } | ({"harness.diagnostic": DIAGNOSTIC_LABEL} if variant.diagnostic else {})


class StepProgressBar(TQDMProgressBar):
    """Progress in optimizer steps out of ``max_steps`` (the training stream is endless)."""

    @property
    def total_train_batches(self) -> int:
        return self.trainer.max_steps

    def on_train_epoch_start(self, trainer: Any, *args: Any) -> None:
        super().on_train_epoch_start(trainer, *args)
        self.train_progress_bar.set_description("train")

    def get_metrics(self, trainer: Any, pl_module: Any) -> dict[str, Any]:
        items = super().get_metrics(trainer, pl_module)
        items.pop("v_num", None)
        return items


def write_run_tables(directory: Path, *, model: Any | None, window_losses: Mapping[str, Any]) -> list[Path]:
    """Write a run's tables as parquet into ``directory`` and return their paths:
    ``window_losses.parquet`` (``split, window, loss``; skipped when there are none, e.g.
    for a diverged run), ``gate_parameters.parquet`` (``layer, head, tau, alpha`` per
    head, plus ``morlet_omega, morlet_sigma`` of the layer for a learned Morlet gate) and
    ``mope_parameters.parquet`` (``dimension, omega, sigma``), the last two from
    ``model`` when it has them. Shared by ``harness train``, the study trainable and the
    device runner (:mod:`harness.studies.device`), so all record the same files and columns;
    written with pyarrow, which a GPU lease's image has (polars it has not)."""
    paths: list[Path] = []
    losses = window_loss_columns(window_losses)
    if losses is not None:
        paths.append(directory / "window_losses.parquet")
        _write_parquet(losses, paths[-1])
    if model is None:
        return paths
    gates = {k: v.detach().float().cpu().numpy() for k, v in model.gate_parameters().items()}
    if gates:
        L, H = next(iter(gates.values())).shape[:2]
        frame = {"layer": np.repeat(np.arange(L), H), "head": np.tile(np.arange(H), L)}
        frame.update({name: values.reshape(-1).astype(np.float64) for name, values in gates.items()})
        for name, values in model.wavelet_parameters().items():  # one Morlet filter per layer: (L,) -> (L*H,)
            frame[f"morlet_{name}"] = np.repeat(values.detach().float().cpu().numpy().astype(np.float64), H)
        paths.append(directory / "gate_parameters.parquet")
        _write_parquet(frame, paths[-1])
    mope = {
        k: v.detach().float().cpu().numpy().reshape(-1).astype(np.float64) for k, v in model.mope_parameters().items()
    }
    if mope:
        lengths = {len(v) for v in mope.values()}
        if len(lengths) == 1:
            table = {"dimension": np.arange(lengths.pop()), **mope}
        else:  # long format if the parameters differ in size
            table = {
                "param": [k for k, v in mope.items() for _ in range(len(v))],
                "dimension": np.concatenate([np.arange(len(v)) for v in mope.values()]),
                "value": np.concatenate(list(mope.values())),
            }
        paths.append(directory / "mope_parameters.parquet")
        _write_parquet(table, paths[-1])
    return paths


def window_loss_columns(window_losses: Mapping[str, Any]) -> dict[str, Any] | None:
    """A run's per-window losses (split -> the loss of each window) as the columns
    ``split, window, loss`` (window numbered from 0 within its split); None when there are none."""
    if not window_losses:
        return None
    arrays = {split: np.asarray(losses, dtype=np.float64) for split, losses in window_losses.items()}
    return {
        "split": [split for split, losses in arrays.items() for _ in range(len(losses))],
        "window": np.concatenate([np.arange(len(losses), dtype=np.int64) for losses in arrays.values()]),
        "loss": np.concatenate(list(arrays.values())),
    }


def _write_parquet(columns: Mapping[str, Any], path: Path) -> None:
    """``columns`` (name -> a list or a 1-d array, all of one length) as a parquet file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table(dict(columns)), path)


def _write_artifacts(run: Any, module: Any, directory: Path, *, final: bool) -> None:
    """Log the run's tables (:func:`write_run_tables`); per-window losses only for the
    final evaluation (a diverged run has none)."""
    for path in write_run_tables(directory, model=module.model, window_losses=module.window_losses if final else {}):
        run.log_artifact(path)


def _default_checkpoint_dir(config: TrainConfig, run_id: str | None) -> Path:
    suffix = run_id or time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}"
    return Path.cwd() / "checkpoints" / f"{run_name(config)}-{suffix}"


def train(
    config: TrainConfig | Mapping[str, Any],
    *,
    callbacks: Sequence[Any] = (),
    mlflow_logging: bool = True,
    resume_from: str | os.PathLike[str] | None = None,
    progress_bar: bool = True,
    compile_sharing: int = 1,
    plan: RunPlan | None = None,
) -> TrainResult:
    """Train one model as ``config`` says and evaluate it on the fixed windows.

    Parameters
    ----------
    config
        A :class:`TrainConfig` (or a mapping of its fields).
    callbacks
        Extra Lightning callbacks (e.g. a Ray Tune report callback at ``on_validation_end``).
    mlflow_logging
        Create and fill an MLflow run (tracking URI: ``config.tracking_uri``, else
        ``$MLFLOW_TRACKING_URI``, else ``sqlite:///mlflow.db``).
    resume_from
        A checkpoint (``.ckpt`` file or a run's checkpoint folder) of the same run to
        continue from: the result equals that of an uninterrupted run (CPU).
    progress_bar
        Show a progress bar.
    compile_sharing
        Runs (this one included) that compile the same graph on this node, e.g. the seeds of
        a variant in a study: ``compile: auto`` weighs one cold compile against their steps
        together (:func:`harness.training.compile.compile_decision`).
    plan
        What :func:`harness.training.plan.prepare_run` made of this config and ``resume_from``
        already (``harness train`` checks its input before Lightning loads); default: made here.

    Returns
    -------
    TrainResult
        ``status="diverged"`` when the training loss became non-finite (the run stops
        there; not an exception).

    Raises
    ------
    InputError
        Bad input (unknown variant/dataset/size, context too long, no GPU, unusable
        tracking URI, corrupt or foreign checkpoint), before any MLflow run exists.
    """
    started = time.perf_counter()
    config = as_train_config(config)
    if plan is None:
        plan = prepare_run(config, resume_from, progress=progress_bar, compile_sharing=compile_sharing)
    elif plan.config != config:
        raise ValueError("train(plan=...) was prepared for another config; pass the config it was made from")

    with run_runtime(plan, progress_bar):
        torch.manual_seed(config.seed)  # initialisation = f(seed)
        model = build_char_model(config, plan.corpus.vocab_size, variant=plan.variant)
        datamodule = run_datamodule(config, plan, start_step=plan.start_step)
        target = prepare_tracking(config.tracking_uri, config.experiment) if mlflow_logging else None

        # ---- from here on a run may exist: it must end, whatever happens --------------
        run = _open_run(target, plan)
        try:
            result, loop = _train_in_run(
                plan, model, datamodule, run, callbacks=callbacks, progress_bar=progress_bar, started=started
            )
        except BaseException as exc:
            if run is not None:
                run.end("killed" if isinstance(exc, (KeyboardInterrupt, SystemExit)) else "failed")
            raise
        if run is not None:
            run.end(result.status)

    return replace(
        result,
        evaluations=tuple(loop.evaluations.evaluations),
        wall_time_s=time.perf_counter() - started,
        compiled=plan.compile.compile,
        compile_reason=plan.compile.reason,
        device_plan=plan.device.describe(),
    )


def _train_in_run(
    plan: RunPlan,
    model: torch.nn.Module,
    datamodule: CharDataModule,
    run: TrackedRun | None,
    *,
    callbacks: Sequence[Any],
    progress_bar: bool,
    started: float,
) -> tuple[TrainResult, _Loop]:
    """The run itself, inside its MLflow run (if any), which the caller ends: the module and the
    trainer built, trained to ``max_steps`` (or to the divergence), the result read off the
    module, and the run's tables and description recorded; the result (``status`` finished or
    diverged, ``wall_time_s`` from ``started``) and the loop whose callbacks hold the rest."""
    config = plan.config
    if run is not None:
        run.declare_corpus(config.dataset, data_dir=config.data_dir)
    module = CharLMModule(config, vocab_size=plan.corpus.vocab_size, model=model, device_plan=plan.device)
    module.mlflow_run_id = run.run_id if run is not None else None
    if plan.compile.compile:
        module.compiled_forward = CompiledForward(model, plan.compile_key)
    loop = _build_loop(plan, module, run, callbacks=callbacks, progress_bar=progress_bar)
    diverged = _fit(loop, module, datamodule, plan)
    result = train_result(
        config,
        status="diverged" if diverged is not None else "finished",
        module=module,
        steps=loop.trainer.global_step,
        tokens_per_s=loop.throughput.tokens_per_s,
        run_id=run.run_id if run is not None else None,
        checkpoint=loop.checkpointer.last_path,
        wall_time=time.perf_counter() - started,
    )
    if run is not None:
        _record_artifacts(run, module, diverged)
        run.set_description(trial_description(result_row(result, plan.variant)))
    return result, loop


def _open_run(target: TrackingTarget | None, plan: RunPlan) -> TrackedRun | None:
    """The MLflow run of this training: the checkpoint's run when resuming (if the store
    still holds it), else a new one with the config as params and the run's tags."""
    if target is None:
        return None
    config = plan.config
    previous = (plan.resume_meta or {}).get("mlflow_run_id")
    run = target.resume_run(previous) if previous else None
    if run is None:
        tags = run_tags(config, plan.variant) | {
            "harness.compile": plan.compile.reason,
            "harness.device_plan": plan.device.describe(),
        }
        if plan.resume_path is not None:
            tags["harness.resumed_from"] = str(plan.resume_path)
        run = target.start_run(run_name=run_name(config), params=run_params(config, plan.variant), tags=tags)
    return run


@dataclass(frozen=True)
class _Loop:
    """The Lightning trainer of a run and the harness callbacks whose state the result reads."""

    trainer: Trainer
    throughput: TokenThroughput
    checkpointer: RollingCheckpoint
    evaluations: EvaluationLog


def _build_loop(
    plan: RunPlan, module: CharLMModule, run: TrackedRun | None, *, callbacks: Sequence[Any], progress_bar: bool
) -> _Loop:
    """The trainer: precision and device of the plan, evaluation every ``eval_every`` steps,
    the harness callbacks (throughput, divergence guard, MLflow metrics, rolling checkpoint,
    progress bar) before the caller's ``callbacks``."""
    config = plan.config
    if config.checkpoint_dir:
        checkpoint_dir = Path(config.checkpoint_dir)
    elif plan.resume_path is not None:
        checkpoint_dir = plan.resume_path.parent
    else:
        checkpoint_dir = _default_checkpoint_dir(config, module.mlflow_run_id)
    monitor = BatchLossMonitor(check_every=plan.device.loss_check_every)  # each test waits for the device
    checkpointer = RollingCheckpoint(checkpoint_dir, every_n_steps=plan.device.checkpoint_every, guard=monitor)
    throughput = TokenThroughput(config.batch_size * config.context_length)
    evaluations = EvaluationLog()
    own: list[Any] = [throughput, monitor, evaluations]
    if plan.variant.has_key_gate:
        own.append(GateGradientNorms())
    if run is not None:
        own.append(MlflowMetrics(run))
    own.append(checkpointer)
    if progress_bar:
        own.append(StepProgressBar())
    trainer = Trainer(
        accelerator=plan.device.accelerator,
        devices=1,
        precision=plan.device.precision,
        max_steps=config.max_steps,
        val_check_interval=config.eval_every,
        check_val_every_n_epoch=None,
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=progress_bar,
        enable_model_summary=False,
        # No clipping by Lightning: the module clips (configure_gradient_clipping), which works with
        # the fused optimizer of the mixed plan too (harness.training.device_plan).
        gradient_clip_val=None,
        callbacks=[*own, *callbacks],
        default_root_dir=str(checkpoint_dir),
    )
    return _Loop(trainer=trainer, throughput=throughput, checkpointer=checkpointer, evaluations=evaluations)


def _fit(loop: _Loop, module: CharLMModule, datamodule: CharDataModule, plan: RunPlan) -> TrainingDiverged | None:
    """Train to ``max_steps`` (from the checkpoint when resuming) and make sure the last
    evaluation is the final one; the divergence that stopped the run, if any."""
    diverged: TrainingDiverged | None = None
    try:
        loop.trainer.fit(
            module,
            datamodule=datamodule,
            ckpt_path=str(plan.resume_path) if plan.resume_path else None,
            weights_only=True,
        )
    except TrainingDiverged as exc:
        diverged = exc
    if diverged is None and not module.final_metrics:
        # The last in-loop evaluation was not at max_steps: evaluate once more, as final.
        module.request_final_evaluation()
        loop.trainer.validate(module, datamodule=datamodule, verbose=False)
    return diverged


def _record_artifacts(run: TrackedRun, module: CharLMModule, diverged: TrainingDiverged | None) -> None:
    """The step a diverged run stopped at (tag) and the run's tables (artifacts)."""
    if diverged is not None:
        run.set_tags({"diverged_at_step": diverged.step})
    with tempfile.TemporaryDirectory() as tmp:
        _write_artifacts(run, module, Path(tmp), final=diverged is None)


def result_row(result: TrainResult, variant: Variant) -> dict[str, Any]:
    """The run as a row of a study's results table (its columns,
    :data:`~harness.results_schema.RESULT_COLUMNS`; ``study`` empty and the run's name as
    ``trial_id``): what :func:`~harness.training.description.trial_description` renders.
    ``variant`` is the run's resolved variant (its position, gate, scoring)."""
    c = result.config
    row: dict[str, Any] = dict.fromkeys(RESULT_COLUMNS)
    row.update(
        {
            "trial_id": run_name(c),
            "dataset": c.dataset,
            "size": c.size,
            "params": result.num_parameters,
            **shape_columns(c.model_size(), result.vocab_size),
            "context_length": c.context_length,
            "variant": c.variant,
            "position": variant.position,
            "gate": variant.gate,
            "scoring": variant.scoring,
            "seed": c.seed,
            "tau_init": c.tau_init,
            "val_loss": result.final_val_loss,
            "test_loss": result.final_test_loss,
            "train_loss": result.final_train_loss,
            "best_val_loss": result.best_val_loss,
            "gen_gap": result.gen_gap,
            "tau_mean": result.tau_mean,
            "tau_heads": head_taus(result.metrics),
            "open_fraction": result.open_fraction,
            "pc1_cosine": result.pc1_cosine,
            "tokens_per_s": result.tokens_per_s,
            "steps": result.steps,
            "val_windows": result.val_windows,
            "val_loss_first64": result.val_loss_first64,
            "val_loss_after64": result.val_loss_after64,
            "status": result.status,
        }
    )
    return row


def train_result(
    config: TrainConfig,
    *,
    status: str,
    module: Any,
    steps: int,
    tokens_per_s: float,
    run_id: str | None,
    checkpoint: Path | None,
    wall_time: float,
) -> TrainResult:
    """The :class:`TrainResult` of a run that ended with ``status``, read off its module's last
    evaluation (a diverged run keeps no final numbers)."""
    final = module.final_metrics
    metrics = dict(module.eval_metrics)
    nan = math.nan
    if status == "diverged":
        final = {}
    return TrainResult(
        config=config,
        status=status,  # type: ignore[arg-type]
        steps=int(steps),
        final_val_loss=final.get("final/val_loss", nan),
        final_test_loss=final.get("final/test_loss") if status != "diverged" else None,
        best_val_loss=float(module.best_val_loss) if math.isfinite(module.best_val_loss) else nan,
        final_train_loss=final.get("final/train_loss", nan),
        gen_gap=final.get("final/gen_gap", nan),
        val_bpc=final.get("final/val_bpc", nan),
        tau_mean=final.get("final/tau_mean"),
        open_fraction=final.get("final/open_fraction"),
        pc1_cosine=final.get("final/pc1_cosine"),
        tokens_per_s=float(tokens_per_s),
        num_parameters=int(module.model.num_parameters()),
        vocab_size=int(module.vocab_size),
        val_windows=int(final["final/val_windows"]) if "final/val_windows" in final else None,
        val_loss_first64=final.get("final/val_loss_first64"),
        val_loss_after64=final.get("final/val_loss_after64"),
        window_losses=dict(module.window_losses) if status != "diverged" else {},
        metrics=metrics,
        mlflow_run_id=run_id,
        checkpoint_path=str(checkpoint) if checkpoint is not None else None,
        wall_time_s=wall_time,
    )
