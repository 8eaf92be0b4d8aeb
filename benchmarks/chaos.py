"""A fault campaign (see harness/bench/chaos/): a real study run once without faults
(the twin), then under seeded schedules of faults (trial processes, the driver, the
MLflow server and a Ray node killed or stopped at drawn moments), each compared with the
twin bit for bit. Same as `harness bench chaos`.

    python benchmarks/chaos.py [--schedules 10] [--seed 1] [--replay SEED ...]

Prints the table (faults injected by kind, studies completed, mismatches, the seeds of
failing schedules) and writes benchmarks/results/chaos.json. Exit code 1 when a schedule
failed; `--replay SEED` runs exactly that schedule again.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.bench.chaos.campaign import main

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--schedules", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--replay", type=int, nargs="+", help="Run exactly these schedule seeds.")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "chaos.json")
    parser.add_argument("--workdir", type=Path, help="Where the studies run (default: a new temporary folder).")
    args = parser.parse_args()
    result = main(schedules=args.schedules, seed=args.seed, replay=args.replay, out=args.out, workdir=args.workdir)
    sys.exit(1 if result["failing_seeds"] else 0)
