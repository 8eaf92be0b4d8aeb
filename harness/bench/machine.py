"""The machine a benchmark ran on: one record with the same keys in every benchmark's JSON, and
the one writer of a benchmark's JSON (:func:`write_result`, which puts the record beside the
numbers). A number measured on a shared machine is only as good as the record of that machine:
its processor, its CPUs, its load while the benchmark ran.

Torch is not imported here: its version is read from the installed package, and its threads
and GPU are recorded only when the benchmark has loaded it (None otherwise), so a benchmark
that never touches torch (the fault campaign, a study's overhead) does not pay for it.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

#: The keys of :func:`machine_record`, in order.
MACHINE_KEYS = (
    "platform",
    "arch",
    "processor",
    "cpu_count",
    "python",
    "torch",
    "torch_threads",
    "gpu",
    "cuda",
    "load_average",
    "date",
)


def _torch_version() -> str | None:
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


def machine_record() -> dict[str, Any]:
    """The machine, now: ``platform`` (OS and libc), ``arch``, ``processor``, ``cpu_count``,
    ``python``, ``torch`` (the installed version), ``torch_threads``, ``gpu`` (the CUDA device
    torch sees) and ``cuda`` (torch's CUDA version) -- these three None unless the benchmark
    loaded torch --, ``load_average`` (1, 5 and 15 minutes; None where the OS has none) and
    ``date`` (UTC, ``YYYY-mm-dd HH:MM UTC``)."""
    torch = sys.modules.get("torch")
    gpu = torch.cuda.get_device_name() if torch is not None and torch.cuda.is_available() else None
    record = {
        "platform": platform.platform(),
        "arch": platform.machine(),
        "processor": platform.processor() or None,
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "torch": _torch_version(),
        "torch_threads": torch.get_num_threads() if torch is not None else None,
        "gpu": gpu,
        "cuda": torch.version.cuda if gpu is not None else None,
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    assert tuple(record) == MACHINE_KEYS
    return record


def write_result(
    path: str | os.PathLike[str], payload: dict[str, Any], *, machine: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Write a benchmark's ``payload`` as JSON to ``path`` with ``"machine"``: ``machine`` (default:
    :func:`machine_record` now) beside it, atomically (a temporary file, then a rename: never a
    half-written result). Returns what was written."""
    written = {**payload, "machine": machine if machine is not None else machine_record()}
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(out.suffix + ".tmp")
    tmp.write_text(json.dumps(written, indent=2) + "\n")
    tmp.replace(out)
    return written
