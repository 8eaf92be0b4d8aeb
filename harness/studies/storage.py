"""Where a study lives: its storage (a local folder or a URI such as ``s3://bucket/studies``)
read and written through pyarrow filesystems, and the study directories in it.

A study run lives in ``<storage>/<name>/<YYYYmmdd-HHMMSS>/`` and is known by its
:data:`STUDY_FILE` (``harness_study.json``). The runner writes it, ``--resume`` finds the
latest one (:func:`latest_study_dir`), and the replay and ``harness report --from`` read it.
Reading never raises for a missing file (None instead): a folder that is not a study is an
answer, not an error.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow.fs

from harness.errors import InputError
from harness.studies.cluster.destinations import is_uri

if TYPE_CHECKING:  # polars loads where a table is written: a GPU lease's image has none (harness.studies.device)
    import polars as pl

#: The file that makes a folder a study run (name, parent run id, trial ids, design, ...).
STUDY_FILE = "harness_study.json"


def storage_filesystem(storage: str) -> tuple[pyarrow.fs.FileSystem, str]:
    """The pyarrow filesystem of ``storage`` (a URI or a local path) and the path on it;
    :class:`InputError` for a URI that cannot be used (unknown scheme, missing credentials)."""
    if is_uri(storage):
        try:
            return pyarrow.fs.FileSystem.from_uri(storage)
        except Exception as exc:  # noqa: BLE001 - unknown scheme, missing credentials ...
            raise InputError(f"storage path {storage!r} cannot be used: {exc}") from None
    return pyarrow.fs.LocalFileSystem(), storage


def check_storage(storage: str) -> None:
    """A local storage path must be creatable and writable (nothing is created here)."""
    if is_uri(storage):
        storage_filesystem(storage)
        return
    path = Path(storage)
    if path.exists() and not path.is_dir():
        raise InputError(f"storage path {storage} is a file, not a directory; pass another --storage-path")
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not os.access(existing, os.W_OK | os.X_OK):
        raise InputError(f"storage path {storage}: {existing} is not writable; pass another --storage-path")


def read_json(fs: pyarrow.fs.FileSystem, path: str) -> dict[str, Any] | None:
    """The JSON object in file ``path`` of ``fs``; None when it is missing or unreadable."""
    try:
        with fs.open_input_stream(path) as f:
            return json.loads(f.read().decode())
    except Exception:  # noqa: BLE001 - missing or unreadable: not a harness study
        return None


def read_text(fs: pyarrow.fs.FileSystem, path: str) -> str | None:
    """The text of file ``path`` of ``fs``; None when it is missing."""
    try:
        with fs.open_input_stream(path) as f:
            return f.read().decode()
    except Exception:  # noqa: BLE001 - missing
        return None


def read_bytes(fs: pyarrow.fs.FileSystem, path: str) -> bytes | None:
    """The bytes of file ``path`` of ``fs``; None when it is missing."""
    try:
        with fs.open_input_stream(path) as f:
            return f.read()
    except Exception:  # noqa: BLE001 - missing
        return None


def trial_dir(study_root: str, trial_id: str) -> str:
    """The folder of trial ``trial_id`` in the study folder ``study_root`` (Tune names trial
    folders by trial id: :mod:`harness.studies.launch`)."""
    return f"{study_root}/{trial_id}"


def trial_reports(fs: pyarrow.fs.FileSystem, trial_dir: str) -> list[dict[str, Any]]:
    """Every report of a trial, in order, from Tune's ``result.json`` in ``trial_dir`` (a line
    a report, appended across restarts and resumes; NaN allowed). A torn last line (the
    driver died while writing it) is skipped. Read by the study's curves table and by the
    record completed from storage."""
    text = read_text(fs, f"{trial_dir}/result.json") or ""
    reports = []
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            reports.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return reports


def write_bytes(fs: pyarrow.fs.FileSystem, path: str, data: bytes) -> None:
    """Write ``data`` to file ``path`` of ``fs`` (replacing it)."""
    with fs.open_output_stream(path) as f:
        f.write(data)


def parquet_bytes(df: pl.DataFrame) -> bytes:
    """``df`` as the bytes of a parquet file (for :func:`write_bytes`)."""
    buf = io.BytesIO()
    df.write_parquet(buf)
    return buf.getvalue()


def latest_study_dir(storage: str, name: str) -> tuple[str, dict[str, Any]] | None:
    """The most recent ``<storage>/<name>/<run>`` holding a ``harness_study.json``."""
    fs, root = storage_filesystem(storage)
    base = f"{root.rstrip('/')}/{name}"
    infos = fs.get_file_info(pyarrow.fs.FileSelector(base, allow_not_found=True))
    for info in sorted(
        (i for i in infos if i.type == pyarrow.fs.FileType.Directory), key=lambda i: i.base_name, reverse=True
    ):
        meta = read_json(fs, f"{info.path}/{STUDY_FILE}")
        if meta is not None:
            return f"{storage.rstrip('/')}/{name}/{info.base_name}", meta
    return None
