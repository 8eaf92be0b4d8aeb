"""End to end, as a user: the README's main command in a clean working directory, then the
MLflow UI in a real browser (headless Chromium driven by Playwright) showing the study's
report.

1. `harness run studies/smoke.yaml` (the README's command, verbatim: default tracking
   store ./mlflow.db, default storage ./results) leaves one parent MLflow run with 8 child
   runs, each finished with its final validation loss, the results table and the report.
2. `harness ui --port P` serves that store on 127.0.0.1 only.
3. In Chromium: the parent run's page (the URL the study printed), its Artifacts tab,
   report/report.html (MLflow shows it in a sandboxed iframe) with the report's title and
   the superadditivity verdict; the artifact's own URL shows the same page. Screenshots
   are saved in the test's temporary directory (their paths are printed).

This is the slow suite's only run of the smoke study (about 4 minutes on 2 cores)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import polars as pl
import pytest
from harness_support import REPO, cli_env, free_port, stop_session, warning_lines
from mlflow import MlflowClient

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def _harness() -> list[str]:
    """The `harness` command as installed (the README's), else the module."""
    found = shutil.which("harness")
    return [found] if found else [sys.executable, "-m", "harness.cli"]


@pytest.mark.slow
def test_readme_command_then_the_report_in_the_mlflow_ui(tmp_path: Path, shared_data_dir: Path) -> None:
    work = tmp_path / "work"  # a clean working directory with the study file, as after a checkout
    (work / "studies").mkdir(parents=True)
    shutil.copy(REPO / "studies" / "smoke.yaml", work / "studies" / "smoke.yaml")
    env = cli_env({"HARNESS_CACHE_DIR": str(tmp_path / "cache")})

    # -- 1. the README's main command ------------------------------------------------------
    started = time.perf_counter()
    out = subprocess.run(
        [*_harness(), "run", "studies/smoke.yaml"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        start_new_session=True,
    )
    wall = time.perf_counter() - started
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    print(f"smoke study: {wall:.0f} s wall")
    assert "Study smoke: 8 trials (4 variants x 2 seeds x nano x tinyshakespeare x T=128), 1 CPU each" in out.stdout
    assert "interaction (superadd.)" in out.stdout  # the report's verdicts are printed
    assert not warning_lines(out.stdout + out.stderr), out.stderr[-3000:]
    assert sorted(p.name for p in work.iterdir()) == ["mlartifacts", "mlflow.db", "results", "studies"]
    ui_line = next(line for line in out.stdout.splitlines() if line.startswith("View it: "))
    assert ui_line.startswith("View it: harness ui  ->  http://127.0.0.1:5000/#/experiments/"), ui_line
    assert ui_line.endswith("?workflowType=machine_learning"), ui_line  # MLflow 3's "Model training" view

    uri = f"sqlite:///{work / 'mlflow.db'}"
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("smoke").experiment_id])
    parents = [r for r in runs if r.data.tags.get("harness.role") == "study"]
    children = [r for r in runs if r.data.tags.get("harness.role") == "trial"]
    assert len(parents) == 1 and len(children) == 8
    parent = parents[0]
    assert parent.info.run_id in ui_line and parent.info.status == "FINISHED"
    assert all(c.data.tags["mlflow.parentRunId"] == parent.info.run_id for c in children)
    assert all("final/val_loss" in c.data.metrics and c.info.status == "FINISHED" for c in children)
    # A trial's page opens on its description and names its corpus; the parent declares the set.
    trial = client.get_run(children[0].info.run_id)
    assert trial.data.tags["mlflow.note.content"].startswith(f"### {trial.data.tags['variant']} - seed ")
    assert [d.dataset.name for d in trial.inputs.dataset_inputs] == ["tinyshakespeare"]
    assert [d.dataset.name for d in client.get_run(parent.info.run_id).inputs.dataset_inputs] == ["tinyshakespeare"]
    files = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"spec.yaml", "results.parquet", "report"} <= files
    assert "report/report.html" in {a.path for a in client.list_artifacts(parent.info.run_id, "report")}
    assert "superadditivity/estimate" in parent.data.metrics
    (table,) = list((work / "results" / "smoke").glob("*/results.parquet"))
    df = pl.read_parquet(table)
    assert df.height == 8 and set(df["status"]) == {"finished"}
    assert df["val_loss"].max() < 3.0  # it trained: a 65-character vocabulary starts at ln(65) = 4.17 nats
    verdicts = pl.read_parquet(table.parent / "report" / "verdicts.parquet")
    (superadditivity,) = verdicts.filter(pl.col("effect") == "interaction (superadd.)")["verdict"].to_list()

    # -- 2. `harness ui` on loopback --------------------------------------------------------
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is absent (Debian package `chromium`; .ci/run installs it): browser part not run")
    playwright = pytest.importorskip("playwright.sync_api", reason="playwright (the [test] extra) is not installed")
    port = free_port()
    ui = subprocess.Popen(
        [*_harness(), "ui", "--port", str(port)],
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{base}/health", timeout=2):
                    break
            except OSError:
                assert ui.poll() is None and time.monotonic() < deadline, "harness ui did not come up"
                time.sleep(0.5)
        listening = subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True).stdout
        assert listening.strip() and all(line.split()[3] == f"127.0.0.1:{port}" for line in listening.splitlines()), (
            listening
        )

        # -- 3. the report in Chromium ---------------------------------------------------------
        run_url = ui_line.split("->", 1)[1].strip().replace("http://127.0.0.1:5000", base)
        shots = []
        with playwright.sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 1100})
                page.goto(run_url)
                page.get_by_text(parent.info.run_name, exact=True).first.wait_for(timeout=60_000)
                close = page.get_by_role("button", name="Close")  # MLflow's assistant panel, if shown
                if close.count():
                    close.first.click()
                page.get_by_text("Artifacts", exact=True).first.click()
                page.get_by_text("report", exact=True).first.click()
                page.get_by_text("report.html", exact=True).first.click()
                report = page.frame_locator("iframe")  # MLflow's sandboxed preview of an HTML artifact
                report.get_by_text("Study report: smoke").wait_for(timeout=60_000)
                shown = report.locator("body").inner_text()
                assert "interaction (superadd.)" in shown and superadditivity in shown, shown[:3000]
                page.wait_for_timeout(1000)  # let the preview paint
                shots.append(tmp_path / "mlflow-ui-report.png")
                page.screenshot(path=str(shots[-1]))

                # The artifact's own URL (MLflow serves it as a download): the same self-contained
                # page, opened on its own, plots included.
                served = page.request.get(f"{base}/get-artifact?path=report/report.html&run_uuid={parent.info.run_id}")
                assert served.ok, served.status
                page.set_content(served.text())
                page.get_by_text("Study report: smoke").first.wait_for(timeout=30_000)
                text = page.locator("body").inner_text()
                assert "interaction (superadd.)" in text and superadditivity in text
                images = page.locator("img")
                assert images.count() >= 2 and all(
                    (images.nth(i).get_attribute("src") or "").startswith("data:image/png")
                    for i in range(images.count())
                )
                assert page.evaluate("Array.from(document.images).every(i => i.complete && i.naturalWidth > 0)")
                shots.append(tmp_path / "report-artifact.png")
                page.screenshot(path=str(shots[-1]), full_page=True)
            finally:
                browser.close()
        for shot in shots:
            assert shot.stat().st_size > 10_000
            print(f"screenshot: {shot}")
    finally:
        stop_session(ui, grace=10)
