"""What a new study shows first in MLflow, read in a browser (issue 41): a real tiny study (a 2x2
without a gate: four headline verdicts) recorded in a real MLflow server on 127.0.0.1, its pages
opened in headless Chromium at 1280 x 800 as MLflow first shows them (the assistant panel
closed, nothing unfolded):

- the parent run's description is its verdict table, whole: no "Show more", every row on screen,
  the full report one click away (the table's first header links it);
- a trial run's charts open on its training curves: every chart group before the last holds
  curves (more than one point), the end-of-run numbers (``final_val_loss`` ...) come last;
- the parent run holds each core effect and its 95 % band at every evaluation step
  (``effect/<claim>``, ``/lo``, ``/hi``), for MLflow's own charts, ending at the verdict (the last
  step's point is the verdict table's estimate and interval), and the figure of them
  (``report/effects_over_training.png``).
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import polars as pl
import pytest
import yaml
from harness_support import TINY, MlflowServer

from harness.report.effect_metrics import effect_claim
from harness.studies.runner import run_study

CHROMIUM = Path("/usr/bin/chromium")
WINDOW = {"width": 1280, "height": 800}
#: A 2x2 without a gate (lagged keys x MOPE): its report has four headline verdicts.
SPEC = {
    **TINY,  # 2 seeds x nano x T=32 x 10 steps, evaluated at 5 and 10
    "name": "first-view",
    "variants": [
        "baseline",
        {"name": "lagged", "position": "sinusoidal", "scoring": "lagged"},
        "mope",
        {"name": "mope-lagged", "position": "mope", "scoring": "lagged"},
    ],
    "analysis": {"factorial": {"base": "baseline", "a": "lagged", "b": "mope", "ab": "mope-lagged"}},
}
EFFECTS = ("superadditivity", "lagged-gain", "mope-gain", "mope-lagged-gain")


def _open(page, url: str, text: str) -> None:
    """``url`` as MLflow first shows it, once ``text`` is on the page, the assistant panel closed."""
    page.goto(url)
    page.get_by_text(text, exact=False).first.wait_for(timeout=120_000)
    close = page.get_by_role("button", name="Close")  # MLflow 3's assistant panel, when it shows
    if close.count() and close.first.is_visible():
        close.first.click(timeout=10_000)
    page.wait_for_timeout(1500)  # the layout settles (the description box measures its content)


def _names(claim: str) -> tuple[str, str, str]:
    """The parent run's metrics of one effect: its estimate and its band's ends."""
    return (f"effect/{claim}", f"effect/{claim}/lo", f"effect/{claim}/hi")


def _chart_groups(page) -> list[str]:
    """The chart groups of a run's "Model metrics" tab, in the order shown (``val (2)``: ``val``)."""
    lines = [line.strip() for line in page.inner_text("body").splitlines()]
    return [lines[i] for i in range(len(lines) - 1) if lines[i] and re.fullmatch(r"\(\d+\)", lines[i + 1])]


@pytest.mark.slow
def test_a_new_study_reads_at_first_sight_in_mlflow(tmp_path: Path, shared_data_dir: Path, local_ray: None) -> None:
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is absent (Debian package `chromium`; .ci/run installs it)")
    playwright = pytest.importorskip("playwright.sync_api", reason="playwright (the [test] extra) is not installed")
    spec = tmp_path / "first-view.yaml"
    spec.write_text(yaml.safe_dump(SPEC, sort_keys=False))
    server = MlflowServer(tmp_path / "mlflow").start()
    try:
        outcome = run_study(
            spec, tracking_uri=server.uri, storage_path=str(tmp_path / "results"), stream=io.StringIO(), live=False
        )
        assert outcome.status == "finished" and outcome.report is not None, outcome
        from mlflow import MlflowClient

        client = MlflowClient(server.uri)
        parent_id = outcome.parent_run_id
        steps = sorted(set(outcome.curves.get_column("step").to_list()))
        assert len(steps) >= 2, steps
        # The band is logged where the analysis has one: lagged scoring starts as dot and 10 steps
        # move the loss by about 1e-8, so its gain can be 0.0 in every seed (float32 curves) and
        # then has no t-interval; the estimate is logged at every step.
        # The last step's point is the verdict's (the final evaluation's windows), the band there its interval.
        effects = pl.read_parquet(outcome.report.table_paths["effects_over_training"])  # what was logged from
        verdicts = {v.effect.replace(" gain", "-gain"): v for v in outcome.report.verdicts}
        verdicts["superadditivity"] = verdicts["interaction (superadd.)"]
        banded_steps = {}
        for claim in EFFECTS:
            history = {n: {m.step: m.value for m in client.get_metric_history(parent_id, n)} for n in _names(claim)}
            assert sorted(history[f"effect/{claim}"]) == steps, claim
            assert history[f"effect/{claim}"][steps[-1]] == verdicts[claim].estimate, claim
            rows = effects.filter(pl.col("effect").map_elements(effect_claim, return_dtype=pl.String) == claim)
            rows = rows.filter(pl.col("step") < steps[-1])
            banded = sorted(rows.filter(pl.col("ci_low").is_finite() & pl.col("ci_high").is_finite())["step"])
            ci = verdicts[claim].confidence_interval
            banded += [steps[-1]] if ci is not None else []
            lo, hi = history[f"effect/{claim}/lo"], history[f"effect/{claim}/hi"]
            assert sorted(lo) == sorted(hi) == banded, (claim, history)
            assert ci is None or (lo[steps[-1]], hi[steps[-1]]) == (ci.low, ci.high), claim
            banded_steps[claim] = banded
        assert banded_steps["mope-gain"] == steps  # a real effect has its band at every step
        figures = {f.path for f in client.list_artifacts(parent_id, "report")}
        assert "report/effects_over_training.png" in figures, figures
        child = client.search_runs(
            [outcome.experiment_id], filter_string=f"tags.`mlflow.parentRunId` = '{parent_id}'", max_results=1
        )[0]
        metrics = child.data.metrics
        curves = {k for k in metrics if "/" in k}
        assert curves and all(len(client.get_metric_history(child.info.run_id, k)) > 1 for k in curves)
        assert "final_val_loss" in metrics and not any(k.startswith("final/") for k in metrics)

        base = f"{server.uri}/#/experiments/{outcome.experiment_id}/runs"
        with playwright.sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu"])
            try:
                page = browser.new_page(viewport=WINDOW)
                _open(page, f"{base}/{parent_id}?workflowType=machine_learning", "full report")
                show_more = page.get_by_text("Show more", exact=True)
                folded = show_more.count() and show_more.first.is_visible()
                table = page.locator("table").filter(has_text="full report").first
                rows = table.locator("tr")
                boxes = [rows.nth(i).bounding_box() for i in range(rows.count())]
                _open(page, f"{base}/{child.info.run_id}/model-metrics?workflowType=machine_learning", "Add chart")
                groups = _chart_groups(page)
            finally:
                browser.close()
    finally:
        server.stop()
    assert not folded, "the parent's description is folded behind 'Show more'"
    assert len(boxes) == 1 + len(outcome.report.verdicts)  # the header and one row a verdict
    assert all(b is not None and 0 <= b["y"] and b["y"] + b["height"] <= WINDOW["height"] for b in boxes), boxes
    assert groups and groups[-1] == "Model metrics" and "final" not in groups, groups
