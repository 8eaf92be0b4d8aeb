"""What one faulted study runs on: its services (a real MLflow server, and for a schedule with
a node fault a two-node Ray cluster on loopback), its driver (``harness run`` as a user starts,
stops and resumes it), its progress as storage shows it, and its journal of events."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.bench.chaos.schedule import SPEC
from harness.bench.local_services import (
    LocalCluster,
    MlflowServer,
    cluster_env,
    end_session,
    session_processes,
    start_driver,
    stop_session,
)

#: How long a signalled driver, Ray's core processes of an ended driver, a whole study and a
#: process left behind are waited for.
DRIVER_EXIT_S, CORE_EXIT_S, STUDY_S, LEFTOVER_S = 180.0, 90.0, 900.0, 60.0


@dataclass
class Outcome:
    """How one study (a schedule's, or the twin's) went."""

    seed: int | None  # None: the twin
    schedule: str
    injected: dict[str, int] = field(default_factory=dict)
    not_reached: list[str] = field(default_factory=list)  # faults whose trigger the study never reached
    completed: bool = False
    findings: list[str] = field(default_factory=list)  # hangs, processes left behind, extra resumes ...
    mismatches: list[str] = field(default_factory=list)  # differences from the twin
    events: list[str] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def failed(self) -> bool:
        return not self.completed or bool(self.findings or self.mismatches)


class Journal:
    """The timeline of one study: its events, timed from the start and printed with ``say`` as
    they happen, and its findings, in ``outcome``."""

    def __init__(self, outcome: Outcome, say: Any) -> None:
        self.outcome, self.say = outcome, say
        self.t0 = time.monotonic()

    def note(self, text: str) -> None:
        self.outcome.events.append(f"{time.monotonic() - self.t0:6.1f} s  {text}")
        self.say(f"    {time.monotonic() - self.t0:6.1f} s  {text}")

    def finding(self, text: str) -> None:
        self.outcome.findings.append(text)
        self.note(f"FINDING: {text}")


class Services:
    """The study's tracking server in ``root`` and, with ``cluster``, a Ray head and a second node."""

    def __init__(self, root: Path, journal: Journal, *, cluster: bool) -> None:
        self.server = MlflowServer(root / "mlflow")
        self.journal = journal
        self.wants_cluster = cluster
        self.cluster: LocalCluster | None = None

    def start(self) -> None:
        self.server.start(timeout=300)
        if self.wants_cluster:
            self.cluster = LocalCluster(cluster_env())
            self.cluster.start_head(num_cpus=1)
            self.cluster.add_worker(num_cpus=1)
        self.journal.note("services up" + (f" (Ray cluster {self.cluster.address}, 2 nodes)" if self.cluster else ""))

    def stop(self) -> None:
        if self.cluster is not None:
            self.cluster.stop()
        self.server.stop()

    def sessions(self) -> set[int]:
        nodes = self.cluster.nodes if self.cluster else []
        return {p.pid for p in [self.server.proc, *nodes] if p is not None}

    def server_down(self) -> None:
        self.server.stop()
        self.journal.note("MLflow server stopped")

    def server_back(self, down_s: float) -> None:
        time.sleep(down_s)
        self.server.start(timeout=300)
        self.journal.note("MLflow server back")


class StorageWatch:
    """The study's progress as its storage shows it: checkpoints, and the results table."""

    def __init__(self, storage: Path) -> None:
        self.storage = storage

    def study_dir(self) -> Path | None:
        found = sorted(self.storage.glob(f"{SPEC['name']}/*/harness_study.json"))
        return found[-1].parent if found else None

    def checkpoints(self) -> dict[str, int]:
        """Trial folder -> index of its newest checkpoint on storage."""
        newest: dict[str, int] = {}
        study_dir = self.study_dir()
        for path in study_dir.glob("*/checkpoint_*") if study_dir else []:
            try:
                newest[path.parent.name] = max(newest.get(path.parent.name, -1), int(path.name.split("_")[1]))
            except ValueError:
                continue
        return newest

    def progress(self) -> int:
        return sum(n + 1 for n in self.checkpoints().values())

    def results_written_since(self, started: float) -> bool:
        """A driver started at ``started`` (epoch seconds) wrote the study's results (Tune is
        done; the report comes next)."""
        study_dir = self.study_dir()
        results = study_dir / "results.parquet" if study_dir else None
        return results is not None and results.is_file() and results.stat().st_mtime >= started


class Driver:
    """``harness run`` of the study (``spec``, into ``storage``, recorded on the services' server),
    each start in a session of its own with its output in ``root/driver<N>.log``."""

    def __init__(self, root: Path, spec: Path, storage: Path, services: Services, journal: Journal) -> None:
        self.root, self.spec, self.storage = root, spec, storage
        self.services, self.journal = services, journal
        self.proc: subprocess.Popen | None = None
        self.started = 0.0
        self.count = 0
        self.log = root / "driver0.log"

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def launch(self, *, resume: bool = False) -> None:
        server, cluster = self.services.server, self.services.cluster
        args = ["run", str(self.spec), "--tracking-uri", server.uri, "--storage-path", str(self.storage)]
        env = None
        if cluster is not None:
            args += ["--address", cluster.address]
            env = {k: v for k, v in cluster.env.items() if k != "RAY_AUTH_MODE"}
        self.count += 1
        self.log = self.root / f"driver{self.count}.log"
        self.proc = start_driver(*args, *(["--resume"] if resume else []), cwd=self.root, log=self.log, env=env)
        self.started = time.time()
        self.journal.note(f"driver {self.count} started" + (" with --resume" if resume else ""))

    def settle(self, sid: int) -> None:
        """The processes of an ended driver's session: Ray's core ones (workers, raylet, GCS)
        must exit on their own; Ray's agents, which take about a minute to notice a dead
        raylet, are ended (see tests/reliability/test_driver_killed.py)."""
        core = ("ray::ImplicitFunc", "ray::IDLE", "raylet", "gcs_server", "harness.cli")
        deadline = time.monotonic() + CORE_EXIT_S
        while time.monotonic() < deadline and any(k in c for c in session_processes(sid).values() for k in core):
            time.sleep(0.5)
        left = end_session(sid)
        stuck = sorted({c[:80] for c in left.values() if any(k in c for k in core)})
        if stuck:
            self.journal.finding(f"left running {CORE_EXIT_S:.0f} s after driver {self.count} ended: {stuck}")

    def stop(self, sig: signal.Signals) -> None:
        """Send ``sig`` as a user would (Ctrl-C: to the process group) and wait for the end: a
        driver that survives a SIGTERM or a Ctrl-C, or exits other than 130, is a finding."""
        assert self.proc is not None
        if sig == signal.SIGINT:
            os.killpg(self.proc.pid, sig)  # Ctrl-C: the terminal signals the foreground process group
        else:
            os.kill(self.proc.pid, sig)
        try:
            code = self.proc.wait(timeout=DRIVER_EXIT_S)
        except subprocess.TimeoutExpired:
            self.journal.finding(f"hang: driver {self.count} still running {DRIVER_EXIT_S:.0f} s after {sig.name}")
            end_session(self.proc.pid)
            code = self.proc.wait(timeout=30)
        self.journal.note(f"driver {self.count} got {sig.name}: exit code {code}")
        if sig != signal.SIGKILL and code != 130:
            self.journal.finding(f"driver {self.count} exited {code} on {sig.name}, not 130 (stopped, resumable)")
        self.settle(self.proc.pid)

    def finish(self) -> bool:
        """Wait for the driver's end; a study that did not finish is resumed (a finding: the
        harness should have survived its faults on its own), at most twice."""
        assert self.proc is not None
        for _ in range(3):
            try:
                code = self.proc.wait(timeout=STUDY_S)
            except subprocess.TimeoutExpired:
                self.journal.finding(f"hang: driver {self.count} still running after {STUDY_S:.0f} s")
                stop_session(self.proc)
                return False
            self.settle(self.proc.pid)
            text = self.log.read_text(errors="replace")
            if code == 0 and f"Study {SPEC['name']} finished" in text:
                self.journal.note(f"driver {self.count} finished the study")
                return True
            tail = " | ".join(text.strip().splitlines()[-4:])[-600:]
            self.journal.finding(f"driver {self.count} exited {code} without finishing the study: {tail}")
            self.launch(resume=True)
        return False

    def end(self) -> None:
        """Whatever still runs of the driver's session is ended."""
        if self.running():
            assert self.proc is not None
            stop_session(self.proc)
