"""Attention speed and memory benchmark; the same as ``harness bench attention``.

    python benchmarks/attention.py                       # full run: T = 256..8192, 3 repeats, training step
    python benchmarks/attention.py -T 256,1024 --repeats 1 --no-train-step   # quick look

Prints a table and writes ``benchmarks/results/attention.json``. See
:mod:`harness.bench.attention` for what is measured.
"""

from __future__ import annotations

import sys

import typer

from harness.bench.cli import bench_attention
from harness.errors import InputError

if __name__ == "__main__":
    try:
        typer.run(bench_attention)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
