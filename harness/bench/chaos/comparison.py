"""A finished study's record (its results table and its MLflow record) and how it differs from
its unfaulted twin's: bit for bit, timing left out."""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Columns and metrics that measure speed, not the computation (differ from run to run).
TIMING = re.compile(r"tokens_per_s|time|wall")


@dataclass
class StudyRecord:
    """What a finished study leaves: its results table and its MLflow record."""

    table: dict[str, dict[str, Any]]  # trial id -> row (timing columns left out)
    parents: int
    children: dict[str, list[str]]  # trial id -> its child runs' ids
    ended: dict[str, str]  # run id -> "STATUS/status tag"
    curves: dict[str, dict[str, list[tuple[int, float]]]]  # trial id -> metric -> [(step, value)] as logged
    headline: dict[str, float]  # the parent run's metrics


def read_record(study_dir: Path, tracking_uri: str, experiment: str) -> StudyRecord:
    import polars as pl

    from harness.mlflow_client import TrackingClient

    table = pl.read_parquet(study_dir / "results.parquet")
    rows = {r["trial_id"]: {k: v for k, v in r.items() if not TIMING.search(k)} for r in table.iter_rows(named=True)}
    client = TrackingClient(tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id], max_results=1000) if exp else []
    parents = [r for r in runs if r.data.tags.get("harness.role") == "study"]
    children: dict[str, list[str]] = {}
    curves: dict[str, dict[str, list[tuple[int, float]]]] = {}
    for run in runs:
        tid = run.data.tags.get("harness.trial_id")
        if run.data.tags.get("harness.role") != "trial" or tid is None:
            continue
        children.setdefault(tid, []).append(run.info.run_id)
        curves[tid] = {
            key: sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, key))
            for key in sorted(run.data.metrics)
            if not TIMING.search(key)
        }
    headline = {k: v for p in parents for k, v in p.data.metrics.items() if not TIMING.search(k)}
    ended = {r.info.run_id: f"{r.info.status}/{r.data.tags.get('status')}" for r in runs}
    return StudyRecord(rows, len(parents), children, ended, curves, headline)


def _same(a: Any, b: Any) -> bool:
    """Equal bit for bit (NaN equals NaN); lists element by element."""
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    return a == b


def compare(twin: StudyRecord, got: StudyRecord) -> list[str]:
    """Every way ``got`` differs from ``twin`` (and every duplicate or unfinished run)."""
    found = []
    if sorted(got.table) != sorted(twin.table):
        found.append(f"results table trials {sorted(got.table)} != {sorted(twin.table)}")
    for tid, want in twin.table.items():
        row = got.table.get(tid, {})
        found += [f"results {tid} {k}: {row.get(k)!r} != {v!r}" for k, v in want.items() if not _same(row.get(k), v)]
    if got.parents != 1:
        found.append(f"{got.parents} parent runs")
    for tid in twin.table:
        if len(got.children.get(tid, [])) != 1:
            found.append(f"{len(got.children.get(tid, []))} child runs of {tid}")
    found += [f"run {rid} ended {state}" for rid, state in got.ended.items() if state != "FINISHED/finished"]
    for tid, metrics in got.curves.items():
        for key, points in metrics.items():
            steps = [s for s, _ in points]
            if len(steps) != len(set(steps)):
                found.append(f"{tid} {key}: a step logged twice {sorted(Counter(steps) - Counter(set(steps)))}")
            if not _same([list(p) for p in points], [list(p) for p in twin.curves.get(tid, {}).get(key, [])]):
                found.append(f"{tid} {key}: curve differs")
        found += [f"{tid} {k}: missing" for k in twin.curves.get(tid, {}) if k not in metrics]
    found += [
        f"headline {k}: {got.headline.get(k)!r} != {v!r}"
        for k, v in twin.headline.items()
        if not _same(got.headline.get(k), v)
    ]
    return found
