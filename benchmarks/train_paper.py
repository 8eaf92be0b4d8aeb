"""The papers' recipe end to end: ``baseline`` and ``ega-mope`` at ``paper`` size on
TinyShakespeare (T=256, batch 64, 5,000 steps, bf16 + torch.compile on GPU), one run each;
prints time per run and final validation loss, writes benchmarks/results/train_paper.json.

Reference: nanoGPT's shakespeare_char recipe reaches a validation loss of about 1.47 in
about 3 minutes on an A100.

    python benchmarks/train_paper.py                      # on a GPU machine
    python benchmarks/train_paper.py --accelerator cpu --size nano --max-steps 20   # smoke test
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from harness.bench.machine import write_result
from harness.training import TrainConfig, train

RESULTS = Path(__file__).resolve().parent / "results" / "train_paper.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", default="baseline,ega-mope")
    parser.add_argument("--size", default="paper")
    parser.add_argument("--max-steps", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--accelerator", default="gpu", choices=["auto", "cpu", "gpu"])
    parser.add_argument("--compile", default=None, action=argparse.BooleanOptionalAction)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()

    import torch

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for variant in args.variants.split(","):
            config = TrainConfig(
                variant=variant,
                dataset="tinyshakespeare",
                size=args.size,
                max_steps=args.max_steps,
                eval_every=min(250, args.max_steps),
                seed=args.seed,
                accelerator=args.accelerator,
                compile=args.compile,
                checkpoint_dir=str(Path(tmp) / variant),
            )
            result = train(config, progress_bar=False, mlflow_logging=False)
            rows.append(
                {
                    "variant": variant,
                    "status": result.status,
                    "steps": result.steps,
                    "wall_time_s": result.wall_time_s,
                    "tokens_per_s": result.tokens_per_s,
                    "final_val_loss": result.final_val_loss,
                    "best_val_loss": result.best_val_loss,
                    "final_train_loss": result.final_train_loss,
                    "tau_mean": result.tau_mean,
                    "open_fraction": result.open_fraction,
                }
            )
            print(
                f"{variant:<12} {result.status:<9} {result.wall_time_s:8.1f} s  {result.tokens_per_s:12,.0f} tokens/s  "
                f"val {result.final_val_loss:.4f}  best {result.best_val_loss:.4f}  train "
                f"{result.final_train_loss:.4f}",
                flush=True,
            )
    device = torch.cuda.get_device_name() if torch.cuda.is_available() and args.accelerator != "cpu" else "cpu"
    payload = {
        "benchmark": "train_paper",
        "size": args.size,
        "max_steps": args.max_steps,
        "device": device,
        "runs": rows,
    }
    write_result(args.output, payload)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
