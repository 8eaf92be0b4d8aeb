"""Fixtures of the fault tests: MLflow servers that are always stopped (the embedded Ray is
the test-wide ``local_ray``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from harness_support import MlflowServer


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
