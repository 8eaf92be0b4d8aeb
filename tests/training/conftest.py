"""Tiny training configs for the training tests (nano model, short context, few steps)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.training.config import TrainConfig


@pytest.fixture
def tiny_config(tmp_path: Path, shared_data_dir: Path) -> Callable[..., TrainConfig]:
    """``tiny_config(**overrides)``: a nano run of a few steps, one thread, checkpoints in tmp_path;
    the final evaluation on 8 windows per split (the default, the whole validation split, costs
    about 7 s per run; a test about it asks ``final_eval_windows=None``)."""

    def make(**overrides: Any) -> TrainConfig:
        fields: dict[str, Any] = dict(
            variant="ega-mope",
            dataset="tinyshakespeare",
            size="nano",
            context_length=32,
            batch_size=4,
            max_steps=12,
            eval_every=4,
            eval_windows=8,
            final_eval_windows=8,
            eval_batch_size=8,
            warmup_steps=2,
            seed=3,
            num_threads=1,
            checkpoint_dir=str(tmp_path / "ckpt"),
        )
        fields.update(overrides)
        return TrainConfig(**fields)

    return make


@pytest.fixture(scope="session")
def compile_cache(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One Inductor cache for every compiling test of the session (``$HARNESS_COMPILE_CACHE``),
    kept between sessions in pytest's cache folder: only the first session pays the cold
    compiles (about a minute per graph on a 2-CPU machine)."""
    cache = getattr(request.config, "cache", None)
    path = cache.mkdir("inductor") if cache is not None else tmp_path_factory.mktemp("inductor")
    os.environ["HARNESS_COMPILE_CACHE"] = str(path)
    return path
