"""What the tests need of local services beyond the fault campaign's own
(:mod:`harness.bench.local_services`, which starts them): waiting for a condition, and stopping
a test cluster's worker nodes while its head stays up.

Processes are ended by their session id only (:func:`harness.bench.local_services.stop_session`),
never by name: other people's Ray and MLflow instances share the machine."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from harness.bench.local_services import LocalCluster, stop_session


def wait_until(predicate: Callable[[], Any], *, timeout: float, interval: float = 0.2, what: str = "condition") -> Any:
    """``predicate()``'s first true value, asked every ``interval`` seconds; an AssertionError
    naming ``what`` after ``timeout`` seconds without one."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def stop_workers(cluster: LocalCluster) -> None:
    """Stop every worker node of ``cluster`` (each one's whole session); the head stays up."""
    for proc in cluster.nodes[1:]:
        stop_session(proc)
    del cluster.nodes[1:]
