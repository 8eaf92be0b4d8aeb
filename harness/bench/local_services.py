"""Real local services for the fault campaign (:mod:`harness.bench.chaos`,
``benchmarks/chaos.py``), which the tests use too: the harness CLI in a subprocess, a real
MLflow server on 127.0.0.1, a real Ray cluster on 127.0.0.1, and exact process clean-up. What
only the tests need beside them lives in ``tests/support/`` (waiting for a condition,
stopping a cluster's worker nodes).

Processes are always started in a session of their own and ended by that session id
(every process of the session, nothing else): never `ray stop` or a kill by name, which
would end other people's Ray and MLflow instances on a shared machine."""

from __future__ import annotations

import json
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

#: The checkout this module belongs to (put first on a subprocess's path).
REPO = Path(__file__).resolve().parents[2]


#: The tiny study: nano model, T=32, 10 steps, one CPU per trial, 2 variants x 2 seeds. Its final
#: evaluation reads the curves' 8 windows per split: the whole validation split (a study's
#: default, 3,500 windows of 32 per split) cost each tiny trial about 7 s more than its training.
TINY: dict[str, Any] = {
    "name": "tiny",
    "datasets": ["tinyshakespeare"],
    "variants": ["baseline", "ega"],
    "seeds": 2,
    "sizes": ["nano"],
    "context_lengths": [32],
    "train": {
        "max_steps": 10,
        "batch_size": 8,
        "eval_every": 5,
        "eval_windows": 8,
        "final_eval_windows": 8,
        "eval_batch_size": 8,
        "warmup_steps": 2,
        "dropout": 0.0,
    },
    "resources": {"cpus": 1},
    "retries": 1,
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cli_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a `harness` subprocess: this checkout first on the path, no
    tracking/storage/Ray settings inherited from the person running the tests."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI", "HARNESS_STORAGE_PATH")
    }
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.update(extra or {})
    return env


def harness_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "harness.cli", *args]


def start_driver(*args: str, cwd: Path, log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """``harness ARGS`` started in its own session (so that the test can later kill it and
    end exactly what it started), its output (and ``env`` beside :func:`cli_env`'s) going to ``log``."""
    with open(log, "w") as out:
        return subprocess.Popen(
            harness_cmd(*args),
            cwd=cwd,
            env=cli_env(env),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def run_harness(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    """``harness ARGS`` to completion in its own session; whatever it leaves running in
    that session (it should leave nothing) is ended afterwards and listed in the result's
    ``left_running`` (pid -> command line)."""
    proc = subprocess.Popen(
        harness_cmd(*args),
        cwd=cwd,
        env=cli_env(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    left: dict[int, str] = {}
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        left = end_session(proc.pid)
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    done.left_running = left  # type: ignore[attr-defined] - what the command left running in its session
    return done


# -- processes ---------------------------------------------------------------------------------


def session_processes(sid: int, *, zombies: bool = False) -> dict[int, str]:
    """pid -> command line of the live processes of session ``sid``."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            if os.getsid(pid) != sid:
                continue
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            if state == "Z" and not zombies:
                continue
            found[pid] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except (ProcessLookupError, PermissionError, FileNotFoundError):
            continue
    return found


def end_session(sid: int, *, grace: float = 5.0) -> dict[int, str]:
    """SIGTERM, then SIGKILL, every live process of session ``sid``; returns what was
    still running when this was called."""
    left = session_processes(sid)
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        for pid in session_processes(sid):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and session_processes(sid):
            time.sleep(0.2)
        if not session_processes(sid):
            break
    return left


def stop_session(proc: subprocess.Popen, *, grace: float = 5.0) -> None:
    """End a process started with ``start_new_session=True`` and everything it started
    (its whole session, nothing else), then reap it."""
    end_session(proc.pid, grace=grace)
    proc.wait(timeout=10)


# -- MLflow and Ray on loopback ---------------------------------------------------------------


class MlflowServer:
    """A real ``mlflow server`` on 127.0.0.1 (SQLite backend, proxied artifacts, one
    worker, no job runner: STACK-NOTES), in a session of its own."""

    def __init__(self, root: Path, port: int | None = None) -> None:
        self.root = root
        self.port = port or free_port()
        self.db = root / "mlflow-server.db"
        self.artifacts = root / "mlflow-server-artifacts"
        self.proc: subprocess.Popen | None = None
        self.log = root / "mlflow-server.log"

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    def start(self, timeout: float = 90) -> MlflowServer:
        self.root.mkdir(parents=True, exist_ok=True)
        cmd = [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--backend-store-uri",
            f"sqlite:///{self.db}",
            "--artifacts-destination",
            str(self.artifacts),
            "--workers",
            "1",
        ]
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        with open(self.log, "a") as log:
            self.proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while not self.healthy():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"mlflow server did not start: {self.log.read_text()[-2000:]}")
            time.sleep(0.3)
        return self

    def stop(self) -> None:
        """End the server: every process of its session (gunicorn/uvicorn workers too)."""
        if self.proc is None:
            return
        end_session(self.proc.pid)
        self.proc.wait(timeout=10)
        self.proc = None


# -- a real Ray cluster ------------------------------------------------------------------------


class LocalCluster:
    """A Ray head (and optionally worker nodes) started with ``ray start --block`` on
    127.0.0.1, each node in a session of its own, with the environment ``env`` (token
    authentication: ``RAY_AUTH_MODE=token`` and ``RAY_AUTH_TOKEN`` in it). Stopped by ending
    exactly the processes of those sessions (never `ray stop`, which would end every Ray
    instance on the machine)."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.temp_dir = tempfile.mkdtemp(prefix="rt", dir="/tmp")  # short: Ray's socket paths
        self.port = free_port()
        self.dashboard_port = free_port()
        self.nodes: list[subprocess.Popen] = []

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def dashboard(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    def _start(
        self, args: list[str], log: str, *, env: dict[str, str] | None, num_cpus: int, cwd: Path | None = None
    ) -> subprocess.Popen:
        # Worker ports below Linux's ephemeral range (32768-60999, where free_port's come
        # from) and above Ray's default range (10002-19999, other Ray instances).
        low = random.randrange(20000, 32400, 200)
        common = [
            "--block",
            f"--num-cpus={num_cpus}",
            "--disable-usage-stats",
            "--node-ip-address=127.0.0.1",
            f"--min-worker-port={low}",
            f"--max-worker-port={low + 150}",
            f"--dashboard-agent-listen-port={free_port()}",
            f"--metrics-export-port={free_port()}",
        ]
        with open(Path(self.temp_dir) / log, "w") as out:  # the child keeps its own descriptor
            proc = subprocess.Popen(
                [shutil.which("ray") or "ray", "start", *args, *common],
                env=env or self.env,
                cwd=cwd,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.nodes.append(proc)
        return proc

    def start_head(self, *, num_cpus: int = 2) -> LocalCluster:
        """The head with the dashboard (job submission) on 127.0.0.1; ``num_cpus=0`` keeps
        every trial off it (the driver of a job needs no CPU)."""
        head = self._start(
            [
                "--head",
                f"--port={self.port}",
                f"--ray-client-server-port={free_port()}",
                "--include-dashboard=true",
                "--dashboard-host=127.0.0.1",
                f"--dashboard-port={self.dashboard_port}",
                f"--temp-dir={self.temp_dir}",
            ],
            "head.log",
            env=None,
            num_cpus=num_cpus,
        )
        deadline = time.monotonic() + 330  # the dashboard's own startup limit (cluster_env) and a margin
        while time.monotonic() < deadline and head.poll() is None:
            try:
                urllib.request.urlopen(f"{self.dashboard}/api/version", timeout=2)
                return self
            except urllib.error.HTTPError:  # 401 without the bearer token: it is up
                return self
            except OSError:
                time.sleep(1)
        raise RuntimeError("the Ray head did not come up: " + (Path(self.temp_dir) / "head.log").read_text()[-2000:])

    def add_worker(
        self, *, env: dict[str, str] | None = None, num_cpus: int = 2, timeout: float = 300, cwd: Path | None = None
    ) -> None:
        """A worker node (its own environment ``env``, default the head's; started in ``cwd``,
        default this process's folder), waited for until the cluster counts it (minutes when
        other work shares the cores)."""
        log = f"worker{len(self.nodes)}.log"
        proc = self._start([f"--address={self.address}"], log, env=env, num_cpus=num_cpus, cwd=cwd)
        deadline = time.monotonic() + timeout
        while len(self.alive_nodes()) < len(self.nodes):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"the worker node did not join within {timeout:.0f} s: "
                    + (Path(self.temp_dir) / log).read_text()[-2000:]
                )
            time.sleep(2)

    def alive_nodes(self) -> list[dict[str, Any]]:
        """``{"id", "head"}`` of every node the cluster counts as alive (asked in a
        subprocess: this process keeps no Ray)."""
        code = (
            f"import json, ray; ray.init(address={self.address!r}, logging_level='ERROR'); "
            "print(json.dumps([{'id': n['NodeID'], 'head': 'node:__internal_head__' in n['Resources']} "
            "for n in ray.nodes() if n['Alive']]))"
        )
        # A driver's connection takes seconds on idle cores, minutes on busy ones.
        out = subprocess.run([sys.executable, "-c", code], env=self.env, capture_output=True, text=True, timeout=180)
        lines = out.stdout.strip().splitlines()
        return json.loads(lines[-1]) if lines and lines[-1].startswith("[") else []

    def stop(self) -> None:
        for proc in reversed(self.nodes):
            stop_session(proc)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def cluster_env(**extra: str) -> dict[str, str]:
    """The environment of a test cluster's nodes: :func:`cli_env` (this checkout first on the
    path; no tracking, storage or Ray settings) with token authentication (a fresh token)."""
    # Ray gives its dashboard 60 s to start; on 2 busy cores it can take longer, and the head
    # then exits (the job API lives in the dashboard).
    return cli_env(
        {
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN": secrets.token_hex(32),
            "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_DASHBOARD_STARTUP_TIMEOUT_S": "300",
            **extra,
        }
    )
