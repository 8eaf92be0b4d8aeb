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

#: The probe's length when no spec beside the component says more: the papers' context (256 tokens).
DEFAULT_CHECK_LENGTH = 256

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

    from harness.models.variants import LAGGED_SCORINGS

    table = Table(title=title)
    for column in ("variant", "position", "gate", "scoring", "options"):
        table.add_column(column)
    for column in ("parameters", "vs baseline", "overhead"):
        table.add_column(column, justify="right")
    for row in rows:
        v = row.variant
        options = ", ".join(f"{k}={val}" for k, val in sorted(v.options.items()))
        if v.scoring in LAGGED_SCORINGS:
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
    length: int | None = typer.Option(
        None,
        "--length",
        help="Tokens of the probe's sequence. Default: the longest context length of the study specs in --dir that "
        f"name the component, else {DEFAULT_CHECK_LENGTH}; a warning when shorter than a spec there trains it at.",
        min=2,
    ),
    directory: Path = typer.Option(
        Path("."), "--dir", help="Folder searched for the component's module after the Python path."
    ),
    graphs: bool = typer.Option(True, "--graphs/--no-graphs", help="Trace the model with torch.compile (seconds)."),
) -> None:
    """Check one component (in the baseline's other slots, or those given) or one variant: each
    slot's contract on a probe batch (shape, dtype, finiteness), the causality probe in eval
    and train mode (no output before position t moves when the tokens from t on change),
    finite outputs and gradients, the parameter count against baseline, and whether
    torch.compile traces it as one graph. Exit 2 when it breaks a contract, reads the future or
    is not finite, or when it cannot be imported or constructed."""
    from harness.errors import InputError
    from harness.models.checks import check_variant

    variant = _variant_to_check(name, position=position, gate=gate, scoring=scoring, directory=directory)
    trained = spec_lengths(directory, name)
    probed = length if length is not None else max(trained.values(), default=DEFAULT_CHECK_LENGTH)
    _warn_if_shorter(probed, trained, name, directory, told=length is not None)
    result = check_variant(variant, size=size, length=probed, component_dir=directory, graphs=graphs)
    typer.echo(_check_report(result))
    if not result.ok:
        raise InputError(result.refusal())


def spec_lengths(directory: Path, name: str) -> dict[str, int]:
    """The study specs (``*.yaml``, ``*.yml``) in ``directory`` that name ``name`` (a component in
    a slot, or a variant), each with the longest context length it trains at. Read as plain
    YAML (the study layer sits above this one); a file that is no spec is passed over."""
    import yaml

    found: dict[str, int] = {}
    for path in sorted([*directory.glob("*.yaml"), *directory.glob("*.yml")]):
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue
        if not isinstance(data, dict) or not isinstance(data.get("variants"), list):
            continue
        lengths = [n for n in data.get("context_lengths") or [] if isinstance(n, int) and not isinstance(n, bool)]
        named = any(
            entry == name
            or (isinstance(entry, dict) and name in (entry.get(k) for k in ("position", "gate", "scoring")))
            for entry in data["variants"]
        )
        if named and lengths:
            found[path.name] = max(lengths)
    return found


def _warn_if_shorter(probed: int, trained: dict[str, int], name: str, directory: Path, *, told: bool) -> None:
    """A warning on stderr when the probe is shorter than a spec in ``directory`` trains ``name``
    at (a leak that shows only beyond the probe's length would pass), or, for the default
    length (not ``told``), a note that no spec there names it."""
    longer = {spec: n for spec, n in trained.items() if n > probed}
    if longer:
        where = ", ".join(f"{spec} at T = {n}" for spec, n in longer.items())
        typer.echo(
            f"warning: probing {probed} tokens, shorter than {name} trains at ({where}): a leak that shows only "
            f"beyond {probed} tokens would pass here; check with --length {max(longer.values())} (a study's "
            "pre-flight probes each of its context lengths)",
            err=True,
        )
    elif not trained and not told:
        typer.echo(
            f"note: no study spec in {directory} names {name}; probing {probed} tokens (--length to change it; a "
            "study's pre-flight probes each of its context lengths)",
            err=True,
        )


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
        f"{result.length} tokens"
    ]
    head += [f"  {slot}: {where}" for slot, where in result.components.items()]
    marks = {True: "pass", False: "FAIL", None: "note"}
    body = [f"  {line.check:<17} {marks[line.passed]:<5} {line.detail}" for line in result.lines()]
    verdict = "passes" if result.ok else "is refused"
    return "\n".join([*head, *body, f"{v.name} {verdict}: a study runs it only when it passes."])


def register(app: typer.Typer) -> None:
    """Add ``harness zoo`` and ``harness zoo check``."""
    app.add_typer(zoo_app, name="zoo")
