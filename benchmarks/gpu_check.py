"""One-call GPU check: does the harness train fast and correctly on this GPU?

    python benchmarks/gpu_check.py                 # a machine with a CUDA GPU: <= 8 min on one H200
    python benchmarks/gpu_check.py --cpu-smoke     # the same code paths on CPU, a few steps (run by the tests)

Four parts, each a named phase below; a table is printed and JSON written
(``benchmarks/results/gpu_check.json``, ``gpu_check_cpu_smoke.json`` for the smoke run):

1. **training speed** (:func:`train_speed`): the ``paper`` size (L6 H8 d256), T = 256,
   batch 64, bf16 autocast and ``torch.compile``, 300 timed steps each of ``baseline``,
   ``ega`` and ``ega-mope`` on TinyShakespeare batches (forward, cross-entropy, backward,
   clipping, fused AdamW): tokens/s, step time against ``baseline``, peak GPU memory, the
   compile time, and whether the loss fell;
2. **compiled graphs** (:func:`compiled_graphs`): the compiled training step of one variant per
   family (Inductor, bf16): graph breaks beyond the documented ones and recompiles after the
   first training and evaluation steps fail the check;
3. **folded attention at long context** (:func:`folded_attention`): the EGA attention
   layer (key gate folded into one SDPA call) against the plain layer at T = 4096 and
   8192 (B = 4, H = 8, head dim 32, bf16): forward + backward time and peak memory, and
   the folded kernel against the naive softmax with an explicit T x T bias (fp32) as an
   oracle. The check fails if the gated layer's extra memory reaches a quarter of one
   T x T score tensor (it would mean a T x T tensor was built);
4. **packed trials** (:func:`packed_study`): a real ``harness run`` of 4 trials with
   ``gpus: 0.25`` (all on the one GPU at once) and the same study with 1 trial: total
   training tokens/s of the four against the one alone (per-trial throughput summed, and
   trained tokens over the study's wall time, Ray start-up included).

Exit status: 0 when every check passed, 1 when any failed (the table says which), 2 for
bad usage (no CUDA device without ``--cpu-smoke``). The checks that fail: an exception in
a phase, a non-finite or non-decreasing loss, an oracle mismatch, a T x T allocation, a
trial that did not finish, and (full mode) a total time over ``--budget-s`` (480 s).

``--cpu-smoke`` runs every phase through the same functions on CPU with a smaller
setting (nano, fp32, no compile in the speed phase, the graphs through Dynamo and
AOTAutograd only (``aot_eager``), T = 128 and 256 for the attention, 4 trials of a few
steps with ``gpus: 0``): it checks that the script works, not the speed of a GPU.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
import yaml
from torch import Tensor

RESULTS = Path(__file__).resolve().parent / "results"


@dataclass(frozen=True)
class Settings:
    """What one check run does (:data:`FULL` on a GPU, :data:`SMOKE` on CPU)."""

    device: str
    size: str
    context_length: int
    batch_size: int
    steps: int  # timed training steps per variant
    warmup: int  # untimed steps first (compilation, autotuning, allocator)
    compile: bool
    bf16: bool
    variants: tuple[str, ...] = ("baseline", "ega", "ega-mope")
    attention_lengths: tuple[int, ...] = (4096, 8192)
    attention_batch: int = 4
    attention_heads: int = 8
    attention_head_dim: int = 32
    attention_repeats: int = 5
    study_trials: int = 4
    study_gpus: float = 0.25
    study_cpus: int = 2
    study_steps: int = 300
    budget_s: float | None = 480.0
    graph_backend: str = "inductor"
    graph_variants: tuple[str, ...] = ("baseline", "rope", "alibi", "ega", "ega-mope", "ega-mope-rel", "phase-mope")


FULL = Settings(
    device="cuda", size="paper", context_length=256, batch_size=64, steps=300, warmup=10, compile=True, bf16=True
)
SMOKE = Settings(
    device="cpu",
    size="nano",
    context_length=64,
    batch_size=4,
    steps=3,
    warmup=1,
    compile=False,
    bf16=False,
    attention_lengths=(128, 256),
    attention_batch=2,
    attention_heads=2,
    attention_repeats=1,
    study_gpus=0.0,
    study_cpus=1,
    study_steps=4,
    budget_s=None,
    graph_backend="aot_eager",
    graph_variants=("baseline", "ega-mope-rel"),
)


@dataclass
class Phase:
    """One part of the check: its measurements and the problems it found."""

    name: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failures


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _reset_peak(device: str) -> None:
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def _peak_mib(device: str) -> float | None:
    return torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else None


def _autocast(settings: Settings) -> Any:
    return torch.autocast(device_type=settings.device, dtype=torch.bfloat16, enabled=settings.bf16)


# -- 1. training speed ------------------------------------------------------------------------------


def _trainer_step(variant: str, settings: Settings, corpus: Any) -> tuple[Callable[[int], Tensor], int]:
    """One training step of ``variant`` as the harness trains it: batch k of seed 0, the
    shared recipe's AdamW groups and schedule, clipping; returns (step(k) -> loss, parameters)."""
    from harness.datasets import sample_train_batch
    from harness.models import build_model
    from harness.training.compile import CompiledForward
    from harness.training.config import TrainConfig
    from harness.training.module import learning_rate, optimizer_groups

    config = TrainConfig(variant=variant, size=settings.size, context_length=settings.context_length)
    torch.manual_seed(0)
    model = build_model(variant, size=settings.size, vocab_size=corpus.vocab_size, block_size=settings.context_length)
    model.to(settings.device).train()
    parameters = model.num_parameters()
    fused = {"fused": True} if settings.device == "cuda" else {}
    optimizer = torch.optim.AdamW(
        optimizer_groups(model, config.weight_decay), lr=config.lr, betas=(config.beta1, config.beta2), **fused
    )
    # The training step's compiled forward, as harness.training.run compiles it.
    forward = CompiledForward(model) if settings.compile else model

    def step(k: int) -> Tensor:
        x, y = sample_train_batch(
            corpus.train, block_size=settings.context_length, batch_size=settings.batch_size, seed=0, step=k
        )
        x = torch.from_numpy(x).to(settings.device, non_blocking=True)
        y = torch.from_numpy(y).to(settings.device, non_blocking=True)
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(k, config)
        with _autocast(settings):
            logits = forward(x)  # (B, T, V)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return step, parameters


def train_speed(settings: Settings, phase: Phase) -> None:
    """Tokens/s, step time against baseline, peak memory and compile time per variant."""
    from harness.datasets import load

    corpus = load("tinyshakespeare", progress=False)
    tokens = settings.batch_size * settings.context_length
    for variant in settings.variants:
        _reset_peak(settings.device)
        step, parameters = _trainer_step(variant, settings, corpus)
        t0 = time.perf_counter()
        first = [float(step(k)) for k in range(settings.warmup)]
        _sync(settings.device)
        warmup_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        losses = [step(settings.warmup + k) for k in range(settings.steps)]
        _sync(settings.device)
        elapsed = time.perf_counter() - t0
        last = float(losses[-1])
        row = {
            "variant": variant,
            "parameters": parameters,
            "step_ms": 1000 * elapsed / settings.steps,
            "tokens_per_s": tokens * settings.steps / elapsed,
            "peak_mib": _peak_mib(settings.device),
            "warmup_s": warmup_s,
            "first_loss": first[0],
            "last_loss": last,
        }
        phase.rows.append(row)
        if not math.isfinite(last):
            phase.failures.append(f"{variant}: loss {last} after {settings.warmup + settings.steps} steps")
        elif settings.steps + settings.warmup >= 50 and not last < first[0]:
            phase.failures.append(f"{variant}: loss did not fall ({first[0]:.3f} -> {last:.3f})")
    base = next((r for r in phase.rows if r["variant"] == "baseline"), None)
    for row in phase.rows:
        row["step_time_ratio"] = row["step_ms"] / base["step_ms"] if base else None


# -- 2. compiled graphs -------------------------------------------------------------------------------


def compiled_graphs(settings: Settings, phase: Phase) -> None:
    """Graph breaks and recompiles of the compiled training step, per variant
    (:func:`harness.bench.compile_cost.check_graph`: a training step, an eager
    evaluation, more training steps); the documented breaks are counted apart."""
    from harness.bench.compile_cost import check_graph
    from harness.training.config import TrainConfig

    for variant in settings.graph_variants:
        config = TrainConfig(
            variant=variant,
            size=settings.size,
            context_length=settings.context_length,
            batch_size=settings.batch_size,
            eval_batch_size=settings.batch_size,
        )
        check = check_graph(config, backend=settings.graph_backend, device=settings.device, bf16=settings.bf16)
        phase.rows.append(
            {
                "variant": variant,
                "backend": settings.graph_backend,
                "graphs": check.graphs,
                "graph_breaks": sum(check.breaks.values()),
                "documented_breaks": sum(check.documented_breaks.values()),
                "recompiles": check.recompiles,
                "first_step_s": check.first_step_s,
            }
        )
        if not check.ok:
            phase.failures.append(f"{variant}: graph breaks {check.breaks}, {check.recompiles} recompile(s)")


# -- 3. folded attention at long context ------------------------------------------------------------


def _attention_layer(gated: bool, settings: Settings) -> tuple[Any, Any]:
    """The plain (``baseline``) or gated (``ega``) attention layer of ``harness bench attention``,
    seed 0, on the device, with its position component (none)."""
    from harness.bench.attention import build_attention

    d, H = settings.attention_heads * settings.attention_head_dim, settings.attention_heads
    torch.manual_seed(0)
    layer, position = build_attention("ega" if gated else "baseline", d, H)
    return layer.to(settings.device), position


def _time_layer(layer: Any, position: Any, x: Tensor, settings: Settings) -> tuple[float, float | None]:
    """Median forward + backward time (ms) and the peak memory above the input (MiB)."""
    times = []
    for repeat in range(settings.attention_repeats + 1):  # the first pass warms up, untimed
        layer.zero_grad(set_to_none=True)
        _sync(settings.device)
        if repeat == settings.attention_repeats:
            _reset_peak(settings.device)
        base = torch.cuda.memory_allocated() if settings.device == "cuda" else 0
        t0 = time.perf_counter()
        with _autocast(settings):
            out, _ = layer(x, position)
        out.float().sum().backward()
        _sync(settings.device)
        times.append(time.perf_counter() - t0)
    peak = (torch.cuda.max_memory_allocated() - base) / 2**20 if settings.device == "cuda" else None
    return 1000 * sorted(times[1:])[len(times[1:]) // 2], peak


def _oracle_error(settings: Settings, T: int) -> float:
    """Largest |folded - naive| of key_biased_attention against softmax with an explicit
    T x T bias, fp32 (the naive side builds the T x T matrix: the oracle, not the method)."""
    from harness.models import key_biased_attention

    g = torch.Generator(device=settings.device).manual_seed(0)
    B, H, hd = 1, settings.attention_heads, settings.attention_head_dim
    q, k, v = (torch.randn(B, H, T, hd, device=settings.device, generator=g) for _ in range(3))
    bias = F.logsigmoid(torch.randn(B, H, T, device=settings.device, generator=g))  # log g_j, (B, H, T)
    precision = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")  # no TF32 in the oracle comparison
    try:
        folded = key_biased_attention(q, k, v, bias)
        causal = torch.ones(T, T, dtype=torch.bool, device=settings.device).tril()
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(hd) + bias[:, :, None, :]  # (B, H, T, T)
        naive = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1) @ v
        return float((folded - naive).abs().max())
    finally:
        torch.set_float32_matmul_precision(precision)


def folded_attention(settings: Settings, phase: Phase) -> None:
    """The gated (folded) attention layer against the plain one at long context."""
    B, H = settings.attention_batch, settings.attention_heads
    d = H * settings.attention_head_dim
    for T in settings.attention_lengths:
        x = torch.randn(B, T, d, device=settings.device, requires_grad=True)
        plain_ms, plain_mib = _time_layer(*_attention_layer(False, settings), x, settings)
        gated_ms, gated_mib = _time_layer(*_attention_layer(True, settings), x, settings)
        error = _oracle_error(settings, T)
        score_mib = B * H * T * T * (2 if settings.bf16 else 4) / 2**20  # one T x T score tensor
        row = {
            "T": T,
            "plain_ms": plain_ms,
            "ega_ms": gated_ms,
            "time_ratio": gated_ms / plain_ms,
            "plain_peak_mib": plain_mib,
            "ega_peak_mib": gated_mib,
            "tt_tensor_mib": score_mib,
            "oracle_max_abs_error": error,
        }
        phase.rows.append(row)
        if not error < 1e-4:
            phase.failures.append(f"T={T}: folded attention differs from the naive oracle by {error:.2e}")
        if plain_mib is not None and gated_mib is not None and gated_mib - plain_mib > score_mib / 4:
            phase.failures.append(
                f"T={T}: the gated layer needs {gated_mib - plain_mib:.0f} MiB more than the plain one "
                f"(one T x T score tensor: {score_mib:.0f} MiB): a T x T tensor was built"
            )


# -- 4. packed trials --------------------------------------------------------------------------------


def _study_spec(settings: Settings, trials: int) -> dict[str, Any]:
    return {
        "name": f"gpu-check-{trials}",
        "datasets": ["tinyshakespeare"],
        "variants": ["baseline"],
        "seeds": trials,
        "sizes": [settings.size],
        "context_lengths": [settings.context_length],
        "train": {
            "max_steps": settings.study_steps,
            "batch_size": settings.batch_size,
            "eval_every": settings.study_steps,
            "eval_windows": 64,
            "warmup_steps": min(100, settings.study_steps // 2),
            "dropout": 0.0,
        },
        "resources": {"cpus": settings.study_cpus, "gpus": settings.study_gpus},
        "retries": 0,
    }


def _run_study(settings: Settings, trials: int, workdir: Path) -> dict[str, Any]:
    """``harness run`` of the study in a subprocess; its results table and wall time."""
    import polars as pl

    from harness.bench.study_overhead import run_study_cli

    spec_path = workdir / f"study-{trials}.yaml"
    spec_path.write_text(yaml.safe_dump(_study_spec(settings, trials)))
    done, wall = run_study_cli(spec_path, workdir, cwd=workdir)
    if done.returncode != 0:
        raise RuntimeError(f"harness run ({trials} trials) exited {done.returncode}:\n{done.stderr[-2000:]}")
    (table_path,) = (workdir / "results" / f"gpu-check-{trials}").glob("*/results.parquet")
    table = pl.read_parquet(table_path)
    return {"wall_s": wall, "rows": table.to_dicts()}


def packed_study(settings: Settings, phase: Phase) -> None:
    """Total training tokens/s of ``study_trials`` trials sharing the GPU against one alone."""
    tokens_per_trial = settings.study_steps * settings.batch_size * settings.context_length
    with tempfile.TemporaryDirectory(prefix="harness-gpu-check-") as tmp:
        for trials in (1, settings.study_trials):
            study = _run_study(settings, trials, Path(tmp))
            finished = [r for r in study["rows"] if r["status"] == "finished"]
            if len(finished) != trials:
                phase.failures.append(f"{trials}-trial study: {len(finished)} of {trials} trials finished")
            phase.rows.append(
                {
                    "trials": trials,
                    "gpus_per_trial": settings.study_gpus,
                    "summed_tokens_per_s": sum(r["tokens_per_s"] or 0.0 for r in finished),
                    "tokens_per_wall_s": tokens_per_trial * len(finished) / study["wall_s"],
                    "wall_s": study["wall_s"],
                }
            )
    alone = phase.rows[0]
    for row in phase.rows:
        row["speedup_vs_alone"] = row["summed_tokens_per_s"] / alone["summed_tokens_per_s"] if alone else None


# -- the check --------------------------------------------------------------------------------------

PHASES: tuple[tuple[str, Callable[[Settings, Phase], None]], ...] = (
    ("training speed", train_speed),
    ("compiled graphs", compiled_graphs),
    ("folded attention", folded_attention),
    ("packed trials", packed_study),
)


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.3g}" if abs(value) < 100 else f"{value:,.0f}"
    return str(value)


def print_report(phases: list[Phase], total_s: float, settings: Settings) -> None:
    for phase in phases:
        status = "ok" if phase.ok else "FAILED"
        print(f"\n== {phase.name} ({phase.seconds:.0f} s): {status}")
        if phase.rows:
            columns = list(phase.rows[0])
            cells = [[_fmt(row.get(c)) for c in columns] for row in phase.rows]
            widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
            print("  " + "  ".join(c.rjust(w) for c, w in zip(columns, widths, strict=True)))
            for r in cells:
                print("  " + "  ".join(v.rjust(w) for v, w in zip(r, widths, strict=True)))
        for failure in phase.failures:
            print(f"  FAILED: {failure}")
    budget = f" (budget {settings.budget_s:.0f} s)" if settings.budget_s else ""
    print(f"\ntotal {total_s:.0f} s{budget}")


def run_check(settings: Settings, output: Path) -> bool:
    """Every phase (a failing one does not stop the others), the table, the JSON; True when all passed."""
    from harness.bench.machine import write_result

    started = time.perf_counter()
    if settings.device == "cuda":
        torch.set_float32_matmul_precision("high")
    phases = []
    for name, function in PHASES:
        phase = Phase(name)
        t0 = time.perf_counter()
        try:
            function(settings, phase)
        except Exception as exc:  # noqa: BLE001 - any error is a failed check, reported, and the next phase runs
            phase.failures.append(f"{type(exc).__name__}: {exc}")
        phase.seconds = time.perf_counter() - t0
        phases.append(phase)
    total = time.perf_counter() - started
    over = settings.budget_s is not None and total > settings.budget_s
    print_report(phases, total, settings)
    if over:
        print(f"FAILED: the check took {total:.0f} s, over its budget of {settings.budget_s:.0f} s")
    ok = all(p.ok for p in phases) and not over
    record = {
        "ok": ok,
        "total_s": total,
        "settings": asdict(settings),
        "phases": [asdict(p) for p in phases],
    }
    write_result(output, record)
    print(f"JSON: {output}")
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpu-smoke", action="store_true", help="the same phases on CPU, a few steps")
    parser.add_argument(
        "--output", type=Path, help="JSON file (default: benchmarks/results/gpu_check[_cpu_smoke].json)"
    )
    parser.add_argument("--budget-s", type=float, help="fail when the whole check takes longer (default: 480 on GPU)")
    args = parser.parse_args(argv)
    settings = SMOKE if args.cpu_smoke else FULL
    if args.budget_s is not None:
        settings = replace(settings, budget_s=args.budget_s)
    if settings.device == "cuda" and not torch.cuda.is_available():
        print("error: no CUDA device; run this on a GPU machine, or pass --cpu-smoke", file=sys.stderr)
        return 2
    output = args.output or RESULTS / ("gpu_check_cpu_smoke.json" if args.cpu_smoke else "gpu_check.json")
    return 0 if run_check(settings, output) else 1


if __name__ == "__main__":
    sys.exit(main())
