"""``harness device kit``: what a GPU lease needs beyond the repository, in one ignored folder.

The lease's machine cannot reach a package index and its image lacks pydantic
(:mod:`harness.studies.device.image`); the corpora are not in the repository. The kit folder
(``.device-kit/`` by default, ignored by git) holds

    wheels/   the :data:`~harness.studies.device.image.KIT_WHEELS`, for CPython 3.12 on manylinux x86-64
    data/     the corpora, laid out as a ``$HARNESS_DATA_DIR`` (``data/<dataset>/<file>``)

under :data:`KIT_LIMIT_BYTES` in all (the lease carries at most 64 MiB with the working tree).
The device command (:data:`DEVICE_COMMAND`, ``benchmarks/device_check.sh``) installs the wheels
into a folder of its own, points ``$HARNESS_DATA_DIR`` at ``data/`` and runs the GPU check; the
lease's ``run`` carries the kit folder (:func:`carry_list`).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.errors import InputError
from harness.studies.device.image import DEVICE_PYTHON, KIT_WHEELS

#: The kit's folder in the repository (listed in .gitignore).
KIT_DIR = ".device-kit"
#: The most the kit may weigh: the lease carries 64 MiB with the working tree (~6 MiB).
KIT_LIMIT_BYTES = 40 * 2**20
#: The lease's one command (run from the repository's root; it writes under ``$OUT``).
DEVICE_COMMAND = "bash benchmarks/device_check.sh"
#: The wheels' platforms, newest first (pip matches each tag exactly).
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")


@dataclass(frozen=True)
class Kit:
    """A prepared kit: its folder, its files and their size."""

    folder: Path
    wheels: tuple[Path, ...]
    corpora: tuple[Path, ...]

    @property
    def size_bytes(self) -> int:
        """Bytes of every file in the folder (what the lease carries, leftovers included)."""
        return sum(p.stat().st_size for p in self.folder.rglob("*") if p.is_file())

    def carry_list(self, root: Path) -> list[str]:
        """The ``carry`` of the lease's ``run``: the kit folder, relative to the repository ``root``
        (:class:`InputError` when it lies outside: a lease carries paths of the repository only)."""
        folder, root = self.folder.resolve(), root.resolve()
        if not folder.is_relative_to(root):
            raise InputError(f"the kit {folder} lies outside {root}: a lease carries the repository's paths only")
        return [str(folder.relative_to(root))]


def pip_download(requirements: Sequence[str], into: Path) -> None:
    """``pip download`` of ``requirements`` (``name==version``) as CPython 3.12 manylinux x86-64
    wheels into ``into``, without their dependencies (the kit names each one); an unreachable
    package index is an :class:`InputError` that says so."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    command += ["--python-version", DEVICE_PYTHON, "--implementation", "cp", "--disable-pip-version-check"]
    for platform in PLATFORMS:
        command += ["--platform", platform]
    done = subprocess.run([*command, "-d", str(into), *requirements], capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise InputError(
            "could not download the device's wheels from the package registry (is it reachable from here? "
            f"`pip download` exited {done.returncode}: {' / '.join(detail)}); prepare the kit on a machine that "
            "reaches it, or put the wheels in the kit's wheels/ folder by hand"
        )


def _wheels(folder: Path, fetch: Callable[[Sequence[str], Path], None]) -> tuple[Path, ...]:
    """The kit's wheels in ``folder``, fetched when one is missing; one file per wheel."""
    folder.mkdir(parents=True, exist_ok=True)

    def found(name: str, version: str) -> list[Path]:
        stem = name.replace("-", "_")
        return sorted(folder.glob(f"{stem}-{version}-*.whl"))

    missing = [f"{n}=={v}" for n, v in KIT_WHEELS.items() if not found(n, v)]
    if missing:
        fetch(missing, folder)
    wheels = []
    for name, version in KIT_WHEELS.items():
        files = found(name, version)
        if len(files) != 1:
            raise InputError(f"{folder}: expected one wheel of {name} {version}, found {[f.name for f in files]}")
        wheels.append(files[0])
    return tuple(wheels)


def _corpora(folder: Path, names: Sequence[str], data_dir: str | None) -> tuple[Path, ...]:
    """Each named corpus's files copied to ``folder/<dataset>/<file>`` (a layout the data
    search finds: :func:`harness.datasets.fetch.file_candidates`); a generated corpus needs none."""
    from harness.datasets import get_card, locate

    copied: list[Path] = []
    for name in names:
        card = get_card(name)
        if card.synthetic:
            continue
        located = locate(card, data_dir=data_dir)
        if located is None:
            raise InputError(
                f"corpus {name!r} is not on this machine: `harness data fetch {name}` (or set $HARNESS_DATA_DIR) first"
            )
        for source in located.paths:
            target = folder / card.name / source.name
            target.parent.mkdir(parents=True, exist_ok=True)
            if not target.is_file() or target.stat().st_size != source.stat().st_size:
                shutil.copyfile(source, target)
            copied.append(target)
    return tuple(copied)


def prepare_kit(
    folder: str | Path = KIT_DIR,
    *,
    datasets: Sequence[str] = ("tinyshakespeare",),
    data_dir: str | None = None,
    fetch: Callable[[Sequence[str], Path], None] = pip_download,
) -> Kit:
    """The kit in ``folder`` (module docstring): the wheels (downloaded unless present) and the
    corpora ``datasets``. :class:`InputError` when a corpus is missing, the registry cannot be
    reached, or the kit would weigh more than :data:`KIT_LIMIT_BYTES`."""
    folder = Path(folder)
    kit = Kit(folder, _wheels(folder / "wheels", fetch), _corpora(folder / "data", datasets, data_dir))
    if kit.size_bytes > KIT_LIMIT_BYTES:
        raise InputError(
            f"the kit weighs {kit.size_bytes / 2**20:.1f} MiB, over its {KIT_LIMIT_BYTES / 2**20:.0f} MiB "
            f"(a lease carries 64 MiB with the working tree): carry fewer corpora than {', '.join(datasets)}"
        )
    return kit
