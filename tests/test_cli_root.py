"""The root command assembles every area's commands and maps bad input to exit 2."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def test_help_lists_commands() -> None:
    out = subprocess.run([sys.executable, "-m", "harness.cli", "--help"], capture_output=True, text=True, check=True)
    assert "bench" in out.stdout


def test_importing_harness_has_no_side_effects() -> None:
    code = (
        "import harness, sys; "
        "assert 'ray' not in sys.modules and 'mlflow' not in sys.modules and 'torch' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def _help_lines(*args: str, columns: str | None = None) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "TERMINAL_WIDTH")}
    if columns is not None:
        env["COLUMNS"] = columns
    out = subprocess.run(
        [sys.executable, "-m", "harness.cli", *args, "--help"], capture_output=True, text=True, check=True, env=env
    )
    return out.stdout.splitlines()


def test_help_reads_at_100_columns_off_a_terminal() -> None:
    """Piped, with no $COLUMNS: rich would lay the help out at 80 columns; the harness's is 100
    wide (the options' box spans it), the root's and a command's alike."""
    for args in ((), ("train",)):
        lines = _help_lines(*args)
        assert max(len(line) for line in lines) == 100, args
        assert any(line.startswith("╭─ Options ") and len(line) == 100 for line in lines), args


def test_help_keeps_to_a_narrower_terminal() -> None:
    lines = _help_lines("train", columns="72")
    assert max(len(line) for line in lines) == 72


def test_the_help_width_is_the_invocations_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process (as a test's CliRunner calls it), the width is set for the call and put back."""
    from typer import rich_utils
    from typer.testing import CliRunner

    from harness.cli import app, help_width

    for name in ("COLUMNS", "TERMINAL_WIDTH"):  # the expected width read under the call's own environment
        monkeypatch.delenv(name, raising=False)
    before = rich_utils.MAX_WIDTH
    result = CliRunner().invoke(app, ["train", "--help"])
    assert result.exit_code == 0 and max(len(line) for line in result.output.splitlines()) == help_width()
    assert rich_utils.MAX_WIDTH == before
