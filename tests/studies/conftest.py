"""Fixtures of the studies tests: tiny specs, one embedded Ray reused by the in-process
studies, real MLflow stores in temporary directories."""

from __future__ import annotations

import io
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

TINY = {
    "name": "tiny",
    "datasets": ["tinyshakespeare"],
    "variants": ["baseline", "ega"],
    "seeds": 1,
    "sizes": ["nano"],
    "context_lengths": [32],
    "train": {
        "max_steps": 10,
        "batch_size": 8,
        "eval_every": 5,
        "eval_windows": 8,
        "eval_batch_size": 8,
        "warmup_steps": 2,
        "dropout": 0.0,
    },
    "resources": {"cpus": 1},
    "retries": 1,
}


@pytest.fixture
def tiny() -> dict[str, Any]:
    """The tiny study as a mapping (2 variants x 1 seed x nano x T=32 x 10 steps)."""
    import copy

    return copy.deepcopy(TINY)


@pytest.fixture
def write_spec(tmp_path: Path) -> Callable[..., Path]:
    """``write_spec(text=None, **overrides)``: a spec file (the tiny study, updated with
    ``overrides``, or the raw ``text``) in the test's temporary directory."""
    counter = {"n": 0}

    def make(text: str | None = None, **overrides: Any) -> Path:
        counter["n"] += 1
        path = tmp_path / f"spec{counter['n']}.yaml"
        if text is None:
            data = {**TINY, **overrides}
            text = yaml.safe_dump(data, sort_keys=False)
        path.write_text(text)
        return path

    return make


@pytest.fixture(scope="session")
def local_ray(_private_cache: Path) -> Iterator[None]:
    """One embedded Ray (2 CPUs) for every in-process study of the session (ray.init costs
    ~3.5 s); ``run_study`` reuses an initialised Ray and leaves it running."""
    import ray

    if ray.is_initialized():
        yield
        return
    logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(logging.ERROR)
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    try:
        yield
    finally:
        ray.shutdown()


@pytest.fixture
def study_env(tmp_path: Path, shared_data_dir: Path, local_ray: None) -> dict[str, Any]:
    """Keyword arguments of ``run_study`` that keep everything in the test's directory."""
    return {
        "tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}",
        "storage_path": str(tmp_path / "results"),
        "stream": io.StringIO(),
        "live": False,
    }
