"""Parity with nanoGPT at its own CPU recipe: the harness's baselines against nanoGPT's ``train.py``.

    python benchmarks/parity_nanogpt.py --nanogpt-dir /tmp/nanogpt        # docs/benchmarks.md (2 h on 2 CPU cores)
    python benchmarks/parity_nanogpt.py --variants learned-pe --seeds 0 --arms recipe,vaswani-embedding \\
        --steps 1000                                                       # screen one change at a time

The recipe is nanoGPT's README CPU run ("I only have a macbook"): 4 layers, 4 heads, width
128, T = 64, batch 12, 2,000 iterations, dropout 0, lr 1e-3 with 100 warmup steps and cosine
decay to 1e-4, AdamW betas (0.9, 0.99), weight decay 0.1, clip 1.0. Both sides see the same
TinyShakespeare split (first 90 % train, last 10 % validation) and the same schedule.

- **harness**: ``harness.training.train`` (the code path of ``harness train``) with that
  recipe as the custom shape L4H4d128 and ``eval_windows=1742``: the loss over the full
  validation split (every non-overlapping window of 64 characters), and over 1,742 evenly
  spaced training windows. One torch thread per run (``--threads``).
- **nanoGPT** (``--nanogpt-dir``, a checkout of karpathy/nanoGPT; nothing of it is copied
  here): its own ``train.py`` at the recipe (``eval_iters=200``), seed ``1337 + seed``
  (``torch.manual_seed`` shifted through a wrapper, since ``train.py`` hard-codes 1337), then
  its final checkpoint evaluated on the harness's windows, so both sides are measured alike.
  ``input.txt`` is written from the harness's copy of the corpus and nanoGPT's
  ``prepare.py`` encodes it (same 65-character vocabulary).

**Arms** change the shipped initialisation one thing at a time, on the built model before
training (the benchmark's own surgery; the model code knows only the shipped recipe):

- ``recipe``: the shared recipe as shipped (:mod:`harness.models.transformer`);
- ``vaswani-embedding``: the recipe before issue 11: E ~ N(0, 1/d) entering as sqrt(d) E,
  the learned position table likewise, unit-amplitude encodings (sinusoidal, MOPE) at
  amplitude 1;
- ``unit-amplitude-positions``: only the last of these (sinusoidal and MOPE at amplitude 1
  next to N(0, 0.02) tokens);
- ``no-bias``: no biases in the transformer's Linear and LayerNorm layers (nanoGPT's
  ``bias=False``; frozen at zero, out of the optimizer); the gates' own parameters keep theirs.

Prints a table and writes ``benchmarks/results/parity_nanogpt.json``; every finished run is
also appended to ``parity_nanogpt.jsonl`` beside it, and ``--reuse`` takes runs from there
instead of training them again (same side, arm, variant, seed and steps).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import torch
import torch.nn.functional as F
from torch import nn

RESULTS = Path(__file__).resolve().parent / "results"
T, BATCH, EVAL_WINDOWS = 64, 12, 1742

#: nanoGPT's README CPU recipe as TrainConfig fields (steps set per run).
RECIPE: dict[str, Any] = {
    "dataset": "tinyshakespeare",
    "n_layer": 4,
    "n_head": 4,
    "d_model": 128,
    "context_length": T,
    "batch_size": BATCH,
    "lr": 1e-3,
    "min_lr": 1e-4,
    "warmup_steps": 100,
    "weight_decay": 0.1,
    "beta1": 0.9,
    "beta2": 0.99,
    "grad_clip": 1.0,
    "dropout": 0.0,
    "eval_windows": EVAL_WINDOWS,
    "accelerator": "cpu",
}


# -- arms: one change of the initialisation at a time -------------------------------------------------


def _vaswani_embedding(model: Any) -> None:
    d = model.size.d_model
    nn.init.normal_(model.wte.weight, std=1.0 / math.sqrt(d))
    learned = hasattr(model.position, "table")
    if learned:
        nn.init.normal_(model.position.table.weight, std=1.0 / math.sqrt(d))
    position_scale = math.sqrt(d) if learned else 1.0

    def embed(idx: torch.Tensor) -> torch.Tensor:  # sqrt(d) E[idx] + PE: Vaswani's scaled embedding
        x = model.wte(idx) * math.sqrt(d)  # (B, T, d)
        pe = model.position.embedding(idx.size(1), idx.device)
        return x if pe is None else x + position_scale * pe

    model.embed = embed


def _unit_amplitude_positions(model: Any) -> None:
    model.position_scale = 1.0


def _no_bias(model: Any) -> None:
    layers = [model.ln_f]
    for block in model.blocks:
        layers += [block.ln_1, block.attn.qkv, block.attn.proj, block.ln_2, block.mlp.fc, block.mlp.proj]
    for layer in layers:
        nn.init.zeros_(layer.bias)
        layer.bias.requires_grad_(False)  # optimizer_groups leaves frozen parameters out


ARMS: dict[str, Callable[[Any], None] | None] = {
    "recipe": None,
    "vaswani-embedding": _vaswani_embedding,
    "unit-amplitude-positions": _unit_amplitude_positions,
    "no-bias": _no_bias,
}


@contextlib.contextmanager
def _arm(name: str) -> Iterator[None]:
    """Apply arm ``name`` to every model ``train()`` builds while the context is open."""
    change = ARMS[name]
    if change is None:
        yield
        return
    # The name train() calls: harness.training.run imported build_char_model into its own
    # namespace, so patching harness.training.module's would leave train() unchanged.
    import harness.training.run as run

    build = run.build_char_model

    def build_with_change(config: Any, vocab_size: int) -> Any:
        model = build(config, vocab_size)
        change(model)
        return model

    with mock.patch.object(run, "build_char_model", build_with_change):
        yield


# -- the two sides -------------------------------------------------------------------------------------


def run_harness(variant: str, seed: int, steps: int, arm: str, threads: int) -> dict[str, Any]:
    """One harness run at the recipe: full-split validation loss and what else the row shows."""
    from harness.training import train

    config = {**RECIPE, "variant": variant, "seed": seed, "max_steps": steps, "eval_every": steps}
    with tempfile.TemporaryDirectory() as tmp, _arm(arm):
        result = train(
            {**config, "num_threads": threads, "checkpoint_dir": tmp}, mlflow_logging=False, progress_bar=False
        )
    metrics = result.metrics
    return {
        "val_loss": result.final_val_loss,
        "train_loss": result.final_train_loss,
        "parameters": result.num_parameters,
        "tau_mean": result.tau_mean,
        "tau_grad_norm": metrics.get("gate/tau_grad_norm"),
        "tau_grad_mean_norm": metrics.get("gate/tau_grad_mean_norm"),
        "tokens_per_s": result.tokens_per_s,
        "wall_s": result.wall_time_s,
    }


def _prepare_nanogpt_data(nanogpt: Path) -> None:
    """nanoGPT's shakespeare_char from the harness's copy of the corpus (prepare.py would download it)."""
    from harness.datasets import load

    folder = nanogpt / "data" / "shakespeare_char"
    if (folder / "train.bin").is_file() and (folder / "meta.pkl").is_file():
        return
    corpus = load("tinyshakespeare", progress=False)
    (folder / "input.txt").write_text(corpus.decode(corpus.train) + corpus.decode(corpus.val))
    subprocess.run([sys.executable, "prepare.py"], cwd=folder, check=True, capture_output=True)


_SEEDED_TRAIN = (
    "import runpy, sys, torch\n"
    "offset = int(sys.argv[1])\n"
    "seed = torch.manual_seed\n"
    "torch.manual_seed = lambda s: seed(s + offset)  # train.py seeds 1337 + seed_offset\n"
    "sys.argv = ['train.py', *sys.argv[2:]]\n"
    "runpy.run_path('train.py', run_name='__main__')\n"
)


def _nanogpt_eval(nanogpt: Path, checkpoint: Path, threads: int) -> dict[str, float]:
    """nanoGPT's checkpoint on the harness's evaluation windows (its own model code, imported)."""
    from harness.datasets import load
    from harness.training.data import make_eval_windows

    spec = importlib.util.spec_from_file_location("nanogpt_model", nanogpt / "model.py")
    model_module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(model_module)
    saved = torch.load(checkpoint, map_location="cpu", weights_only=False)  # nanoGPT's own pickle (its config)
    model = model_module.GPT(model_module.GPTConfig(**saved["model_args"]))
    model.load_state_dict({k.removeprefix("_orig_mod."): v for k, v in saved["model"].items()})
    model.eval()
    corpus = load("tinyshakespeare", progress=False)
    torch.set_num_threads(threads)
    losses = {}
    for split in ("val", "train"):
        windows = make_eval_windows(getattr(corpus, split), split=split, block_size=T, max_windows=EVAL_WINDOWS)
        per_window = []
        with torch.no_grad():
            for lo in range(0, len(windows), 128):
                x, y = windows.x[lo : lo + 128], windows.y[lo : lo + 128]
                logits, _ = model(x, y)  # (N, T, V) when targets are given
                per_window.append(F.cross_entropy(logits.transpose(1, 2), y, reduction="none").mean(dim=1))
        losses[split] = float(torch.cat(per_window).double().mean())
    return losses


def run_nanogpt(nanogpt: Path, seed: int, steps: int, threads: int) -> dict[str, Any]:
    """nanoGPT's train.py at the recipe; its own estimate and the harness's full-split loss."""
    _prepare_nanogpt_data(nanogpt)
    with tempfile.TemporaryDirectory() as out_dir:
        args = ["config/train_shakespeare_char.py", "--device=cpu", "--compile=False", "--eval_iters=200"]
        args += [f"--block_size={T}", f"--batch_size={BATCH}", "--n_layer=4", "--n_head=4", "--n_embd=128"]
        args += [f"--max_iters={steps}", f"--lr_decay_iters={steps}", "--dropout=0.0", f"--eval_interval={steps}"]
        args += ["--always_save_checkpoint=True", f"--out_dir={out_dir}", "--log_interval=100"]
        env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
        t0 = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-c", _SEEDED_TRAIN, str(seed), *args],
            cwd=nanogpt,
            env=env,
            capture_output=True,
            text=True,
        )
        wall = time.perf_counter() - t0
        if done.returncode != 0:
            raise RuntimeError(f"nanoGPT's train.py failed:\n{done.stderr[-3000:]}")
        final = [line for line in done.stdout.splitlines() if line.startswith(f"step {steps}:")]
        own = {}
        if final:  # "step 2000: train loss 1.7877, val loss 1.9216"
            parts = final[-1].split(":", 1)[1].split(",")
            own = {p.strip().rsplit(" ", 1)[0]: float(p.strip().rsplit(" ", 1)[1]) for p in parts}
        full = _nanogpt_eval(nanogpt, Path(out_dir) / "ckpt.pt", threads)
    return {
        "val_loss": full["val"],
        "train_loss": full["train"],
        "own_val_loss": own.get("val loss"),
        "own_train_loss": own.get("train loss"),
        "parameters": None,
        "wall_s": wall,
    }


# -- the table --------------------------------------------------------------------------------------------


def _key(row: dict[str, Any]) -> tuple:
    return (row["side"], row["arm"], row["variant"], row["seed"], row["steps"])


def _cached(path: Path) -> dict[tuple, dict[str, Any]]:
    if not path.is_file():
        return {}
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {_key(r): r for r in rows}


def summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean over seeds per (side, arm, variant) and the gap to nanoGPT's mean (same steps)."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["side"], row["arm"], row["variant"], row["steps"]), []).append(row)
    reference = {
        steps: statistics.fmean(r["val_loss"] for r in g)
        for (side, _, _, steps), g in groups.items()
        if side == "nanogpt"
    }
    table = []
    for (side, arm, variant, steps), group in groups.items():
        val = statistics.fmean(r["val_loss"] for r in group)
        table.append(
            {
                "side": side,
                "arm": arm,
                "variant": variant,
                "steps": steps,
                "seeds": ",".join(str(r["seed"]) for r in sorted(group, key=lambda r: r["seed"])),
                "val_loss_per_seed": " ".join(f"{r['val_loss']:.4f}" for r in sorted(group, key=lambda r: r["seed"])),
                "mean_val_loss": val,
                "mean_train_loss": statistics.fmean(r["train_loss"] for r in group),
                "gap_to_nanogpt": val - reference[steps] if steps in reference else None,
            }
        )
    return table


def print_table(table: list[dict[str, Any]]) -> None:
    head = f"{'side':8} {'arm':25} {'variant':10} {'steps':>5} {'seeds':6} {'val per seed':>16} {'mean val':>8} "
    print(head + f"{'mean train':>10} {'gap':>7}")
    for r in table:
        gap = f"{r['gap_to_nanogpt']:+.4f}" if r["gap_to_nanogpt"] is not None else "-"
        print(
            f"{r['side']:8} {r['arm']:25} {r['variant']:10} {r['steps']:>5} {r['seeds']:6} "
            f"{r['val_loss_per_seed']:>16} {r['mean_val_loss']:8.4f} {r['mean_train_loss']:10.4f} {gap:>7}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", default="learned-pe,baseline,ega,ega-mope")
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--arms", default="recipe", help=f"comma-separated, of: {', '.join(ARMS)}")
    parser.add_argument("--nanogpt-dir", type=Path, help="a checkout of karpathy/nanoGPT: run its train.py too")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run (1: robust on shared cores)")
    parser.add_argument("--reuse", action="store_true", help="take finished runs from the .jsonl instead of rerunning")
    parser.add_argument("--output", type=Path, default=RESULTS / "parity_nanogpt.json")
    args = parser.parse_args(argv)
    from harness.bench.machine import write_result

    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        print(f"error: unknown arm(s) {', '.join(unknown)}; known: {', '.join(ARMS)}", file=sys.stderr)
        return 2
    if args.nanogpt_dir is not None and not (args.nanogpt_dir / "train.py").is_file():
        print(f"error: {args.nanogpt_dir} has no train.py: pass a checkout of karpathy/nanoGPT", file=sys.stderr)
        return 2
    seeds = [int(s) for s in args.seeds.split(",")]
    jobs = [("nanogpt", "-", "nanogpt", s) for s in seeds] if args.nanogpt_dir else []
    jobs += [("harness", arm, v.strip(), s) for arm in arms for v in args.variants.split(",") for s in seeds]
    log = args.output.with_suffix(".jsonl")
    log.parent.mkdir(parents=True, exist_ok=True)
    cache = _cached(log) if args.reuse else {}
    rows = []
    for side, arm, variant, seed in jobs:
        key = (side, arm, variant, seed, args.steps)
        if key in cache:
            rows.append(cache[key])
            continue
        if side == "nanogpt":
            measured = run_nanogpt(args.nanogpt_dir, seed, args.steps, args.threads)
        else:
            measured = run_harness(variant, seed, args.steps, arm, args.threads)
        row = {"side": side, "arm": arm, "variant": variant, "seed": seed, "steps": args.steps, **measured}
        print(json.dumps(row), flush=True)
        with log.open("a") as f:
            f.write(json.dumps(row) + "\n")
        rows.append(row)
    table = summarise(rows)
    print_table(table)
    write_result(args.output, {"recipe": RECIPE, "rows": rows, "table": table})
    print(f"JSON: {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
