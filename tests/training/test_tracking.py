"""Experiments the harness creates: artifacts beside a SQLite database, shown by MLflow's
UI as model training, and a deleted experiment refused with what to do instead."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow import MlflowClient

from harness.errors import InputError
from harness.mlflow_client import EXPERIMENT_TAGS
from harness.studies.record.recorder import StudyRecorder
from harness.training.tracking import prepare_tracking


def test_new_experiment_is_tagged_and_keeps_artifacts_beside_the_database(
    sqlite_tracking_uri: str, tmp_path: Path
) -> None:
    target = prepare_tracking(sqlite_tracking_uri, "my runs/ega")
    experiment = MlflowClient(sqlite_tracking_uri).get_experiment(target.experiment_id)
    assert (
        experiment.tags["mlflow.experimentKind"]
        == EXPERIMENT_TAGS["mlflow.experimentKind"]
        == "custom_model_development"
    )
    assert experiment.artifact_location == (tmp_path / "mlartifacts" / "my-runs-ega").as_uri()
    assert prepare_tracking(sqlite_tracking_uri, "my runs/ega").experiment_id == target.experiment_id  # found, not made


def test_deleted_experiment_is_refused_by_train_and_study(sqlite_tracking_uri: str) -> None:
    client = MlflowClient(sqlite_tracking_uri)
    client.delete_experiment(prepare_tracking(sqlite_tracking_uri, "gone").experiment_id)
    with pytest.raises(InputError, match=r"'gone' .* is deleted; restore it .* pass another --experiment"):
        prepare_tracking(sqlite_tracking_uri, "gone")
    with pytest.raises(InputError, match=r"is deleted; restore it .* set tracking.experiment in the spec"):
        StudyRecorder(sqlite_tracking_uri, "gone").store.connect()


def test_learned_morlet_gate_is_logged_per_layer(tmp_path: Path) -> None:
    """ega-morlet-param learns one Morlet filter (omega, sigma) per layer: it appears in the
    telemetry metrics and, per layer and head, in gate_parameters.parquet."""
    import numpy as np
    import polars as pl
    import torch

    from harness.models import build_model
    from harness.training.config import TrainConfig
    from harness.training.module import CharLMModule
    from harness.training.run import write_run_tables

    model = build_model("ega-morlet-param", vocab_size=11, block_size=32)  # nano: 2 layers x 2 heads
    with torch.no_grad():
        model.blocks[1].attn.gate.log_sigma.fill_(np.log(3.0))
    config = TrainConfig(variant="ega-morlet-param", context_length=32)
    metrics = CharLMModule(config, vocab_size=11, model=model).parameter_telemetry()
    assert metrics["gate/morlet_sigma/l1"] == pytest.approx(3.0) and metrics["gate/morlet_sigma/l0"] == pytest.approx(
        2.0
    )
    assert {"gate/morlet_omega/l0", "gate/morlet_omega/l1", "gate/tau/l1h1"} <= set(metrics)

    (path,) = write_run_tables(tmp_path, model=model, window_losses={})
    table = pl.read_parquet(path)
    assert table.columns == ["layer", "head", "tau", "alpha", "morlet_omega", "morlet_sigma"]
    assert table["morlet_sigma"].to_list() == pytest.approx([2.0, 2.0, 3.0, 3.0])
