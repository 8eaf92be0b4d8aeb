"""Divergence: a trial whose training loss becomes NaN ends as ``diverged`` (not retried,
not failed), is recorded as such in MLflow and in the results table, its seed block is
dropped from the paired contrasts and counted, and the report names it.

The NaN is injected with the test-only setting ``HARNESS_FAULT_NAN_TRIALS=<trial id>@<step>``:
from that step on the trial's weights hold NaN, so its loss is NaN exactly as in a real
divergence, and the training loop's own check has to catch it."""

from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np
import pytest
from harness_support import write_spec
from mlflow import MlflowClient

from harness.studies.runner import run_study

DIVERGING = "ega_s1_nano_T32_tinyshakespeare"


@pytest.mark.slow
def test_diverged_trial_is_recorded_and_excluded_from_contrasts(
    tmp_path: Path, shared_data_dir: Path, local_ray: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = write_spec(tmp_path / "spec.yaml", variants=["baseline", "ega"], seeds=3)
    monkeypatch.setenv("HARNESS_FAULT_NAN_TRIALS", f"{DIVERGING}@4")
    stream = io.StringIO()
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    outcome = run_study(spec, tracking_uri=uri, storage_path=str(tmp_path / "results"), stream=stream, live=False)
    log = stream.getvalue()
    assert outcome.status == "finished", log
    assert outcome.counts == {"finished": 5, "diverged": 1, "failed": 0, "incomplete": 0}
    assert "DIVERGED" in log and DIVERGING in log

    # The results table: the trial's row says diverged, stopped early, no loss to compare.
    table = outcome.results
    rows = {r["trial_id"]: r for r in table.iter_rows(named=True)}
    bad = rows[DIVERGING]
    assert bad["status"] == "diverged" and bad["steps"] < 10
    assert bad["val_loss"] is None or math.isnan(bad["val_loss"])
    assert all(r["status"] == "finished" and math.isfinite(r["val_loss"]) for t, r in rows.items() if t != DIVERGING)

    # MLflow: one child per trial; the diverged one ended (not failed, not retried), tagged diverged.
    client = MlflowClient(uri)
    children = {
        r.data.tags["harness.trial_id"]: r
        for r in client.search_runs([outcome.experiment_id])
        if r.data.tags.get("harness.role") == "trial"
    }
    assert sorted(children) == sorted(rows)
    child = children[DIVERGING]
    assert child.data.tags["status"] == "diverged" and child.info.status == "FINISHED"
    assert "harness.retries" not in child.data.tags  # a divergence is a result, not a fault to retry
    assert all(c.data.tags["status"] == "finished" for t, c in children.items() if t != DIVERGING)
    parent = client.get_run(outcome.parent_run_id)
    assert parent.data.metrics["trials/diverged"] == 1 and parent.data.metrics["trials/finished"] == 5

    # The paired contrast drops seed 1's block and counts it: the EGA gain is the mean over
    # seeds 0 and 2 of L_baseline - L_ega (the oracle, from the table).
    report = outcome.report
    assert report is not None, log
    gains = [
        rows[f"baseline_s{s}_nano_T32_tinyshakespeare"]["val_loss"]
        - rows[f"ega_s{s}_nano_T32_tinyshakespeare"]["val_loss"]
        for s in (0, 2)
    ]
    headline = report.headline_metrics
    assert headline["ega/gain/n_dropped"] == 1 and headline["ega/gain/n_seeds"] == 2
    np.testing.assert_allclose(headline["ega/gain/estimate"], np.mean(gains), rtol=1e-12)
    assert parent.data.metrics["ega/gain/n_dropped"] == 1

    # The report says so, in the markdown and in the HTML logged to the parent run.
    text = f"diverged: 1 trial(s), excluded from the paired contrasts: {DIVERGING}"
    assert text in report.markdown
    assert "dropped 1 incomplete seed block(s) (seed 1)" in report.markdown
    assert "status: diverged=1, finished=5" in report.markdown
    html_path = client.download_artifacts(outcome.parent_run_id, "report/report.html", str(tmp_path / "dl"))
    assert text in Path(html_path).read_text()


def test_nan_fault_setting_is_checked_against_the_grid(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The test-only setting names trials of the study (a typo would silently inject nothing)."""
    from harness.errors import InputError
    from harness.studies.runner import fault_nan_trials
    from harness.studies.spec.grid import expand_grid
    from harness.studies.spec.study_spec import load_spec

    trials = expand_grid(load_spec(write_spec(tmp_path / "spec.yaml")))
    monkeypatch.delenv("HARNESS_FAULT_NAN_TRIALS", raising=False)
    assert fault_nan_trials(trials) is None
    monkeypatch.setenv("HARNESS_FAULT_NAN_TRIALS", f"{DIVERGING}@4, baseline_s0_nano_T32_tinyshakespeare")
    assert fault_nan_trials(trials) == {DIVERGING: 4, "baseline_s0_nano_T32_tinyshakespeare": 1}
    monkeypatch.setenv("HARNESS_FAULT_NAN_TRIALS", "ega_s9_nano_T32_tinyshakespeare")
    with pytest.raises(InputError, match="no trial 'ega_s9_nano_T32_tinyshakespeare' in this study"):
        fault_nan_trials(trials)
    monkeypatch.setenv("HARNESS_FAULT_NAN_TRIALS", f"{DIVERGING}@x")
    with pytest.raises(InputError, match="non-negative integer"):
        fault_nan_trials(trials)
