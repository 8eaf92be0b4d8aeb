"""A user's study reports on the user's variants (issue 43): the papers' tau reference (0.35 ±
0.05, a reference for EGA's gate) is not set against a user's gate, in the verdicts, the tau
section or the tau-over-training figure; a study that also holds the zoo's EGA keeps its tau row,
read over EGA's runs alone."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from harness.analysis.results_types import AnalysisSettings
from harness.report import build_report
from harness.report.sections_tau import user_gated_variants

USER_GATE = "novelty_gate:CosineNoveltyGate"


def _with_gates(df: pl.DataFrame, gates: dict[str, str]) -> pl.DataFrame:
    return df.with_columns(pl.col("variant").replace_strict(gates, default="none").alias("gate"))


def _curves(df: pl.DataFrame) -> pl.DataFrame:
    """Two evaluations per trial, tau and the loss as at the end."""
    return pl.concat([df.with_columns(step=pl.lit(s)) for s in (50, 100)]).select(
        "study", "trial_id", "dataset", "size", "context_length", "variant", "seed", "step", "val_loss", "tau_mean"
    )


def test_a_study_of_baseline_and_a_user_gate_gets_no_tau_row(tmp_path: Path, make_study) -> None:
    df = make_study(means={"baseline": 1.47, "mine-ega": 1.44}, seeds=4)  # "ega" in the name: tau logged
    df = _with_gates(df, {"mine-ega": USER_GATE})
    assert user_gated_variants(df) == ["mine-ega"]
    settings = AnalysisSettings(primary={"treatment": "mine-ega", "control": "baseline"})
    report = build_report(df, settings=settings, out_dir=tmp_path / "r", curves=_curves(df))
    assert [v.effect for v in report.verdicts if "tau" in v.effect] == []
    assert any("tau of mine-ega (a user's gate) is not set against the papers' 0.35 ± 0.05" in n for n in report.notes)
    assert "tau_over_training" not in report.png_paths and "tau" not in report.png_paths
    assert "0.35" not in " ".join(v.verdict for v in report.verdicts)


def test_a_study_with_the_zoos_ega_and_a_user_gate_reads_tau_over_egas_runs_alone(tmp_path: Path, make_study) -> None:
    df = make_study(means={"baseline": 1.47, "ega": 1.40, "mine-ega": 1.44}, seeds=4)
    df = _with_gates(df, {"ega": "ega", "mine-ega": USER_GATE})
    report = build_report(df, settings=AnalysisSettings(), out_dir=tmp_path / "r")
    (tau,) = [v for v in report.verdicts if v.effect == "tau"]
    ega_tau = df.filter(pl.col("variant") == "ega").get_column("tau_mean").mean()
    assert abs(tau.estimate - ega_tau) < 1e-12 and tau.n_seeds == 4
