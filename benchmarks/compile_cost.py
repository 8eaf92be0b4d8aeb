"""What ``torch.compile`` costs (cold and warm Inductor cache) and saves per training step on
CPU, per variant and shape: the measurement behind ``harness.training.compile``'s constants.

    python benchmarks/compile_cost.py [--variants baseline,ega-mope] [--shapes 1x2x64,2x2x64]

Prints a table and writes ``benchmarks/results/compile_cost.json``; see
:mod:`harness.bench.compile_cost`.
"""

from harness.bench.compile_cost import main

if __name__ == "__main__":
    main()
