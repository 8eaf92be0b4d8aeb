"""Tokens/s of a training step for each zoo variant against baseline (paper size, T=256, CPU),
plus the overhead of train()'s loop, callbacks and MLflow logging.

    python benchmarks/train_step.py [--size paper] [--context-length 256] [--batch-size 8]
                                    [--steps 10] [--variants baseline,ega-mope] [--no-overhead]

Same as ``harness bench train``; writes benchmarks/results/train_step.json.
"""

from __future__ import annotations

import sys

from harness.cli import main

if __name__ == "__main__":
    main(["bench", "train", *sys.argv[1:]])
