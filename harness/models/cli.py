"""Commands of the model zoo: ``harness zoo`` and ``harness bench attention``.

Imports stay light at module level (typer only); torch is imported inside the commands.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from harness.errors import InputError

if TYPE_CHECKING:
    from rich.table import Table

    from harness.models.zoo import ReadingRow, ZooRow


def zoo(
    size: str = typer.Option("paper", "--size", "-s", help="Size preset: nano, paper, small, medium, large."),
    vocab_size: int = typer.Option(65, help="Vocabulary size used for the parameter counts (TinyShakespeare: 65)."),
    block_size: int = typer.Option(256, help="Context length (matters for learned-pe only)."),
) -> None:
    """Print every variant with its slots, parameter count and overhead against baseline;
    the diagnostics (not models) apart; and each reading of the papers' vague points."""
    from rich.console import Console

    from harness.models.sizes import get_size
    from harness.models.zoo import reading_rows, zoo_rows

    s = get_size(size)  # unknown size: InputError before any work
    rows = zoo_rows(s, vocab_size=vocab_size, block_size=block_size)
    console = Console(width=160)
    shape = f"{s.n_layer} layers, {s.n_head} heads, width {s.d_model}, vocab {vocab_size}, block {block_size}"
    console.print(
        _variant_table(f"Model zoo at size {s.name!r}: {shape}", [r for r in rows if not r.variant.diagnostic])
    )
    diagnostics = [r for r in rows if r.variant.diagnostic]
    if diagnostics:
        console.print(
            _variant_table(
                "Diagnostics, not models (leak future tokens; a study runs them only with allow_diagnostics: true)",
                diagnostics,
            )
        )
    console.print(_readings_table(reading_rows(rows)))


def _variant_table(title: str, rows: list[ZooRow]) -> Table:
    from rich.table import Table

    table = Table(title=title)
    for column in ("variant", "position", "gate", "scoring", "options"):
        table.add_column(column)
    for column in ("parameters", "vs baseline", "overhead"):
        table.add_column(column, justify="right")
    for row in rows:
        v = row.variant
        options = ", ".join(f"{k}={val}" for k, val in sorted(v.options.items()))
        if v.scoring == "lagged":
            options = ", ".join(filter(None, [options, f"lags={v.lags}" if "lags" not in v.options else ""]))
        table.add_row(
            v.name,
            v.position,
            v.gate,
            v.scoring,
            options or "-",
            f"{row.parameters:,}",
            f"{row.extra_parameters:+,}",
            f"{row.overhead_percent:+.3f} %",
        )
    return table


def _readings_table(rows: list[ReadingRow]) -> Table:
    from rich.table import Table

    from harness.models.variants import DIAGNOSTIC_LABEL

    table = Table(title="Readings of the papers' vague points (docs/zoo.md, Readings): reading B against reading A")
    for column in ("vague point", "reading A", "reading B"):
        table.add_column(column)
    for column in ("parameters B", "B vs baseline", "B - A"):
        table.add_column(column, justify="right")
    for row in rows:
        name_b = f"{row.variant_b} ({DIAGNOSTIC_LABEL})" if row.diagnostic else row.variant_b
        table.add_row(
            row.point,
            row.variant_a,
            name_b,
            f"{row.parameters_b:,}",
            f"{row.overhead_percent:+.3f} %",
            f"{row.extra_over_a:+,}",
        )
    return table


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


def _benchmark_progress(console: Any) -> Any:
    """A progress callback printing one line per measured case."""
    from harness.models import benchmark as bm

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

    from harness.models import benchmark as bm

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
        "machine": bm.machine_info(),
        "attention": [asdict(r) for r in results],
        "train_step": [asdict(r) for r in train_results],
    }
    bm.write_json(output, payload)
    console.print(f"wrote {output}")


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    """Add ``harness zoo`` and ``harness bench attention``."""
    app.command("zoo")(zoo)
    bench_app.command("attention")(bench_attention)
