"""The ``harness`` command.

Each area registers its own commands from ``harness/<area>/cli.py`` (a ``register``
function; the benchmarks from ``harness/bench/cli.py``), so this file only assembles them
and maps bad input to exit code 2:

    harness zoo | data ... | train | run | submit | report | scorecard | ui | device ... | bench ...
"""

from __future__ import annotations

import importlib
import sys

import typer

from harness.errors import InputError

app = typer.Typer(
    name="harness",
    help="Multi-seed studies of attention variants: model zoo, training, Ray Tune sweeps, statistics in MLflow.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
bench_app = typer.Typer(help="Speed and memory benchmarks (print a table, write JSON).", no_args_is_help=True)
app.add_typer(bench_app, name="bench")

# Areas that contribute commands; each module defines ``register(app)``; ``harness bench ...``
# comes from the benchmark package alone (``register(bench_app)``).
_COMMAND_MODULES = (
    "harness.models.cli",
    "harness.datasets.cli",
    "harness.training.cli",
    "harness.studies.cli",
    "harness.studies.device.cli",
    "harness.scorecard.cli",
)

for _module_name in _COMMAND_MODULES:
    importlib.import_module(_module_name).register(app)
importlib.import_module("harness.bench.cli").register(bench_app)


def main(argv: list[str] | None = None) -> None:
    """Console entry point. Typer handles usage errors itself (exit 2); bad input that
    the harness detects (:class:`InputError`) becomes one message on stderr and exit 2."""
    # MLflow's progress bar per downloaded artifact is off for every call of the harness
    # (harness.mlflow_client.QUIET_CALLS): one per trial would bury the verdicts.
    try:
        app(args=argv)
    except InputError as exc:
        typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
