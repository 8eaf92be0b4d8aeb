"""What a ``harness train`` run shows first in MLflow: its description (variant slots, seed,
shape, final numbers, from the run's result) and its corpus as an MLflow dataset input
(name, digest = the dataset card's sha256, source URL, split as context). Real MLflow
(SQLite)."""

from __future__ import annotations

import json

from mlflow import MlflowClient

from harness.datasets import REGISTRY
from harness.datasets.mlflow_datasets import DIGEST_CHARS
from harness.training import train
from harness.training.description import NOTE_TAG, trial_description
from harness.training.module import resolve_variant
from harness.training.run import result_row


def test_train_run_has_a_description_and_declares_its_corpus(tiny_config, sqlite_tracking_uri: str) -> None:
    config = tiny_config(max_steps=4, eval_every=4, tracking_uri=sqlite_tracking_uri, experiment="page")
    result = train(config, progress_bar=False)
    client = MlflowClient(sqlite_tracking_uri)
    run = client.get_run(result.mlflow_run_id)

    note = run.data.tags[NOTE_TAG]
    assert note == trial_description(result_row(result, resolve_variant(config)))
    assert note.startswith("### ega-mope - seed 3 - finished")
    assert "Training run `ega-mope-tinyshakespeare-nano-T32-s3`." in note
    assert "| position | mope |" in note and "| gate | ega |" in note and "| scoring | dot |" in note
    assert f"| shape | `nano`: 2 layers x 2 heads, width 64 ({result.num_parameters:,} parameters) |" in note
    assert f"| val loss (nats) | {result.final_val_loss:.4f} |" in note
    assert f"| val bits per character | {result.val_bpc:.4f} |" in note
    assert "| steps | 4 |" in note

    (declared,) = run.inputs.dataset_inputs
    (card_file,) = REGISTRY["tinyshakespeare"].files
    tags = {t.key: t.value for t in declared.tags}
    assert declared.dataset.name == "tinyshakespeare"
    assert declared.dataset.digest == card_file.sha256[:DIGEST_CHARS]
    assert json.loads(declared.dataset.profile)["sha256"] == card_file.sha256
    assert json.loads(declared.dataset.source) == {"url": card_file.urls[0]}
    assert tags == {"mlflow.data.context": "training", "harness.splits": "train,val"}
