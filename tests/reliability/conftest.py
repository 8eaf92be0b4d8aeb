"""Fixtures of the fault tests: MLflow servers that are always stopped, an embedded Ray for
the in-process studies."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from reliability_support import MlflowServer


@pytest.fixture
def mlflow_server(tmp_path: Path) -> Iterator[Callable[..., MlflowServer]]:
    """``mlflow_server(port=None)``: a started MLflow server on 127.0.0.1 with its store in
    the test's directory (the same store on every call); all are stopped at the end."""
    started: list[MlflowServer] = []

    def start(port: int | None = None) -> MlflowServer:
        server = MlflowServer(tmp_path / "mlflow-server", port=port)
        started.append(server)
        return server.start()

    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="session")
def reliability_ray(_private_cache: Path) -> Iterator[None]:
    """One embedded Ray (2 CPUs) for the in-process studies of these tests (``run_study``
    reuses an initialised Ray and leaves it running); shut down at the end."""
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
