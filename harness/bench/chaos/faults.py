"""The kinds of fault, each a small object that fires one :class:`~harness.bench.chaos.schedule.Fault`
on a study (:class:`StudyUnderFaults`: what a fault may touch) and says whether it could; the
registry :data:`FAULT_KINDS` holds one per name of
:data:`~harness.bench.chaos.schedule.KINDS`."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from harness.bench.chaos.processes import trial_workers
from harness.bench.chaos.schedule import Fault
from harness.bench.local_services import stop_session


class StudyUnderFaults(Protocol):
    """What a fault touches of the study it hits (:class:`harness.bench.chaos.study.FaultedStudy`)."""

    services: Any  # harness.bench.chaos.driver.Services: the tracking server, the cluster
    driver: Any  # harness.bench.chaos.driver.Driver: `harness run`, stopped and resumed
    watch: Any  # harness.bench.chaos.driver.StorageWatch: checkpoints on storage
    journal: Any  # harness.bench.chaos.driver.Journal

    def kill_trial(self, name: str | None, pick: int) -> bool: ...

    def in_background(self, work: Callable[[], None]) -> None: ...

    def join_background(self) -> None: ...


class FaultKind(Protocol):
    def fire(self, study: StudyUnderFaults, fault: Fault) -> bool:
        """Fire ``fault`` on ``study``; False when there was nothing to hit (it counts as not reached)."""
        ...


@dataclass(frozen=True)
class TrialKill:
    """SIGKILL of a trial's process (a Ray worker) while it trains, or (``at_checkpoint``) the
    moment a new checkpoint of it appears on storage, while it is being written."""

    at_checkpoint: bool = False

    def fire(self, study: StudyUnderFaults, fault: Fault) -> bool:
        if not self.at_checkpoint:
            return study.kill_trial(None, fault.pick)
        before = study.watch.checkpoints()
        deadline = time.monotonic() + 120
        while study.driver.running() and time.monotonic() < deadline:
            now = study.watch.checkpoints()
            grown = [t for t, n in now.items() if n > before.get(t, -1)]
            if grown:
                return study.kill_trial(grown[0], 0)
            time.sleep(0.002)
        return False


@dataclass(frozen=True)
class DriverSignal:
    """The driver gets ``sig`` (SIGKILL, SIGTERM, or Ctrl-C to its process group), then the
    study is resumed (``harness run --resume``)."""

    sig: signal.Signals

    def fire(self, study: StudyUnderFaults, fault: Fault) -> bool:
        study.driver.stop(self.sig)
        study.driver.launch(resume=True)
        return True


@dataclass(frozen=True)
class MlflowRestart:
    """The tracking server stopped and restarted ``fault.repeat`` times (down ``fault.down_s``
    beyond its start-up each time), beside the study."""

    def fire(self, study: StudyUnderFaults, fault: Fault) -> bool:
        def cycles() -> None:
            for cycle in range(fault.repeat):
                if cycle:
                    time.sleep(fault.delay_s)
                study.services.server_down()
                study.services.server_back(fault.down_s)

        study.in_background(cycles)
        return True


@dataclass(frozen=True)
class MlflowDuringReport:
    """The tracking server stopped at once when the study writes its results (the report
    phase takes seconds), restarted after ``fault.down_s``."""

    def fire(self, study: StudyUnderFaults, fault: Fault) -> bool:
        study.join_background()  # an earlier outage first
        if not study.driver.running():
            return False  # the report was over by then
        study.services.server_down()
        study.in_background(lambda: study.services.server_back(fault.down_s))
        return True


@dataclass(frozen=True)
class NodeLeave:
    """The second Ray node stopped with its trials on it; a fresh node joins after ``fault.delay_s``."""

    def fire(self, study: StudyUnderFaults, fault: Fault) -> bool:
        cluster = study.services.cluster
        assert cluster is not None
        node = cluster.nodes.pop(1)
        on_it = trial_workers([node.pid])
        stop_session(node)
        study.journal.note(f"worker node stopped with trials {sorted(on_it.values())} on it")

        def rejoin() -> None:
            time.sleep(fault.delay_s)
            cluster.add_worker(num_cpus=1)
            study.journal.note("a fresh worker node joined")

        study.in_background(rejoin)
        return True


#: Each kind of :data:`~harness.bench.chaos.schedule.KINDS`, by name.
FAULT_KINDS: dict[str, FaultKind] = {
    "trial_kill_step": TrialKill(),
    "trial_kill_checkpoint": TrialKill(at_checkpoint=True),
    "driver_kill": DriverSignal(signal.SIGKILL),
    "driver_term": DriverSignal(signal.SIGTERM),
    "driver_int": DriverSignal(signal.SIGINT),
    "mlflow_restart": MlflowRestart(),
    "mlflow_during_report": MlflowDuringReport(),
    "node_leave": NodeLeave(),
}
