"""Divergence: a trial whose training loss becomes NaN ends as ``diverged`` (not retried,
not failed), is recorded as such in MLflow and in the results table, its seed block is
dropped from the paired contrasts and counted, and the report names it.

The NaN is injected with the test-only setting ``HARNESS_FAULT_NAN_TRIALS=<trial id>@<step>``
(:mod:`harness.studies.tune.fault_injection`), read in the trial's own process: the study runs
as ``harness run`` in a subprocess whose embedded Ray inherits it. From that step on the
trial's weights hold NaN, so its loss is NaN exactly as in a real divergence, and the
training loop's own check has to catch it."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from harness_support import run_harness, write_spec
from mlflow import MlflowClient

from harness.errors import InputError
from harness.studies.tune.fault_injection import FAULT_DIR_ENV, KILL_AT_STEP_ENV, kill_at_step, nan_trials

DIVERGING = "ega_s1_nano_T32_tinyshakespeare"


@pytest.mark.slow
def test_diverged_trial_is_recorded_and_excluded_from_contrasts(tmp_path: Path, shared_data_dir: Path) -> None:
    write_spec(tmp_path / "spec.yaml", variants=["baseline", "ega"], seeds=3)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    done = run_harness(
        "run",
        "spec.yaml",
        "--tracking-uri",
        uri,
        "--storage-path",
        str(tmp_path / "results"),
        cwd=tmp_path,
        env={"HARNESS_FAULT_NAN_TRIALS": f"{DIVERGING}@4"},
        timeout=900,
    )
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-4000:]  # a divergence is a result, not a failure
    assert "Study tiny finished" in done.stdout and "5 finished, 1 diverged" in done.stdout, log[-4000:]
    assert "DIVERGED" in done.stdout and DIVERGING in done.stdout
    (study_dir,) = [p.parent for p in (tmp_path / "results" / "tiny").glob("*/harness_study.json")]

    # The results table: the trial's row says diverged, stopped early, no loss to compare.
    rows = {r["trial_id"]: r for r in pl.read_parquet(study_dir / "results.parquet").iter_rows(named=True)}
    bad = rows[DIVERGING]
    assert bad["status"] == "diverged" and bad["steps"] < 10
    assert bad["val_loss"] is None or math.isnan(bad["val_loss"])
    assert all(r["status"] == "finished" and math.isfinite(r["val_loss"]) for t, r in rows.items() if t != DIVERGING)

    # MLflow: one child per trial; the diverged one ended (not failed, not retried), tagged diverged.
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("tiny").experiment_id
    runs = client.search_runs([experiment])
    children = {r.data.tags["harness.trial_id"]: r for r in runs if r.data.tags.get("harness.role") == "trial"}
    assert sorted(children) == sorted(rows)
    child = children[DIVERGING]
    assert child.data.tags["status"] == "diverged" and child.info.status == "FINISHED"
    assert "harness.retries" not in child.data.tags  # a divergence is a result, not a fault to retry
    assert all(c.data.tags["status"] == "finished" for t, c in children.items() if t != DIVERGING)
    (parent,) = [r for r in runs if r.data.tags.get("harness.role") == "study"]
    headline = parent.data.metrics
    assert headline["trials/diverged"] == 1 and headline["trials/finished"] == 5

    # The paired contrast drops seed 1's block and counts it: the EGA gain is the mean over
    # seeds 0 and 2 of L_baseline - L_ega (the oracle, from the table).
    gains = [
        rows[f"baseline_s{s}_nano_T32_tinyshakespeare"]["val_loss"]
        - rows[f"ega_s{s}_nano_T32_tinyshakespeare"]["val_loss"]
        for s in (0, 2)
    ]
    assert headline["ega/gain/n_dropped"] == 1 and headline["ega/gain/n_seeds"] == 2
    np.testing.assert_allclose(headline["ega/gain/estimate"], np.mean(gains), rtol=1e-12)

    # The report says so, in the markdown and in the HTML logged to the parent run.
    text = f"diverged: 1 trial(s), excluded from the paired contrasts: {DIVERGING}"
    markdown = (study_dir / "report" / "summary.md").read_text()
    assert text in markdown
    assert "dropped 1 incomplete seed block(s) (seed 1)" in markdown
    assert "status: diverged=1, finished=5" in markdown
    html_path = client.download_artifacts(parent.info.run_id, "report/report.html", str(tmp_path / "dl"))
    assert text in Path(html_path).read_text()


def test_nan_fault_setting_is_checked_against_the_grid() -> None:
    """The test-only setting names trials of the study (a typo would silently inject nothing)."""
    known = {DIVERGING, "baseline_s0_nano_T32_tinyshakespeare"}
    assert nan_trials("", known) == {}
    assert nan_trials(f"{DIVERGING}@4, baseline_s0_nano_T32_tinyshakespeare", known) == {
        DIVERGING: 4,
        "baseline_s0_nano_T32_tinyshakespeare": 1,
    }
    with pytest.raises(InputError, match="no trial 'ega_s9_nano_T32_tinyshakespeare' in this study"):
        nan_trials("ega_s9_nano_T32_tinyshakespeare", known)
    with pytest.raises(InputError, match="non-negative integer"):
        nan_trials(f"{DIVERGING}@x", known)


def test_the_kill_fault_needs_its_marker_folder(tmp_path: Path) -> None:
    assert kill_at_step({}) is None
    assert kill_at_step({KILL_AT_STEP_ENV: "7", FAULT_DIR_ENV: str(tmp_path)}) == (7, tmp_path)
    with pytest.raises(InputError, match=FAULT_DIR_ENV):
        kill_at_step({KILL_AT_STEP_ENV: "7"})
    with pytest.raises(InputError, match="non-negative integer"):
        kill_at_step({KILL_AT_STEP_ENV: "seven", FAULT_DIR_ENV: str(tmp_path)})


def test_the_runner_knows_nothing_of_faults() -> None:
    """Fault injection is the trainable's business alone (its callbacks): no other module of a
    study names a fault setting or hook (``fault_...``, ``HARNESS_FAULT_...``)."""
    studies = Path(__file__).resolve().parents[2] / "harness" / "studies"
    named = re.compile(r"\bfault_|HARNESS_FAULT")
    mentions = [
        p.relative_to(studies).as_posix()
        for p in sorted(studies.rglob("*.py"))
        if named.search(p.read_text(encoding="utf-8"))
    ]
    assert mentions == ["tune/fault_injection.py", "tune/trainable.py"]
