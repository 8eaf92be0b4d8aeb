"""Test-wide settings: the shared corpora, a private cache, no telemetry, few threads."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

_REPO = Path(__file__).resolve().parents[1]
_SHARED_DATA = _REPO.parent / "shared" / "data"

os.environ.setdefault("HARNESS_DATA_DIR", str(_SHARED_DATA))
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


@pytest.fixture(scope="session", autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Encoded-corpus cache of this test session only: tests never touch ~/.cache."""
    cache = tmp_path_factory.mktemp("harness-cache")
    os.environ["HARNESS_CACHE_DIR"] = str(cache)
    return cache


@pytest.fixture(scope="session")
def shared_data_dir() -> Path:
    """``../shared/data`` (or $HARNESS_DATA_DIR): TinyShakespeare and PTB."""
    path = Path(os.environ["HARNESS_DATA_DIR"])
    if not (path / "tinyshakespeare" / "input.txt").exists():
        pytest.skip(f"shared corpora not found in {path}")
    return path


@pytest.fixture
def sqlite_tracking_uri(tmp_path: Path) -> str:
    """A fresh MLflow SQLite store for one test."""
    return f"sqlite:///{tmp_path / 'mlflow.db'}"
