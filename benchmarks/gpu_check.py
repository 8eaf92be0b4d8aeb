"""One-call GPU check: would the harness train, correctly and fast, on this GPU?

    python benchmarks/gpu_check.py                       # a CUDA GPU: every phase
    python benchmarks/gpu_check.py --phase train,syncs   # some phases
    python benchmarks/gpu_check.py --cpu-smoke           # every phase on CPU, small (run by the tests)

Prints a table per phase, writes ``benchmarks/results/gpu_check.json`` and the measured
constants the study cost model reads (``benchmarks/results/gpu_constants.json``); see
:mod:`harness.bench.gpu_check` for the phases and what each one judges.
"""

import sys

from harness.bench.gpu_check import main

if __name__ == "__main__":
    sys.exit(main())
