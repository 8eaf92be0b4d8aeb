"""Divergence: a trial whose training loss becomes NaN ends as ``diverged`` (not retried,
not failed), is recorded as such in MLflow and in the results table, its seed block is
dropped from the paired contrasts and counted, and the report names it.

The NaN is injected with the chaos campaign's trial faults
(:class:`harness.bench.chaos.trial_faults.TrialFaults`, ``nan_from_step={trial id: step}``),
handed to ``run_study`` and called in the trial's own process. From that step on the trial's
weights hold NaN, so its loss is NaN exactly as in a real divergence, and the training loop's
own check has to catch it."""

from __future__ import annotations

import io
import math
import pickle
import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from harness_support import write_spec
from mlflow import MlflowClient

from harness.bench.chaos.trial_faults import TrialFaults
from harness.errors import InputError
from harness.studies.runner import run_study

DIVERGING = "ega_s1_nano_T32_tinyshakespeare"


@pytest.mark.slow
def test_diverged_trial_is_recorded_and_excluded_from_contrasts(
    tmp_path: Path, shared_data_dir: Path, local_ray: None
) -> None:
    spec = write_spec(tmp_path / "spec.yaml", variants=["baseline", "ega"], seeds=3)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    stream = io.StringIO()
    done = run_study(
        spec,
        tracking_uri=uri,
        storage_path=str(tmp_path / "results"),
        trial_callbacks=TrialFaults(nan_from_step={DIVERGING: 4}),
        stream=stream,
        live=False,
    )
    log = stream.getvalue()
    assert done.status == "finished" and not done.counts.get("failed"), log[-4000:]  # a result, not a failure
    assert "Study tiny finished" in log and "5 finished, 1 diverged" in log, log[-4000:]
    assert "DIVERGED" in log and DIVERGING in log
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


def test_the_nan_fault_is_checked_against_the_grid() -> None:
    """A trial the NaN fault names must be one of the study's (a typo would silently inject
    nothing): every trial of such a study fails, naming it; a trial it does not name gets no
    callback."""
    known = {DIVERGING, "baseline_s0_nano_T32_tinyshakespeare"}
    faults = TrialFaults(nan_from_step={DIVERGING: 4, "baseline_s0_nano_T32_tinyshakespeare": 1})
    assert [type(c).__name__ for c in faults(DIVERGING, known)] == ["NanWeights"]
    assert TrialFaults()(DIVERGING, known) == []
    assert TrialFaults(nan_from_step={DIVERGING: 4})("baseline_s0_nano_T32_tinyshakespeare", known) == []
    with pytest.raises(InputError, match="no trial 'ega_s9_nano_T32_tinyshakespeare' in this study"):
        TrialFaults(nan_from_step={"ega_s9_nano_T32_tinyshakespeare": 4})(DIVERGING, known)
    with pytest.raises(InputError, match="non-negative integer"):
        TrialFaults(nan_from_step={DIVERGING: -1})


def test_the_faults_travel_to_the_trials_by_pickle_and_nan_the_weights_from_their_step(tmp_path: Path) -> None:
    """What ``run_study`` hands on reaches each trial pickled (``tune.with_parameters``); there
    the NaN callback leaves the weights alone before its step and fills the first parameter with
    NaN from it on."""
    from types import SimpleNamespace

    import torch

    faults = TrialFaults(nan_from_step={DIVERGING: 4}, kill_at_step=7, marker_dir=tmp_path)
    travelled = pickle.loads(pickle.dumps(faults))
    assert travelled == faults
    nan, _kill = travelled(DIVERGING, {DIVERGING})
    module = torch.nn.Linear(2, 2)
    for step, expect_nan in ((3, False), (4, True)):
        nan.on_train_batch_start(SimpleNamespace(global_step=step), module, None, 0)
        assert bool(torch.isnan(module.weight).all()) is expect_nan
        assert not torch.isnan(module.bias).any()


def test_the_kill_fault_needs_its_marker_folder(tmp_path: Path) -> None:
    (kill,) = TrialFaults(kill_at_step=7, marker_dir=tmp_path)(DIVERGING, {DIVERGING})
    assert type(kill).__name__ == "KillOnce"
    with pytest.raises(InputError, match="marker_dir"):
        TrialFaults(kill_at_step=7)
    with pytest.raises(InputError, match="non-negative integer"):
        TrialFaults(kill_at_step=-7, marker_dir=tmp_path)


def test_no_module_of_the_package_reads_a_fault_setting() -> None:
    """Faults are a callback the chaos campaign (or a test) hands to ``run_study``, never a
    ``HARNESS_FAULT_*`` variable every trial reads (issue 42's done-when); a study's modules
    name no fault hook (``fault_...``): they hand the trials' callbacks on, whatever they are."""
    package = Path(__file__).resolve().parents[2] / "harness"
    sources = {p.relative_to(package).as_posix(): p.read_text(encoding="utf-8") for p in package.rglob("*.py")}
    assert [p for p, text in sources.items() if "HARNESS_FAULT" in text] == []
    named = re.compile(r"\bfault_")
    assert [p for p, text in sources.items() if p.startswith("studies/") and named.search(text)] == []
