"""Experiments the harness creates: artifacts beside a SQLite database, shown by MLflow's
UI as model training, and a deleted experiment refused with what to do instead."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow import MlflowClient

from harness.errors import InputError
from harness.studies.tracking import StudyRecorder
from harness.training.tracking import EXPERIMENT_TAGS, prepare_tracking


def test_new_experiment_is_tagged_and_keeps_artifacts_beside_the_database(sqlite_tracking_uri: str, tmp_path: Path) -> None:
    target = prepare_tracking(sqlite_tracking_uri, "my runs/ega")
    experiment = MlflowClient(sqlite_tracking_uri).get_experiment(target.experiment_id)
    assert experiment.tags["mlflow.experimentKind"] == EXPERIMENT_TAGS["mlflow.experimentKind"] == "custom_model_development"
    assert experiment.artifact_location == (tmp_path / "mlartifacts" / "my-runs-ega").as_uri()
    assert prepare_tracking(sqlite_tracking_uri, "my runs/ega").experiment_id == target.experiment_id  # found, not made


def test_deleted_experiment_is_refused_by_train_and_study(sqlite_tracking_uri: str) -> None:
    client = MlflowClient(sqlite_tracking_uri)
    client.delete_experiment(prepare_tracking(sqlite_tracking_uri, "gone").experiment_id)
    with pytest.raises(InputError, match=r"'gone' .* is deleted; restore it .* pass another --experiment"):
        prepare_tracking(sqlite_tracking_uri, "gone")
    with pytest.raises(InputError, match=r"is deleted; restore it .* set tracking.experiment in the spec"):
        StudyRecorder(sqlite_tracking_uri, "gone").connect()
