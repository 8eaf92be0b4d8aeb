"""The cost of a study, printed by ``harness run --dry-run`` with the assumptions it rests on.

Tokens are exact (steps x batch x T per trial, plus the evaluation windows). Time is an
estimate from a step's cost and a trial's fixed costs, per device:

    trial  = fixed + steps x step + evaluations x evaluation
    FLOPs per training step  = B T (6 N + 6 L T d)       (N = 12 L d^2 + V d; fwd + bwd, causal)
    FLOPs per evaluated token = 2 N + 2 L T d

**CPU** (one thread per CPU of the trial), fitted to ``harness train ... --num-threads 1`` on
the 2-core development machine, quiet, T = 128, batch 16, ``ega-mope``: ``nano`` 57 ms a step,
L3H4d96 149 ms, L4H4d128 270 ms. A step is its eager element-wise work, proportional to the
activations (L d B T: layer norms, the gate, dropout, the optimizer's share), plus its FLOPs
at an effective rate, both spread over the trial's threads:

    step = (CPU_ACTIVATION_S x L d B T + FLOPs / CPU_THREAD_FLOPS) / threads

(61, 145 and 271 ms at the three shapes: within 8 %). Trials sharing the machine's cores run
each step CPU_CONCURRENT_SLOWDOWN times slower, and each trial costs CPU_TRIAL_FIXED_S to start.

**H200** (assumed until a GPU is lent: the performance review's estimates, issue 40). At the
papers' size a *compiled* bf16 step takes 3-4.5 ms and is bound by kernel launches, not by the
matrix units (the 5.5 ms assumed before was the eager step's); a larger model becomes bound by
its FLOPs:

    step = max(GPU_LAYER_LAUNCH_S x L, FLOPs / GPU_EFFECTIVE_FLOPS)

Fixed costs: the imports (~20 s) once per worker, not per trial (Ray Tune reuses a worker for
the trials it runs one after another; trials packed k to a GPU run on k workers, which import at
the same time); per trial the compile (40-90 s cold, once per graph on a node; 5-15 s warm, for
the other trials of that graph), evaluations, and the checkpoints (12 bytes a parameter: weights
and AdamW's two moments) saved and uploaded CHECKPOINTS_PER_GPU_RUN times.
``benchmarks/gpu_check.py`` measures these on a GPU (the imports in a fresh interpreter, its
first phase) and writes them to ``benchmarks/results/gpu_constants.json`` (``--out``: a lease's
folder); when that file (or ``$HARNESS_MEASURED_COSTS``) holds a GPU's measurements, they replace
the assumptions (:func:`load_measured_constants`), and the dry run says which it used. Treat the
hours as the order of magnitude, not a promise.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# -- CPU: fitted to one thread on the development machine (module docstring) ---------------------------
CPU_ACTIVATION_S = 2.03e-7  # seconds per layer x width x token
CPU_THREAD_FLOPS = 1.82e11
#: Per-step slowdown when trials share the machine's cores. Fitted so that the two long CPU studies
#: estimate their measured wall times on 2 cores (studies/long-cpu.yaml ~1.3-1.5 h, ladder-cpu.yaml
#: ~2.2-2.5 h); single trials timed while another ran read 1.3-1.9x, which those wall times do not show.
CPU_CONCURRENT_SLOWDOWN = 1.05
CPU_TRIAL_FIXED_S = 10.0
# -- H200: the review's estimates, replaced by gpu_check.py's measurements when present -----------------
GPU_LAYER_LAUNCH_S = 3.75e-3 / 6  # the papers' size (6 layers): 3-4.5 ms a compiled bf16 step
GPU_EFFECTIVE_FLOPS = 3.0e14  # bf16 dense peak ~9.9e14; ~30 % of it where the FLOPs bind
GPU_WORKER_IMPORTS_S = 20.0  # once per worker (module docstring)
GPU_COLD_COMPILE_S = 65.0  # 40-90 s
GPU_WARM_COMPILE_S = 10.0  # 5-15 s
CHECKPOINTS_PER_GPU_RUN = 4  # harness.training.device_plan.CHECKPOINTS_PER_RUN_GPU (+ the last)
CHECKPOINT_BYTES_PER_PARAMETER = 12.0
CHECKPOINT_UPLOAD_BYTES_PER_S = 100e6
#: Fractional GPUs pack trials; assume packing buys at most this much aggregate throughput.
GPU_PACKING_LIMIT = 2.0
#: Evaluation windows assumed when a spec evaluates whole splits (eval_windows: null).
WHOLE_SPLIT_WINDOWS = 1000
CHAR_VOCAB = 100
#: The measured constants: ``$HARNESS_MEASURED_COSTS``, else this file of a checkout.
MEASURED_CONSTANTS = Path(__file__).resolve().parents[3] / "benchmarks" / "results" / "gpu_constants.json"


def approx_parameters(n_layer: int, d_model: int, vocab: int = CHAR_VOCAB) -> float:
    """12 L d^2 (attention + 4x MLP) + embeddings (tied)."""
    return 12 * n_layer * d_model**2 + vocab * d_model


def step_flops(n_layer: int, d_model: int, batch: int, T: int) -> float:
    """FLOPs of one training step: B T (6 N + 6 L T d)."""
    return batch * T * (6 * approx_parameters(n_layer, d_model) + 6 * n_layer * T * d_model)


def cpu_step_s(n_layer: int, d_model: int, batch: int, T: int, threads: int = 1) -> float:
    """Seconds of one CPU training step: (CPU_ACTIVATION_S L d B T + FLOPs / CPU_THREAD_FLOPS) / threads."""
    activations = CPU_ACTIVATION_S * n_layer * d_model * batch * T
    return (activations + step_flops(n_layer, d_model, batch, T) / CPU_THREAD_FLOPS) / threads


@dataclass(frozen=True)
class MeasuredConstants:
    """What ``benchmarks/gpu_check.py`` measured on one device (``step_s``: seconds a step per
    variant at ``size``, ``context_length``, ``batch_size``); None where it did not measure."""

    source: str
    device: str
    date: str
    size: str
    context_length: int
    batch_size: int
    step_s: dict[str, float] = field(default_factory=dict)
    cold_compile_s: float | None = None
    warm_compile_s: float | None = None
    study_fixed_s: float | None = None
    checkpoint_mb: float | None = None
    checkpoint_copy_s: float | None = None
    packed_speedup: float | None = None
    imports_s: float | None = None  # a fresh interpreter's imports of the training path (once per worker)

    @property
    def is_gpu(self) -> bool:
        return self.device != "cpu"


def load_measured_constants(path: str | os.PathLike[str] | None = None) -> MeasuredConstants | None:
    """The constants ``gpu_check.py`` wrote: ``path``, else ``$HARNESS_MEASURED_COSTS``, else
    :data:`MEASURED_CONSTANTS`; None when there is no such file."""
    chosen = Path(path or os.environ.get("HARNESS_MEASURED_COSTS") or MEASURED_CONSTANTS)
    if not chosen.is_file():
        return None
    data: dict[str, Any] = json.loads(chosen.read_text())
    known = {name for name in MeasuredConstants.__dataclass_fields__ if name != "source"}
    return MeasuredConstants(source=str(chosen), **{k: v for k, v in data.items() if k in known})


@dataclass(frozen=True)
class GpuModel:
    """A compiled bf16 step and a trial's fixed costs on one GPU (assumed or measured)."""

    layer_launch_s: float
    flops: float
    imports_s: float
    cold_compile_s: float
    warm_compile_s: float
    packing: float
    source: str

    @classmethod
    def from_constants(cls, measured: MeasuredConstants | None) -> GpuModel:
        if measured is None or not measured.is_gpu or not measured.step_s:
            return cls(
                GPU_LAYER_LAUNCH_S,
                GPU_EFFECTIVE_FLOPS,
                GPU_WORKER_IMPORTS_S,
                GPU_COLD_COMPILE_S,
                GPU_WARM_COMPILE_S,
                GPU_PACKING_LIMIT,
                "assumed: the performance review's estimates",
            )
        from harness.models.sizes import get_size

        size = get_size(measured.size)
        step = max(measured.step_s.values())  # the slowest variant measured (ega-mope)
        flops = step_flops(size.n_layer, size.d_model, measured.batch_size, measured.context_length)
        cold = measured.cold_compile_s if measured.cold_compile_s is not None else GPU_COLD_COMPILE_S
        # The imports as measured; else a one-trial study's seconds beyond its steps, less its cold compile.
        if measured.imports_s is not None:
            start = measured.imports_s
        elif measured.study_fixed_s is not None:
            start = max(0.0, measured.study_fixed_s - cold)
        else:
            start = GPU_WORKER_IMPORTS_S
        return cls(
            layer_launch_s=step / size.n_layer,
            flops=max(GPU_EFFECTIVE_FLOPS, flops / step),
            imports_s=start,
            cold_compile_s=cold,
            warm_compile_s=measured.warm_compile_s if measured.warm_compile_s is not None else GPU_WARM_COMPILE_S,
            packing=measured.packed_speedup or GPU_PACKING_LIMIT,
            source=f"measured on {measured.device} on {measured.date} ({measured.source})",
        )

    def step_s(self, n_layer: int, flops: float) -> float:
        return max(self.layer_launch_s * n_layer, flops / self.flops)


@dataclass(frozen=True)
class CostEstimate:
    trials: int
    train_tokens: float  # summed over trials
    eval_tokens: float
    flops: float
    cpu_core_hours: float  # the trials one after another on one core each
    h200_hours: float  # one H200, trials one after another
    wall_hours: float  # with the spec's resources on the machine described by `on`
    on: str
    assumptions: tuple[str, ...] = ()
    paper_h200_hours: float | None = None  # the same grid at the papers' size on one H200

    def lines(self) -> list[str]:
        lines = [
            f"tokens: {self.train_tokens:.3g} trained + {self.eval_tokens:.3g} evaluated over {self.trials} trials "
            f"({self.flops:.2g} FLOPs)",
            f"time (rough estimate): ~{_hours(self.h200_hours)} on one H200 (trials one after another), "
            f"~{_hours(self.cpu_core_hours)} of CPU-core time; ~{_hours(self.wall_hours)} wall time {self.on}",
        ]
        if self.paper_h200_hours is not None:
            lines.append(f"the same study at size paper: ~{_hours(self.paper_h200_hours)} on one H200")
        return lines + [f"  assumed: {line}" for line in self.assumptions]


def _hours(h: float) -> str:
    if h < 1 / 60:
        return f"{h * 3600:.0f} s"
    if h < 1:
        return f"{h * 60:.0f} min"
    if h < 48:
        return f"{h:.1f} h"
    return f"{h / 24:.1f} days"


@dataclass(frozen=True)
class _TrialCost:
    tokens: float
    evaluated: float
    flops: float
    cpu_s: float  # its steps and evaluations on ``threads`` threads, alone on the machine
    cpu_core_s: float  # the same on one thread
    gpu_s: float  # on one H200, the trial's fixed costs included (not the worker's imports)


def _trial_cost(config: Any, *, threads: int, gpu: GpuModel, warm: bool) -> _TrialCost:
    """The costs of one trial's config (``warm``: its graph was compiled by an earlier trial)."""
    size = config.model_size()
    L, d, T, B = size.n_layer, size.d_model, config.context_length, config.batch_size
    n = approx_parameters(L, d)
    per_step = step_flops(L, d, B, T)
    windows = config.eval_windows or WHOLE_SPLIT_WINDOWS
    final_windows = getattr(config, "final_eval_windows", None) or WHOLE_SPLIT_WINDOWS
    evaluations = math.ceil(config.max_steps / config.eval_every) + 1
    # train + val windows at every evaluation; train, val and test once more on the final set
    evaluated = float(evaluations * windows * T * 2 + final_windows * T * 3)
    eval_flops = evaluated * (2 * n + 2 * L * T * d)
    eval_batches = (
        evaluations * 2 * math.ceil(windows / config.eval_batch_size)  # launches on a GPU
        + 3 * math.ceil(final_windows / config.eval_batch_size)
    )

    def cpu(threads: int) -> float:
        evaluation = CPU_ACTIVATION_S * L * d * evaluated / 3 + eval_flops / CPU_THREAD_FLOPS  # forward only
        return config.max_steps * cpu_step_s(L, d, B, T, threads) + evaluation / threads

    checkpoints = (CHECKPOINTS_PER_GPU_RUN + 1) * n * CHECKPOINT_BYTES_PER_PARAMETER / CHECKPOINT_UPLOAD_BYTES_PER_S
    gpu_eval = eval_flops / gpu.flops + eval_batches * L * gpu.layer_launch_s / 3
    compile_s = gpu.warm_compile_s if warm else gpu.cold_compile_s
    gpu_s = compile_s + config.max_steps * gpu.step_s(L, per_step) + gpu_eval + checkpoints  # imports: per worker
    tokens = float(config.max_steps * B * T)
    return _TrialCost(tokens, evaluated, config.max_steps * per_step + eval_flops, cpu(threads), cpu(1), gpu_s)


def _graph(config: Any) -> tuple[Any, ...]:
    """What one compiled graph serves: the trials that differ only in seed or schedule share it."""
    size = config.model_size()
    return (config.variant, size.n_layer, size.n_head, size.d_model, config.batch_size, config.context_length)


def _gpu_seconds(configs: Sequence[Any], gpu: GpuModel) -> float:
    """The trials one after another on one H200, in one worker: its imports once, a cold compile
    per graph, warm ones for the other trials of a graph."""
    seen: set[tuple[Any, ...]] = set()
    total = gpu.imports_s if configs else 0.0
    for config in configs:
        total += _trial_cost(config, threads=1, gpu=gpu, warm=_graph(config) in seen).gpu_s
        seen.add(_graph(config))
    return total


def estimate(
    trials: Sequence[Any],
    *,
    cpus_per_trial: int,
    gpus_per_trial: float,
    total_cpus: float | None = None,
    measured: MeasuredConstants | None = None,
) -> CostEstimate:
    """Cost of ``trials`` (:class:`~harness.studies.spec.grid.Trial`). ``total_cpus``: the CPUs
    of the Ray cluster, when known (for the wall-time estimate of CPU studies); ``measured``: a
    GPU's constants (default: :func:`load_measured_constants`)."""
    gpu = GpuModel.from_constants(measured if measured is not None else load_measured_constants())
    configs = [t.config for t in trials]
    costs = [_trial_cost(c, threads=cpus_per_trial, gpu=gpu, warm=True) for c in configs]
    gpu_s = _gpu_seconds(configs, gpu)
    paper = None
    if gpus_per_trial > 0:
        packing = min(gpu.packing, 1.0 / gpus_per_trial) if gpus_per_trial < 1 else 1.0
        wall = ((gpu_s - gpu.imports_s) / packing + gpu.imports_s) / 3600  # the packed workers import together
        on = f"on one H200 with {gpus_per_trial:g} GPU per trial"
    else:
        cores = total_cpus or cpus_per_trial
        concurrent = max(1, min(int(cores // cpus_per_trial), len(trials) or 1))
        slowdown = CPU_CONCURRENT_SLOWDOWN if concurrent > 1 else 1.0
        wall = sum(CPU_TRIAL_FIXED_S + slowdown * c.cpu_s for c in costs) / concurrent / 3600
        on = f"on {cores:g} CPU cores ({cpus_per_trial} per trial)"
        paper = _gpu_seconds([_at_paper_size(c) for c in configs], gpu) / 3600
    return CostEstimate(
        trials=len(trials),
        train_tokens=sum(c.tokens for c in costs),
        eval_tokens=sum(c.evaluated for c in costs),
        flops=sum(c.flops for c in costs),
        cpu_core_hours=sum(CPU_TRIAL_FIXED_S + c.cpu_core_s for c in costs) / 3600,
        h200_hours=gpu_s / 3600,
        wall_hours=wall,
        on=on,
        assumptions=assumptions(gpu),
        paper_h200_hours=paper,
    )


def _at_paper_size(config: Any) -> Any:
    return config.model_copy(update={"size": "paper", "n_layer": None, "n_head": None, "d_model": None})


def assumptions(gpu: GpuModel) -> tuple[str, ...]:
    """The constants behind an estimate, in words (the dry run prints them)."""
    paper = gpu.step_s(6, step_flops(6, 256, 64, 256))
    return (
        f"CPU step = {CPU_ACTIVATION_S:.3g} s x layers x width x tokens + FLOPs / {CPU_THREAD_FLOPS:.3g} FLOP/s, "
        "over the trial's threads (fitted to ega-mope, T = 128, batch 16, one thread: nano 57 ms, L3H4d96 149 ms, "
        "L4H4d128 270 ms); "
        f"x{CPU_CONCURRENT_SLOWDOWN:g} when trials share the cores; {CPU_TRIAL_FIXED_S:.0f} s per trial to start",
        f"H200 ({gpu.source}): compiled bf16 step = max({gpu.layer_launch_s * 1000:.2f} ms x layers, "
        f"FLOPs / {gpu.flops:.2g} FLOP/s) ({paper * 1000:.1f} ms at size paper, T = 256, batch 64); "
        f"{gpu.imports_s:.0f} s of imports per worker; per trial compile {gpu.cold_compile_s:.0f} s cold "
        "(once per graph) / "
        f"{gpu.warm_compile_s:.0f} s warm, {CHECKPOINTS_PER_GPU_RUN + 1} checkpoints of "
        f"{CHECKPOINT_BYTES_PER_PARAMETER:g} B/parameter uploaded at {CHECKPOINT_UPLOAD_BYTES_PER_S / 1e6:.0f} MB/s; "
        f"packed trials up to x{gpu.packing:g}",
    )
