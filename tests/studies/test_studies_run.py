"""A tiny study end to end on an embedded Ray and a real MLflow store: one parent run,
one child run per trial with its final validation loss, the results table, the report."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import yaml
from harness_support import TINY
from mlflow import MlflowClient
from numpy.testing import assert_allclose

from harness.analysis.results import normalise
from harness.models import get_variant
from harness.report import parent_description
from harness.results_schema import RESULT_COLUMNS, RESULT_SCHEMA
from harness.studies.cluster.connect import resolve_address, resolve_storage
from harness.studies.record.recorder import default_tracking_uri
from harness.studies.runner import run_study
from harness.studies.spec.grid import expand_grid
from harness.studies.spec.study_spec import load_spec, parse_spec
from harness.studies.tune.results_table import results_table
from harness.studies.tune.state import is_complete
from harness.training.config import TrainConfig
from harness.training.description import NOTE_TAG
from harness.training.run import TrainResult, result_row

#: The results table's columns: their one definition is harness.results_schema.
CONTRACT_COLUMNS = list(RESULT_COLUMNS)


def test_precedence_flag_spec_env_default(tiny: dict, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    for var in ("MLFLOW_TRACKING_URI", "HARNESS_STORAGE_PATH", "RAY_ADDRESS"):
        monkeypatch.delenv(var, raising=False)
    plain = parse_spec(yaml.safe_dump(tiny))
    with_spec = parse_spec(
        yaml.safe_dump({**tiny, "tracking": {"uri": "sqlite:///spec.db"}, "storage_path": "spec-results"})
    )
    assert default_tracking_uri(None, plain.tracking.uri) == f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert resolve_storage(None, plain) == str(tmp_path / "results")
    assert resolve_address(None) is None
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///env.db")
    monkeypatch.setenv("HARNESS_STORAGE_PATH", "s3://bucket/env")
    monkeypatch.setenv("RAY_ADDRESS", "head:6379")
    assert default_tracking_uri(None, plain.tracking.uri) == "sqlite:///env.db"
    assert resolve_storage(None, plain) == "s3://bucket/env"
    assert resolve_address(None) == "head:6379"
    assert default_tracking_uri(None, with_spec.tracking.uri) == "sqlite:///spec.db"
    assert resolve_storage(None, with_spec) == str(tmp_path / "spec-results")
    assert default_tracking_uri("sqlite:///flag.db", with_spec.tracking.uri) == "sqlite:///flag.db"
    assert resolve_storage("gs://flag", with_spec) == "gs://flag"
    assert resolve_address("other:6379") == "other:6379"


def test_results_columns_are_the_contract(tiny: dict) -> None:
    """Every producer of the table writes the one schema, names and types: the runner (a
    finished and a failed trial), the analysis (a table read back with text columns) and
    `harness train` (its run as a row)."""
    trials = expand_grid(parse_spec(yaml.safe_dump({**tiny, "seeds": 1})))
    finished = {"status": "finished", "steps": 10, "final/val_loss": 2.5, "gate/tau/l0h1": 0.2, "gate/tau/l0h0": 0.1}
    table = results_table("tiny", trials, {trials[0].trial_id: (finished, None), trials[1].trial_id: (None, "boom")})
    assert table.columns == CONTRACT_COLUMNS and dict(table.schema) == RESULT_SCHEMA
    assert table.get_column("status").to_list() == ["finished", "failed"]
    as_text = table.with_columns(pl.col("seed", "params", "steps").cast(pl.String))
    assert dict(normalise(as_text).schema) == RESULT_SCHEMA
    nan = math.nan
    result = TrainResult(
        config=TrainConfig(variant="ega"),
        status="finished",
        steps=10,
        final_val_loss=2.5,
        final_test_loss=None,
        best_val_loss=2.5,
        final_train_loss=2.4,
        gen_gap=0.1,
        val_bpc=nan,
        tau_mean=0.15,
        open_fraction=0.5,
        tokens_per_s=1.0,
        num_parameters=7,
        window_losses={},
        metrics=finished,
        mlflow_run_id=None,
        checkpoint_path=None,
        wall_time_s=0.0,
        vocab_size=65,
    )
    row = result_row(result, get_variant("ega"))
    assert list(row) == CONTRACT_COLUMNS and row["tau_heads"] == [0.1, 0.2]
    shape = TrainConfig(variant="ega").model_size()
    assert (row["n_layer"], row["n_head"], row["d_model"], row["vocab_size"]) == (
        shape.n_layer,
        shape.n_head,
        shape.d_model,
        65,
    )
    assert dict(pl.DataFrame([row], schema=RESULT_SCHEMA).schema) == RESULT_SCHEMA


def test_tiny_study_records_one_parent_and_a_child_per_trial(write_spec, study_env: dict, tmp_path: Path) -> None:
    spec_path = write_spec()
    outcome = run_study(spec_path, **study_env)
    log = study_env["stream"].getvalue()
    assert outcome.status == "finished", log
    assert outcome.counts == {"finished": 2, "diverged": 0, "failed": 0, "incomplete": 0}
    assert "Study tiny: 2 trials (2 variants x seed 0 x nano x tinyshakespeare x T=32)" in log
    assert f"MLflow: parent run {outcome.parent_run_id}" in log and "View it: harness ui --tracking-uri" in log
    assert "interaction skipped" not in log  # the spec names no factorial: no note about one

    client = MlflowClient(study_env["tracking_uri"])
    experiment = client.get_experiment_by_name("tiny")
    runs = client.search_runs([experiment.experiment_id])
    parents = [r for r in runs if r.data.tags.get("harness.role") == "study"]
    children = [r for r in runs if r.data.tags.get("harness.role") == "trial"]
    assert len(parents) == 1 and len(children) == 2 and len(runs) == 3
    parent = parents[0]
    spec = load_spec(spec_path)
    assert parent.info.run_id == outcome.parent_run_id and parent.info.status == "FINISHED"
    assert parent.data.tags["harness.study"] == "tiny"
    assert parent.data.tags["harness.spec_sha256"] == spec.sha256()
    assert parent.data.tags["harness.git_commit"]
    assert parent.data.params["grid_size"] == "2"
    parent_files = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"spec.yaml", "results.parquet"} <= parent_files
    assert outcome.report is not None and "report" in parent_files, log
    if outcome.report is not None:  # the parent run's page opens on the verdict table, linked to the full report
        link = (
            f"#/experiments/{experiment.experiment_id}/runs/{parent.info.run_id}/artifacts/report/report.html"
            "?workflowType=machine_learning"
        )
        assert parent.data.tags[NOTE_TAG] == parent_description(outcome.report, report_link=link)

    table = pl.read_parquet(Path(outcome.study_dir) / "results.parquet")
    assert table.columns == CONTRACT_COLUMNS and table.height == 2
    assert table.get_column("status").to_list() == ["finished", "finished"]
    by_trial = {row["trial_id"]: row for row in table.iter_rows(named=True)}
    for child in children:
        tags = child.data.tags
        tid = tags["harness.trial_id"]
        assert child.info.status == "FINISHED" and tags["status"] == "finished"
        assert tags["mlflow.parentRunId"] == parent.info.run_id
        assert child.info.run_name == tid
        assert {tags[k] for k in ("dataset", "size", "context_length", "seed")} == {
            "tinyshakespeare",
            "nano",
            "32",
            "0",
        }
        assert child.data.params["max_steps"] == "10" and child.data.params["variant"] == tags["variant"]
        final = child.data.metrics["final_val_loss"]
        assert math.isfinite(final) and final == pytest.approx(by_trial[tid]["val_loss"])
        assert by_trial[tid]["steps"] == 10 and by_trial[tid]["params"] > 0
        # each evaluation once, at its step: no duplicated points
        history = client.get_metric_history(child.info.run_id, "val/loss")
        assert sorted(m.step for m in history) == [5, 10]
        files = {a.path for a in client.list_artifacts(child.info.run_id)}
        assert "window_losses.parquet" in files
    ega = by_trial["ega_s0_nano_T32_tinyshakespeare"]
    assert ega["gate"] == "ega" and ega["tau_mean"] is not None and ega["open_fraction"] is not None
    assert by_trial["baseline_s0_nano_T32_tinyshakespeare"]["tau_mean"] is None
    # the energy direction's |cos| with the first principal component (the scorecard's ega-learns-first-pc)
    assert 0.0 <= ega["pc1_cosine"] <= 1.0 and by_trial["baseline_s0_nano_T32_tinyshakespeare"]["pc1_cosine"] is None
    # every head's tau (nano: 2 layers x 2 heads), their mean is tau_mean; none for the ungated baseline
    assert len(ega["tau_heads"]) == 4 and np.mean(ega["tau_heads"]) == pytest.approx(ega["tau_mean"], abs=1e-6)
    assert by_trial["baseline_s0_nano_T32_tinyshakespeare"]["tau_heads"] is None
    # `harness report` rebuilds the same per-head taus from the child runs' gate/tau/l*h* metrics
    from harness.analysis import mlflow_results_frame

    rebuilt = mlflow_results_frame(study_env["tracking_uri"], "tiny").filter(pl.col("variant") == "ega")
    assert_allclose(rebuilt.get_column("tau_heads")[0].to_list(), ega["tau_heads"], rtol=1e-12)
    assert rebuilt.get_column("pc1_cosine")[0] == pytest.approx(ega["pc1_cosine"], rel=1e-9)
    assert rebuilt.get_column("vocab_size")[0] == ega["vocab_size"] == 65  # TinyShakespeare's, as trained

    windows = pl.read_parquet(Path(outcome.study_dir) / "window_losses.parquet")
    assert {"split", "window", "loss", "variant", "seed", "dataset", "size", "context_length"} <= set(windows.columns)

    # Each checkpoint on storage carries its manifest: a resume tells it from one cut short.
    import pyarrow.fs

    kept = sorted(Path(outcome.study_dir).glob("*/checkpoint_*"))
    assert len(kept) == 2 and all(is_complete(pyarrow.fs.LocalFileSystem(), str(folder)) for folder in kept), kept


@pytest.mark.slow  # two studies of 4 trials: about 90 s on 2 busy cores
def test_a_study_run_twice_gives_every_trial_the_same_numbers(write_spec, study_env: dict, tmp_path: Path) -> None:
    """A seed fixes a trial's numbers (CPU, fp32, one thread a trial): the same study run again
    gives every trial bit-identical losses, tau included, though its trials meet the reused Ray
    worker in the opposite order (each follows another trial than the first time), with dropout
    drawing masks and a gated variant among them."""
    train = {**TINY["train"], "dropout": 0.1, "attention_dropout": 0.0}
    first = write_spec(variants=["baseline", "ega"], seeds=2, train=train)
    second = write_spec(variants=["ega", "baseline"], seeds=2, train=train)
    tables = []
    for spec_path, folder in ((first, "a"), (second, "b")):
        env = {**study_env, "tracking_uri": f"sqlite:///{tmp_path / folder}.db", "storage_path": str(tmp_path / folder)}
        outcome = run_study(spec_path, report=False, **env)
        assert outcome.status == "finished", env["stream"].getvalue()
        tables.append(pl.read_parquet(Path(outcome.study_dir) / "results.parquet").sort("trial_id"))
    losses = ["trial_id", "val_loss", "train_loss", "best_val_loss", "gen_gap", "tau_mean", "open_fraction"]
    a, b = (t.select(losses) for t in tables)
    assert a.height == 4 and a.get_column("tau_mean").drop_nulls().len() == 2
    assert a.to_dicts() == b.to_dicts()  # exact: no tolerance


def test_trial_equals_a_plain_training_run(write_spec, study_env: dict, tmp_path: Path) -> None:
    """The trainable passes the trial's config unchanged: Tune's result is the plain
    ``train(config)`` result (CPU, same seed), a custom shape included."""
    from harness.studies.spec.grid import expand_grid
    from harness.training import train

    w48 = {"name": "w48", "n_layer": 1, "n_head": 2, "d_model": 48}
    fewer_checkpoints = {**TINY["train"], "checkpoint_every": 10}  # than evaluations (every 5 steps)
    spec_path = write_spec(variants=["ega-mope"], seeds=[3], sizes=[w48], train=fewer_checkpoints)
    outcome = run_study(spec_path, report=False, **{**study_env, "live": True})  # the live table's code path
    assert "ega-mope_s3_w48-L1H2d48_T32_tinyshakespeare" in study_env["stream"].getvalue()
    assert "1/1 trials done" in study_env["stream"].getvalue()
    (trial,) = expand_grid(load_spec(spec_path))
    assert (trial.config.n_layer, trial.config.n_head, trial.config.d_model) == (1, 2, 48)
    plain = train(
        trial.config.model_copy(update={"checkpoint_dir": str(tmp_path / "plain")}),
        mlflow_logging=False,
        progress_bar=False,
    )
    row = outcome.results.row(0, named=True)
    assert row["size"] == "w48" and row["params"] == plain.num_parameters
    np.testing.assert_allclose(row["val_loss"], plain.final_val_loss, rtol=1e-6)
    np.testing.assert_allclose(row["train_loss"], plain.final_train_loss, rtol=1e-6)
    assert row["steps"] == plain.steps == 10
    # An evaluation without a new checkpoint reports none (nothing uploaded): step 5 has none, 10 has one.
    (result_json,) = Path(outcome.study_dir).glob("*/result.json")
    reports = [json.loads(line) for line in result_json.read_text().splitlines() if line.strip()]
    evaluations = [r for r in reports if "wall_time_s" not in r]  # not the trainable's final report
    assert {r["step"]: r.get("checkpoint_dir_name") is not None for r in evaluations} == {5: False, 10: True}
