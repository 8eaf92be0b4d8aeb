"""Training: one LightningModule for the whole zoo, deterministic runs, telemetry in MLflow.

- :func:`train` (``harness.training.run``): one run from a :class:`TrainConfig` to a
  :class:`TrainResult` (MLflow run, checkpoints, final evaluation on fixed windows).
- :class:`CharLMModule` (``module``), :class:`CharDataModule` (``data``), callbacks
  (``callbacks``), MLflow bookkeeping (``tracking``), the CLI (``cli``).

Importing this package imports neither torch, Lightning nor MLflow (the ``harness`` CLI
imports it for ``--help``); the names below load their module on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from harness.training.config import TrainConfig

_LAZY = {
    "train": "harness.training.run",
    "TrainResult": "harness.training.run",
    "config_from_checkpoint": "harness.training.run",
    "load_checkpoint_meta": "harness.training.run",
    "CharLMModule": "harness.training.module",
    "learning_rate": "harness.training.module",
    "CharDataModule": "harness.training.data",
}

__all__ = ["TrainConfig", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'harness.training' has no attribute {name!r}")
