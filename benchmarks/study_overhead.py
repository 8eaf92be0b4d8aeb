"""Overhead of `harness run` (Ray Tune + MLflow + report) against a plain loop of the same
trainings; see harness/bench/study_overhead.py. Same as `harness bench study`.

    python benchmarks/study_overhead.py [--trials 8] [--steps 60]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.bench.study_overhead import main

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "study_overhead.json")
    args = parser.parse_args()
    main(trials=args.trials, steps=args.steps, out=args.out)
