"""What a study's runs show first in MLflow: each trial's description (variant slots, seed,
shape, final numbers) and its corpus as MLflow dataset inputs (name, digest = the corpus
checksum of the dataset card, source, split as context); the parent declares the set; and
``harness report`` rewrites the descriptions from the recomputed table. Real embedded Ray,
real MLflow (SQLite)."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
from mlflow import MlflowClient
from typer.testing import CliRunner

from harness.analysis.results import mlflow_results_frame
from harness.cli import app
from harness.datasets import REGISTRY
from harness.datasets.mlflow_datasets import DIGEST_CHARS
from harness.studies.runner import run_study
from harness.training.description import NOTE_TAG, trial_description

CONTEXT = "mlflow.data.context"


def _inputs(client: MlflowClient, run_id: str) -> dict[tuple[str, str], dict]:
    """The run's dataset inputs by (name, context): digest, source, profile, splits."""
    out = {}
    for item in client.get_run(run_id).inputs.dataset_inputs:
        tags = {t.key: t.value for t in item.tags}
        d = item.dataset
        out[(d.name, tags[CONTEXT])] = {
            "digest": d.digest,
            "source_type": d.source_type,
            "source": json.loads(d.source),
            "profile": json.loads(d.profile),
            "splits": tags["harness.splits"],
        }
    return out


def _expected_inputs(dataset: str) -> dict[tuple[str, str], dict]:
    """What the dataset card says each declared input is."""
    card = REGISTRY[dataset]
    if dataset == "tinyshakespeare":  # one file: train and val are cut from it
        (f,) = card.files
        return {(dataset, "training"): {"sha256": f.sha256, "url": f.urls[0], "splits": "train,val"}}
    assert dataset == "ptb-char"  # one file per split, inside Mikolov's archive
    contexts = {"train": "training", "val": "validation", "test": "test"}
    return {
        (dataset, contexts[f.role]): {"sha256": f.sha256, "url": card.archive.urls[0], "splits": f.role}
        for f in card.files
    }


def _check_inputs(found: dict, expected: dict) -> None:
    assert set(found) == set(expected), found
    for key, want in expected.items():
        got = found[key]
        assert got["digest"] == want["sha256"][:DIGEST_CHARS]  # MLflow keeps 36 characters at most
        assert got["profile"]["sha256"] == want["sha256"]  # the full checksum of the card
        assert got["source_type"] == "http" and got["source"] == {"url": want["url"]}
        assert got["splits"] == want["splits"]


def test_trial_runs_show_their_description_and_corpus(write_spec, study_env: dict, tmp_path: Path) -> None:
    spec_path = write_spec(variants=["ega"], datasets=["tinyshakespeare", "ptb-char"])
    outcome = run_study(spec_path, report=False, **study_env)
    assert outcome.status == "finished", study_env["stream"].getvalue()
    uri = study_env["tracking_uri"]
    client = MlflowClient(uri)
    table = pl.read_parquet(Path(outcome.study_dir) / "results.parquet")
    rows = {row["trial_id"]: row for row in table.iter_rows(named=True)}
    children = client.search_runs(
        [outcome.experiment_id], filter_string=f"tags.`mlflow.parentRunId` = '{outcome.parent_run_id}'"
    )
    assert len(children) == 2

    for child in children:
        row = rows[child.data.tags["harness.trial_id"]]
        note = child.data.tags[NOTE_TAG]
        assert note == trial_description(row)  # the row results.parquet holds, rendered
        assert note.startswith("### ega - seed 0 - finished")
        for line in ("| position | sinusoidal |", "| gate | ega |", "| scoring | dot |", "| seed | 0 |"):
            assert line in note
        assert "| shape | `nano`: 2 layers x 2 heads, width 64 (" in note and "| context length | 32 |" in note
        assert f"| val loss (nats) | {row['val_loss']:.4f} |" in note
        assert f"| tau, mean over layers and heads | {row['tau_mean']:.4g} |" in note
        _check_inputs(_inputs(client, child.info.run_id), _expected_inputs(row["dataset"]))

    # The parent declares the set: every corpus of the study, each input once.
    _check_inputs(
        _inputs(client, outcome.parent_run_id), {**_expected_inputs("tinyshakespeare"), **_expected_inputs("ptb-char")}
    )

    # `harness report` recomputes the table and rewrites each description from it.
    stale = children[0].info.run_id
    client.set_tag(stale, NOTE_TAG, "stale")
    result = CliRunner().invoke(
        app, ["report", "tiny", "--tracking-uri", uri, "--out", str(tmp_path / "report"), "--no-windows"]
    )
    assert result.exit_code == 0, result.output
    assert "MLflow: refreshed the descriptions of 2 trial runs" in result.output
    # ... and writes the parent's: the verdict table (the study ran without its report)
    parent_note = client.get_run(outcome.parent_run_id).data.tags[NOTE_TAG]
    assert parent_note.startswith("| effect ([full report](") and "| estimate, 1 seed |" in parent_note
    assert "\n| tau | " in parent_note and "_no test possible (1 seed)_" in parent_note
    assert f"runs/{outcome.parent_run_id}/artifacts/report/report.html?workflowType=machine_learning)" in parent_note
    recomputed = {row["mlflow_run_id"]: row for row in mlflow_results_frame(uri, "tiny").iter_rows(named=True)}
    for child in children:
        note = client.get_run(child.info.run_id).data.tags[NOTE_TAG]
        assert note == trial_description(recomputed[child.info.run_id])
        assert note.startswith("### ega - seed 0 - finished") and "| gate | ega |" in note
