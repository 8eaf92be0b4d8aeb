"""Whole-study wall time with ``torch.compile`` on CPU: eager, compiled with a cold and a warm
Inductor cache, and ``compile: auto`` (cold and warm), for ``studies/smoke.yaml`` (500 steps)
the same study at 1,500 steps (``nano1500``), and at 1,500 steps without dropout
(``nano1500-nodrop``).

    python benchmarks/compile_study.py                       # both studies, every arm
    python benchmarks/compile_study.py --studies smoke --arms eager,auto-cold

Each arm is a real ``harness run`` in a fresh interpreter (Ray start, 8 trials on the
machine's CPUs, one CPU a trial, MLflow on SQLite, the report), the spec's ``train.compile``
set by the arm and ``$HARNESS_COMPILE_CACHE`` pointing at the arm's cache: a fresh folder
(cold), or the folder the study's compiled-cold arm has just filled (warm). Arms run in the
order given; ``*-warm`` arms need ``compiled-cold`` before them. The load average is
recorded beside every wall time: on a shared machine the numbers are only as good as it.
Prints a table and writes ``benchmarks/results/compile_study.json``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path
from typing import Any

import yaml

from harness.bench.machine import write_result
from harness.bench.study_overhead import run_study_cli

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
#: arm -> (train.compile, cache): "fresh" or the cache the study's compiled-cold arm filled.
ARMS = {
    "eager": (False, "fresh"),
    "auto-cold": ("auto", "fresh"),
    "compiled-cold": (True, "fresh"),
    "compiled-warm": (True, "warm"),
    "auto-warm": ("auto", "warm"),
}
#: study -> (max_steps, residual dropout: None keeps the recipe's 0.2). Without dropout the compiled
#: graph fuses across the whole block; with it, eager's random ops (fallback_random) cut it apart.
STUDIES: dict[str, tuple[int, float | None]] = {
    "smoke": (500, None),
    "nano1500": (1500, None),
    "nano1500-nodrop": (1500, 0.0),
}


def study_spec(name: str, study: str, compile_setting: Any) -> dict[str, Any]:
    """``studies/smoke.yaml`` with the study's ``max_steps`` (evaluation every steps / 5), its
    dropout, and ``compile`` set."""
    steps, dropout = STUDIES[study]
    spec = yaml.safe_load((REPO / "studies" / "smoke.yaml").read_text())
    spec["name"] = name
    spec["train"] = {**spec["train"], "max_steps": steps, "eval_every": steps // 5, "compile": compile_setting}
    if dropout is not None:
        spec["train"]["dropout"] = dropout
    return spec


def run_arm(study: str, arm: str, workdir: Path, caches: dict[str, Path]) -> dict[str, Any]:
    compile_setting, cache = ARMS[arm]
    if cache == "warm" and study not in caches:
        raise SystemExit(f"arm {arm} needs compiled-cold before it (the cache it warms)")
    folder = caches[study] if cache == "warm" else Path(tempfile.mkdtemp(prefix="inductor-", dir=workdir))
    if arm == "compiled-cold":
        caches[study] = folder
    run_dir = Path(tempfile.mkdtemp(prefix=f"{study}-{arm}-", dir=workdir))
    spec_path = run_dir / f"{study}.yaml"
    spec_path.write_text(yaml.safe_dump(study_spec(f"{study}-{arm}", study, compile_setting)))
    os.environ["HARNESS_COMPILE_CACHE"] = str(folder)
    load_before = os.getloadavg()[0]
    done, wall = run_study_cli(spec_path, run_dir, cwd=run_dir)
    row = {
        "study": study,
        "arm": arm,
        "compile": compile_setting,
        "cache": cache,
        "wall_s": wall,
        "ok": done.returncode == 0,
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
    }
    if done.returncode != 0:
        row["stderr_tail"] = done.stderr[-2000:]
    return row


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--studies", default=",".join(STUDIES))
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--output", default=str(RESULTS / "compile_study.json"))
    args = parser.parse_args(argv)
    studies, arms = args.studies.split(","), args.arms.split(",")
    unknown = [s for s in studies if s not in STUDIES] + [a for a in arms if a not in ARMS]
    if unknown:
        parser.error(f"unknown studies or arms {unknown}; studies: {', '.join(STUDIES)}; arms: {', '.join(ARMS)}")
    rows: list[dict[str, Any]] = []
    caches: dict[str, Path] = {}
    print(f"{'study':<10}{'arm':<15}{'wall s':>9}{'x eager':>9}{'load':>12}  status", flush=True)
    with tempfile.TemporaryDirectory(prefix="harness-compile-study-") as tmp:
        for study in studies:
            for arm in arms:
                row = run_arm(study, arm, Path(tmp), caches)
                eager = next((r["wall_s"] for r in rows if r["study"] == study and r["arm"] == "eager"), None)
                row["x_eager"] = row["wall_s"] / eager if eager else None
                rows.append(row)
                ratio = f"{row['x_eager']:.2f}" if row["x_eager"] else "-"
                load = f"{row['load_before']:.1f}-{row['load_after']:.1f}"
                status = "ok" if row["ok"] else "FAILED"
                print(f"{study:<10}{arm:<15}{row['wall_s']:>9.0f}{ratio:>9}{load:>12}  {status}", flush=True)
    payload = {
        "benchmark": "compile_study",
        "rows": rows,
    }
    written = write_result(args.output, payload)
    print(f"load: 1-minute load average before-after each run; wrote {args.output}")
    return written


if __name__ == "__main__":
    main()
