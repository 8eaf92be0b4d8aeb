"""The GPU check's phases that a lease decides first and last (:mod:`harness.bench.gpu_check`):
does the device path import there, is the bf16 fold right once compiled, and the papers' 2x2
through the device runner (:mod:`harness.studies.device.runner`)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from harness.bench.gpu_settings import Phase, Settings

REPO = Path(__file__).resolve().parents[2]

# -- import: the device path in a fresh interpreter ------------------------------------------------

#: What a fresh interpreter imports to train and run a study on the device, timed; and what it has.
IMPORT_PROBE = """
import importlib.util, json, sys, time
t0 = time.perf_counter()
import torch
import harness.training.run, harness.studies.device.runner
seconds = time.perf_counter() - t0
cuda = torch.cuda.is_available()
print(json.dumps({
    "imports_s": seconds,
    "python": sys.version.split()[0],
    "torch": torch.__version__,
    "cuda": torch.version.cuda,
    "device": torch.cuda.get_device_name() if cuda else "cpu",
    "bf16": bool(cuda and torch.cuda.is_bf16_supported()),
    "present": {m: importlib.util.find_spec(m) is not None for m in ("pydantic", "polars", "mlflow", "ray")},
}))
"""


def device_imports(settings: Settings, phase: Phase) -> None:
    """A fresh interpreter imports the training core and the device runner (what a worker pays
    once: the cost model's ``imports_s``), on the device it runs on; polars, MLflow and Ray may be
    absent (the lease's image has none), pydantic must be there (the kit carries it)."""
    done = subprocess.run([sys.executable, "-c", IMPORT_PROBE], capture_output=True, text=True, timeout=300, cwd=REPO)
    if done.returncode != 0:
        phase.failures.append(f"the device path does not import: {done.stderr.strip()[-1500:]}")
        return
    found = json.loads(done.stdout.strip().splitlines()[-1])
    phase.rows.append({k: v for k, v in found.items() if k != "present"} | {"present": found["present"]})
    phase.constants["imports_s"] = found["imports_s"]
    if not found["present"]["pydantic"]:
        phase.failures.append("pydantic is missing: install the kit's wheels (benchmarks/device_check.sh)")
    if settings.device == "cuda" and found["device"] == "cpu":
        phase.failures.append("a fresh interpreter sees no CUDA device")


# -- bf16, compiled: the fold's pieces and the folded attention ---------------------------------------


def bf16_eager_and_compiled(settings: Settings, phase: Phase) -> None:
    """The bf16 phase: the fold and the pairwise layers eager
    (:func:`harness.bench.gpu_phases.bf16_correctness`), then the fold's pieces eager and compiled
    by Inductor (:func:`judge_fold_pieces`), then the folded attention compiled (:func:`compiled_fold`)."""
    from harness.bench.gpu_phases import bf16_correctness

    bf16_correctness(settings, phase)
    torch._dynamo.reset()
    judge_fold_pieces(phase, settings.device)
    compiled_fold(settings, phase)


def judge_fold_pieces(phase: Phase, device: str, fold: Any = None) -> None:
    """The fold's bf16 pieces, eager and compiled by Inductor (the compiler that collapsed the
    round-trip fold, issue 40; on CPU too: one small graph), sum to their bias: at most
    :data:`~harness.models.fold.FOLD_ERROR_LIMIT` of it by
    :func:`~harness.models.fold.fold_error`; a fold whose middle piece the compiler dropped is
    off by ~1e-3 and fails. ``fold`` (default the model's
    :func:`~harness.models.fold.fold_columns`) is there for the tests to hand in a collapsing one."""
    from harness.models.fold import FOLD_ERROR_LIMIT, fold_error

    for name, compiled in (("eager", False), ("inductor", True)):
        error = fold_error(compiled, device=device, fold=fold)
        phase.rows.append({"case": f"fold pieces, {name}", "T": 1024, "error": error, "bf16_floor": None})
        if not error <= FOLD_ERROR_LIMIT:
            phase.failures.append(
                f"the fold's bf16 pieces ({name}) sum to the bias only within {error:.2e} of it (allowed "
                f"{FOLD_ERROR_LIMIT:g}): the compiler dropped a piece"
            )


def compiled_fold(settings: Settings, phase: Phase) -> None:
    """The folded attention compiled by ``settings.fold_backend`` (Inductor on a GPU) against the
    float64 oracle within bf16's floor, as the eager one is judged."""
    from harness.bench.gpu_phases import bf16_floor, biased_attention_oracle
    from harness.models import key_biased_attention

    device, backend = settings.device, settings.fold_backend
    T = settings.kernel_context_length
    g = torch.Generator(device="cpu").manual_seed(0)
    q, k, v = (torch.randn(2, 4, T, 32, generator=g).to(device) for _ in range(3))
    log_g = F.logsigmoid(3 * torch.randn(2, 4, T, generator=g)).to(device)
    ref, _ = biased_attention_oracle(q, k, v, log_g, torch.zeros_like(q))
    attention = torch.compile(key_biased_attention, backend=backend)
    with torch.no_grad(), torch.autocast(device_type=device, dtype=torch.bfloat16):
        out = attention(q, k, v, log_g)
    floor = bf16_floor(q, k, v, log_g, ref)
    error = float((out.double() - ref).abs().max())
    phase.rows.append({"case": f"ega fold, {backend}", "T": T, "error": error, "bf16_floor": floor})
    if error > 1.05 * floor:
        phase.failures.append(
            f"the compiled ({backend}) bf16 fold is off by {error:.2e}, bf16 attention itself by {floor:.2e}"
        )


# -- the papers' 2x2 through the device runner ---------------------------------------------------------


def papers_spec_text(settings: Settings) -> str:
    """The spec of the 2x2 phase: ``settings.papers_spec`` with ``settings.papers_overrides``
    (its ``train`` merged into the spec's)."""
    import yaml

    spec = yaml.safe_load((REPO / settings.papers_spec).read_text())
    overrides = dict(settings.papers_overrides)
    spec["train"] = {**spec.get("train", {}), **overrides.pop("train", {})}
    spec.update(overrides)
    return yaml.safe_dump(spec, sort_keys=False)


def papers_study(settings: Settings, phase: Phase) -> None:
    """The papers' 2x2 x 4 seeds through the device runner, each variant's seeds one group
    (seed-batched where the trainer allows), stopped at the phase's budget: every trial finishes,
    the loss falls below the uniform guess; each group's seconds and steps per second."""
    from harness.studies.device.runner import run_device_study

    budget = settings.phase_budget_s("study")
    with tempfile.TemporaryDirectory(prefix="harness-gpu-check-study-") as tmp:
        spec_path = Path(tmp) / "papers-2x2.yaml"
        spec_path.write_text(papers_spec_text(settings))
        out = Path(settings.study_out) if settings.study_out else Path(tmp) / "study"
        # A margin for the final evaluations of the group the deadline stops and for the tables.
        study = run_device_study(spec_path, out, deadline_s=None if budget is None else 0.9 * budget)
    _judge_study(study, phase)


def _judge_study(study: Any, phase: Phase) -> None:
    uniform = math.log(65)  # TinyShakespeare's 65 characters
    for group in study.groups:
        outcomes = [study.outcomes[tid] for tid in group["trials"]]
        finals = [o.final for o in outcomes if o.final is not None]
        steps = max((int(f["steps"]) for f in finals), default=0)
        losses = [float(f["final/val_loss"]) for f in finals]
        first = outcomes[0].trial.config
        phase.rows.append(
            {
                "variant": first.variant,
                "seeds": len(outcomes),
                "trainer": group["trainer"],
                "finished": sum(f["status"] == "finished" for f in finals),
                "steps": steps,
                "wall_s": group["wall_s"],
                "seed_steps_per_s": len(finals) * steps / group["wall_s"] if group["wall_s"] else None,
                "val_loss_mean": sum(losses) / len(losses) if losses else None,
            }
        )
        if losses and steps >= 100 and not max(losses) < uniform:
            phase.failures.append(f"{first.variant}: a val loss {max(losses):.3f} not below log 65 = {uniform:.3f}")
    unfinished = [tid for tid, o in study.outcomes.items() if o.final is None or o.final["status"] != "finished"]
    if unfinished:
        phase.failures.append(f"{len(unfinished)} of {len(study.outcomes)} trials did not finish: {unfinished[:4]}")
    phase.constants["papers_study"] = {
        "trials": len(study.outcomes),
        "wall_s": study.wall_s,
        "groups": [{k: r[k] for k in ("variant", "seeds", "trainer", "steps", "wall_s")} for r in phase.rows],
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
    }
