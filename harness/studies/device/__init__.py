"""A study on a GPU lease: one machine for minutes, no network, no Ray, MLflow or polars.

- :mod:`~harness.studies.device.image`   what the lease's machine holds; an environment here with only that
- :mod:`~harness.studies.device.kit`     ``harness device kit``: the wheels and corpora to carry, the command
- :mod:`~harness.studies.device.runner`  ``harness device run``: a study's trials in one process, seed groups
  seed-batched, its tables under an output folder
- :mod:`~harness.studies.device.tables`  those tables, written with pyarrow in the study schema
- :mod:`~harness.studies.device.record`  ``harness device record``: the folder as a study directory, recorded
  in MLflow as a Ray study is

Importing this package imports neither torch, Ray, MLflow nor polars; the names below load their
module on first use (:mod:`harness.lazy_exports`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.lazy_exports import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "runner": ["run_device_study", "seed_groups", "DeviceStudy"],
        "record": ["record_device_study"],
        "kit": ["prepare_kit"],
    },
)

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs
    from harness.studies.device.kit import prepare_kit
    from harness.studies.device.record import record_device_study
    from harness.studies.device.runner import DeviceStudy, run_device_study, seed_groups
