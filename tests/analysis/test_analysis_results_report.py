"""The results table from files and from a real MLflow store, the report (stand-alone
HTML, PNGs, tables, headline metrics), logging it to MLflow, and ``harness report``."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from numpy.testing import assert_allclose

from harness.analysis import (
    AnalysisSettings,
    find_study_run,
    interaction_contrast,
    results_frame,
    window_losses_frame,
)
from harness.analysis.results import at_reference_tau_init
from harness.analysis.results_types import format_interval
from harness.errors import InputError
from harness.report import build_report, log_report, parent_description
from harness.report.study import short_verdict
from harness.training.description import NOTE_TAG


# ----------------------------------------------------------------------------- results_frame
def test_results_frame_from_parquet_and_study_directory(tmp_path: Path, make_study) -> None:
    df = make_study(seeds=2)
    study_dir = tmp_path / "smoke"
    study_dir.mkdir()
    df.write_parquet(study_dir / "results.parquet")
    for source in (study_dir / "results.parquet", study_dir, str(study_dir)):
        got = results_frame(source)
        assert got.height == df.height and got["val_loss"].to_list() == df["val_loss"].to_list()
        assert got.schema["seed"] == pl.Int64
    assert results_frame(study_dir, study="synthetic").height == df.height
    with pytest.raises(InputError, match="other"):
        results_frame(study_dir, study="other")
    with pytest.raises(InputError, match="neither a parquet file nor a study directory"):
        results_frame(tmp_path / "missing.parquet")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="without results.parquet"):
        results_frame(tmp_path / "empty")
    (tmp_path / "bad.parquet").write_text("not parquet")
    with pytest.raises(InputError, match="cannot read"):
        results_frame(tmp_path / "bad.parquet")


def test_results_frame_from_a_real_mlflow_store(shared_mlflow_study) -> None:
    sqlite_tracking_uri, pid, df = shared_mlflow_study
    got = results_frame((sqlite_tracking_uri, "synthetic")).sort("variant", "seed")
    assert got.height == df.height
    assert find_study_run(sqlite_tracking_uri, "synthetic").info.run_id == pid
    expected = df.sort("variant", "seed")
    assert got["variant"].to_list() == expected["variant"].to_list()
    assert got["seed"].to_list() == expected["seed"].to_list() and got.schema["seed"] == pl.Int64
    assert got["context_length"].to_list() == expected["context_length"].to_list()
    assert got["status"].to_list() == expected["status"].to_list()
    finished = expected["status"] == "finished"
    assert_allclose(got["val_loss"].filter(finished).to_numpy(), expected["val_loss"].filter(finished).to_numpy())
    assert got.filter(pl.col("status") == "failed")["val_loss"].is_null().all()
    assert got["params"].filter(finished).to_list() == expected["params"].filter(finished).to_list()
    gated = got.filter(pl.col("tau_mean").is_not_null())
    assert_allclose(gated["tau_head_max"] - gated["tau_mean"], 0.03, atol=1e-9)
    assert got["tau_init"].is_null().all() and got["steps"].filter(finished).to_list() == [300] * int(finished.sum())
    # the same contrast from MLflow as from the table itself
    assert interaction_contrast(got, rng=0).estimate == pytest.approx(interaction_contrast(df, rng=0).estimate)
    windows = window_losses_frame(sqlite_tracking_uri, "synthetic")
    assert windows is not None and windows.height == 16 * int(finished.sum())
    assert {"variant", "seed", "window", "loss", "dataset"} <= set(windows.columns)
    with pytest.raises(InputError, match="synthetic"):  # the message lists the known studies
        results_frame(sqlite_tracking_uri, study="nope")


def test_results_frame_falls_back_to_the_parents_results_parquet(
    tmp_path: Path, shared_mlflow_study, make_study
) -> None:
    from mlflow import MlflowClient

    from harness.mlflow_client import ensure_experiment

    uri = shared_mlflow_study[0]
    client = MlflowClient(tracking_uri=uri)
    exp = ensure_experiment(client, uri, "table-only", deleted_hint="")  # artifacts beside the database
    run = client.create_run(exp, tags={"harness.role": "study", "harness.study": "table-only"})
    df = make_study(seeds=2).with_columns(pl.lit("table-only").alias("study"))
    df.write_parquet(tmp_path / "results.parquet")
    client.log_artifact(run.info.run_id, str(tmp_path / "results.parquet"))
    client.set_terminated(run.info.run_id)
    got = results_frame(uri, study="table-only")
    assert got.height == df.height and got["val_loss"].to_list() == df["val_loss"].to_list()


# ----------------------------------------------------------------------------- report
def _standalone(page: str) -> None:
    sources = re.findall(r"""(?:src|href)\s*=\s*['"]([^'"]*)['"]""", page)
    assert sources and all(s.startswith("data:image/png;base64,") for s in sources), sources[:3]
    assert "<link" not in page and "<script" not in page


def test_report_renders_from_a_synthetic_table(tmp_path: Path, make_study) -> None:
    df = make_study(seeds=5, contexts=(128, 256), sizes=(("nano", 10_000), ("small", 100_000)), rng=7)
    report = build_report(
        df,
        settings=AnalysisSettings(n_resamples=999),
        out_dir=tmp_path / "rep",
        mope_sigmas=np.exp(np.r_[np.zeros(20), np.full(20, 2.0)] + 0.1 * np.arange(40) % 0.3),
        corpus_info={"tinyshakespeare": {"content_fraction": 0.42, "mean_word_length": 4.1}},
    )
    page = report.html_path.read_text()
    _standalone(page)
    assert set(report.png_paths) >= {
        "forest",
        "interaction",
        "effects_vs_size",
        "effects_vs_context",
        "tau",
        "open_fraction",
        "mope_scales",
    }
    assert page.count("data:image/png;base64,") == len(report.png_paths)
    for path in report.files:
        assert path.is_file() and path.parent == tmp_path / "rep"
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in report.png_paths.values())
    effects = pl.read_parquet(report.table_paths["effects"])
    assert effects.height == 4 * 4 and "pvalue_holm" in effects.columns
    h = report.headline_metrics
    for key in (
        "superadditivity/estimate",
        "superadditivity/ci_low",
        "superadditivity/ci_high",
        "superadditivity/pvalue",
        "ega/gain/estimate",
        "ega/gain/ci_low",
        "mope/gain/estimate",
        "tau/mean",
        "tau/ci_low",
        "tau/ci_high",
        "tau/tost_pvalue",
        "open_fraction/gaussian_tail",
    ):
        assert key in h, key
    pooled = interaction_contrast(df, rng=0)
    assert h["superadditivity/estimate"] == pytest.approx(pooled.estimate)
    assert h["superadditivity/ci_low"] == pytest.approx(pooled.confidence_interval.low)
    assert (
        "interaction (superadd.)" in report.verdict_table
        and "superadditive (95% CI excludes 0)" in report.verdict_table
    )
    terminal = " ".join(report.verdict_table.split())  # verdicts wrapped under their rows
    assert "a new seed's" in terminal and "TOST p=" in terminal
    assert "1 - Phi(tau_h)" in report.markdown and "content-word fraction is 0.420" in report.markdown
    assert "## Verdicts" in report.markdown


def test_report_without_factorial_or_tau_skips_sections_with_notes(tmp_path: Path) -> None:
    df = pl.DataFrame(
        {
            "variant": ["baseline", "rope"] * 3,
            "seed": [0, 0, 1, 1, 2, 2],
            "val_loss": [1.5, 1.45, 1.52, 1.46, 1.49, 1.47],
        }
    )
    report = build_report(df, settings=AnalysisSettings(), out_dir=tmp_path / "r")
    assert any("interaction skipped" in n for n in report.notes)
    assert any("tau section skipped" in n for n in report.notes)
    assert "superadditivity/estimate" not in report.headline_metrics
    assert "rope" in pl.read_parquet(report.table_paths["effects"])["effect"][0]
    _standalone(report.html_path.read_text())
    single = build_report(
        pl.DataFrame(
            {
                "variant": ["baseline", "ega", "mope", "ega-mope"],
                "seed": [0] * 4,
                "val_loss": [1.4742, 1.3821, 1.5060, 1.3550],
            }
        ),
        out_dir=tmp_path / "s",
    )
    assert single.headline_metrics["superadditivity/estimate"] == pytest.approx(0.0589)
    assert "superadditivity/ci_low" not in single.headline_metrics
    assert "no test possible (1 seed)" in single.verdict_table


def test_tau_study_with_several_initial_values(tmp_path: Path, make_study) -> None:
    """Trials repeated per tau_init: contrasts refuse the ambiguous pairing (naming
    tau_init), the report says so and still tests tau, including across initial values."""
    df = pl.concat(
        [make_study(seeds=3, rng=i).with_columns(pl.lit(init).alias("tau_init")) for i, init in enumerate((0.0, 1.0))]
    )
    with pytest.raises(InputError, match="differ in tau_init"):
        interaction_contrast(df)
    report = build_report(df, out_dir=tmp_path / "tau")
    assert any("tau_init" in n for n in report.notes)
    assert "tau/tost_pvalue" in report.headline_metrics
    het = pl.read_parquet(report.table_paths["tau_heterogeneity"])
    assert "tau_init" in het["factor"].to_list()


def test_report_bad_input(tmp_path: Path, make_study) -> None:
    with pytest.raises(InputError, match="val_los"):
        build_report(make_study(seeds=2), settings=AnalysisSettings(metric="val_los"), out_dir=tmp_path / "x")
    with pytest.raises(InputError, match="empty"):
        build_report(make_study(seeds=2).head(0), out_dir=tmp_path / "y")
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()
    with pytest.raises(InputError, match="unknown key"):
        AnalysisSettings.from_mapping({"factorial": {"base": "baseline", "c": "x"}})
    s = AnalysisSettings.from_mapping(
        {"factorial": {"base": "b0", "a": "a1", "b": "b1", "ab": "ab1"}, "tau": {"reference": 0.3, "margin": 0.1}}
    )
    assert (s.base, s.ab, s.tau_reference, s.tau_margin) == ("b0", "ab1", 0.3, 0.1)


def test_log_report_to_mlflow_and_read_it_back(
    tmp_path: Path, sqlite_tracking_uri: str, make_study, mlflow_study
) -> None:
    from mlflow import MlflowClient

    df = make_study(seeds=3)
    pid = mlflow_study(sqlite_tracking_uri, df)
    report = build_report(df, settings=AnalysisSettings(n_resamples=999), out_dir=tmp_path / "rep")
    log_report(report, run_id=pid, tracking_uri=sqlite_tracking_uri)
    client = MlflowClient(tracking_uri=sqlite_tracking_uri)
    names = {Path(f.path).name for f in client.list_artifacts(pid, "report")}
    assert {"report.html", "summary.md", "forest.png", "tau.png", "effects.parquet"} <= names
    metrics = client.get_run(pid).data.metrics
    for key in ("superadditivity/estimate", "superadditivity/ci_low", "tau/mean", "tau/tost_pvalue"):
        assert metrics[key] == pytest.approx(report.headline_metrics[key])
    local = client.download_artifacts(pid, "report/report.html", str(tmp_path / "dl"))
    _standalone(Path(local).read_text())
    # The parent run's page opens on the verdict table, with the link to the full report.
    run = client.get_run(pid)
    link = f"#/experiments/{run.info.experiment_id}/runs/{pid}/artifacts/report/report.html"
    link += "?workflowType=machine_learning"  # MLflow 3's "Model training" view
    note = run.data.tags[NOTE_TAG]
    assert note == parent_description(report, report_link=link)
    # the table alone, short enough that MLflow shows it unfolded; its first header links the report
    assert note.startswith(f"| effect ([full report]({link})) | estimate, 3 seeds | 95% CI | verdict |\n")
    rows = [line for line in note.splitlines() if line.startswith("| ")][2:]
    assert len(rows) == len(report.verdicts)
    for row, v in zip(rows, report.verdicts, strict=True):
        # the primary row marked by its * only: bold means settled (the verdict cell), never the row
        assert row.startswith(f"| {v.effect} \\* |" if v.role == "primary" else f"| {v.effect} |"), row
        assert f" | {format_interval(v.confidence_interval, v.signed, 4)} | " in row
        assert short_verdict(v.verdict) in row.rsplit(" | ", 1)[1] and "—" not in row  # the claim, in one line
    with pytest.raises(InputError, match="no MLflow run"):
        log_report(report, run_id="0" * 32, tracking_uri=sqlite_tracking_uri)


# ----------------------------------------------------------------------------- CLI
def test_harness_report_command_logs_to_the_parent_run(tmp_path: Path, shared_mlflow_study, capsys) -> None:
    from mlflow import MlflowClient

    from harness.cli import main

    sqlite_tracking_uri, pid, df = shared_mlflow_study
    client = MlflowClient(tracking_uri=sqlite_tracking_uri)
    client.set_tag(pid, NOTE_TAG, "stale description")
    with pytest.raises(SystemExit) as exit_info:
        main(["report", "synthetic", "--tracking-uri", sqlite_tracking_uri, "--out", str(tmp_path / "out")])
    assert exit_info.value.code in (0, None)
    out = capsys.readouterr().out
    assert "interaction (superadd.)" in out and pid in out
    assert (tmp_path / "out" / "report.html").is_file()
    assert (tmp_path / "out" / "multi_bootstrap.parquet").is_file()
    run = client.get_run(pid)
    assert "superadditivity/estimate" in run.data.metrics
    assert any(f.path == "report/report.html" for f in client.list_artifacts(pid, "report"))
    # `harness report` rewrote the parent's description from the recomputed verdicts
    note = run.data.tags[NOTE_TAG]
    assert note.startswith("| effect ([full report](") and "| estimate, 3 seeds |" in note and "stale" not in note
    verdicts = pl.read_parquet(tmp_path / "out" / "verdicts.parquet")
    rows = [line for line in note.splitlines() if line.startswith("| ")][2:]
    assert len(rows) == verdicts.height
    for row, effect in zip(rows, verdicts["effect"], strict=True):
        assert row.startswith((f"| {effect} |", f"| {effect} \\* |")), row
    link = f"#/experiments/{run.info.experiment_id}/runs/{pid}/artifacts/report/report.html"
    assert f"({link}?workflowType=machine_learning)" in note
    # --from a results table, no MLflow store at the default URI: nothing is created there
    df.write_parquet(tmp_path / "results.parquet")
    windows = df.filter(pl.col("status") == "finished").select(
        "variant", "seed", "dataset", "size", "context_length", "val_loss"
    )
    windows = pl.concat(
        [
            windows.with_columns(
                pl.lit(w).alias("window"), pl.lit("val").alias("split"), (pl.col("val_loss") + 0.01 * w).alias("loss")
            )
            for w in range(4)
        ]
    )
    windows.write_parquet(tmp_path / "window_losses.parquet")
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "report",
                "synthetic",
                "--from",
                str(tmp_path / "results.parquet"),
                "--out",
                str(tmp_path / "o2"),
                "--tracking-uri",
                f"sqlite:///{tmp_path / 'absent.db'}",
            ]
        )
    assert exit_info.value.code in (0, None)
    assert not (tmp_path / "absent.db").exists() and (tmp_path / "o2" / "report.html").is_file()
    assert (tmp_path / "o2" / "multi_bootstrap.parquet").is_file()  # the window losses beside results.parquet


def test_harness_report_bad_input_exits_2(tmp_path: Path, shared_mlflow_study, capsys) -> None:
    from harness.cli import main

    sqlite_tracking_uri = shared_mlflow_study[0]
    cases = [
        (["report", "synthetic", "--from", str(tmp_path / "none.parquet")], "none.parquet"),
        (["report", "synthetic", "--tracking-uri", f"sqlite:///{tmp_path / 'absent.db'}"], "no MLflow database"),
        (["report", "nope", "--tracking-uri", sqlite_tracking_uri], "no study named 'nope'"),
    ]
    for args, needle in cases:
        with pytest.raises(SystemExit) as exit_info:
            main([*args, "--out", str(tmp_path / "out")])
        assert exit_info.value.code == 2, args
        err = capsys.readouterr().err
        assert "error:" in err and needle in err, err
    assert not (tmp_path / "out").exists() and not (tmp_path / "absent.db").exists()


def test_importing_the_report_command_is_light() -> None:
    code = (
        "import sys, harness.analysis, harness.studies.cli; "
        "heavy = [m for m in ('mlflow', 'matplotlib', 'scipy', 'statsmodels', 'sklearn', 'ray', 'torch') "
        "if m in sys.modules]; "
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_tau_sweep_reads_its_contrasts_at_the_default_initial_value(tmp_path: Path, make_study) -> None:
    """ega swept over tau_init -0.5, 0, 0.7 beside unswept controls: the contrasts pair the
    runs at tau_init 0 (no duplicate runs per seed), tau's section reads them all."""
    df = make_study(seeds=4, rng=3)
    ega = df.filter(pl.col("variant") == "ega")
    others = df.filter(pl.col("variant") != "ega").with_columns(pl.lit(None, dtype=pl.Float64).alias("tau_init"))
    swept = [ega.with_columns(pl.lit(v).alias("tau_init"), pl.col("val_loss") + 0.5 * v) for v in (-0.5, 0.0, 0.7)]
    table = pl.concat([others, *swept], how="diagonal_relaxed")
    paired, reference = at_reference_tau_init(table)
    assert reference == 0.0 and paired.height == df.height
    report = build_report(table, settings=AnalysisSettings(n_resamples=199), out_dir=tmp_path / "rep")
    pooled = interaction_contrast(paired, rng=0)
    assert report.headline_metrics["superadditivity/estimate"] == pytest.approx(pooled.estimate)
    assert any("tau's initial value is swept" in note for note in report.notes)
    assert at_reference_tau_init(df.drop("tau_init", strict=False))[1] is None
