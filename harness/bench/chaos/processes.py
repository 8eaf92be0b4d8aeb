"""The processes of a fault campaign: every one it starts carries :data:`TAG` in its environment,
so that one that left its session is found too; Ray's trial workers found by their working
directory (Tune's trial folder)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from harness.bench.local_services import session_processes

#: Every process the campaign starts inherits this variable (value: the campaign's id).
TAG = "HARNESS_CHAOS_CAMPAIGN"


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
