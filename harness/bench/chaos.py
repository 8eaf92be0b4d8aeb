"""A fault campaign: a real study under a seeded schedule of faults, compared bit for bit
with an unfaulted twin.

The study (:data:`SPEC`: nano, 2 variants x 2 seeds, 60 steps, an evaluation and a
checkpoint every 5) runs once without faults (the twin), then once per schedule, each time
as a user runs it: ``harness run SPEC`` against a real ``mlflow server`` on 127.0.0.1, on an
embedded local Ray or (schedules with a node fault) on a ``ray start --head`` cluster with a
second node joined on loopback. A schedule (:func:`draw_schedule`, from its seed alone) holds
one to three faults, each fired when the study's progress (checkpoints on storage, summed
over the trials) reaches a drawn point, after a drawn delay:

==========================  ==============================================================
kind                        what happens
==========================  ==============================================================
``trial_kill_step``         SIGKILL of a trial's process (a Ray worker) while it trains
``trial_kill_checkpoint``   SIGKILL of a trial's process the moment a new checkpoint of it
                            appears on storage (while it is being written)
``driver_kill``             SIGKILL of the driver (``harness run``), then ``--resume``
``driver_term``             SIGTERM of the driver, then ``--resume``
``driver_int``              Ctrl-C (SIGINT to the driver's process group), then ``--resume``
``mlflow_restart``          the tracking server stopped and restarted, 1-3 times
``mlflow_during_report``    the tracking server stopped once the study writes its results
                            (the report phase), restarted after a drawn pause
``node_leave``              the second Ray node stopped with its trials on it; a fresh
                            node joins after a drawn pause
==========================  ==============================================================

At the end (after ``harness report STUDY --from STUDY_DIR`` where the study's output asks for
it) the study must equal its twin: the results table (all but the timing column), every
evaluation of every trial's curve (every metric but throughput, bit for bit), every headline
number on the parent run, exactly one parent run and one child run per trial, each metric
step logged once, every run ended as finished, and no process of the study left running
(every process the campaign starts carries :data:`TAG` in its environment, so one that left
its session is found too). A schedule that fails is replayed with ``--replay SEED``: the
same faults at the same progress points, after the same delays (where a SIGKILL lands
inside the code still depends on the machine's timing). A server's or a node's return runs
beside the study, so that the next fault fires on time.
"""

from __future__ import annotations

import json
import math
import os
import platform
import random
import re
import shlex
import signal
import subprocess
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from harness.bench.local_services import (
    TINY,
    LocalCluster,
    MlflowServer,
    cluster_env,
    end_session,
    run_harness,
    session_processes,
    start_driver,
    stop_session,
)

#: Every process the campaign starts inherits this variable (value: the campaign's id).
TAG = "HARNESS_CHAOS_CAMPAIGN"

KINDS = (
    "trial_kill_step",
    "trial_kill_checkpoint",
    "driver_kill",
    "driver_term",
    "driver_int",
    "mlflow_restart",
    "mlflow_during_report",
    "node_leave",
)
#: Faults that fire at a progress point (the others: the report phase).
REPORT_PHASE = -1

STEPS, EVAL_EVERY = 60, 5
#: The campaign's study: 4 trials, each reporting a checkpoint every 5 steps and a final one.
SPEC: dict[str, Any] = {
    **TINY,
    "name": "chaos",
    "train": {**TINY["train"], "max_steps": STEPS, "eval_every": EVAL_EVERY},
    "retries": 6,  # more than the trial faults of any schedule
    "storage_shared": True,  # one machine: the storage path is the same on every node
}
TRIALS = 4
CHECKPOINTS = TRIALS * (STEPS // EVAL_EVERY + 1)

#: Columns and metrics that measure speed, not the computation (differ from run to run).
TIMING = re.compile(r"tokens_per_s|time|wall")
#: Ray's processes that carry a study's work (none may outlive a killed driver long).
RAY_CORE = ("ray::", "raylet", "gcs_server", "harness.cli")
DRIVER_EXIT_S, CORE_EXIT_S, STUDY_S, LEFTOVER_S = 180.0, 90.0, 900.0, 60.0


# -- schedules ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fault:
    kind: str
    at: int  # progress (checkpoints on storage) that fires it; REPORT_PHASE: once results.parquet is written
    delay_s: float  # after the trigger
    repeat: int = 1  # mlflow_restart: stop/start cycles
    down_s: float = 0.0  # mlflow: how long the server stays down (beyond its start-up)
    pick: int = 0  # which of the running trials (sorted by name) a trial fault hits


@dataclass(frozen=True)
class Schedule:
    seed: int
    faults: tuple[Fault, ...]

    @property
    def cluster(self) -> bool:
        return any(f.kind == "node_leave" for f in self.faults)

    def describe(self) -> str:
        return ", ".join(
            f"{f.kind}@{'report' if f.at == REPORT_PHASE else f.at}" + (f"x{f.repeat}" if f.repeat > 1 else "")
            for f in self.faults
        )


def draw_schedule(seed: int) -> Schedule:
    """The schedule of ``seed`` (a pure function of it): its first fault is of kind
    ``KINDS[seed % len(KINDS)]``, then 0-2 more of any kind but ``node_leave``, each at a
    progress point in [2, CHECKPOINTS * 3/4] (the report phase for ``mlflow_during_report``)."""
    rng = random.Random(seed)
    kinds = [KINDS[seed % len(KINDS)]]
    kinds += [rng.choice(KINDS[:-1]) for _ in range(rng.randint(0, 2))]
    faults = []
    for kind in kinds:
        at = REPORT_PHASE if kind == "mlflow_during_report" else rng.randint(2, CHECKPOINTS * 3 // 4)
        mlflow = kind.startswith("mlflow")
        faults.append(
            Fault(
                kind=kind,
                at=at,
                delay_s=round(rng.uniform(0.0, 0.6 if kind == "mlflow_during_report" else 2.0), 2),
                repeat=rng.randint(1, 3) if kind == "mlflow_restart" else 1,
                down_s=round(rng.uniform(0.5, 6.0), 1) if mlflow else 0.0,
                pick=rng.randrange(TRIALS),
            )
        )
    ordered = sorted(faults, key=lambda f: (f.at == REPORT_PHASE, f.at))
    return Schedule(seed=seed, faults=tuple(ordered))


def schedule_seeds(campaign_seed: int, n: int) -> list[int]:
    """``n`` schedule seeds from the campaign's seed; seed i leads with kind ``KINDS[i % 8]``,
    so that any 8 consecutive schedules inject every kind."""
    rng = random.Random(campaign_seed)
    return [len(KINDS) * rng.randrange(10**8) + i % len(KINDS) for i in range(n)]


# -- the record of a finished study --------------------------------------------------------------


@dataclass
class StudyRecord:
    """What a finished study leaves: its results table and its MLflow record."""

    table: dict[str, dict[str, Any]]  # trial id -> row (timing columns left out)
    parents: int
    children: dict[str, list[str]]  # trial id -> its child runs' ids
    ended: dict[str, str]  # run id -> "STATUS/status tag"
    curves: dict[str, dict[str, list[tuple[int, float]]]]  # trial id -> metric -> [(step, value)] as logged
    headline: dict[str, float]  # the parent run's metrics


def read_record(study_dir: Path, tracking_uri: str, experiment: str) -> StudyRecord:
    import polars as pl

    from harness.mlflow_client import TrackingClient

    table = pl.read_parquet(study_dir / "results.parquet")
    rows = {r["trial_id"]: {k: v for k, v in r.items() if not TIMING.search(k)} for r in table.iter_rows(named=True)}
    client = TrackingClient(tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id], max_results=1000) if exp else []
    parents = [r for r in runs if r.data.tags.get("harness.role") == "study"]
    children: dict[str, list[str]] = {}
    curves: dict[str, dict[str, list[tuple[int, float]]]] = {}
    for run in runs:
        tid = run.data.tags.get("harness.trial_id")
        if run.data.tags.get("harness.role") != "trial" or tid is None:
            continue
        children.setdefault(tid, []).append(run.info.run_id)
        curves[tid] = {
            key: sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, key))
            for key in sorted(run.data.metrics)
            if not TIMING.search(key)
        }
    headline = {k: v for p in parents for k, v in p.data.metrics.items() if not TIMING.search(k)}
    ended = {r.info.run_id: f"{r.info.status}/{r.data.tags.get('status')}" for r in runs}
    return StudyRecord(rows, len(parents), children, ended, curves, headline)


def _same(a: Any, b: Any) -> bool:
    """Equal bit for bit (NaN equals NaN); lists element by element."""
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    return a == b


def compare(twin: StudyRecord, got: StudyRecord) -> list[str]:
    """Every way ``got`` differs from ``twin`` (and every duplicate or unfinished run)."""
    found = []
    if sorted(got.table) != sorted(twin.table):
        found.append(f"results table trials {sorted(got.table)} != {sorted(twin.table)}")
    for tid, want in twin.table.items():
        row = got.table.get(tid, {})
        found += [f"results {tid} {k}: {row.get(k)!r} != {v!r}" for k, v in want.items() if not _same(row.get(k), v)]
    if got.parents != 1:
        found.append(f"{got.parents} parent runs")
    for tid in twin.table:
        if len(got.children.get(tid, [])) != 1:
            found.append(f"{len(got.children.get(tid, []))} child runs of {tid}")
    found += [f"run {rid} ended {state}" for rid, state in got.ended.items() if state != "FINISHED/finished"]
    for tid, metrics in got.curves.items():
        for key, points in metrics.items():
            steps = [s for s, _ in points]
            if len(steps) != len(set(steps)):
                found.append(f"{tid} {key}: a step logged twice {sorted(Counter(steps) - Counter(set(steps)))}")
            if not _same([list(p) for p in points], [list(p) for p in twin.curves.get(tid, {}).get(key, [])]):
                found.append(f"{tid} {key}: curve differs")
        found += [f"{tid} {k}: missing" for k in twin.curves.get(tid, {}) if k not in metrics]
    found += [
        f"headline {k}: {got.headline.get(k)!r} != {v!r}"
        for k, v in twin.headline.items()
        if not _same(got.headline.get(k), v)
    ]
    return found


# -- processes ---------------------------------------------------------------------------------


def tagged_processes(campaign: str) -> dict[int, tuple[int, str]]:
    """pid -> (session id, command line) of the live processes carrying ``TAG=campaign``."""
    found = {}
    needle = f"{TAG}={campaign}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            found[int(entry.name)] = (os.getsid(int(entry.name)), cmd)
        except (ProcessLookupError, PermissionError, FileNotFoundError, OSError):
            continue
    return found


def end_processes(pids: dict[int, str]) -> None:
    """SIGKILL ``pids`` (processes the campaign started that outlived their session's end)."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def trial_workers(sessions: list[int]) -> dict[int, str]:
    """pid -> trial name (the worker's working directory, Tune's trial folder) of the Ray
    workers that run a trial in the given sessions."""
    workers = {}
    for sid in sessions:
        for pid, cmd in session_processes(sid).items():
            if not cmd.startswith("ray::ImplicitFunc"):
                continue
            try:
                workers[pid] = Path(os.readlink(f"/proc/{pid}/cwd")).name
            except OSError:
                continue
    return workers


# -- one study under a schedule ------------------------------------------------------------------


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


class FaultedStudy:
    """The campaign's study run as a user runs it (``harness run``, ``--resume``, ``harness
    report --from``) under ``schedule`` (None: the twin, no fault), in ``root``."""

    def __init__(self, schedule: Schedule | None, root: Path, campaign: str, say: Any) -> None:
        self.schedule, self.root, self.campaign, self.say = schedule, root, campaign, say
        root.mkdir(parents=True, exist_ok=True)
        self.spec = root / "chaos.yaml"
        self.spec.write_text(yaml.safe_dump(SPEC, sort_keys=False))
        self.storage = root / "results"
        self.server = MlflowServer(root / "mlflow")
        self.cluster: LocalCluster | None = None
        self.driver: subprocess.Popen | None = None
        self.driver_started = 0.0
        self.drivers = 0
        self.outcome = Outcome(
            seed=schedule.seed if schedule else None, schedule=schedule.describe() if schedule else ""
        )
        self.injected: Counter[str] = Counter()
        self.background: threading.Thread | None = None  # a server's or a node's return
        self.t0 = time.monotonic()

    def note(self, text: str) -> None:
        self.outcome.events.append(f"{time.monotonic() - self.t0:6.1f} s  {text}")
        self.say(f"    {time.monotonic() - self.t0:6.1f} s  {text}")

    def finding(self, text: str) -> None:
        self.outcome.findings.append(text)
        self.note(f"FINDING: {text}")

    # -- services and the driver ---------------------------------------------------------------
    def start_services(self) -> None:
        self.server.start(timeout=300)
        if self.schedule is not None and self.schedule.cluster:
            self.cluster = LocalCluster(cluster_env())
            self.cluster.start_head(num_cpus=1)
            self.cluster.add_worker(num_cpus=1)
        self.note("services up" + (f" (Ray cluster {self.cluster.address}, 2 nodes)" if self.cluster else ""))

    def stop_services(self) -> None:
        if self.driver is not None and self.driver.poll() is None:
            stop_session(self.driver)
        if self.cluster is not None:
            self.cluster.stop()
        self.server.stop()

    def service_sessions(self) -> set[int]:
        nodes = self.cluster.nodes if self.cluster else []
        return {p.pid for p in [self.server.proc, *nodes] if p is not None}

    def launch(self, *, resume: bool = False) -> None:
        args = ["run", str(self.spec), "--tracking-uri", self.server.uri, "--storage-path", str(self.storage)]
        env = None
        if self.cluster is not None:
            args += ["--address", self.cluster.address]
            env = {k: v for k, v in self.cluster.env.items() if k != "RAY_AUTH_MODE"}
        self.drivers += 1
        self.log = self.root / f"driver{self.drivers}.log"
        self.driver = start_driver(*args, *(["--resume"] if resume else []), cwd=self.root, log=self.log, env=env)
        self.driver_started = time.time()
        self.note(f"driver {self.drivers} started" + (" with --resume" if resume else ""))

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
            self.finding(f"left running {CORE_EXIT_S:.0f} s after driver {self.drivers} ended: {stuck}")

    def stop_driver(self, sig: signal.Signals) -> None:
        assert self.driver is not None
        if sig == signal.SIGINT:
            os.killpg(self.driver.pid, sig)  # Ctrl-C: the terminal signals the foreground process group
        else:
            os.kill(self.driver.pid, sig)
        try:
            code = self.driver.wait(timeout=DRIVER_EXIT_S)
        except subprocess.TimeoutExpired:
            self.finding(f"hang: driver {self.drivers} still running {DRIVER_EXIT_S:.0f} s after {sig.name}")
            end_session(self.driver.pid)
            code = self.driver.wait(timeout=30)
        self.note(f"driver {self.drivers} got {sig.name}: exit code {code}")
        if sig != signal.SIGKILL and code != 130:
            self.finding(f"driver {self.drivers} exited {code} on {sig.name}, not 130 (stopped, resumable)")
        self.settle(self.driver.pid)

    # -- progress and triggers -------------------------------------------------------------------
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

    def in_report_phase(self) -> bool:
        """This driver wrote the study's results (Tune is done; the report comes next)."""
        study_dir = self.study_dir()
        results = study_dir / "results.parquet" if study_dir else None
        return results is not None and results.is_file() and results.stat().st_mtime >= self.driver_started

    def reached(self, fault: Fault) -> bool:
        """Wait for ``fault``'s trigger: True when reached, False when the driver ended first."""
        assert self.driver is not None
        while self.driver.poll() is None:
            if self.in_report_phase() if fault.at == REPORT_PHASE else self.progress() >= fault.at:
                return True
            time.sleep(0.01 if fault.at == REPORT_PHASE else 0.05)
        return False

    # -- the faults --------------------------------------------------------------------------------
    def inject(self, fault: Fault) -> None:
        if not self.reached(fault):
            self.outcome.not_reached.append(fault.kind)
            self.note(f"{fault.kind}: not reached (the study ended first)")
            return
        time.sleep(fault.delay_s)
        self.note(f"{fault.kind} fires at progress {self.progress()}")
        if getattr(self, fault.kind)(fault):
            self.injected[fault.kind] += 1
        else:
            self.outcome.not_reached.append(fault.kind)

    def _kill_trials(self, name: str | None, pick: int) -> bool:
        sessions = [n.pid for n in self.cluster.nodes] if self.cluster else [self.driver.pid]
        workers = trial_workers(sessions)
        if name is not None:
            workers = {pid: n for pid, n in workers.items() if n == name} or workers
        if not workers:
            self.note("no trial process to kill")
            return False
        pid, trial = sorted(workers.items(), key=lambda item: (item[1], item[0]))[pick % len(workers)]
        os.kill(pid, signal.SIGKILL)
        self.note(f"SIGKILL trial process {pid} ({trial}) at progress {self.progress()}")
        return True

    def trial_kill_step(self, fault: Fault) -> bool:
        return self._kill_trials(None, fault.pick)

    def trial_kill_checkpoint(self, fault: Fault) -> bool:
        """Watch storage for the next checkpoint folder; kill its trial's process at once."""
        before = self.checkpoints()
        deadline = time.monotonic() + 120
        while self.driver.poll() is None and time.monotonic() < deadline:
            now = self.checkpoints()
            grown = [t for t, n in now.items() if n > before.get(t, -1)]
            if grown:
                return self._kill_trials(grown[0], 0)
            time.sleep(0.002)
        return False

    def _driver_fault(self, sig: signal.Signals) -> bool:
        self.stop_driver(sig)
        self.launch(resume=True)
        return True

    def driver_kill(self, fault: Fault) -> bool:
        return self._driver_fault(signal.SIGKILL)

    def driver_term(self, fault: Fault) -> bool:
        return self._driver_fault(signal.SIGTERM)

    def driver_int(self, fault: Fault) -> bool:
        return self._driver_fault(signal.SIGINT)

    def in_background(self, work: Any) -> None:
        """Run ``work`` (a server's or a node's return) beside the study, so that the next
        fault fires on time; one at a time (an earlier one is waited for first)."""
        self.join_background()
        self.background = threading.Thread(target=work, daemon=True)
        self.background.start()

    def join_background(self) -> None:
        if self.background is not None:
            self.background.join()
            self.background = None

    def _server_down(self) -> None:
        self.server.stop()
        self.note("MLflow server stopped")

    def _server_back(self, down_s: float) -> None:
        time.sleep(down_s)
        self.server.start(timeout=300)
        self.note("MLflow server back")

    def mlflow_restart(self, fault: Fault) -> bool:
        def cycles() -> None:
            for cycle in range(fault.repeat):
                if cycle:
                    time.sleep(fault.delay_s)
                self._server_down()
                self._server_back(fault.down_s)

        self.in_background(cycles)
        return True

    def mlflow_during_report(self, fault: Fault) -> bool:
        self.join_background()  # an earlier outage first
        if self.driver is None or self.driver.poll() is not None:
            return False  # the report was over by then
        self._server_down()  # at once: the report takes seconds
        self.in_background(lambda: self._server_back(fault.down_s))
        return True

    def node_leave(self, fault: Fault) -> bool:
        assert self.cluster is not None
        node = self.cluster.nodes.pop(1)
        on_it = trial_workers([node.pid])
        stop_session(node)
        self.note(f"worker node stopped with trials {sorted(on_it.values())} on it")
        cluster = self.cluster

        def rejoin() -> None:
            time.sleep(fault.delay_s)
            cluster.add_worker(num_cpus=1)
            self.note("a fresh worker node joined")

        self.in_background(rejoin)
        return True

    # -- the end -----------------------------------------------------------------------------------
    def finish(self) -> bool:
        """Wait for the driver's end; a study that did not finish is resumed (a finding: the
        harness should have survived its faults on its own), at most twice."""
        assert self.driver is not None
        for _ in range(3):
            try:
                code = self.driver.wait(timeout=STUDY_S)
            except subprocess.TimeoutExpired:
                self.finding(f"hang: driver {self.drivers} still running after {STUDY_S:.0f} s")
                stop_session(self.driver)
                return False
            self.settle(self.driver.pid)
            text = self.log.read_text(errors="replace")
            if code == 0 and f"Study {SPEC['name']} finished" in text:
                self.note(f"driver {self.drivers} finished the study")
                return True
            tail = " | ".join(text.strip().splitlines()[-4:])[-600:]
            self.finding(f"driver {self.drivers} exited {code} without finishing the study: {tail}")
            self.launch(resume=True)
        return False

    def record(self) -> None:
        """``harness report ... --from STUDY_DIR`` when the study's output asks for it."""
        text = self.log.read_text(errors="replace")
        asked = [line.strip() for line in text.splitlines() if line.strip().startswith("harness report ")]
        if not asked:
            return
        done = run_harness(*shlex.split(asked[-1])[1:], cwd=self.root, timeout=600)
        self.note(f"{asked[-1]}: exit code {done.returncode}")
        if done.returncode != 0:
            self.finding(f"`{asked[-1]}` failed ({done.returncode}): {done.stderr.strip()[-600:]}")
        if done.left_running:
            self.finding(f"`harness report` left running: {sorted(done.left_running.values())}")

    def left_behind(self) -> None:
        """Processes of the campaign's study outside the services' sessions: none may stay
        (waited for :data:`LEFTOVER_S`: a Ray worker may take a moment to exit)."""
        deadline = time.monotonic() + LEFTOVER_S
        while True:
            stray = {
                p: c for p, (sid, c) in tagged_processes(self.campaign).items() if sid not in self.service_sessions()
            }
            if not stray or time.monotonic() > deadline:
                break
            time.sleep(1)
        if stray:
            self.finding(f"processes left behind: {sorted(c[:80] for c in stray.values())}")
            end_processes(stray)

    def run(self, twin: StudyRecord | None) -> tuple[Outcome, StudyRecord | None]:
        """Run the study under the schedule; compare its end with ``twin`` (None: this is the twin)."""
        record = None
        try:
            self.start_services()
            self.launch()
            for fault in self.schedule.faults if self.schedule else ():
                self.inject(fault)
            self.outcome.completed = self.finish()
            self.join_background()  # the server is up again before the record is checked
            if self.outcome.completed:
                self.record()
                study_dir = self.study_dir()
                assert study_dir is not None
                record = read_record(study_dir, self.server.uri, SPEC["name"])
                if twin is not None:
                    self.outcome.mismatches = compare(twin, record)
            self.left_behind()
        finally:
            self.join_background()
            self.stop_services()
            escaped = {p: c for p, (_, c) in tagged_processes(self.campaign).items()}
            if escaped:
                self.finding(f"still running after the services stopped: {sorted(c[:80] for c in escaped.values())}")
                end_processes(escaped)
        self.outcome.injected = dict(self.injected)
        self.outcome.wall_s = time.monotonic() - self.t0
        return self.outcome, record


# -- the campaign ----------------------------------------------------------------------------------


def _table(outcomes: list[Outcome], seeds: list[int], wall: float) -> tuple[list[str], dict[str, Any]]:
    injected = Counter()
    not_reached = Counter()
    for o in outcomes:
        injected.update(o.injected)
        not_reached.update(o.not_reached)
    failing = [o.seed for o in outcomes if o.failed]
    summary = {
        "schedules": len(outcomes),
        "faults_injected": dict(sorted(injected.items())),
        "faults_not_reached": dict(sorted(not_reached.items())),
        "studies_completed": sum(o.completed for o in outcomes),
        "mismatches": sum(len(o.mismatches) for o in outcomes),
        "findings": sum(len(o.findings) for o in outcomes),
        "failing_seeds": failing,
        "wall_s": round(wall, 1),
    }
    width = max(len(k) for k in KINDS)
    lines = [f"  {'fault':<{width}}  injected  not reached"]
    lines += [f"  {k:<{width}}  {injected[k]:>8}  {not_reached[k]:>11}" for k in KINDS]
    lines += [
        f"  {'total':<{width}}  {sum(injected.values()):>8}  {sum(not_reached.values()):>11}",
        "",
        f"  schedules run        {len(outcomes)}",
        f"  studies completed    {summary['studies_completed']}",
        f"  mismatches           {summary['mismatches']} (results, curves, headline numbers, runs against the twin)",
        f"  other findings       {summary['findings']} (hangs, processes left behind, extra resumes)",
        f"  failing schedules    {', '.join(map(str, failing)) or '-'}"
        + (f"  (replay: python benchmarks/chaos.py --replay {failing[0]})" if failing else ""),
        f"  wall time            {wall / 60:.1f} min",
    ]
    return lines, summary


def main(
    *,
    schedules: int = 10,
    seed: int = 1,
    replay: list[int] | None = None,
    out: Path | str = "benchmarks/results/chaos.json",
    workdir: Path | None = None,
    say: Any = print,
) -> dict[str, Any]:
    """Run the twin, then every schedule (``replay``: exactly these schedule seeds); print
    the table; write the JSON to ``out``. Returns the JSON's content."""
    started = time.monotonic()
    campaign = f"{os.getpid()}-{int(time.time())}"
    os.environ[TAG] = campaign  # inherited by every process the campaign starts
    seeds = list(replay) if replay else schedule_seeds(seed, schedules)
    root = Path(workdir or tempfile.mkdtemp(prefix="harness-chaos-"))
    say(f"Fault campaign: {len(seeds)} schedules, work in {root}; load average {os.getloadavg()[0]:.1f}")
    say("  twin (no faults)")
    twin_outcome, twin = FaultedStudy(None, root / "twin", campaign, say).run(None)
    if twin is None or twin_outcome.failed:
        raise RuntimeError(f"the unfaulted twin did not finish cleanly: {twin_outcome.findings}")
    outcomes = []
    for i, schedule_seed in enumerate(seeds):
        schedule = draw_schedule(schedule_seed)
        say(f"  schedule {i + 1}/{len(seeds)}: seed {schedule_seed}: {schedule.describe()}")
        outcome, _ = FaultedStudy(schedule, root / f"s{schedule_seed}", campaign, say).run(twin)
        outcomes.append(outcome)
        verdict = "ok" if not outcome.failed else f"FAILED: {(outcome.findings + outcome.mismatches)[:3]}"
        say(f"    {outcome.wall_s:.0f} s, injected {outcome.injected}: {verdict}")
    wall = time.monotonic() - started
    lines, summary = _table(outcomes, seeds, wall)
    say(
        f"\nFault campaign: seed {seed}, {len(seeds)} schedules, study {SPEC['name']} ({TRIALS} trials x {STEPS} steps)"
    )
    for line in lines:
        say(line)
    result = {
        "campaign_seed": seed,
        "schedule_seeds": seeds,
        **summary,
        "twin_wall_s": round(twin_outcome.wall_s, 1),
        "outcomes": [asdict(o) for o in outcomes],
        "spec": SPEC,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load_avg_1m": os.getloadavg()[0]},
        "date": time.strftime("%Y-%m-%d"),
    }
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    say(f"JSON: {out}")
    return result
