"""The README's main job, as a user runs it: `harness run studies/smoke.yaml` leaves one
parent MLflow run with 8 child runs, each with its final validation loss, the results
table and the report. (Its wall time is a benchmark number, not asserted here.)"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
from mlflow import MlflowClient

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_smoke_study_from_the_command_line(tmp_path: Path, shared_data_dir: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI")}
    started = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", str(REPO / "studies" / "smoke.yaml"), "--tracking-uri", uri,
         "--storage-path", str(tmp_path / "results")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    wall = time.perf_counter() - started
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    print(f"smoke study: {wall:.0f} s wall")
    assert "Study smoke: 8 trials (4 variants x 2 seeds x nano x tinyshakespeare x T=128), 1 CPU each" in out.stdout
    assert "interaction (superadd.)" in out.stdout  # the report's verdicts are printed
    assert "View it: harness ui --tracking-uri" in out.stdout

    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("smoke").experiment_id])
    parents = [r for r in runs if r.data.tags.get("harness.role") == "study"]
    children = [r for r in runs if r.data.tags.get("harness.role") == "trial"]
    assert len(parents) == 1 and len(children) == 8
    assert all(c.data.tags["mlflow.parentRunId"] == parents[0].info.run_id for c in children)
    assert all("final/val_loss" in c.data.metrics and c.info.status == "FINISHED" for c in children)
    assert parents[0].info.run_id in out.stdout
    files = {a.path for a in client.list_artifacts(parents[0].info.run_id)}
    assert {"spec.yaml", "results.parquet", "report"} <= files
    report = {a.path for a in client.list_artifacts(parents[0].info.run_id, "report")}
    assert "report/report.html" in report
    assert "superadditivity/estimate" in parents[0].data.metrics
    (table,) = list((tmp_path / "results" / "smoke").glob("*/results.parquet"))
    df = pl.read_parquet(table)
    assert df.height == 8 and set(df["status"]) == {"finished"}
    # training went somewhere: a 65-character vocabulary starts at ln(65) = 4.17 nats
    assert df["val_loss"].max() < 3.0
