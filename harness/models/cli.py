"""Commands of the model zoo: ``harness zoo``.

Imports stay light at module level (typer only); torch is imported inside the commands.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

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


def register(app: typer.Typer) -> None:
    """Add ``harness zoo``."""
    app.command("zoo")(zoo)
