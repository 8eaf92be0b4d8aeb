"""The ``harness`` command.

Each area registers its own commands from ``harness/<area>/cli.py`` (a ``register``
function; the benchmarks from ``harness/bench/cli.py``), so this file only assembles them
and maps bad input to exit code 2:

    harness zoo | data ... | train | run | submit | report | scorecard | ui | device ... | bench ...
"""

from __future__ import annotations

import importlib
import shutil
import sys
from typing import Any

import typer
from typer import rich_utils
from typer.core import TyperGroup

from harness.datasets.data_dir import resolve_data_dir_env
from harness.errors import InputError
from harness.mlflow_client import quiet_mlflow

#: Columns of the help and of typer's error panels: the options' help reads in long lines instead
#: of a narrow column beside the option names (80 columns, rich's width off a terminal).
HELP_WIDTH = 100


def help_width() -> int:
    """Columns the help is laid out in: typer's ``$TERMINAL_WIDTH`` when set, else
    :data:`HELP_WIDTH`, or a narrower terminal's (``$COLUMNS`` or the terminal's own width)."""
    if rich_utils.MAX_WIDTH is not None:
        return rich_utils.MAX_WIDTH
    return min(HELP_WIDTH, shutil.get_terminal_size((HELP_WIDTH, 24)).columns)


class HarnessGroup(TyperGroup):
    """The root command: every help and usage error of one invocation laid out at
    :func:`help_width` (typer's help reads its width from ``rich_utils.MAX_WIDTH`` alone, set
    for the call and restored after it; the environment is left alone)."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        saved = rich_utils.MAX_WIDTH
        rich_utils.MAX_WIDTH = help_width()
        try:
            return super().main(*args, **kwargs)
        finally:
            rich_utils.MAX_WIDTH = saved


app = typer.Typer(
    cls=HarnessGroup,
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
    "harness.report.cli",
    "harness.studies.device.cli",
    "harness.scorecard.cli",
)

for _module_name in _COMMAND_MODULES:
    importlib.import_module(_module_name).register(app)
importlib.import_module("harness.bench.cli").register(bench_app)


def main(argv: list[str] | None = None) -> None:
    """Console entry point. Typer handles usage errors itself (exit 2); bad input that
    the harness detects (:class:`InputError`) becomes one message on stderr and exit 2."""
    quiet_mlflow()  # no progress bar per downloaded artifact unless the user's environment asks
    # A relative $HARNESS_DATA_DIR means the folder as seen from here: resolved once, before any
    # process is started or directory changed, and handed on resolved (harness.datasets.data_dir).
    resolve_data_dir_env()
    try:
        app(args=argv)
    except InputError as exc:
        typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
