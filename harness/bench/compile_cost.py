"""What ``torch.compile`` costs and saves per training run on this machine: the measurement
behind the constants of :mod:`harness.training.compile` (``benchmarks/compile_cost.py``).

For each variant and shape, two fresh processes share one empty Inductor cache:

1. *cold*: the first compiled training step (Dynamo, AOTAutograd, Inductor building the
   kernels), then the steady state: eager and compiled steps of the same model timed in
   interleaved rounds (load from other processes hits both alike; the fastest round counts);
2. *warm*: the first compiled step again, now served by the cache.

Every time is given twice: wall clock, and CPU time (this process and the compiler
processes it waited for; Inductor compiles in-process, ``compile_threads=1``). With one
torch thread the CPU time is what the wall clock reads on an idle machine, so it is the
number that stays meaningful on a shared one; the constants of
:mod:`harness.training.compile` come from it.

A third table says where a step's time goes, eager against compiled: ``torch.profiler``
self time per step in matmuls, attention, drawing dropout masks, Inductor's generated
kernels and everything else (:func:`step_breakdown`).

Compile cost = first compiled step - a steady compiled step. Step = forward, cross-entropy,
backward, clipping, AdamW, in train mode (dropout ``--dropout``, default 0.2 as the recipe,
on residuals; none on the attention weights, as ``studies/smoke.yaml``), fp32, the threads
given. Prints a table, writes JSON (default ``benchmarks/results/compile_cost.json``) with the load average beside it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.bench.machine import write_result
from harness.training.config import TrainConfig

_REPO = Path(__file__).resolve().parents[2]


def _probe(args: argparse.Namespace) -> dict[str, Any]:
    """One process: first compiled step, then interleaved eager / compiled rounds."""
    import torch
    import torch.nn.functional as F

    from harness.models.numerics import flush_denormals
    from harness.training.compile import CompiledForward, use_shared_cache
    from harness.training.config import TrainConfig
    from harness.training.module import build_char_model, learning_rate, optimizer_groups

    flush_denormals()  # as training does
    torch.set_num_threads(args.threads)
    shape = dict(zip(("n_layer", "n_head", "d_model"), map(int, args.shape.split("x")), strict=True))
    config = TrainConfig(
        variant=args.variant,
        **shape,
        context_length=args.context_length,
        batch_size=args.batch_size,
        dropout=args.dropout,
        attention_dropout=0.0,
    )
    torch.manual_seed(0)
    model = build_char_model(config, vocab_size=65).train()
    optimizer = torch.optim.AdamW(optimizer_groups(model, config.weight_decay), lr=config.lr)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(65, (config.batch_size, config.context_length), generator=g)
    y = torch.randint(65, (config.batch_size, config.context_length), generator=g)
    state = {"k": 0}

    def step(forward: Any) -> None:
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(state["k"], config)
        logits = forward(x)
        F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1)).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        state["k"] += 1

    use_shared_cache(Path(args.cache))
    compiled = CompiledForward(model)
    first = _timed(lambda: step(compiled))
    step(model)  # eager warm-up
    rounds: dict[str, list[tuple[float, float]]] = {"eager": [], "compiled": []}
    forwards = (("eager", model), ("compiled", compiled))
    for _ in range(args.rounds):
        for name, forward in forwards:
            wall, cpu = _timed(lambda f=forward: [step(f) for _ in range(args.steps)])
            rounds[name].append((wall / args.steps, cpu / args.steps))
    from torch._dynamo.utils import counters

    breakdown = {name: step_breakdown(lambda f=forward: step(f), args.steps) for name, forward in forwards}
    return {
        "breakdown_ms": breakdown,
        "first_step_s": first[0],
        "first_step_cpu_s": first[1],
        **{f"{name}_step_ms": 1000 * min(w for w, _ in rounds[name]) for name in rounds},
        **{f"{name}_step_cpu_ms": 1000 * min(c for _, c in rounds[name]) for name in rounds},
        "rounds_ms": {k: [1000 * w for w, _ in vs] for k, vs in rounds.items()},
        "graph_breaks": sum(counters["graph_break"].values()),
        "unique_graphs": counters["stats"]["unique_graphs"],
    }


#: Where a CPU training step's time goes: (category, test on the profiler's op name), first match.
#: Self time, so a category is the op itself, not what it calls.
STEP_CATEGORIES: tuple[tuple[str, Callable[[str], bool]], ...] = (
    ("matmul", lambda op: op in ("aten::mm", "aten::addmm", "aten::bmm")),
    ("attention", lambda op: "scaled_dot_product" in op),
    ("dropout masks", lambda op: op in ("aten::bernoulli_", "aten::uniform_", "aten::rand", "aten::rand_like")),
    ("Inductor kernels", lambda op: op.startswith("## Call CompiledFxGraph")),
    ("other", lambda op: True),  # eager element-wise ops, the optimizer, autograd and Dynamo overhead
)


def step_breakdown(step: Callable[[], Any], steps: int) -> dict[str, float]:
    """Milliseconds per call of ``step`` by :data:`STEP_CATEGORIES` (``torch.profiler`` self
    CPU time over ``steps`` calls; the profiler's own overhead lands in them alike)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step()
    out = {name: 0.0 for name, _ in STEP_CATEGORIES}
    for event in prof.key_averages():
        name = next(name for name, match in STEP_CATEGORIES if match(event.key))
        out[name] += event.self_cpu_time_total / 1000 / steps
    return out


@dataclass(frozen=True)
class GraphCheck:
    """The compiled training step of one variant: its graph breaks (reason -> count: should be
    none, every variant of the zoo plans its attention from Python numbers), the graphs compiled
    by the end of the first training and evaluation steps, and the graphs compiled after them
    (recompiles: should be none)."""

    variant: str
    breaks: dict[str, int]
    graphs: int
    recompiles: int
    first_step_s: float

    @property
    def ok(self) -> bool:
        return not self.breaks and self.recompiles == 0


def check_graph(
    config: TrainConfig, *, backend: str = "inductor", device: str = "cpu", steps: int = 3, bf16: bool = False
) -> GraphCheck:
    """Compile ``config``'s training step as :func:`harness.training.run.train` does and count
    graph breaks and recompiles (``torch._dynamo.utils.counters``): one training step, one
    evaluation step (eager, another batch size, no grad), then ``steps`` training steps with an
    evaluation between them; any graph compiled after the first two is a recompile."""
    import torch
    import torch.nn.functional as F
    from torch._dynamo.utils import counters

    from harness.training.compile import CompiledForward, begin_compiled_run
    from harness.training.module import build_char_model

    begin_compiled_run(threads=1)
    counters.clear()
    torch.manual_seed(config.seed)
    model = build_char_model(config, vocab_size=65).to(device).train()
    compiled = CompiledForward(model, backend=backend)  # as train() compiles: static shapes, eager's random ops
    g = torch.Generator().manual_seed(config.seed)
    batches = [torch.randint(65, (config.batch_size, config.context_length + 1), generator=g) for _ in range(2)]
    eval_x = torch.randint(65, (config.eval_batch_size + 1, config.context_length), generator=g).to(device)

    def train_step(k: int) -> None:
        batch = batches[k % 2].to(device)
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=bf16):
            logits = compiled(batch[:, :-1])
        F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), batch[:, 1:].reshape(-1)).backward()
        model.zero_grad(set_to_none=True)

    def eval_step() -> None:
        model.eval()
        with torch.no_grad(), torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=bf16):
            model(eval_x)
        model.train()

    t0 = time.perf_counter()
    train_step(0)
    first = time.perf_counter() - t0
    eval_step()
    graphs = counters["stats"]["unique_graphs"]
    for k in range(1, steps + 1):
        train_step(k)
        if k == steps // 2:
            eval_step()
    breaks: dict[str, int] = {}
    for reason, count in counters["graph_break"].items():
        key = reason.splitlines()[0]
        breaks[key] = breaks.get(key, 0) + count
    return GraphCheck(
        variant=config.variant,
        breaks=breaks,
        graphs=graphs,
        recompiles=counters["stats"]["unique_graphs"] - graphs,
        first_step_s=first,
    )


def _timed(work: Callable[[], Any]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process and of the children it waited for) of ``work()``."""
    before, t0 = os.times(), time.perf_counter()
    work()
    after, wall = os.times(), time.perf_counter() - t0
    cpu = sum(getattr(after, f) - getattr(before, f) for f in ("user", "system", "children_user", "children_system"))
    return wall, cpu


def _run_probe(variant: str, shape: str, cache: Path, a: argparse.Namespace) -> dict[str, Any]:
    cmd = [
        sys.executable,
        "-m",
        "harness.bench.compile_cost",
        "--probe",
        f"--variant={variant}",
        f"--shape={shape}",
        f"--cache={cache}",
        f"--threads={a.threads}",
        f"--context-length={a.context_length}",
        f"--batch-size={a.batch_size}",
        f"--dropout={a.dropout}",
        f"--steps={a.steps}",
        f"--rounds={a.rounds}",
    ]
    env = {**os.environ, "TORCHINDUCTOR_COMPILE_THREADS": "1"}  # compile in-process: its CPU time is counted
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def measure(a: argparse.Namespace) -> dict[str, Any]:
    """Cold and warm probes of every (variant, shape); the table rows."""
    rows = []
    for shape in a.shapes.split(","):
        for variant in a.variants.split(","):
            with tempfile.TemporaryDirectory(prefix="inductor-bench-") as cache:
                cold = _run_probe(variant, shape, Path(cache), a)
                warm = _run_probe(variant, shape, Path(cache), a)
            eager, compiled = cold["eager_step_cpu_ms"], cold["compiled_step_cpu_ms"]
            row = {
                "variant": variant,
                "shape": shape,
                "n_layer": int(shape.split("x")[0]),
                "eager_step_ms": eager,
                "compiled_step_ms": compiled,
                "saving": 1 - compiled / eager,
                "cold_compile_s": cold["first_step_cpu_s"] - compiled / 1000,
                "warm_compile_s": warm["first_step_cpu_s"] - warm["compiled_step_cpu_ms"] / 1000,
                "wall": {
                    "eager_step_ms": cold["eager_step_ms"],
                    "compiled_step_ms": cold["compiled_step_ms"],
                    "cold_first_step_s": cold["first_step_s"],
                    "warm_first_step_s": warm["first_step_s"],
                },
                "graph_breaks": cold["graph_breaks"],
                "unique_graphs": cold["unique_graphs"],
                "cold": cold,
                "warm": warm,
            }
            saved_s = (eager - compiled) / 1000
            for state in ("cold", "warm"):  # steps that repay the compile; never when it saves nothing
                row[f"break_even_steps_{state}"] = row[f"{state}_compile_s"] / saved_s if saved_s > 0 else math.inf
            row["breakdown_ms"] = cold["breakdown_ms"]
            rows.append(row)
            print(_line(row), flush=True)
    _print_breakdown(rows)
    return {"rows": rows}


def _print_breakdown(rows: list[dict[str, Any]]) -> None:
    """Where the step's time goes, eager against compiled (profiler self time, ms per step)."""
    names = [name for name, _ in STEP_CATEGORIES]
    print(f"\n{'variant':<14}{'shape':>9}{'arm':>10}" + "".join(f"{n:>18}" for n in names) + f"{'total':>9}")
    for r in rows:
        for arm, parts in r["breakdown_ms"].items():
            cells = "".join(f"{parts[n]:>18.1f}" for n in names)
            print(f"{r['variant']:<14}{r['shape']:>9}{arm:>10}{cells}{sum(parts.values()):>9.1f}")


def _line(r: dict[str, Any]) -> str:
    return (
        f"{r['variant']:<14}{r['shape']:>9}{r['eager_step_ms']:>9.1f}{r['compiled_step_ms']:>10.1f}"
        f"{100 * r['saving']:>8.0f}%{r['cold_compile_s']:>9.1f}{r['warm_compile_s']:>9.1f}"
        f"{r['break_even_steps_cold']:>9.0f}{r['break_even_steps_warm']:>9.0f}{r['graph_breaks']:>7}"
    )


def main(argv: list[str] | None = None) -> dict[str, Any] | None:
    """``benchmarks/compile_cost.py``: print the table, write JSON."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--variants", default="baseline,ega-mope")
    p.add_argument("--shapes", default="1x2x64,2x2x64", help="n_layer x n_head x d_model, comma-separated")
    p.add_argument("--context-length", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--dropout", type=float, default=0.2, help="residual dropout (attention dropout is 0)")
    p.add_argument("--steps", type=int, default=10, help="steps per timed round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--output", default=str(_REPO / "benchmarks" / "results" / "compile_cost.json"))
    p.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--variant", help=argparse.SUPPRESS)
    p.add_argument("--shape", help=argparse.SUPPRESS)
    p.add_argument("--cache", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.probe:
        print(json.dumps(_probe(a)))
        return None
    load_before = os.getloadavg()
    print(
        f"torch.compile on CPU: T={a.context_length} B={a.batch_size}, dropout {a.dropout}, {a.threads} thread(s); "
        "CPU ms per step, compile = first compiled step - a compiled step (CPU s)"
    )
    print(
        f"{'variant':<14}{'shape':>9}{'eager':>9}{'compiled':>10}{'saving':>9}{'cold s':>9}{'warm s':>9}"
        f"{'b-e cold':>9}{'b-e warm':>9}{'breaks':>7}"
    )
    payload = {
        "benchmark": "compile_cost",
        "settings": {k: v for k, v in vars(a).items() if k not in ("probe", "variant", "shape", "cache", "output")},
        "load_average_before": load_before,  # the machine record holds the one after
        **measure(a),
    }
    written = write_result(a.output, payload)
    print(f"load average before {load_before[0]:.2f}, after {written['machine']['load_average'][0]:.2f} (1 min)")
    print(f"wrote {a.output}")
    return written


def _torch_version() -> str:
    import torch

    return torch.__version__


if __name__ == "__main__":
    main()
