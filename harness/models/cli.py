"""Commands of the model zoo: ``harness zoo`` (the zoo's table) and ``harness zoo check``
(one component or variant through the checks every study runs before it trains).

Imports stay light at module level (typer only); torch is imported inside the commands.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from rich.table import Table

    from harness.models.checks import VariantCheck
    from harness.models.zoo import ReadingRow, ZooRow

zoo_app = typer.Typer(
    help="The model zoo: every variant with its parameter count (harness zoo), or one component checked "
    "(harness zoo check package.module:Class).",
    invoke_without_command=True,
)


@zoo_app.callback()
def zoo(
    ctx: typer.Context,
    size: str = typer.Option("paper", "--size", "-s", help="Size preset: nano, paper, small, medium, large."),
    vocab_size: int = typer.Option(65, help="Vocabulary size used for the parameter counts (TinyShakespeare: 65)."),
    block_size: int = typer.Option(256, help="Context length (matters for learned-pe only)."),
) -> None:
    """Print every variant with its slots, parameter count and overhead against baseline;
    the diagnostics (not models) apart; and each reading of the papers' vague points."""
    if ctx.invoked_subcommand is not None:
        return
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


@zoo_app.command("check")
def check(
    name: str = typer.Argument(
        ...,
        help="A user component (package.module:Class, or a name registered in the entry-point group "
        "harness.components), or a variant of the zoo (e.g. ega-leaky).",
    ),
    position: str | None = typer.Option(None, "--position", help="Position to combine it with (default sinusoidal)."),
    gate: str | None = typer.Option(None, "--gate", help="Gate to combine it with (default none)."),
    scoring: str | None = typer.Option(None, "--scoring", help="Scoring to combine it with (default dot)."),
    size: str = typer.Option("nano", "--size", "-s", help="Size preset the checks build."),
    length: int = typer.Option(64, "--length", help="Tokens of the probe's sequence (every position is changed)."),
    directory: Path = typer.Option(
        Path("."), "--dir", help="Folder searched for the component's module after the Python path."
    ),
    graphs: bool = typer.Option(True, "--graphs/--no-graphs", help="Trace the model with torch.compile (seconds)."),
) -> None:
    """Check one component (in the baseline's other slots, or those given) or one variant: the
    causality probe (no output before position t moves when the token at t changes), finite
    outputs and gradients, the parameter count against baseline, and whether torch.compile
    traces it as one graph. Exit 2 when it reads the future or is not finite, or when it
    cannot be imported or constructed."""
    from harness.errors import InputError
    from harness.models.checks import check_variant

    variant = _variant_to_check(name, position=position, gate=gate, scoring=scoring, directory=directory)
    result = check_variant(variant, size=size, length=length, component_dir=directory, graphs=graphs)
    typer.echo(_check_report(result))
    if not result.ok:
        raise InputError(result.refusal())


def _variant_to_check(name: str, *, position: str | None, gate: str | None, scoring: str | None, directory: Path):
    """The registry variant ``name``, or the baseline with the component ``name`` in its slot
    (read from its class) and the slots given."""
    from harness.errors import InputError
    from harness.models.component_names import is_user_component
    from harness.models.components import resolve_component, slot_of
    from harness.models.variants import VARIANTS, make_variant

    if name in VARIANTS and not any((position, gate, scoring)):
        return VARIANTS[name]
    if not is_user_component(name):
        raise InputError(
            f"{name!r} is neither a variant of the zoo nor a user component; name a class as package.module:Class "
            "(found on the Python path or in --dir), a name registered in the entry-point group harness.components, "
            f"or a variant ({', '.join(VARIANTS)})"
        )
    slot = slot_of(resolve_component(name, search_dir=directory))
    slots = {"position": position or "sinusoidal", "gate": gate or "none", "scoring": scoring or "dot", slot: name}
    return make_variant(name.rsplit(":", 1)[-1], **slots)


def _check_report(result: VariantCheck) -> str:
    """The checks as lines: the variant, where its components come from, one line per check."""
    v, s = result.variant, result.size
    head = [
        f"Checking {v.describe()} at size {s.name} ({s.n_layer} layers, {s.n_head} heads, width {s.d_model}), "
        f"{result.causality.length} tokens"
    ]
    head += [f"  {slot}: {where}" for slot, where in result.components.items()]
    marks = {True: "pass", False: "FAIL", None: "note"}
    body = [f"  {line.check:<17} {marks[line.passed]:<5} {line.detail}" for line in result.lines()]
    verdict = "passes" if result.ok else "is refused"
    return "\n".join([*head, *body, f"{v.name} {verdict}: a study runs it only when it passes."])


def register(app: typer.Typer) -> None:
    """Add ``harness zoo`` and ``harness zoo check``."""
    app.add_typer(zoo_app, name="zoo")
