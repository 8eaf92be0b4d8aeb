"""The device runner (``harness device run``): a study's trials in one process without Ray or
MLflow, its tables in the study schema, read by ``harness report --from`` and recorded in MLflow
by ``harness device record`` as a Ray study is.

One tiny study (two variants x two seeds, ``nano``, six steps) runs once for the module."""

from __future__ import annotations

import json
import math
from pathlib import Path

import polars as pl
import pytest
import yaml

from harness.errors import InputError
from harness.results_schema import CURVE_SCHEMA, RESULT_SCHEMA
from harness.studies.device import runner as device_runner
from harness.studies.device.record import record_device_study
from harness.studies.device.runner import DEVICE_FILE, run_device_study, seed_groups
from harness.studies.device.tables import WINDOW_TYPES
from harness.studies.spec.grid import expand_grid
from harness.studies.spec.study_spec import parse_spec

SPEC = {
    "name": "device-tiny",
    "datasets": ["tinyshakespeare"],
    "variants": ["baseline", "ega"],
    "seeds": 2,
    "sizes": ["nano"],
    "context_lengths": [32],
    "train": {
        "max_steps": 6,
        "batch_size": 4,
        "eval_every": 3,
        "eval_windows": 4,
        "final_eval_windows": 4,
        "eval_batch_size": 4,
        "warmup_steps": 1,
    },
    "resources": {"cpus": 1, "gpus": 0},
    "retries": 0,
}


def _spec_file(folder: Path, **changes: object) -> Path:
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump({**SPEC, **changes}))
    return path


@pytest.fixture(scope="module")
def device_study(tmp_path_factory: pytest.TempPathFactory, shared_data_dir: Path):
    folder = tmp_path_factory.mktemp("device")
    return run_device_study(_spec_file(folder), folder / "out", accelerator="cpu", say=lambda _: None)


def test_seed_groups_hold_the_trials_that_differ_only_in_seed() -> None:
    trials = expand_grid(parse_spec(yaml.safe_dump({**SPEC, "seeds": 3, "context_lengths": [32, 64]})))
    groups = seed_groups(trials)
    assert len(groups) == 4  # 2 variants x 2 context lengths
    for group in groups:
        assert [t.config.seed for t in group] == [0, 1, 2]
        assert len({(t.config.variant, t.config.context_length) for t in group}) == 1
    # in the order the groups' first trials come in the (seed-major) grid
    assert [(g[0].config.variant, g[0].config.context_length) for g in groups] == [
        (t.config.variant, t.config.context_length) for t in trials[:4]
    ]


def test_the_tables_are_the_study_schema(device_study) -> None:
    out = device_study.out
    assert sorted(p.name for p in out.iterdir()) == [
        "curves.parquet",
        DEVICE_FILE,
        "results.parquet",
        "spec.yaml",
        "window_losses.parquet",
    ]
    assert all(p.stat().st_size < 16 * 2**20 for p in out.iterdir())  # what a lease hands back per file
    results = pl.read_parquet(out / "results.parquet")
    assert results.schema == pl.Schema(RESULT_SCHEMA)
    assert results["trial_id"].to_list() == list(device_study.outcomes)  # grid order
    assert results["status"].to_list() == ["finished"] * 4 and results["steps"].to_list() == [6] * 4
    curves = pl.read_parquet(out / "curves.parquet")
    assert curves.schema == pl.Schema(CURVE_SCHEMA)
    assert curves.group_by("trial_id").len()["len"].to_list() == [2] * 4  # evaluations at steps 3 and 6
    windows = pl.read_parquet(out / "window_losses.parquet")
    assert list(windows.columns) == list(WINDOW_TYPES)
    # a trial's final val loss is the mean of its final evaluation's val windows
    for row in results.iter_rows(named=True):
        mine = windows.filter((pl.col("trial_id") == row["trial_id"]) & (pl.col("split") == "val"))
        assert mine.height == row["val_windows"] == 4
        assert math.isclose(mine["loss"].mean(), row["val_loss"], rel_tol=1e-12)
    record = json.loads((out / DEVICE_FILE).read_text())
    assert record["trial_ids"] == results["trial_id"].to_list()
    assert [g["trainer"] for g in record["groups"]] == [device_study.groups[0]["trainer"]] * 2
    last = record["reports"][results["trial_id"][0]][-1]
    assert last["status"] == "finished" and last["final/val_loss"] == results["val_loss"][0]


def test_a_study_folder_is_not_overwritten_and_bad_specs_are_refused(device_study, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="already holds a study"):
        run_device_study(_spec_file(tmp_path), device_study.out)
    sequential = _spec_file(
        tmp_path,
        seeds={"min": 2, "max": 4, "batch": 2},
        stop_when="settled",
        analysis={"primary": {"treatment": "ega", "control": "baseline"}, "smallest_effect": 0.02},
    )
    with pytest.raises(InputError, match="sequential study"):
        run_device_study(sequential, tmp_path / "out")
    with pytest.raises(InputError, match="ptb-word-missing"):
        run_device_study(_spec_file(tmp_path, datasets=["ptb-word-missing"]), tmp_path / "out2")
    assert not (tmp_path / "out").exists() and not (tmp_path / "out2").exists()


def test_a_deadline_leaves_the_trials_incomplete(tmp_path: Path, shared_data_dir: Path) -> None:
    study = run_device_study(_spec_file(tmp_path), tmp_path / "out", deadline_s=0, say=lambda _: None)
    assert study.groups == [] and study.count("incomplete") == 4
    results = pl.read_parquet(tmp_path / "out" / "results.parquet")
    assert results["status"].to_list() == ["incomplete"] * 4 and results["val_loss"].is_null().all()


def test_seed_groups_go_to_the_seed_batched_trainer(monkeypatch, tmp_path: Path, shared_data_dir: Path) -> None:
    """Where ``harness.training.seed_batch`` exists the runner hands it each group's configs (with
    its deadline callback) and takes its results in seed order."""
    from harness.training.run import train

    calls = []

    def train_seed_batch(configs, *, callbacks=(), progress_bar=True):  # the interface, as separate runs
        calls.append([c.seed for c in configs])
        return [train(c, callbacks=callbacks, mlflow_logging=False, progress_bar=False) for c in configs]

    monkeypatch.setattr(device_runner, "seed_batch_trainer", lambda: train_seed_batch)
    spec = _spec_file(tmp_path, variants=["baseline"], train={**SPEC["train"], "max_steps": 3})
    study = run_device_study(spec, tmp_path / "out", accelerator="cpu", say=lambda _: None)
    assert calls == [[0, 1]] and [g["trainer"] for g in study.groups] == ["seed-batched"]
    assert study.count("finished") == 2


def test_report_reads_the_folder_and_record_writes_mlflow_as_ray_would(
    device_study, tmp_path: Path, sqlite_tracking_uri: str
) -> None:
    from harness.analysis.results import results_frame
    from harness.mlflow_client import TrackingClient

    assert results_frame(device_study.out).height == 4  # harness report / scorecard --from DIR
    directory, outcome = record_device_study(
        device_study.out, storage=tmp_path / "results", tracking_uri=sqlite_tracking_uri, say=lambda _: None
    )
    assert (outcome.created, outcome.parent_created) == (4, True)
    client = TrackingClient(sqlite_tracking_uri)
    curves = pl.read_parquet(device_study.out / "curves.parquet")
    runs = client.search_runs(
        [outcome.experiment_id], filter_string=f"tags.`mlflow.parentRunId` = '{outcome.parent_run_id}'"
    )
    assert len(runs) == 4
    for run in runs:
        tid = run.data.tags["harness.trial_id"]
        points = sorted(client.get_metric_history(run.info.run_id, "val/loss"), key=lambda m: m.step)
        history = [m.value for m in points]
        assert history == curves.filter(pl.col("trial_id") == tid).sort("step")["val_loss"].to_list()
        assert run.data.tags["status"] == "finished" and "final_val_loss" in run.data.metrics
        assert "window_losses.parquet" in {f.path for f in client.list_artifacts(run.info.run_id)}
    again = record_device_study(
        device_study.out, storage=tmp_path / "results", tracking_uri=sqlite_tracking_uri, say=lambda _: None
    )[1]
    assert (again.created, again.unchanged, again.parent_run_id) == (0, 4, outcome.parent_run_id)  # idempotent


def test_record_refuses_a_folder_without_a_device_study(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="holds no device study"):
        record_device_study(tmp_path, storage=tmp_path / "results")
