"""Helpers shared by the tests (importable as ``harness_support``: pytest puts ``tests/`` on
the path for its conftest): the tiny study, Tune's record of trial states, MLflow runs, a
flaky tracking server; and, from :mod:`harness.bench.local_services` (the fault campaign's),
the harness CLI in a subprocess, a real MLflow server and Ray cluster on 127.0.0.1, and exact
process clean-up, with what only the tests need beside them (:mod:`support.services`)."""

from __future__ import annotations

import glob
import json
import urllib.parse
from pathlib import Path
from typing import Any

import yaml
from support.services import stop_workers, wait_until  # noqa: F401 - re-exported for the tests

from harness.bench.local_services import (  # noqa: F401 - re-exported for the tests
    REPO,
    TINY,
    LocalCluster,
    MlflowServer,
    cli_env,
    cluster_env,
    end_session,
    free_port,
    harness_cmd,
    run_harness,
    session_processes,
    start_driver,
    stop_session,
)


def write_spec(path: Path, **overrides: Any) -> Path:
    """The tiny study (updated with ``overrides``) as a YAML file at ``path``."""
    import copy

    data = copy.deepcopy(TINY)
    data.update(overrides)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


#: Ray Tune's notices that an operation of its own was slow (``ray.tune.utils.util.warn_if_slow``
#: and the slow experiment-state sync, Ray 2.60): "The `on_trial_result` operation took 4.7 s,
#: which may be a performance bottleneck." Whether one appears depends on the machine's load,
#: not on the harness, so the tests that count warnings leave them out (and nothing else).
RAY_SLOW_OPERATION = "which may be a performance bottleneck"


def warning_lines(output: str) -> list[str]:
    """The lines of ``output`` that warn (``warning`` in any case), but for Ray Tune's
    load-dependent slow-operation notices (:data:`RAY_SLOW_OPERATION`)."""
    return [line for line in output.splitlines() if "warning" in line.lower() and RAY_SLOW_OPERATION not in line]


# -- Tune's record -----------------------------------------------------------------------------


def tune_trial_states(storage: Path, study: str = "tiny") -> dict[str, str]:
    """Trial id -> Tune status (PENDING, RUNNING, TERMINATED, ERROR) from the newest
    experiment snapshot in the study's storage directory ({} before the first)."""
    snapshots = sorted(glob.glob(str(storage / study / "*" / "experiment_state-*.json")))
    if not snapshots:
        return {}
    try:
        data = json.loads(Path(snapshots[-1]).read_text())
    except (OSError, ValueError):
        return {}  # being written
    states = {}
    for entry in data.get("trial_data", []):
        trial = json.loads(entry[0])
        states[str(trial["config"]["trial"])] = str(trial["status"])
    return states


def result_reports(study_dir: Path) -> dict[str, int]:
    """Trial id -> number of results in Tune's result.json (one line per report)."""
    out = {}
    for path in study_dir.glob("*/result.json"):
        out[path.parent.name] = sum(1 for line in path.read_text().splitlines() if line.strip())
    return out


# -- MLflow ------------------------------------------------------------------------------------


def all_runs(uri: str) -> list:
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    return [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id], max_results=1000)]


def sqlite_runs(db: Path) -> int:
    """Number of runs in an MLflow SQLite database (0 when there is no database or no
    table), read with sqlite3 itself: looking must not create a store."""
    import sqlite3

    if not db.exists():
        return 0
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        try:
            return int(conn.execute("select count(*) from runs").fetchone()[0])
        except sqlite3.OperationalError:
            return 0


# -- a flaky tracking server -------------------------------------------------------------------


class FlakyProxy:
    """A real HTTP server on 127.0.0.1 in front of a tracking server (``upstream``) that
    answers ``503 Service Unavailable`` to some requests instead of passing them on: every
    ``fail_every``-th request (1 = every request; with no ``upstream``, every request).

    A failed request is answered only after its body is read (a client retrying it sends it
    whole again) and never reaches the upstream server, so a retry cannot duplicate a write;
    with ``fail_after_forward`` it does reach it, and its answer is dropped (a server that
    failed after doing the work).
    ``log`` holds ``(method, path, status)`` of every request in order. Use as a context
    manager: the server thread stops at the end."""

    def __init__(self, upstream: str | None = None, *, fail_every: int = 1, fail_after_forward: bool = False) -> None:
        import http.server
        import threading

        self.upstream = urllib.parse.urlsplit(upstream) if upstream else None
        self.fail_every = fail_every if upstream else 1
        self.fail_after_forward = fail_after_forward and upstream is not None
        self.log: list[tuple[str, str, int]] = []
        self.lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _handle(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with proxy.lock:
                    fail = (len(proxy.log) + 1) % proxy.fail_every == 0
                    entry = len(proxy.log)
                    proxy.log.append((self.command, self.path.split("?", 1)[0], 503))
                status, headers, payload = (503, {"Content-Type": "application/json"}, b'{"error": "flaky"}')
                if not fail or proxy.fail_after_forward:
                    forwarded = proxy.forward(self.command, self.path, self.headers, body)
                    if not fail:
                        status, headers, payload = forwarded
                with proxy.lock:
                    proxy.log[entry] = (*proxy.log[entry][:2], status)
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def forward(self, method: str, path: str, headers: Any, body: bytes) -> tuple[int, dict[str, str], bytes]:
        import http.client

        assert self.upstream is not None
        conn = http.client.HTTPConnection(self.upstream.hostname, self.upstream.port, timeout=60)
        hop = {"connection", "keep-alive", "transfer-encoding", "host", "content-length"}
        try:
            conn.request(method, path, body=body, headers={k: v for k, v in headers.items() if k.lower() not in hop})
            response = conn.getresponse()
            payload = response.read()
            kept = {k: v for k, v in response.getheaders() if k.lower() not in hop}
            return response.status, kept, payload
        finally:
            conn.close()

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def requests(self, path_suffix: str = "") -> list[tuple[str, str, int]]:
        """The logged requests whose path ends with ``path_suffix``."""
        with self.lock:
            return [entry for entry in self.log if entry[1].endswith(path_suffix)]

    def __enter__(self) -> FlakyProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=10)


#: One zoo variant per code path of the attention layer (positions, the folded gate, absolute and
#: relative MOPE, ALiBi's slope fold, the pairwise query chunks): the every-variant tests run these
#: in the fast suite and the others in the slow suite, which CI runs on every change.
FAST_VARIANTS = frozenset(
    {"baseline", "rope", "alibi", "ega", "mope", "ega-mope", "mope-rel", "ega-qnorm", "mope-bias"}
)


def per_code_path(values: Any, name: Any = lambda v: v) -> list:
    """``values`` as pytest parameters, those whose ``name(value)`` is not in :data:`FAST_VARIANTS`
    marked ``slow``."""
    import pytest

    return [pytest.param(v, marks=() if name(v) in FAST_VARIANTS else pytest.mark.slow) for v in values]


def round_trip_fold(bias: Any, dtype: Any) -> Any:
    """The fold as it was before bit masks (issue 40): pieces by bf16 round trips, right eager,
    which Inductor collapses (b - fp32(bf16(b)) computed as 0: the middle piece dropped); for the
    tests to tell a collapsed fold from :func:`harness.models.fold.fold_columns`."""
    import torch

    bias = bias.float()
    hi = bias.to(dtype)
    rest = bias.detach() - hi.detach().float()
    mid = rest.to(dtype)
    return torch.stack([hi, mid, (rest - mid.float()).to(dtype)], dim=-1)
