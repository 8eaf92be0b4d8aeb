"""A sequential study's driver killed mid-batch (SIGKILL, as the OOM killer would): the
resume finishes it without running a finished trial again and without changing a decision
it had already taken (the decision log in the study directory), runs the remaining batches
and stops where the rule says. How the kill is survived is test_driver_killed.py's subject;
this test is about what a sequential study adds: the searcher's state and its log."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import polars as pl
import pytest
from harness_support import (
    TINY,
    all_runs,
    end_session,
    result_reports,
    run_harness,
    start_driver,
    tune_trial_states,
    wait_until,
    write_spec,
)

from harness.studies.tune.sequential import DECISIONS_FILE, DecisionLog


def _decisions(storage: Path) -> list[dict]:
    logs = list(storage.glob(f"tiny/*/{DECISIONS_FILE}"))
    return DecisionLog.parse(logs[0].read_text())["decisions"] if logs else []


@pytest.mark.slow
def test_sequential_study_killed_mid_batch_resumes_with_its_decisions(
    tmp_path: Path, shared_data_dir: Path, local_ray: None
) -> None:
    # baseline vs ega, seeds 0-1 first, then one seed at a time up to 3; a precision no
    # interval reaches: decisions after 2 (continue), 3 (continue) and 4 seeds (stop: max).
    # One trial at a time, so that the kill lands inside the second batch. The test sees a
    # trial finish in Tune's snapshot, which is uploaded at the next checkpoint: 40 steps with
    # an evaluation (and checkpoint) every 5 make that upload come early in the next trial,
    # long before it ends and the second decision is taken (at 10 steps CI once saw both).
    spec = write_spec(
        tmp_path / "spec.yaml",
        seeds={"min": 2, "max": 4, "batch": 1},
        stop_when={"precision": 1e-9},
        analysis={"primary": {"treatment": "ega", "control": "baseline"}},
        max_concurrent_trials=1,
        train={**TINY["train"], "max_steps": 40},
    )
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    storage = tmp_path / "results"
    args = ["run", str(spec), "--tracking-uri", uri, "--storage-path", str(storage)]
    driver = start_driver(*args, cwd=tmp_path, log=tmp_path / "killed.log")
    second_batch = {"baseline_s2_nano_T32_tinyshakespeare", "ega_s2_nano_T32_tinyshakespeare"}
    try:
        # Mid-batch: the first decision is logged and one trial of the second batch finished.
        wait_until(
            lambda: (
                _decisions(storage) and any(tune_trial_states(storage).get(t) == "TERMINATED" for t in second_batch)
            ),
            timeout=600,
            what="the first decision and a finished trial of the second batch",
        )
        os.kill(driver.pid, signal.SIGKILL)
        assert driver.wait(timeout=30) == -signal.SIGKILL
    finally:
        end_session(driver.pid)

    (study_dir,) = [p.parent for p in storage.glob("tiny/*/harness_study.json")]
    before = _decisions(storage)
    assert [d["action"] for d in before] == ["continue"], before
    at_kill = tune_trial_states(storage)
    done_before = sorted(t for t, s in at_kill.items() if s == "TERMINATED")
    assert len(done_before) >= 5 and not (study_dir / "results.parquet").exists(), at_kill
    reports_before = result_reports(study_dir)

    resumed = run_harness(*args, "--resume", cwd=tmp_path, timeout=600)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "- resuming" in resumed.stdout and "Study tiny finished" in resumed.stdout, resumed.stdout[-3000:]
    assert "sequential: max seeds reached (4)" in resumed.stdout

    # The decision taken before the kill is kept as it was (not taken again), then the rest.
    after = _decisions(storage)
    assert after[0] == before[0]
    assert [(d["seeds_scheduled"], d["action"], d["stopped_by"]) for d in after] == [
        (2, "continue", None),
        (3, "continue", None),
        (4, "stop", "max"),
    ]
    # Finished trials did not run again; every scheduled trial ran exactly once in Tune.
    reports_after = result_reports(study_dir)
    assert {t: reports_after[t] for t in done_before} == {t: reports_before[t] for t in done_before}
    assert len(reports_after) == 8
    table = pl.read_parquet(study_dir / "results.parquet")
    assert table.height == 8 and set(table.get_column("status")) == {"finished"}
    runs = all_runs(uri)
    parents = [r for r in runs if r.data.tags.get("harness.role") == "study"]
    assert len(parents) == 1 and len(runs) == 9  # one parent, one child per trial, none duplicated
    assert parents[0].data.metrics["sequential/n_seeds"] == 4 and parents[0].data.metrics["sequential/stopped_by"] == 3
