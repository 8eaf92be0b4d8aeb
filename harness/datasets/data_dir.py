"""The data folder of ``$HARNESS_DATA_DIR``, resolved once, where it is read.

A relative value (the README's ``export HARNESS_DATA_DIR=../shared/data``) means the folder as
seen from where the command started. Every process the harness starts -- a test's ``harness``
subprocess in another folder, a Ray worker in Tune's trial directory, a job's driver -- starts
somewhere else, and would read the same words as another folder. So the first read resolves it
against the working directory of that moment (the ``harness`` command does so as it starts,
:func:`harness.cli.main`) and writes the absolute folder back into the environment: this process
reads the same folder after any change of directory, and every process it starts inherits it
resolved. Imported by the CLI at start: no heavy imports here.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from pathlib import Path

#: The environment variable of the data folder searched after ``data_dir`` / ``--data-dir``.
DATA_DIR_ENV = "HARNESS_DATA_DIR"


def resolve_data_dir_env(environ: MutableMapping[str, str] | None = None, *, cwd: Path | None = None) -> Path | None:
    """``$HARNESS_DATA_DIR`` as an absolute folder (``~`` expanded, a relative one against
    ``cwd``, default the working directory), written back into ``environ`` (default
    ``os.environ``) so that it is resolved once; None when it is unset or empty."""
    environ = os.environ if environ is None else environ
    raw = environ.get(DATA_DIR_ENV)
    if not raw:
        return None
    folder = Path(os.path.abspath((cwd or Path.cwd()) / Path(raw).expanduser()))
    if raw != str(folder):
        environ[DATA_DIR_ENV] = str(folder)
    return folder


__all__ = ["DATA_DIR_ENV", "resolve_data_dir_env"]
