"""The root command assembles every area's commands and maps bad input to exit 2."""

from __future__ import annotations

import subprocess
import sys


def test_help_lists_commands() -> None:
    out = subprocess.run([sys.executable, "-m", "harness.cli", "--help"], capture_output=True, text=True, check=True)
    assert "bench" in out.stdout


def test_importing_harness_has_no_side_effects() -> None:
    code = (
        "import harness, sys; "
        "assert 'ray' not in sys.modules and 'mlflow' not in sys.modules and 'torch' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
