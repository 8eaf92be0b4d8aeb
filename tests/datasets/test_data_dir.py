"""A relative ``$HARNESS_DATA_DIR`` (the README's ``../shared/data``) is resolved once, where it
is read, against the folder the command started in; shown resolved; and handed on resolved to
every process started after (issue 43)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from harness_support import cli_env, run_harness

from harness.datasets.data_dir import DATA_DIR_ENV, resolve_data_dir_env


def test_a_relative_folder_is_resolved_against_the_working_directory_and_written_back(tmp_path: Path) -> None:
    here = tmp_path / "work"
    environ = {DATA_DIR_ENV: "../shared/data"}
    assert resolve_data_dir_env(environ, cwd=here) == tmp_path / "shared" / "data"
    assert environ[DATA_DIR_ENV] == str(tmp_path / "shared" / "data")  # what every later read and child sees
    assert resolve_data_dir_env(environ, cwd=tmp_path / "elsewhere") == tmp_path / "shared" / "data"  # once
    assert resolve_data_dir_env({}, cwd=here) is None and resolve_data_dir_env({DATA_DIR_ENV: ""}, cwd=here) is None
    home = {DATA_DIR_ENV: "~/corpora"}
    assert resolve_data_dir_env(home, cwd=here) == Path.home() / "corpora"


def test_the_harness_command_reads_a_relative_folder_from_where_it_started(
    tmp_path: Path, shared_data_dir: Path
) -> None:
    """``harness data list`` started in a folder of its own with the folder given relative to it:
    the corpus is found and the folder is shown absolute; a process the harness starts gets it
    absolute too."""
    relative = os.path.relpath(shared_data_dir, tmp_path)
    assert not Path(relative).is_absolute()
    out = run_harness("data", "list", cwd=tmp_path, env={DATA_DIR_ENV: relative}, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    (row,) = [line for line in out.stdout.splitlines() if line.startswith("tinyshakespeare")]
    assert f"$HARNESS_DATA_DIR: {shared_data_dir.resolve() / 'tinyshakespeare' / 'input.txt'}" in row
    assert "sha256 ok" in row
    assert f"searched, in order: $HARNESS_DATA_DIR {shared_data_dir.resolve()}," in out.stdout
    child = (
        "from harness.cli import main; import os, subprocess, sys\n"
        "try:\n    main(['data', 'info', 'tinyshakespeare'])\nexcept SystemExit:\n    pass\n"
        "os.chdir('/')\n"
        "print(subprocess.run([sys.executable, '-c', 'import os; print(os.environ[\"HARNESS_DATA_DIR\"])'],"
        " capture_output=True, text=True).stdout.strip())"
    )
    seen = subprocess.run(
        [sys.executable, "-c", child],
        cwd=tmp_path,
        env=cli_env({DATA_DIR_ENV: relative}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert seen.returncode == 0, seen.stderr
    assert seen.stdout.strip().splitlines()[-1] == str(shared_data_dir.resolve())
