"""One-call GPU check: would the harness train, correctly and fast, on this GPU?

    python benchmarks/gpu_check.py                       # a CUDA GPU: every phase, ~10-15 min on one H200
    python benchmarks/gpu_check.py --phase train,syncs   # some phases (the real run always first)
    python benchmarks/gpu_check.py --cpu-smoke           # every phase on CPU, small (run by the tests)

The phases (:mod:`harness.bench.gpu_phases`), in order; the first is the real training path,
and a failure there stops the check (the rest would measure a harness that does not train):

1. ``train``: ``train()`` as a study runs it (mixed precision, the fused AdamW, clipping, the
   recipe's dropout, callbacks, evaluations, checkpoints, compiled), ``ega-mope`` at the
   papers' size, then again on the warm compile cache: it finishes, the loss falls, no steady
   step waits for the device (CUDA's sync debug mode); the cold and warm compile, the step
   and the checkpoint's size and copy time are measured;
2. ``syncs``: the steady step of baseline, ega, mope, ega-mope, ALiBi, relative MOPE and the
   pairwise readings at T = 256 waits for the device zero times;
3. ``kernels``: the SDPA kernel each attention family runs under bf16 (flash where eligible),
   and one profiled step saved as a Chrome trace with the GPU-busy fraction;
4. ``bf16``: the gate's fold against a float64 oracle (the output no further off than bf16
   attention with an exact bias; the gradient of log g within bf16's rounding), the ALiBi,
   relative MOPE and pairwise layers at T = 256 within bf16's error;
5. ``speed``: tokens/s of baseline, ega and ega-mope, compiled bf16, judged by thresholds
   (baseline's step, each variant's ratio to it);
6. ``compile``: ten variants and two shapes compiled in one process stay one static graph each,
   and one variant per family has no graph break and no recompile;
7. ``attention``: the folded (EGA) attention layer against the plain one at T = 4096 and 8192:
   time, memory (no T x T tensor), an fp32 oracle;
8. ``packed``: a real ``harness run`` of 4 trials sharing the GPU (``gpus: 0.25``) against 1
   alone, 3,000 steps each so that their training overlaps, not only their start-up.

All phases share one Inductor cache (``--compile-cache``; default a fresh folder, so the first
compile is a cold one), the study subprocesses included. Exit status: 0 when every phase ran
passed, 1 when one failed, 2 for bad usage (no CUDA device without ``--cpu-smoke``).

Besides the table and the JSON record (``benchmarks/results/gpu_check.json``), the check writes
the constants it measured (step times, compile costs, a trial's fixed cost, the checkpoint) to
``--constants`` (default ``benchmarks/results/gpu_constants.json`` on a GPU): the study cost
model (:mod:`harness.studies.spec.cost`) reads that file in place of its assumptions.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch

from harness.bench.gpu_phases import (
    attention_kernels,
    bf16_correctness,
    compile_per_run,
    host_syncs,
    train_speed,
    training_run,
)
from harness.bench.gpu_settings import FULL, SMOKE, Phase, Settings
from harness.bench.gpu_study_phases import folded_attention, packed_study

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"

#: The phases by name, in the order they run; the first one stops the check when it fails.
PHASES: dict[str, tuple[str, Callable[[Settings, Phase], None]]] = {
    "train": ("real training run", training_run),
    "syncs": ("host syncs", host_syncs),
    "kernels": ("attention kernels", attention_kernels),
    "bf16": ("bf16 correctness", bf16_correctness),
    "speed": ("training speed", train_speed),
    "compile": ("compile per run", compile_per_run),
    "attention": ("folded attention", folded_attention),
    "packed": ("packed trials", packed_study),
}
FIRST = "train"


def run_phases(settings: Settings, names: list[str]) -> list[Phase]:
    """Run the phases ``names`` (in :data:`PHASES` order); an exception is a failed phase and the
    next one runs, except after a failed real training run, which stops the check."""
    phases = []
    for name in [n for n in PHASES if n in names]:
        title, function = PHASES[name]
        phase = Phase(title)
        t0 = time.perf_counter()
        try:
            function(settings, phase)
        except Exception as exc:  # noqa: BLE001 - any error is a failed check, reported
            phase.failures.append(f"{type(exc).__name__}: {exc}")
        phase.seconds = time.perf_counter() - t0
        phases.append(phase)
        if name == FIRST and not phase.ok:
            print(f"the real training run failed: the other phases are not run ({phase.failures})")
            break
    return phases


def measured_constants(phases: list[Phase], settings: Settings) -> dict[str, Any]:
    """What the cost model reads (:func:`harness.studies.spec.cost.load_measured_constants`): the
    step seconds per variant at ``size``, the cold and warm compile seconds, the fixed seconds a
    trial costs beside its steps (from the packed study), the checkpoint, where and when."""
    merged: dict[str, Any] = {}
    for phase in phases:
        merged.update(phase.constants)
    return {
        "device": torch.cuda.get_device_name() if settings.device == "cuda" else "cpu",
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "size": settings.size,
        "context_length": settings.context_length,
        "batch_size": settings.batch_size,
        **merged,
    }


def print_report(phases: list[Phase], total_s: float, settings: Settings) -> None:
    for phase in phases:
        print(f"\n== {phase.name} ({phase.seconds:.0f} s): {'ok' if phase.ok else 'FAILED'}")
        if phase.rows:
            columns = list(dict.fromkeys(c for row in phase.rows for c in row))
            cells = [[_fmt(row.get(c)) for c in columns] for row in phase.rows]
            widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
            print("  " + "  ".join(c.rjust(w) for c, w in zip(columns, widths, strict=True)))
            for r in cells:
                print("  " + "  ".join(v.rjust(w) for v, w in zip(r, widths, strict=True)))
        for failure in phase.failures:
            print(f"  FAILED: {failure}")
    budget = f" (budget {settings.budget_s:.0f} s)" if settings.budget_s else ""
    print(f"\ntotal {total_s:.0f} s{budget}")


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.3g}" if abs(value) < 100 else f"{value:,.0f}"
    text = str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def run_check(settings: Settings, output: Path, constants: Path, names: list[str], cache: Path) -> bool:
    """The phases in one shared compile cache, the table, the JSON record and the measured
    constants; True when every phase passed within the budget."""
    from harness.bench.machine import write_result
    from harness.training.compile import shared_cache

    started = time.perf_counter()
    os.environ["HARNESS_COMPILE_CACHE"] = str(cache)  # the study subprocesses' cache too
    with shared_cache(cache):
        phases = run_phases(settings, names)
    total = time.perf_counter() - started
    over = settings.budget_s is not None and total > settings.budget_s and set(names) == set(PHASES)
    print_report(phases, total, settings)
    if over:
        print(f"FAILED: the check took {total:.0f} s, over its budget of {settings.budget_s:.0f} s")
    ok = all(p.ok for p in phases) and not over and len(phases) == len([n for n in PHASES if n in names])
    record = {
        "ok": ok,
        "total_s": total,
        "phases_run": names,
        "settings": asdict(settings),
        "phases": [asdict(p) for p in phases],
    }
    write_result(output, record)
    write_result(constants, measured_constants(phases, settings))
    print(f"JSON: {output}\nmeasured constants: {constants}")
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpu-smoke", action="store_true", help="every phase on CPU, small")
    parser.add_argument("--phase", default="all", help=f"comma-separated phases ({', '.join(PHASES)}) or 'all'")
    parser.add_argument(
        "--output", type=Path, help="JSON record (default: benchmarks/results/gpu_check[_cpu_smoke].json)"
    )
    parser.add_argument(
        "--constants", type=Path, help="measured constants (default: benchmarks/results/gpu_constants[_cpu_smoke].json)"
    )
    parser.add_argument("--compile-cache", type=Path, help="Inductor cache of every phase (default: a fresh folder)")
    parser.add_argument(
        "--budget-s", type=float, help="fail when every phase together takes longer (default: 900 on GPU)"
    )
    args = parser.parse_args(argv)
    settings = SMOKE if args.cpu_smoke else FULL
    if args.budget_s is not None:
        settings = replace(settings, budget_s=args.budget_s)
    names = list(PHASES) if args.phase == "all" else [n.strip() for n in args.phase.split(",") if n.strip()]
    unknown = sorted(set(names) - set(PHASES))
    if unknown:
        print(f"error: unknown phase(s) {', '.join(unknown)}; known: {', '.join(PHASES)}", file=sys.stderr)
        return 2
    if settings.device == "cuda" and not torch.cuda.is_available():
        print("error: no CUDA device; run this on a GPU machine, or pass --cpu-smoke", file=sys.stderr)
        return 2
    suffix = "_cpu_smoke" if args.cpu_smoke else ""
    output = args.output or RESULTS / f"gpu_check{suffix}.json"
    constants = args.constants or RESULTS / f"gpu_constants{suffix}.json"
    with contextlib.ExitStack() as stack:
        cache = args.compile_cache or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="harness-inductor-")))
        return 0 if run_check(settings, output, constants, names, cache) else 1
