"""Tokens/s of S seeds trained as one seed-batched model against S separate runs (CPU, eager).

    python benchmarks/seed_batch.py [--variants baseline,ega,ega-mope] [--seeds 4] [--size nano]
                                    [--context-length 64] [--batch-size 8] [--steps 40] [--threads 1]

For each variant: :func:`harness.training.seed_batch.train_seed_batch` on S seeds, then
:func:`harness.training.run.train` on each seed in turn (MLflow off, compile off, dropout 0,
one evaluation at the end). ``per seed`` is each run's own tokens/s (train's TokenThroughput:
B T tokens per step over the step's time; a batched step trains every seed at once), ``all
seeds`` what the machine trains in total (S times the batched per-seed figure; the mean of the
separate runs, which run one after another). Prints a table and writes
``benchmarks/results/seed_batch.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from harness.training.config import TrainConfig
from harness.training.run import train
from harness.training.seed_batch import train_seed_batch

RESULTS = Path(__file__).parent / "results" / "seed_batch.json"


def measure(variant: str, args: argparse.Namespace) -> dict[str, float | str | int]:
    """One variant: the batched run and the separate runs, tokens/s and wall time."""
    fields = dict(
        variant=variant,
        size=args.size,
        dataset="tinyshakespeare",
        context_length=args.context_length,
        batch_size=args.batch_size,
        max_steps=args.steps,
        eval_every=args.steps,
        eval_windows=8,
        final_eval_windows=8,
        warmup_steps=2,
        dropout=0.0,
        attention_dropout=0.0,
        compile=False,
        accelerator="cpu",
        num_threads=args.threads,
    )
    configs = [TrainConfig(**fields, seed=s) for s in range(args.seeds)]
    start = time.perf_counter()
    batched = train_seed_batch(configs, progress_bar=False)
    batched_s = time.perf_counter() - start
    start = time.perf_counter()
    separate = [train(c, mlflow_logging=False, progress_bar=False) for c in configs]
    separate_s = time.perf_counter() - start
    per_seed_batched = statistics.mean(r.tokens_per_s for r in batched)
    per_seed_separate = statistics.mean(r.tokens_per_s for r in separate)
    return {
        "variant": variant,
        "seeds": args.seeds,
        "batched_tokens_per_s_per_seed": per_seed_batched,
        "separate_tokens_per_s_per_seed": per_seed_separate,
        "batched_tokens_per_s_all_seeds": args.seeds * per_seed_batched,
        "separate_tokens_per_s_all_seeds": per_seed_separate,
        "speedup_all_seeds": args.seeds * per_seed_batched / per_seed_separate,
        "batched_wall_s": batched_s,
        "separate_wall_s": separate_s,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default="baseline,ega,ega-mope")
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--size", default="nano")
    parser.add_argument("--context-length", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    rows = [measure(v, args) for v in args.variants.split(",")]
    print(f"{'variant':<12} {'seeds':>5} {'tok/s/seed batched':>19} {'separate':>9} {'all seeds x':>11} {'wall s':>13}")
    for r in rows:
        print(
            f"{r['variant']:<12} {r['seeds']:>5} {r['batched_tokens_per_s_per_seed']:>19.0f} "
            f"{r['separate_tokens_per_s_per_seed']:>9.0f} {r['speedup_all_seeds']:>11.2f} "
            f"{r['batched_wall_s']:>6.1f}/{r['separate_wall_s']:<6.1f}"
        )
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({"settings": vars(args) | {"output": str(args.output)}, "rows": rows}, indent=2))
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
