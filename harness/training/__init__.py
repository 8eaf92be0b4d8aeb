"""Training: one LightningModule for the whole zoo, deterministic runs, telemetry in MLflow.

- :func:`train` (``harness.training.run``): one run from a :class:`TrainConfig` to a
  :class:`TrainResult` (MLflow run, checkpoints, final evaluation on fixed windows).
- :func:`prepare_run` (``plan``): every check a run makes before Lightning loads (config,
  checkpoint, variant, device, corpus), as the :class:`RunPlan` that :func:`train` follows.
- :class:`CharLMModule` (``module``), :class:`CharDataModule` (``data``), callbacks
  (``callbacks``), MLflow bookkeeping (``tracking``), the CLI (``cli``).
- :class:`DevicePlan` (``device_plan``): how a run computes on its device (precision, the
  fused optimizer, clipping, checkpoint cadence), chosen by :func:`choose_device_plan`.

Importing this package imports neither torch, Lightning, MLflow nor pydantic (the
``harness`` CLI imports it for ``--help``); the names below load their module on first use
(:mod:`harness.lazy_exports`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.lazy_exports import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "config": ["TrainConfig"],
        "run": ["train", "TrainResult"],
        "plan": ["config_from_checkpoint", "load_checkpoint_meta", "prepare_run", "RunPlan"],
        "module": ["CharLMModule", "learning_rate"],
        "data": ["CharDataModule"],
        "device_plan": ["DevicePlan", "choose_device_plan"],
    },
)

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs
    from harness.training.config import TrainConfig
    from harness.training.data import CharDataModule
    from harness.training.device_plan import DevicePlan, choose_device_plan
    from harness.training.module import CharLMModule, learning_rate
    from harness.training.plan import RunPlan, config_from_checkpoint, load_checkpoint_meta, prepare_run
    from harness.training.run import TrainResult, train
