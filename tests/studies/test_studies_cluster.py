"""Studies on a real Ray cluster started on loopback (`ray start --head`), by address and
as a `ray job submit` job, with token authentication on. Slow: each starts Ray processes.

The clusters are stopped by ending exactly the processes their `ray start --block` started
(never `ray stop`, which would end every Ray instance on the machine)."""

from __future__ import annotations

import os
import random
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from harness_support import free_port, stop_session
from mlflow import MlflowClient

pytestmark = pytest.mark.slow


class LocalCluster:
    """A Ray head (and optionally worker nodes) on 127.0.0.1 with token authentication."""

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

    def _start(self, args: list[str], log: str) -> subprocess.Popen:
        # Worker ports below Linux's ephemeral range (32768-60999, where free_port's come
        # from) and above Ray's default range (10002-19999, other Ray instances).
        low = random.randrange(20000, 32400, 200)
        common = [
            "--block",
            "--num-cpus=2",
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
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.nodes.append(proc)
        return proc

    def start_head(self) -> None:
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
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and head.poll() is None:
            try:
                urllib.request.urlopen(f"{self.dashboard}/api/version", timeout=2)
                return
            except urllib.error.HTTPError:  # 401 without the bearer token: it is up
                return
            except OSError:
                time.sleep(1)
        raise RuntimeError("the Ray head did not come up: " + (Path(self.temp_dir) / "head.log").read_text()[-2000:])

    def add_worker(self) -> None:
        self._start([f"--address={self.address}"], f"worker{len(self.nodes)}.log")

    def stop_workers(self) -> None:
        for proc in self.nodes[1:]:
            stop_session(proc)
        del self.nodes[1:]

    def stop(self) -> None:
        for proc in reversed(self.nodes):
            stop_session(proc)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster(_private_cache: Path) -> Iterator[LocalCluster]:
    token = secrets.token_hex(32)
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI")}
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token, RAY_USAGE_STATS_ENABLED="0")
    c = LocalCluster(env)
    try:
        c.start_head()
        yield c
    finally:
        c.stop()


def _client_env(cluster: LocalCluster, **extra: str) -> dict[str, str]:
    """A client's environment: the token, but no RAY_AUTH_MODE (harness run enables token
    mode itself when a token is available, as Ray does for ray.init())."""
    env = {k: v for k, v in cluster.env.items() if k != "RAY_AUTH_MODE"}
    env.update(extra)
    return env


def _spec(tmp_path: Path, tiny: dict, **overrides) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({**tiny, **overrides}))
    return path


def _study_runs(tracking_uri: str, experiment: str) -> tuple[list, list]:
    client = MlflowClient(tracking_uri)
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    return (
        [r for r in runs if r.data.tags.get("harness.role") == "study"],
        [r for r in runs if r.data.tags.get("harness.role") == "trial"],
    )


def test_study_on_a_cluster_by_address(
    cluster: LocalCluster, tmp_path: Path, tiny: dict, shared_data_dir: Path
) -> None:
    spec = _spec(tmp_path, tiny)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "run",
            str(spec),
            "--address",
            cluster.address,
            "--tracking-uri",
            uri,
            "--storage-path",
            str(tmp_path / "results"),
        ],
        cwd=tmp_path,
        env=_client_env(cluster),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert f"Ray cluster at {cluster.address}" in out.stdout
    parents, children = _study_runs(uri, "tiny")
    assert len(parents) == 1 and len(children) == 2
    assert all(c.info.status == "FINISHED" and "final/val_loss" in c.data.metrics for c in children)


def test_study_submitted_as_a_ray_job(cluster: LocalCluster, tmp_path: Path, tiny: dict, shared_data_dir: Path) -> None:
    workdir = tmp_path / "job"
    workdir.mkdir()
    _spec(workdir, tiny, name="jobstudy")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    out = subprocess.run(
        [
            shutil.which("ray") or "ray",
            "job",
            "submit",
            "--address",
            cluster.dashboard,
            "--working-dir",
            str(workdir),
            "--",
            "harness",
            "run",
            "spec.yaml",
            "--tracking-uri",
            uri,
            "--storage-path",
            str(tmp_path / "results"),
        ],
        env=_client_env(cluster, RAY_AUTH_MODE="token"),  # the job CLI needs token mode spelled out
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "succeeded" in out.stdout + out.stderr
    assert "Study jobstudy: 2 trials" in out.stdout
    parents, children = _study_runs(uri, "jobstudy")
    assert len(parents) == 1 and len(children) == 2
    assert all(c.data.tags["status"] == "finished" for c in children)


def test_multi_node_cluster_refuses_local_storage(cluster: LocalCluster, tmp_path: Path, tiny: dict) -> None:
    cluster.add_worker()
    try:
        import ray  # noqa: F401 - only to wait for the node through the dashboard API below

        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            nodes = subprocess.run(
                [
                    sys.executable,
                    "-c",
                    f"import ray; ray.init(address={cluster.address!r}, logging_level='ERROR'); "
                    "print(sum(n['Alive'] for n in ray.nodes()))",
                ],
                env=cluster.env,
                capture_output=True,
                text=True,
                timeout=60,
            ).stdout.strip()
            if nodes.endswith("2"):
                break
            time.sleep(2)
        spec = _spec(tmp_path, tiny)
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "harness.cli",
                "run",
                str(spec),
                "--address",
                cluster.address,
                "--tracking-uri",
                f"sqlite:///{tmp_path / 'mlflow.db'}",
                "--storage-path",
                str(tmp_path / "results"),
            ],
            cwd=tmp_path,
            env=_client_env(cluster),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
        assert "has 2 nodes" in out.stderr and "shared storage" in out.stderr
        assert not (tmp_path / "results").exists() and not (tmp_path / "mlflow.db").exists()
    finally:
        cluster.stop_workers()
