"""One study under a schedule of faults, run as a user runs it (``harness run``, ``--resume``,
``harness report --from``), then compared with its unfaulted twin."""

from __future__ import annotations

import os
import shlex
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from harness.bench.chaos.comparison import StudyRecord, compare, read_record
from harness.bench.chaos.driver import LEFTOVER_S, Driver, Journal, Outcome, Services, StorageWatch
from harness.bench.chaos.faults import FAULT_KINDS
from harness.bench.chaos.processes import end_processes, tagged_processes, trial_workers
from harness.bench.chaos.schedule import REPORT_PHASE, SPEC, Fault, Schedule
from harness.bench.local_services import run_harness


class FaultedStudy:
    """The campaign's study under ``schedule`` (None: the twin, no fault), in ``root``: its
    services, its driver, its progress on storage and its journal, the faults fired on it in
    their turn (:data:`~harness.bench.chaos.faults.FAULT_KINDS`), and a server's or a node's
    return run beside it."""

    def __init__(self, schedule: Schedule | None, root: Path, campaign: str, say: Any) -> None:
        self.schedule, self.root, self.campaign = schedule, root, campaign
        root.mkdir(parents=True, exist_ok=True)
        spec = root / "chaos.yaml"
        spec.write_text(yaml.safe_dump(SPEC, sort_keys=False))
        storage = root / "results"
        self.outcome = Outcome(
            seed=schedule.seed if schedule else None, schedule=schedule.describe() if schedule else ""
        )
        self.journal = Journal(self.outcome, say)
        self.services = Services(root, self.journal, cluster=schedule is not None and schedule.cluster)
        self.driver = Driver(root, spec, storage, self.services, self.journal)
        self.watch = StorageWatch(storage)
        self.injected: Counter[str] = Counter()
        self.background: threading.Thread | None = None  # a server's or a node's return

    # -- the faults ------------------------------------------------------------------------------
    def reached(self, fault: Fault) -> bool:
        """Wait for ``fault``'s trigger: True when reached, False when the driver ended first."""
        while self.driver.running():
            if fault.at == REPORT_PHASE:
                if self.watch.results_written_since(self.driver.started):
                    return True
            elif self.watch.progress() >= fault.at:
                return True
            time.sleep(0.01 if fault.at == REPORT_PHASE else 0.05)
        return False

    def inject(self, fault: Fault) -> None:
        if not self.reached(fault):
            self.outcome.not_reached.append(fault.kind)
            self.journal.note(f"{fault.kind}: not reached (the study ended first)")
            return
        time.sleep(fault.delay_s)
        self.journal.note(f"{fault.kind} fires at progress {self.watch.progress()}")
        if FAULT_KINDS[fault.kind].fire(self, fault):
            self.injected[fault.kind] += 1
        else:
            self.outcome.not_reached.append(fault.kind)

    def kill_trial(self, name: str | None, pick: int) -> bool:
        """SIGKILL of the process of trial ``name`` (None, or not running: the ``pick``-th of the
        running trials, sorted by name); False when no trial runs."""
        cluster = self.services.cluster
        assert self.driver.proc is not None
        sessions = [n.pid for n in cluster.nodes] if cluster else [self.driver.proc.pid]
        workers = trial_workers(sessions)
        if name is not None:
            workers = {pid: n for pid, n in workers.items() if n == name} or workers
        if not workers:
            self.journal.note("no trial process to kill")
            return False
        pid, trial = sorted(workers.items(), key=lambda item: (item[1], item[0]))[pick % len(workers)]
        os.kill(pid, signal.SIGKILL)
        self.journal.note(f"SIGKILL trial process {pid} ({trial}) at progress {self.watch.progress()}")
        return True

    def in_background(self, work: Callable[[], None]) -> None:
        """Run ``work`` (a server's or a node's return) beside the study, so that the next
        fault fires on time; one at a time (an earlier one is waited for first)."""
        self.join_background()
        self.background = threading.Thread(target=work, daemon=True)
        self.background.start()

    def join_background(self) -> None:
        if self.background is not None:
            self.background.join()
            self.background = None

    # -- the end -----------------------------------------------------------------------------------
    def record(self) -> None:
        """``harness report ... --from STUDY_DIR`` when the study's output asks for it."""
        text = self.driver.log.read_text(errors="replace")
        asked = [line.strip() for line in text.splitlines() if line.strip().startswith("harness report ")]
        if not asked:
            return
        done = run_harness(*shlex.split(asked[-1])[1:], cwd=self.root, timeout=600)
        self.journal.note(f"{asked[-1]}: exit code {done.returncode}")
        if done.returncode != 0:
            self.journal.finding(f"`{asked[-1]}` failed ({done.returncode}): {done.stderr.strip()[-600:]}")
        if done.left_running:
            self.journal.finding(f"`harness report` left running: {sorted(done.left_running.values())}")

    def left_behind(self) -> None:
        """Processes of the campaign's study outside the services' sessions: none may stay
        (waited for :data:`~harness.bench.chaos.driver.LEFTOVER_S`: a Ray worker may take a
        moment to exit)."""
        deadline = time.monotonic() + LEFTOVER_S
        while True:
            stray = {
                p: c for p, (sid, c) in tagged_processes(self.campaign).items() if sid not in self.services.sessions()
            }
            if not stray or time.monotonic() > deadline:
                break
            time.sleep(1)
        if stray:
            self.journal.finding(f"processes left behind: {sorted(c[:80] for c in stray.values())}")
            end_processes(stray)

    def run(self, twin: StudyRecord | None) -> tuple[Outcome, StudyRecord | None]:
        """Run the study under the schedule; compare its end with ``twin`` (None: this is the twin)."""
        record = None
        try:
            self.services.start()
            self.driver.launch()
            for fault in self.schedule.faults if self.schedule else ():
                self.inject(fault)
            self.outcome.completed = self.driver.finish()
            self.join_background()  # the server is up again before the record is checked
            if self.outcome.completed:
                self.record()
                study_dir = self.watch.study_dir()
                assert study_dir is not None
                record = read_record(study_dir, self.services.server.uri, SPEC["name"])
                if twin is not None:
                    self.outcome.mismatches = compare(twin, record)
            self.left_behind()
        finally:
            self.join_background()
            self.driver.end()
            self.services.stop()
            escaped = {p: c for p, (_, c) in tagged_processes(self.campaign).items()}
            if escaped:
                found = sorted(c[:80] for c in escaped.values())
                self.journal.finding(f"still running after the services stopped: {found}")
                end_processes(escaped)
        self.outcome.injected = dict(self.injected)
        self.outcome.wall_s = time.monotonic() - self.journal.t0
        return self.outcome, record
