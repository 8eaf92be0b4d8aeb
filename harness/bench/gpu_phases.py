"""The phases of the GPU check (:mod:`harness.bench.gpu_check`), each a function
``phase(settings, phase)`` that fills ``phase.rows``, ``phase.failures`` and, where it measures
one, ``phase.constants`` (step times, fixed costs: what the cost model reads).

Every phase trains with the mixed-precision plan (:mod:`harness.training.device_plan`: bf16
autocast, the fused AdamW, clipping by ``clip_grad_norm_``, the padded output layer), on a GPU
and, in ``--cpu-smoke``, on CPU.
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from harness.bench.gpu_settings import FLASH_FAMILIES, KERNEL_FAMILIES, Phase, Settings
from harness.bench.host_syncs import HostReads, SyncWindow, cuda_syncs


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _autocast(settings: Settings) -> Any:
    return torch.autocast(device_type=settings.device, dtype=torch.bfloat16, enabled=settings.bf16)


def _config(settings: Settings, variant: str, **fields: Any) -> Any:
    from harness.training.config import TrainConfig

    base = {
        "variant": variant,
        "size": settings.size,
        "context_length": settings.context_length,
        "batch_size": settings.batch_size,
        "accelerator": "gpu" if settings.device == "cuda" else "cpu",
        "precision": "bf16-mixed",
    }
    return TrainConfig(**{**base, **fields})


# -- 1. the real training run ----------------------------------------------------------------------


def training_run(settings: Settings, phase: Phase) -> None:
    """``train()`` as a study runs it (the recipe's dropout, the callbacks, evaluations, checkpoints,
    ``compile`` as the settings say), then (``train_warm_steps`` > 0) again on the warm compile
    cache: the run finishes, the loss falls below the uniform guess, no steady step waits for the
    device; the compile costs, the step time and the checkpoint's size and copy time are measured."""
    with tempfile.TemporaryDirectory(prefix="harness-gpu-check-run-") as tmp:
        first = _one_run(settings, phase, Path(tmp) / "cold", settings.train_steps, count_syncs=True)
        if first is None:
            return
        result, config = first
        step_s = settings.batch_size * settings.context_length / result.tokens_per_s
        phase.constants["train_step_s"] = {"size": settings.size, "variant": settings.train_variant, "step_s": step_s}
        cold = _compile_seconds(config, settings, step_s) if result.compiled else None
        _checkpoint_cost(result.checkpoint_path, phase)
        phase.rows[0]["compile_s"] = cold
        if cold is not None:
            phase.constants["cold_compile_s"] = cold
        if not settings.train_warm_steps:  # the warm run is optional (a lease spends its minutes elsewhere)
            return
        second = _one_run(settings, phase, Path(tmp) / "warm", settings.train_warm_steps, count_syncs=False)
        warm = _compile_seconds(config, settings, step_s) if second is not None and second[0].compiled else None
    phase.rows[-1]["compile_s"] = warm
    if warm is not None and len(phase.rows) > 1:
        phase.constants["warm_compile_s"] = warm


def _one_run(settings: Settings, phase: Phase, directory: Path, steps: int, *, count_syncs: bool) -> Any:
    from harness.training.run import train

    config = _config(
        settings,
        settings.train_variant,
        max_steps=steps,
        eval_every=min(settings.train_eval_every, steps),
        eval_windows=settings.train_eval_windows,
        final_eval_windows=settings.train_final_eval_windows,
        eval_batch_size=settings.batch_size,
        warmup_steps=min(100, steps // 4),
        compile=settings.compile,
        checkpoint_dir=str(directory),
    )
    window = SyncWindow(range(*settings.sync_steps)) if count_syncs else None
    result = train(config, callbacks=[window] if window else [], mlflow_logging=False, progress_bar=False)
    uniform = math.log(65)  # TinyShakespeare's 65 characters
    row = {
        "run": "cold cache" if count_syncs else "warm cache",
        "status": result.status,
        "steps": result.steps,
        "val_loss": result.final_val_loss,
        "tokens_per_s": result.tokens_per_s,
        "wall_s": result.wall_time_s,
        "compiled": result.compiled,
        "plan": result.device_plan,
    }
    if window is not None:
        row["syncs_per_steady_step"] = window.total / max(1, len(window.per_step))
        row["sync_steps"] = len(window.per_step)
        if window.total:
            phase.failures.append(f"the real run waited for the device in its steady steps: {window.per_step}")
    phase.rows.append(row)
    if result.status != "finished" or not math.isfinite(result.final_val_loss):
        phase.failures.append(f"the real training run ended {result.status} (val loss {result.final_val_loss})")
        return None
    if count_syncs and steps >= 100 and not result.final_val_loss < uniform:
        phase.failures.append(f"the val loss {result.final_val_loss:.3f} did not fall below log 65 = {uniform:.3f}")
    return result, config


def _compile_seconds(config: Any, settings: Settings, step_s: float) -> float | None:
    """Seconds the compile added to the run's first step: the first step's duration the run
    recorded in the node's marker of its graph (:func:`harness.training.compile.mark_warm`), less
    a steady step."""
    from harness.training.compile import cache_dir, graph_key

    key = graph_key(config, device="cuda" if settings.device == "cuda" else "cpu")
    marker = cache_dir() / "harness-graphs" / f"{key}.json"
    return json.loads(marker.read_text())["compile_s"] - step_s if marker.is_file() else None


def _checkpoint_cost(path: str | None, phase: Phase) -> None:
    """The checkpoint's size and the seconds one local copy takes (a lower bound of an upload)."""
    if not path:
        return
    with tempfile.TemporaryDirectory(prefix="harness-ckpt-copy-") as tmp:
        t0 = time.perf_counter()
        shutil.copy(path, Path(tmp) / "copy.ckpt")
        copy_s = time.perf_counter() - t0
    phase.constants["checkpoint_mb"] = Path(path).stat().st_size / 2**20
    phase.constants["checkpoint_copy_s"] = copy_s


# -- the mixed plan's training step, outside Lightning ---------------------------------------------


def plan_step(settings: Settings, variant: str, corpus: Any, *, compile: bool, T: int | None = None) -> Any:
    """The training step of ``variant`` as the module takes it under the mixed plan: batch k of
    seed 0, the fused AdamW of the recipe's groups, the schedule, the padded output layer,
    ``clip_grad_norm_``. Returns ``(step(k) -> loss, model)``."""
    from harness.datasets import sample_train_batch
    from harness.training.compile import CompiledForward
    from harness.training.device_plan import choose_device_plan
    from harness.training.module import build_char_model, learning_rate, optimizer_groups

    T = T or settings.context_length
    config = _config(settings, variant, context_length=T)
    plan = choose_device_plan(config, cuda_available=settings.device == "cuda", bf16_supported=True, cpus=1)
    torch.manual_seed(0)
    model = build_char_model(config, corpus.vocab_size).to(settings.device).train()
    optimizer = torch.optim.AdamW(
        optimizer_groups(model, config.weight_decay),
        lr=config.lr,
        betas=(config.beta1, config.beta2),
        fused=plan.fused_optimizer,
    )
    forward = CompiledForward(model) if compile else model
    parameters = [p for group in optimizer.param_groups for p in group["params"]]

    def step(k: int) -> Tensor:
        x, y = sample_train_batch(corpus.train, block_size=T, batch_size=settings.batch_size, seed=0, step=k)
        x = torch.from_numpy(x.copy()).pin_memory() if settings.device == "cuda" else torch.from_numpy(x.copy())
        y = torch.from_numpy(y.copy()).pin_memory() if settings.device == "cuda" else torch.from_numpy(y.copy())
        x, y = x.to(settings.device, non_blocking=True), y.to(settings.device, non_blocking=True)
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(k, config)
        with _autocast(settings):
            logits = forward(x, vocab_multiple=plan.vocab_multiple)  # (B, T, V padded)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(parameters, plan.clip_grad_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return step, model


# -- 2. host syncs per steady step ------------------------------------------------------------------


def host_syncs(settings: Settings, phase: Phase) -> None:
    """Waits for the device in three steady training steps of each variant (CUDA's sync debug mode;
    on CPU the host reads themselves, :class:`~harness.bench.host_syncs.HostReads`): none expected.
    The issue this guards: ALiBi and relative MOPE waited 18 times a step at T = 256."""
    from harness.datasets import load

    corpus = load("tinyshakespeare", progress=False)
    T = settings.sync_context_length
    for variant in settings.sync_variants:
        step, _ = plan_step(settings, variant, corpus, compile=False, T=T)
        for k in range(2):
            step(k)
        _sync(settings.device)
        counter = cuda_syncs() if settings.device == "cuda" else HostReads()
        with counter as counts:
            for k in range(2, 5):
                step(k)
        counts = counts.counts if isinstance(counts, HostReads) else counts
        phase.rows.append(
            {"variant": variant, "T": T, "syncs_per_step": sum(counts.values()) / 3, "what": dict(counts)}
        )
        if counts:
            phase.failures.append(f"{variant} at T = {T}: {dict(counts)} in 3 steady steps")


# -- 3. attention kernels and a profiler trace -----------------------------------------------------


def attention_kernels(settings: Settings, phase: Phase) -> None:
    """The SDPA kernel each family's attention layer runs forward and backward under bf16 (the
    flash kernel where eligible, else a failure), and one profiled training step of the real
    variant, saved as a Chrome trace, with the fraction of its wall time the GPU was busy."""
    from harness.bench.attention import build_attention

    T, H = settings.kernel_context_length, settings.attention_heads
    d = H * settings.attention_head_dim
    for family in KERNEL_FAMILIES:
        torch.manual_seed(0)
        layer, position = build_attention(family, d, H)
        layer, position = layer.to(settings.device), position.to(settings.device)
        x = torch.randn(2, T, d, device=settings.device, requires_grad=True)
        with torch.profiler.profile() as prof, _autocast(settings):
            out, _ = layer(x, position)
            out.float().sum().backward()
        kernels = sorted({e.name for e in prof.events() if _is_sdpa_kernel(e.name)})
        phase.rows.append({"family": family, "T": T, "kernels": kernels})
        fused = [k for k in kernels if "flash" in k or "cudnn" in k]  # cuDNN's is flash-style too (Hopper)
        if family in FLASH_FAMILIES and (not fused or len(kernels) != len(fused)):
            phase.failures.append(f"{family}: runs {kernels}, not the flash (or cuDNN) kernel alone")
    _profiled_step(settings, phase)


def _is_sdpa_kernel(name: str) -> bool:
    """One of SDPA's implementations (flash, memory-efficient, cuDNN, math; CPU's or CUDA's), not
    the dispatching ``aten::scaled_dot_product_attention`` nor a backward kernel."""
    return name.startswith("aten::_scaled_dot_product") and "backward" not in name


def _profiled_step(settings: Settings, phase: Phase) -> None:
    from harness.datasets import load

    step, _ = plan_step(settings, settings.train_variant, load("tinyshakespeare", progress=False), compile=False)
    for k in range(2):
        step(k)
    _sync(settings.device)
    activities = [torch.profiler.ProfilerActivity.CPU]
    if settings.device == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    t0 = time.perf_counter()
    with torch.profiler.profile(activities=activities) as prof:
        for k in range(2, 5):
            step(k)
        _sync(settings.device)
    wall_us = (time.perf_counter() - t0) * 1e6
    trace = Path(tempfile.gettempdir()) / f"harness-gpu-check-{settings.train_variant}-trace.json"
    prof.export_chrome_trace(str(trace))
    busy = None
    if settings.device == "cuda":
        kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        busy = sum(e.time_range.elapsed_us() for e in kernels) / wall_us
    phase.rows.append({"family": f"{settings.train_variant} step x3", "trace": str(trace), "gpu_busy": busy})
    phase.constants["gpu_busy_fraction"] = busy


# -- 4. bf16 correctness --------------------------------------------------------------------------


def bf16_correctness(settings: Settings, phase: Phase) -> None:
    """The gate's fold under bf16 against a float64 oracle: the output no further off than bf16
    attention with an exact bias, the gradient of log g within bf16's rounding of the fp32 one;
    the ALiBi, relative MOPE and pairwise layers at T = 256 under bf16 within bf16's error of
    their float64 selves."""
    from harness.models import key_biased_attention

    device, T = settings.device, settings.kernel_context_length
    g = torch.Generator(device="cpu").manual_seed(0)
    q, k, v = (torch.randn(2, 4, T, 32, generator=g).to(device) for _ in range(3))
    log_g = F.logsigmoid(3 * torch.randn(2, 4, T, generator=g)).to(device).requires_grad_(True)
    up = torch.randn(2, 4, T, 32, generator=g).to(device)
    ref, ref_grad = biased_attention_oracle(q, k, v, log_g, up)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        out = key_biased_attention(q, k, v, log_g)
    (grad,) = torch.autograd.grad((out.float() * up).sum(), (log_g,))
    floor = bf16_floor(q, k, v, log_g, ref)
    error = float((out.detach().double() - ref).abs().max())
    grad_error = float((grad.double() - ref_grad).abs().max() / ref_grad.abs().max())
    phase.rows.append({"case": "ega fold", "T": T, "error": error, "bf16_floor": floor, "grad_log_g_rel": grad_error})
    if error > 1.05 * floor:
        phase.failures.append(f"the bf16 fold is off by {error:.2e}, bf16 attention itself by {floor:.2e}")
    if grad_error > 0.03:
        phase.failures.append(f"the bf16 gradient of log g is off by {grad_error:.1%} of its largest entry")
    for family in ("alibi", "mope-rel", "ega-qnorm", "mope-bias"):
        _layer_against_float64(settings, family, phase)


def biased_attention_oracle(q: Tensor, k: Tensor, v: Tensor, log_g: Tensor, up: Tensor) -> tuple[Tensor, Tensor]:
    """Causal softmax with the explicit bias in float64 (the T x T matrix: the oracle), and the
    gradient of log g of (out * up).sum()."""
    bias = log_g.detach().double().requires_grad_(True)
    T, hd = q.size(-2), q.size(-1)
    scores = q.double() @ k.double().transpose(-1, -2) / math.sqrt(hd) + bias[..., None, :]
    causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    out = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1) @ v.double()
    (grad,) = torch.autograd.grad((out * up.double()).sum(), (bias,))
    return out.detach(), grad


def bf16_floor(q: Tensor, k: Tensor, v: Tensor, log_g: Tensor, ref: Tensor) -> float:
    """The error of bf16 attention with an exact bias and a bf16 output (what bf16 cannot avoid)."""
    rounded = [t.bfloat16().double() for t in (q, k, v)]
    floor, _ = biased_attention_oracle(*rounded, log_g, torch.zeros_like(rounded[0]))
    return float((floor.bfloat16().double() - ref).abs().max())


def _layer_against_float64(settings: Settings, family: str, phase: Phase) -> None:
    import copy

    from harness.bench.attention import build_attention

    T, H = settings.kernel_context_length, 4
    torch.manual_seed(1)
    layer, position = build_attention(family, 64, H)
    layer, position = layer.to(settings.device), position.to(settings.device)
    x = torch.randn(1, T, 64, device=settings.device)
    with torch.no_grad():
        ref, _ = copy.deepcopy(layer).double()(x.double(), copy.deepcopy(position).double())
        with _autocast(settings):
            out, _ = layer(x, position)
    error = float((out.double() - ref).abs().max() / ref.abs().max())
    phase.rows.append({"case": f"{family} layer", "T": T, "error": error, "bf16_floor": None, "grad_log_g_rel": None})
    if not error < 3e-2:
        phase.failures.append(f"{family}: the bf16 layer is off by {error:.1%} of its largest output")


# -- 5. training speed ---------------------------------------------------------------------------


def train_speed(settings: Settings, phase: Phase) -> None:
    """Tokens/s of the mixed plan's step per variant (compiled as the settings say), the step time
    against ``baseline``, peak memory; judged against the settings' thresholds."""
    from harness.datasets import load

    corpus = load("tinyshakespeare", progress=False)
    tokens = settings.batch_size * settings.context_length
    for variant in settings.variants:
        if settings.device == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        step, model = plan_step(settings, variant, corpus, compile=settings.compile)
        t0 = time.perf_counter()
        first = [float(step(k)) for k in range(settings.warmup)]
        _sync(settings.device)
        warmup_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        losses = [step(settings.warmup + k) for k in range(settings.steps)]
        _sync(settings.device)
        elapsed = time.perf_counter() - t0
        last = float(losses[-1])
        phase.rows.append(
            {
                "variant": variant,
                "parameters": model.num_parameters(),
                "step_ms": 1000 * elapsed / settings.steps,
                "tokens_per_s": tokens * settings.steps / elapsed,
                "peak_mib": torch.cuda.max_memory_allocated() / 2**20 if settings.device == "cuda" else None,
                "warmup_s": warmup_s,
                "first_loss": first[0],
                "last_loss": last,
            }
        )
        if not math.isfinite(last):
            phase.failures.append(f"{variant}: loss {last} after {settings.warmup + settings.steps} steps")
        elif settings.steps + settings.warmup >= 50 and not last < first[0]:
            phase.failures.append(f"{variant}: loss did not fall ({first[0]:.3f} -> {last:.3f})")
    judge_speed(settings, phase)


def judge_speed(settings: Settings, phase: Phase) -> None:
    """Each row's step against baseline's, the step times as measured constants, and failures for
    a baseline step over ``max_baseline_step_ms`` or a ratio over ``max_step_ratio``."""
    base = next((r for r in phase.rows if r["variant"] == "baseline"), None)
    for row in phase.rows:
        row["step_time_ratio"] = row["step_ms"] / base["step_ms"] if base else None
    phase.constants["step_s"] = {row["variant"]: row["step_ms"] / 1000 for row in phase.rows}
    phase.constants["step_size"] = settings.size
    if base and settings.max_baseline_step_ms and base["step_ms"] > settings.max_baseline_step_ms:
        phase.failures.append(f"baseline: {base['step_ms']:.1f} ms a step, over {settings.max_baseline_step_ms} ms")
    for row in phase.rows:
        ratio = row["step_time_ratio"]
        if settings.max_step_ratio and ratio is not None and ratio > settings.max_step_ratio:
            phase.failures.append(f"{row['variant']}: x{ratio:.2f} of baseline's step, over x{settings.max_step_ratio}")


# -- 6. compile per run ---------------------------------------------------------------------------


def compile_per_run(settings: Settings, phase: Phase) -> None:
    """Ten variants and two shapes compiled in one process, as a reused Ray worker runs its trials
    (:func:`harness.training.compile.begin_compiled_run` before each): each stays one static graph
    that runs every step (a recording backend sees what Dynamo hands any backend); then the
    compiled training step of one variant per family (Dynamo and AOTAutograd, bf16): no graph
    break, no recompile after the first training and evaluation steps."""
    from harness.bench.compile_cost import check_graph

    for batch, T in settings.compile_shapes:
        for variant in TEN_VARIANTS:
            row = _compiled_twice(settings, variant, batch, T)
            phase.rows.append(row)
            if row["graphs"] != 1 or row["calls"] != 2 or not row["static"]:
                phase.failures.append(f"{variant} at batch {batch}, T = {T}: {row}")
    for variant in settings.graph_variants:
        config = _config(settings, variant, eval_batch_size=settings.batch_size)
        check = check_graph(config, backend="aot_eager", device=settings.device, bf16=True)
        phase.rows.append(
            {"variant": variant, "graphs": check.graphs, "breaks": check.breaks, "recompiles": check.recompiles}
        )
        if not check.ok:
            phase.failures.append(f"{variant}: graph breaks {check.breaks}, {check.recompiles} recompile(s)")


#: The ten variants of :func:`compile_per_run`: every position family, EGA, the pairwise gate, lagged keys.
TEN_VARIANTS = (
    "baseline",
    "learned-pe",
    "rope",
    "alibi",
    "ega",
    "ega-mope",
    "mope-rel",
    "ega-mope-rel",
    "ega-qnorm",
    "ega-mope-lagged",
)


class GraphRecorder:
    """A ``torch.compile`` backend that records each graph's input shapes and runs it as it is,
    counting the calls: a fallback to eager shows as no graph, a break as two, a dynamic shape
    as a symbolic size."""

    def __init__(self) -> None:
        self.graphs: list[list[Any]] = []
        self.calls = 0

    def __call__(self, gm: Any, example_inputs: list[Any]) -> Callable[..., Any]:
        self.graphs.append([tuple(t.shape) if isinstance(t, Tensor) else t for t in example_inputs])

        def run(*args: Any) -> Any:
            self.calls += 1
            return gm.forward(*args)

        return run

    @property
    def static(self) -> bool:
        sizes = [d for graph in self.graphs for item in graph for d in (item if isinstance(item, tuple) else (item,))]
        return all(isinstance(d, int) for d in sizes)


def _compiled_twice(settings: Settings, variant: str, batch: int, T: int) -> dict[str, Any]:
    from harness.models import build_model
    from harness.training.compile import CompiledForward, begin_compiled_run

    begin_compiled_run(threads=1)
    torch.manual_seed(0)
    model = build_model(variant, size=settings.size, vocab_size=65, block_size=T, dropout=0.1).to(settings.device)
    recorder = GraphRecorder()
    forward = CompiledForward(model, backend=recorder)
    for step in range(2):
        x = torch.randint(65, (batch, T), generator=torch.Generator().manual_seed(step)).to(settings.device)
        with _autocast(settings):
            forward(x, vocab_multiple=64).float().square().mean().backward()
    graphs = len(recorder.graphs)
    return {
        "variant": variant,
        "batch": batch,
        "T": T,
        "graphs": graphs,
        "calls": recorder.calls,
        "static": recorder.static,
    }
