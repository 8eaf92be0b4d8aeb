"""How large a gain does a future-token leak fake? ``ega`` against the ``ega-leaky`` diagnostic.

``ega-leaky`` is EGA-1 with its energy z-normalised over the whole window instead of the
causal prefix, so every key's gate (and every earlier query's output) depends on tokens
that come later: the model reads the future. The papers' gains (+0.09 to +0.10 nats from
12 k parameters) would follow from such a leak. This trains both, paired by seed, at a
CPU-sized setting and reports the gain the leak fakes (L_ega - L_ega-leaky per seed, with a
t-interval over seeds from ``harness.analysis.main_effect``). A benchmark, not a test: it
takes minutes of CPU.

    python benchmarks/leak.py                                   # nano, T=128, 400 steps, seeds 0-2
    python benchmarks/leak.py --max-steps 100 --seeds 0,1       # quicker look

Prints a table and writes ``benchmarks/results/leak.json``.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import polars as pl

from harness.analysis.contrasts import main_effect
from harness.bench.machine import write_result
from harness.training import TrainConfig, train

RESULTS = Path(__file__).resolve().parent / "results" / "leak.json"
VARIANTS = ("ega", "ega-leaky")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="nano")
    parser.add_argument("--context-length", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-steps", type=int, default=400)
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (each trains both variants)")
    parser.add_argument("--dataset", default="tinyshakespeare")
    parser.add_argument("--threads", type=int, default=None, help="torch threads per run (default: all CPUs)")
    parser.add_argument("--output", type=Path, default=RESULTS)
    return parser.parse_args()


def train_pairs(args: argparse.Namespace) -> list[dict]:
    """Train ega and ega-leaky at every seed with identical settings (the recipe's, with
    dropout on the attention weights off so that CPU SDPA keeps its fused kernel)."""
    rows = []
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    with tempfile.TemporaryDirectory() as tmp:
        for seed in seeds:
            for variant in VARIANTS:
                config = TrainConfig(
                    variant=variant,
                    dataset=args.dataset,
                    size=args.size,
                    context_length=args.context_length,
                    batch_size=args.batch_size,
                    max_steps=args.max_steps,
                    warmup_steps=min(100, args.max_steps // 10),
                    eval_every=max(1, args.max_steps // 4),
                    eval_windows=256,
                    attention_dropout=0.0,
                    seed=seed,
                    accelerator="cpu",
                    num_threads=args.threads,
                    checkpoint_dir=str(Path(tmp) / f"{variant}-{seed}"),
                )
                result = train(config, progress_bar=False, mlflow_logging=False)
                row = {
                    "variant": variant,
                    "seed": seed,
                    "status": result.status,
                    "val_loss": result.final_val_loss,
                    "best_val_loss": result.best_val_loss,
                    "train_loss": result.final_train_loss,
                    "tau_mean": result.tau_mean,
                    "open_fraction": result.open_fraction,
                    "wall_time_s": result.wall_time_s,
                }
                rows.append(row)
                print(
                    f"  seed {seed}  {variant:<10} val {row['val_loss']:.4f}  train {row['train_loss']:.4f}  "
                    f"({row['wall_time_s']:.0f} s)",
                    flush=True,
                )
    return rows


def main() -> None:
    args = parse_args()
    print(
        f"ega vs ega-leaky: {args.size}, T={args.context_length}, batch {args.batch_size}, {args.max_steps} steps, "
        f"{args.dataset}, seeds {args.seeds}",
        flush=True,
    )
    rows = train_pairs(args)
    table = pl.DataFrame(rows)
    gain = main_effect(table, "ega-leaky", "ega", metric="val_loss", rng=0)
    per_seed = table.pivot(on="variant", index="seed", values="val_loss").with_columns(
        (pl.col("ega") - pl.col("ega-leaky")).alias("faked_gain")
    )
    print("\nvalidation loss (nats) per seed, and the gain the leak fakes (ega - ega-leaky):")
    for seed, ega, leaky, faked in per_seed.select("seed", "ega", "ega-leaky", "faked_gain").iter_rows():
        print(f"  seed {seed}:  ega {ega:.4f}   ega-leaky {leaky:.4f}   faked gain {faked:+.4f}")
    ci = gain.confidence_interval
    interval = f"[{ci.low:+.4f}, {ci.high:+.4f}]" if ci is not None else "n/a"
    print(
        f"faked gain: {gain.estimate:+.4f} nats, 95 % t-interval {interval} over {gain.n_seeds} seeds; {gain.verdict}"
    )
    write_result(
        args.output,
        {
            "benchmark": "leak",
            "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "runs": rows,
            "faked_gain": gain.to_row(),
        },
    )
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
