"""Test-wide settings and fixtures: the shared corpora, a private cache, no telemetry, one
embedded Ray for the in-process studies, a fresh MLflow SQLite store."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

# The fast suite's workers share the machine's cores: each torch (and each harness process a test
# starts, through OMP_NUM_THREADS) gets its share of them. Two workers each spinning two OpenMP
# threads on two cores made a 0.8 s training loop take 26 s (tests/models, 2026-12-06).
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // _WORKERS)))

import torch  # noqa: E402 - after OMP_NUM_THREADS, which OpenMP reads once

from harness.datasets.data_dir import resolve_data_dir_env  # noqa: E402

torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", torch.get_num_threads())))

_REPO = Path(__file__).resolve().parents[1]
_SHARED_DATA = _REPO.parent / "shared" / "data"

os.environ.setdefault("HARNESS_DATA_DIR", str(_SHARED_DATA))
# A relative folder (the README's `export HARNESS_DATA_DIR=../shared/data`) is resolved here, once,
# against the folder pytest started in: the harness processes the tests start elsewhere inherit it
# resolved, as those the harness starts do (harness.datasets.data_dir).
resolve_data_dir_env()
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On the fast suite's workers, the files that run studies on the session's Ray (10-45 s
    each) come first, then the rest by their number of tests (as xdist's own reorder, which
    pyproject turns off for this). ``--dist loadfile`` hands the files out in this order, so the
    long ones start early and the short ones fill in at the end: with the long ones last, one
    worker ran 35 s after the other had finished (2026-12-07)."""
    if not hasattr(config, "workerinput"):  # the slow suite (-n 0) keeps the collection order
        return
    files: dict[str, list[pytest.Item]] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::")[0], []).append(item)

    def weight(tests: list[pytest.Item]) -> tuple[bool, int]:
        return any("local_ray" in t.fixturenames for t in tests), len(tests)

    items[:] = [item for tests in sorted(files.values(), key=weight, reverse=True) for item in tests]


def pytest_collection_finish(session: pytest.Session) -> None:
    """Freeze what collection imported (torch, Ray, MLflow, Lightning, the test modules): a full
    garbage collection then traverses only what the tests make. statsmodels' Holm runs
    ``gc.collect()`` on every call, about 0.5 s per call in a worker holding those libraries
    (the reference tests call it dozens of times), and Python's own full collections pay the same."""
    import gc

    gc.collect()
    gc.freeze()


@pytest.fixture(scope="session", autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Encoded-corpus cache of this test session only: tests never touch ~/.cache."""
    cache = tmp_path_factory.mktemp("harness-cache")
    os.environ["HARNESS_CACHE_DIR"] = str(cache)
    return cache


@pytest.fixture(scope="session", autouse=True)
def _working_directory_stays_clean() -> Iterator[None]:
    """Tests write only in their temporary directories: nothing MLflow or Ray would drop
    in the working directory (an experiment's default ``./mlruns``, ``./mlflow.db``,
    ``./results``) may appear there during the session."""
    watched = [Path.cwd() / name for name in ("mlruns", "mlflow.db", "results")]
    before = {path for path in watched if path.exists()}
    yield
    appeared = sorted(str(path) for path in watched if path.exists() and path not in before)
    assert not appeared, f"tests wrote into the working directory: {appeared}"


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


@pytest.fixture(scope="session")
def local_ray(_private_cache: Path) -> Iterator[None]:
    """One embedded Ray for every in-process study of the session (ray.init costs ~3.5 s);
    ``run_study`` reuses an initialised Ray and leaves it running. It has this worker's share of
    the cores, as torch has: on the fast suite's two workers, one CPU, so a study's trials run one
    after another in one reused actor, whose imports (torch and Lightning, 7 s) are paid once per
    study instead of once per parallel slot (a 4-trial study: 26 s instead of 31 s alone, 2026-12-07)."""
    import ray

    if ray.is_initialized():
        yield
        return
    logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(logging.ERROR)
    cpus = max(1, (os.cpu_count() or 1) // _WORKERS)
    ray.init(
        address="local", num_cpus=cpus, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING
    )
    try:
        yield
    finally:
        ray.shutdown()
