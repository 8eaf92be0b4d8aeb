"""The link a study prints to its parent run: MLflow 3's "Model training" view, on the
local `harness ui` or on the tracking server itself, never with the URI's password."""

from __future__ import annotations

import pytest

from harness.studies.record.recorder import StudyRecorder


@pytest.mark.parametrize(
    ("uri", "expected_base"),
    [
        ("sqlite:////tmp/x/mlflow.db", "http://127.0.0.1:5000"),
        ("http://127.0.0.1:5999", "http://127.0.0.1:5999"),
        ("https://harness:pw-SECRET@mlflow.example.org/prefix/", "https://mlflow.example.org/prefix"),
    ],
)
def test_ui_url_opens_the_parent_run_in_the_model_training_view(uri: str, expected_base: str) -> None:
    recorder = StudyRecorder(uri, "smoke")
    assert recorder.ui_url() is None  # no parent run yet
    recorder.store.experiment_id, recorder.parent.run_id = "7", "abc123"  # as connect() and start_parent() set them
    url = recorder.ui_url()
    assert url == f"{expected_base}/#/experiments/7/runs/abc123?workflowType=machine_learning"
    assert "SECRET" not in url
