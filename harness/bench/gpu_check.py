"""One-call GPU check: would the harness train, correctly and fast, on this GPU? Within one
9-minute command of a lease, the papers' 2x2 included.

    python benchmarks/gpu_check.py --out DIR             # a CUDA GPU: the default phases, ~9 min on one H200
    python benchmarks/gpu_check.py --phase train,syncs   # some phases (the first ones always run first)
    python benchmarks/gpu_check.py --phase extra         # the extra phases (speed, compile, attention, packed)
    python benchmarks/gpu_check.py --cpu-smoke           # the default phases on CPU, small (run by the tests)

The default phases, in the order of what they decide, each with its own budget of seconds
(:data:`~harness.bench.gpu_settings.PHASE_BUDGETS_S`, the GPU's; the CPU smoke runs within the
same ones). A failure of the first two stops the check (the rest would measure a harness that
does not train):

1. ``import`` (60 s): a fresh interpreter imports the training core and the device runner
   (:mod:`harness.bench.gpu_device_phases`): the image has what the device path needs;
2. ``train`` (90 s): ``train()`` as a study runs it (mixed precision, the fused AdamW, clipping,
   the recipe's dropout, callbacks, evaluations, checkpoints, compiled), ``ega-mope`` at the
   papers' size: it finishes, the loss falls, no steady step waits for the device (CUDA's sync
   debug mode); the cold compile, the step and the checkpoint's size and copy time are measured;
3. ``syncs`` (30 s): the steady step of baseline, ega, mope, ega-mope, ALiBi, relative MOPE and the
   pairwise readings at T = 256 waits for the device zero times;
4. ``kernels`` (30 s): the SDPA kernel each attention family runs under bf16 (flash where eligible),
   and one profiled step saved as a Chrome trace with the GPU-busy fraction;
5. ``bf16`` (60 s): the gate's fold against a float64 oracle, eager and compiled (Inductor): its
   pieces sum to the bias within ``FOLD_ERROR_LIMIT`` (:func:`harness.models.fold.fold_error`,
   Inductor on CPU too: a fold whose middle piece the compiler dropped fails), the output no
   further off than bf16 attention with an exact bias; the ALiBi, relative MOPE and pairwise
   layers at T = 256 within bf16's error;
6. ``study`` (270 s, or what the phases before it left of the 540): the papers' 2x2 x 4 seeds at
   5,000 steps (``studies/papers-2x2-device.yaml``) through the device runner
   (:mod:`harness.studies.device.runner`), each variant's seeds one seed-batched group where the
   trainer allows, stopped at its budget: every trial finishes.

The extra phases run only when named: ``speed`` (tokens/s of baseline, ega and ega-mope compiled,
judged by thresholds), ``compile`` (ten variants and two shapes compiled in one process stay one
static graph each), ``attention`` (the folded attention layer at T = 4096 and 8192: time, memory,
an fp32 oracle) and ``packed`` (a real ``harness run`` of 4 trials sharing the GPU against 1
alone: needs Ray, which a lease's image lacks).

All phases share one Inductor cache (``--compile-cache``; default a fresh folder, so the first
compile is a cold one). Exit status: 0 when every phase ran passed within its budget, 1 when one
failed, 2 for bad usage (no CUDA device without ``--cpu-smoke``).

``--out DIR`` puts everything under ``DIR`` (a lease's ``$OUT``): the JSON record
``gpu_check.json``, the measured constants ``gpu_constants.json`` (step times, compile costs, the
imports a worker pays once, the checkpoint: the study cost model,
:mod:`harness.studies.spec.cost`, reads that file in place of its assumptions) and the 2x2's
tables in ``DIR/study`` (``harness device record DIR/study`` records them in MLflow here).
Without it: ``benchmarks/results/gpu_check.json`` and ``gpu_constants.json``.
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

from harness.bench.gpu_device_phases import bf16_eager_and_compiled, device_imports, papers_study
from harness.bench.gpu_phases import (
    attention_kernels,
    compile_per_run,
    host_syncs,
    train_speed,
    training_run,
)
from harness.bench.gpu_settings import FULL, SMOKE, Phase, Settings
from harness.bench.gpu_study_phases import folded_attention, packed_study

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"

#: The phases by name, in the order they run (module docstring): the default ones, then the extra ones.
PHASES: dict[str, tuple[str, Callable[[Settings, Phase], None]]] = {
    "import": ("device imports", device_imports),
    "train": ("real training run", training_run),
    "syncs": ("host syncs", host_syncs),
    "kernels": ("attention kernels", attention_kernels),
    "bf16": ("bf16 correctness, eager and compiled", bf16_eager_and_compiled),
    "study": ("the papers' 2x2 on the device runner", papers_study),
    "speed": ("training speed", train_speed),
    "compile": ("compile per run", compile_per_run),
    "attention": ("folded attention", folded_attention),
    "packed": ("packed trials", packed_study),
}
#: What ``--phase all`` (the default) runs: one lease's command.
DEFAULT_PHASES = ("import", "train", "syncs", "kernels", "bf16", "study")
EXTRA_PHASES = tuple(name for name in PHASES if name not in DEFAULT_PHASES)
#: Phases whose failure stops the check: the rest would measure a harness that does not import or train.
STOPPING = ("import", "train")
#: The last default phase takes the time the others left of the check's budget (its own at least),
#: less this margin for the record and the constants.
LAST = "study"
LAST_MARGIN_S = 20.0


def run_phases(settings: Settings, names: list[str]) -> list[Phase]:
    """Run the phases ``names`` (in :data:`PHASES` order); an exception is a failed phase and the
    next one runs, except after a failed :data:`STOPPING` phase, which stops the check; a phase
    over its budget (:meth:`~harness.bench.gpu_settings.Settings.phase_budget_s`) fails, unless
    ``settings.enforce_budgets`` is off (then it is reported)."""
    phases = []
    started = time.perf_counter()
    for name in [n for n in PHASES if n in names]:
        title, function = PHASES[name]
        phase = Phase(title)
        budget = settings.phase_budget_s(name)
        if name == LAST and budget is not None and settings.budget_s is not None:
            # The 2x2 takes what the phases before it left of the command's budget, less a margin.
            left = settings.budget_s - (time.perf_counter() - started) - LAST_MARGIN_S
            budget = max(budget, left)
            settings = replace(settings, phase_budgets_s={**settings.phase_budgets_s, name: budget})
        print(f"-- {name}: {title} (budget {budget:.0f} s)" if budget else f"-- {name}: {title}", flush=True)
        t0 = time.perf_counter()
        try:
            function(settings, phase)
        except Exception as exc:  # noqa: BLE001 - any error is a failed check, reported
            phase.failures.append(f"{type(exc).__name__}: {exc}")
        phase.seconds, phase.budget_s = time.perf_counter() - t0, budget
        if phase.over_budget and settings.enforce_budgets:
            phase.failures.append(f"took {phase.seconds:.0f} s, over its budget of {budget:.0f} s")
        phases.append(phase)
        over = f" (over its {budget:.0f} s)" if phase.over_budget else ""
        print(f"   {name}: {'ok' if phase.ok else 'FAILED'} in {phase.seconds:.0f} s{over}", flush=True)
        if name in STOPPING and not phase.ok:
            print(f"{title} failed: the other phases are not run ({phase.failures})")
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
        budget = f" of {phase.budget_s:.0f} s{', OVER' if phase.over_budget else ''}" if phase.budget_s else ""
        print(f"\n== {phase.name} ({phase.seconds:.0f} s{budget}): {'ok' if phase.ok else 'FAILED'}")
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
    from harness.training.compile import use_shared_cache

    started = time.perf_counter()
    os.environ["HARNESS_COMPILE_CACHE"] = str(cache)  # the study subprocesses' cache too
    use_shared_cache(cache)  # this process's Inductor cache from now on
    phases = run_phases(settings, names)
    total = time.perf_counter() - started
    over = (
        settings.enforce_budgets
        and settings.budget_s is not None
        and total > settings.budget_s
        and set(names) == set(DEFAULT_PHASES)
    )
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


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpu-smoke", action="store_true", help="the phases on CPU, small, within the GPU's budgets")
    parser.add_argument(
        "--phase", default="all", help=f"comma-separated phases ({', '.join(PHASES)}), 'all' (the default) or 'extra'"
    )
    parser.add_argument("--out", type=Path, help="put every file under this folder (a lease's $OUT)")
    parser.add_argument("--output", type=Path, help="JSON record (default: --out's, else benchmarks/results/)")
    parser.add_argument("--constants", type=Path, help="measured constants (default: --out's, else benchmarks/results)")
    parser.add_argument("--compile-cache", type=Path, help="Inductor cache of every phase (default: a fresh folder)")
    parser.add_argument(
        "--budget-s", type=float, help="fail when the default phases together take longer (default: 540)"
    )
    parser.add_argument(
        "--report-budgets", action="store_true", help="report a phase over its budget instead of failing it"
    )
    return parser.parse_args(argv)


def _phase_names(text: str) -> list[str]:
    if text == "all":
        return list(DEFAULT_PHASES)
    if text == "extra":
        return list(EXTRA_PHASES)
    return [n.strip() for n in text.split(",") if n.strip()]


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    settings = SMOKE if args.cpu_smoke else FULL
    if args.budget_s is not None:
        settings = replace(settings, budget_s=args.budget_s)
    if args.report_budgets:
        settings = replace(settings, enforce_budgets=False)
    names = _phase_names(args.phase)
    unknown = sorted(set(names) - set(PHASES))
    if unknown:
        print(f"error: unknown phase(s) {', '.join(unknown)}; known: {', '.join(PHASES)}", file=sys.stderr)
        return 2
    if settings.device == "cuda" and not torch.cuda.is_available():
        print("error: no CUDA device; run this on a GPU machine, or pass --cpu-smoke", file=sys.stderr)
        return 2
    suffix = "_cpu_smoke" if args.cpu_smoke else ""
    folder = args.out or RESULTS
    output = args.output or folder / (f"gpu_check{suffix}.json" if args.out is None else "gpu_check.json")
    constants = args.constants or folder / (f"gpu_constants{suffix}.json" if args.out is None else "gpu_constants.json")
    if args.out is not None:
        if (args.out / "study").exists():
            print(f"error: {args.out / 'study'} exists; pass another --out", file=sys.stderr)
            return 2
        settings = replace(settings, study_out=str(args.out / "study"))
    with contextlib.ExitStack() as stack:
        cache = args.compile_cache or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="harness-inductor-")))
        return 0 if run_check(settings, output, constants, names, cache) else 1
