"""``harness bench ...``: the benchmarks and the fault campaign (:mod:`harness.bench`)."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from harness.bench.machine import write_result
from harness.datasets.cli import text_table
from harness.errors import InputError


def _parse_ints(text: str, what: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise InputError(f"{what} must be comma-separated integers, got {text!r}") from None
    if not values:
        raise InputError(f"{what} is empty")
    return values


def _mib(value: float | None) -> str:
    return f"{value:.1f}" if value is not None else "-"


def _attention_table(results: Any, lens: Any) -> Any:
    """Families x T: time ratio / peak tensor memory ratio against baseline (baseline: ms / MiB)."""
    from rich.table import Table

    table = Table(
        title="attention forward+backward against baseline: time ratio / peak tensor memory ratio "
        "(baseline row: ms / MiB)"
    )
    table.add_column("family")
    for t in lens:
        table.add_column(f"T={t}", justify="right")
    by_case = {(r.family, r.seq_len): r for r in results}
    for family in dict.fromkeys(r.family for r in results):
        cells = []
        for t in lens:
            r = by_case[(family, t)]
            if r.status != "ok":
                cells.append(r.status.split(":")[0])
            elif family == "baseline":
                cells.append(f"{r.time_ms:.1f} ms / {_mib(r.peak_tensor_mb)} MiB")
            else:
                mem = f"x{r.tensor_ratio:.2f}" if r.tensor_ratio is not None else "-"
                cells.append(f"x{r.time_ratio:.2f} / {mem}")
        table.add_row(family, *cells)
    return table


def _train_step_table(train_results: Any) -> Any:
    """One row per variant and dropout: ms per training step and the ratio to baseline."""
    from rich.table import Table

    step_table = Table(title="full training step (paper size, T=256) against baseline")
    for column in ("variant", "dropout", "ms / step", "ratio"):
        step_table.add_column(column, justify="left" if column == "variant" else "right")
    for r in train_results:
        step_table.add_row(r.variant, f"{r.dropout:g}", f"{r.time_ms:.1f}", f"x{r.ratio:.2f}")
    return step_table


def _benchmark_progress(console: Any) -> Any:
    """A progress callback printing one line per measured case."""
    from harness.bench import attention as bm

    def show(result: Any) -> None:
        if isinstance(result, bm.CaseResult):
            detail = (
                f"{result.time_ms:9.1f} ms   tensors {_mib(result.peak_tensor_mb):>7} MiB   rss "
                f"{_mib(result.peak_rss_mb):>7} MiB"
                if result.status == "ok"
                else result.status
            )
            console.print(f"  T={result.seq_len:<5} {result.family:<13} {detail}")
        else:
            console.print(
                f"  train step {result.variant:<20} dropout={result.dropout:g} {result.time_ms:8.1f} ms  "
                f"x{result.ratio:.2f}"
            )

    return show


def bench_attention(
    seq_lens: str = typer.Option("256,1024,4096,8192", "--seq-lens", "-T", help="Comma-separated sequence lengths."),
    families: str = typer.Option(
        "all", help="Comma-separated attention families (baseline is always included), or 'all'."
    ),
    repeats: int = typer.Option(3, help="Timed forward+backward passes per case (after one warm-up)."),
    batch: int = typer.Option(4, help="Batch size B."),
    heads: int = typer.Option(8, help="Heads H."),
    head_dim: int = typer.Option(32, help="Head dimension."),
    threads: int = typer.Option(0, help="torch threads (0: torch's default)."),
    memory: bool = typer.Option(True, help="Measure peak memory (one subprocess per case)."),
    train_step: bool = typer.Option(True, help="Also time a full training step of every variant (paper size, T=256)."),
    train_batch: int = typer.Option(16, help="Batch size of the training-step benchmark."),
    output: Path = typer.Option(Path("benchmarks/results/attention.json"), help="JSON output path."),
) -> None:
    """Forward+backward time and peak memory of each attention family against baseline."""
    from dataclasses import asdict

    from rich.console import Console

    from harness.bench import attention as bm

    lens = _parse_ints(seq_lens, "--seq-lens")
    fams = bm.FAMILIES if families.strip() == "all" else tuple(f.strip() for f in families.split(",") if f.strip())
    for name, value in (
        ("--repeats", repeats),
        ("--batch", batch),
        ("--heads", heads),
        ("--head-dim", head_dim),
        ("--train-batch", train_batch),
    ):
        if value < 1:
            raise InputError(f"{name} must be a positive integer, got {value}")
    console = Console(width=160)
    show = _benchmark_progress(console)
    console.print(
        f"attention forward+backward: B={batch} H={heads} head_dim={head_dim} fp32 CPU, T in {lens}, "
        f"median of {repeats}"
    )
    results = bm.run_attention_benchmark(
        families=fams,
        seq_lens=lens,
        batch=batch,
        n_head=heads,
        head_dim=head_dim,
        repeats=repeats,
        threads=threads or None,
        measure_memory=memory,
        progress=show,
    )
    console.print(_attention_table(results, lens))

    train_results = []
    if train_step:
        console.print(f"training step: paper size, T=256, batch {train_batch}, AdamW; dropout 0 and 0.2")
        train_results = bm.run_train_step_benchmark(
            batch=train_batch, repeats=max(repeats, 3), threads=threads or None, dropouts=(0.0, 0.2), progress=show
        )
        console.print(_train_step_table(train_results))

    payload = {
        "settings": {
            "batch": batch,
            "heads": heads,
            "head_dim": head_dim,
            "dtype": "float32",
            "device": "cpu",
            "seq_lens": list(lens),
            "repeats": repeats,
            "train_batch": train_batch,
            "time_ms": "median wall time of forward+backward after one warm-up, in one process",
            "peak_tensor_mb": "peak live tensor bytes during one forward+backward (torch profiler memory events)",
            "peak_rss_mb": "peak RSS increase (VmHWM reset, minus VmRSS before) during a forward+backward after one "
            "warm-up pass, in a fresh process with MALLOC_MMAP_THRESHOLD_=65536",
        },
        "attention": [asdict(r) for r in results],
        "train_step": [asdict(r) for r in train_results],
    }
    write_result(output, payload)
    console.print(f"wrote {output}")


def bench_chaos(
    schedules: Annotated[int, typer.Option("--schedules", help="Number of fault schedules.")] = 10,
    seed: Annotated[int, typer.Option("--seed", help="Seed the schedules are drawn from.")] = 1,
    replay: Annotated[
        list[int] | None, typer.Option("--replay", help="Run exactly this schedule seed (repeatable).")
    ] = None,
    out: Annotated[Path, typer.Option("--out", help="JSON results file.")] = Path("benchmarks/results/chaos.json"),
) -> None:
    """Fault campaign: the study under seeded kills and outages, compared bit for bit with an unfaulted twin."""
    from harness.bench.chaos.campaign import main

    result = main(schedules=schedules, seed=seed, replay=replay, out=out)
    raise typer.Exit(1 if result["failing_seeds"] else 0)


def bench_data_load(
    names: str = typer.Option("tinyshakespeare,ptb-char", "--names", help="Comma-separated corpus names."),
    repeats: int = typer.Option(5, "--repeats", min=1, help="Warm loads to time (best and mean reported)."),
    out: Path = typer.Option(Path("benchmarks/results/data_load.json"), "--out", help="JSON results file."),
) -> None:
    """Time a cold load (encode + write the token cache, in a fresh temporary cache) and
    warm loads (hash sources + memory-map the cache) of each corpus."""

    from harness.datasets.corpus import load

    results = []
    with tempfile.TemporaryDirectory(prefix="harness-bench-cache-") as cache:
        for name in [n.strip() for n in names.split(",") if n.strip()]:
            t0 = time.perf_counter()
            corpus = load(name, cache_dir=cache, progress=False)
            cold = time.perf_counter() - t0
            warm = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                load(name, cache_dir=cache, progress=False)
                warm.append(time.perf_counter() - t0)
            results.append(
                {
                    "dataset": name,
                    "tokens": int(sum(len(v) for v in corpus.splits.values())),
                    "first_load_s": cold,
                    "second_load_s": warm[0],
                    "warm_best_s": min(warm),
                    "warm_mean_s": sum(warm) / len(warm),
                    "memory_mapped": bool(all(hasattr(v, "filename") for v in corpus.splits.values())),
                }
            )
    rows = [
        (
            r["dataset"],
            f"{r['tokens']:,}",
            f"{r['first_load_s'] * 1e3:.1f}",
            f"{r['second_load_s'] * 1e3:.1f}",
            f"{r['warm_best_s'] * 1e3:.1f}",
            str(r["memory_mapped"]),
        )
        for r in results
    ]
    typer.echo(text_table(rows, ("dataset", "tokens", "first load ms", "second load ms", "warm best ms", "memmap")))
    write_result(out, {"benchmark": "data_load", "results": results})
    typer.echo(f"wrote {out}")


def bench_study(
    trials: Annotated[int, typer.Option("--trials", help="Number of short trials.")] = 8,
    steps: Annotated[int, typer.Option("--steps", help="Training steps per trial.")] = 60,
    out: Annotated[Path, typer.Option("--out", help="JSON results file.")] = Path(
        "benchmarks/results/study_overhead.json"
    ),
) -> None:
    """Overhead of a study: N short trials through `harness run` against the same trainings in a plain loop."""
    from harness.bench.study_overhead import main

    main(trials=trials, steps=steps, out=out)


def bench_train_command(
    size: str = typer.Option("paper", "--size", help="Model size preset."),
    context_length: int = typer.Option(256, "--context-length", help="Context length T."),
    batch_size: int = typer.Option(8, "--batch-size", help="Batch size."),
    steps: int = typer.Option(10, "--steps", help="Timed steps per variant (after warm-up)."),
    warmup: int = typer.Option(2, "--warmup", help="Untimed warm-up steps."),
    variants: str | None = typer.Option(None, "--variants", help="Comma-separated variants. (default: all of the zoo)"),
    overhead: bool = typer.Option(
        True, "--overhead/--no-overhead", help="Also measure the cost of logging and callbacks."
    ),
    overhead_steps: int = typer.Option(
        12, "--overhead-steps", help="Steps of each train() run in the overhead measurement."
    ),
    num_threads: int | None = typer.Option(None, "--num-threads", help="Torch threads. (default: the CPUs given)"),
    rounds: int = typer.Option(3, "--rounds", help="Interleaved timing rounds (the fastest is reported)."),
    output: Path | None = typer.Option(
        None, "--output", help="JSON file. (default: benchmarks/results/train_step.json)"
    ),
) -> None:
    """Tokens/s of a training step (forward, backward, AdamW) per variant against baseline."""
    from harness.bench.train_step import main

    main(
        size=size,
        context_length=context_length,
        batch_size=batch_size,
        steps=steps,
        warmup=warmup,
        variants=[v.strip() for v in variants.split(",") if v.strip()] if variants else None,
        overhead=overhead,
        overhead_steps=overhead_steps,
        num_threads=num_threads,
        rounds=rounds,
        output=output,
    )


def register(bench_app: typer.Typer) -> None:
    """Add ``harness bench attention | train | study | chaos | data-load``."""
    bench_app.command("attention")(bench_attention)
    bench_app.command("train")(bench_train_command)
    bench_app.command("study")(bench_study)
    bench_app.command("chaos")(bench_chaos)
    bench_app.command("data-load")(bench_data_load)
