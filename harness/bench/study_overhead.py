"""Overhead of running trials as a study (``harness run``: Ray, Tune, checkpoints to the
study's storage, MLflow from the driver, the report) against the same trainings in a
plain Python loop (``train(config)`` one after another, no MLflow).

Both sides train the same N configs (nano, T=64, a few dozen steps: short on purpose,
so that the fixed costs show). The study runs them ``concurrency`` at a time with one
CPU each, the loop one at a time with one thread, so the comparison is in CPU-seconds:

    overhead per trial = (study wall time x concurrency - loop wall time) / N

Printed as a table and written as JSON (``benchmarks/results/study_overhead.json``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from harness.bench.machine import machine_record, write_result
from harness.studies.spec.grid import expand_grid
from harness.studies.spec.study_spec import parse_spec


def _spec(trials: int, steps: int) -> dict[str, Any]:
    variants = ["baseline", "ega", "mope", "ega-mope"]
    seeds = max(1, -(-trials // len(variants)))
    return {
        "name": "overhead",
        "datasets": ["tinyshakespeare"],
        "variants": variants[: min(trials, len(variants))],
        "seeds": seeds,
        "sizes": ["nano"],
        "context_lengths": [64],
        "train": {
            "max_steps": steps,
            "batch_size": 8,
            "eval_every": max(1, steps // 2),
            "eval_windows": 16,
            "eval_batch_size": 16,
            "warmup_steps": min(10, steps // 2),
        },
        "resources": {"cpus": 1},
        "retries": 0,
    }


def run_study_cli(
    spec_path: Path, workdir: Path, *, cwd: Path | None = None
) -> tuple[subprocess.CompletedProcess[str], float]:
    """``harness run SPEC_PATH`` in a fresh interpreter, as a user runs it: MLflow in
    ``workdir/mlflow.db``, the study's storage ``workdir/results``; ``RAY_ADDRESS`` and
    ``MLFLOW_TRACKING_URI`` are left out of its environment (a local Ray, the given
    tracking URI). Returns the finished process (output captured, not checked) and its
    wall time in seconds, interpreter start-up and Ray included."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI")}
    command = [sys.executable, "-m", "harness.cli", "run", str(spec_path)]
    command += ["--tracking-uri", f"sqlite:///{workdir / 'mlflow.db'}", "--storage-path", str(workdir / "results")]
    t0 = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=cwd)
    return done, time.perf_counter() - t0


def main(
    *, trials: int = 8, steps: int = 60, out: Path | str = "benchmarks/results/study_overhead.json"
) -> dict[str, Any]:

    spec_data = _spec(trials, steps)
    spec = parse_spec(yaml.safe_dump(spec_data))
    configs = [t.config for t in expand_grid(spec)][:trials]
    concurrency = max(1, min(os.cpu_count() or 1, len(configs)))

    with tempfile.TemporaryDirectory(prefix="harness-bench-") as tmp:
        tmp_path = Path(tmp)
        spec_path = tmp_path / "overhead.yaml"
        spec_path.write_text(yaml.safe_dump(spec_data))

        # 1. the plain loop (in a fresh interpreter: imports counted once, like a script)
        loop_code = (
            "import json, sys, time, torch\n"
            "t0 = time.perf_counter()\n"
            "torch.set_num_threads(1)\n"
            "from harness.training import TrainConfig, train\n"
            "configs = json.loads(sys.argv[1])\n"
            "walls = []\n"
            "for i, c in enumerate(configs):\n"
            "    c['checkpoint_dir'] = sys.argv[2] + f'/ckpt{i}'\n"
            "    r = train(TrainConfig(**c), mlflow_logging=False, progress_bar=False)\n"
            "    walls.append(r.wall_time_s)\n"
            "print(json.dumps({'total': time.perf_counter() - t0, 'per_trial': walls}))\n"
        )
        payload = json.dumps([c.model_dump() for c in configs])
        t0 = time.perf_counter()
        loop = subprocess.run(
            [sys.executable, "-c", loop_code, payload, str(tmp_path)], capture_output=True, text=True, check=True
        )
        loop_wall = time.perf_counter() - t0
        loop_times = json.loads(loop.stdout.strip().splitlines()[-1])

        # 2. the study, as a user runs it
        study, study_wall = run_study_cli(spec_path, tmp_path)
        if study.returncode != 0:
            raise RuntimeError(f"harness run failed:\n{study.stdout[-3000:]}\n{study.stderr[-3000:]}")

    n = len(configs)
    train_s = sum(loop_times["per_trial"])
    result = {
        "trials": n,
        "steps": steps,
        "concurrency": concurrency,
        "loop_wall_s": loop_wall,
        "loop_train_s": train_s,
        "loop_per_trial_s": train_s / n,
        "study_wall_s": study_wall,
        "study_cpu_s": study_wall * concurrency,
        "overhead_per_trial_s": (study_wall * concurrency - loop_wall) / n,
        "speedup_wall": loop_wall / study_wall,
    }
    machine = machine_record()
    rows = [
        ("plain loop, wall (1 thread, one after another)", f"{loop_wall:.1f} s"),
        ("  of which train() calls", f"{train_s:.1f} s ({train_s / n:.1f} s per trial)"),
        (f"harness run, wall ({concurrency} trials at a time, 1 CPU each)", f"{study_wall:.1f} s"),
        ("harness run, CPU-seconds (wall x concurrency)", f"{study_wall * concurrency:.1f} s"),
        ("overhead per trial (CPU-s, study - loop)", f"{result['overhead_per_trial_s']:+.1f} s"),
        ("wall-time speed-up of the study", f"{result['speedup_wall']:.2f}x"),
    ]
    width = max(len(r[0]) for r in rows)
    print(
        f"Study overhead: {n} trials of {steps} steps (nano, T=64, batch 8), load avg {machine['load_average'][0]:.1f}"
    )
    for name, value in rows:
        print(f"  {name:<{width}}  {value}")
    written = write_result(out, result, machine=machine)
    print(f"JSON: {out}")
    return written
