"""Claims over training (issue 30, item 2): every claim read at every evaluation step with the
same readers, intervals and rules as the final numbers; simulated per-seed curves through the
real functions, against oracles (scipy's t-interval, statsmodels' Holm); the figures."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from scipy import stats
from scorecard_sim import ladder_study
from statsmodels.stats.multitest import multipletests

from harness.analysis import AnalysisSettings
from harness.analysis.over_training import stable_from, step_frames
from harness.report import Figure, build_report
from harness.scorecard import StudyResults, load_claims, scorecard_table
from harness.scorecard.cli import write_outputs
from harness.scorecard.document import scorecard_document

GAINS = {"ega": (0.01, 0.01), "mope": (-0.004, 0.0), "ega-mope": (0.012, 0.012)}
STEPS = (250, 500, 750, 1000)
CORE = ("superadditivity", "ega-gain-mope-paper", "mope-gain", "ega-mope-gain", "tau-035", "open-fraction-36")


@pytest.fixture(scope="module")
def card() -> tuple[StudyResults, pl.DataFrame]:
    study, _ = ladder_study(GAINS, seeds=6, steps=STEPS, rng=2)
    return study, scorecard_table([study])


def test_every_core_claim_is_read_at_every_step_of_every_cell(card) -> None:
    _, table = card
    training = table.filter(pl.col("kind") == "training")
    for claim in CORE:
        rows = training.filter(pl.col("claim") == claim)
        for size in ("nano", "L3H4d96", "L4H4d128"):
            steps = rows.filter(pl.col("size") == size).get_column("step").sort().to_list()
            assert steps == list(STEPS), (claim, size)
    # a count is not a curve: the parameter claims have no training rows
    assert training.filter(pl.col("metric") == "parameters").height == 0


def test_the_last_step_reads_as_the_final_numbers(card) -> None:
    """The curve's last evaluation is the results table's final one: the same estimate,
    interval, Holm-adjusted p and kind as the cell row (the verdict of record)."""
    _, table = card
    cells = table.filter(pl.col("kind") == "cell")
    last = table.filter((pl.col("kind") == "training") & (pl.col("step") == STEPS[-1]))
    assert last.height == cells.filter(pl.col("metric") != "parameters").height
    for row in last.iter_rows(named=True):
        mine = (pl.col("measurement") == row["measurement"].split("|step=")[0]) & (pl.col("claim") == row["claim"])
        cell = cells.filter(mine & (pl.col("reading") == row["reading"])).row(0, named=True)
        for column in ("estimate", "ci_low", "ci_high", "pvalue", "pvalue_holm"):
            assert row[column] == pytest.approx(cell[column], nan_ok=True), (row["claim"], column)
        assert (row["verdict_kind"], row["verdict"]) == (cell["verdict_kind"], cell["verdict"])


def test_a_step_is_read_with_the_reports_interval(card) -> None:
    """Oracle: the paired gain at step 500 in one cell, by hand, and scipy's t-interval."""
    study, table = card
    curves = study.curves.filter((pl.col("step") == 500) & (pl.col("size") == "nano"))
    wide = curves.pivot(on="variant", index="seed", values="val_loss").sort("seed")
    gains = (wide["baseline"] - wide["ega"]).to_numpy()
    ci = stats.ttest_1samp(gains, 0.0).confidence_interval(0.95)
    row = table.filter(
        (pl.col("claim") == "ega-gain-mope-paper") & (pl.col("step") == 500) & (pl.col("size") == "nano")
    ).row(0, named=True)
    assert row["estimate"] == pytest.approx(gains.mean())
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((ci.low, ci.high))
    assert row["n_seeds"] == 6 and row["steps"] == 500


def test_each_step_is_adjusted_in_its_cell_rows_place_never_across_steps(card) -> None:
    _, table = card
    claim = "ega-gain-mope-paper"
    family = table.filter(
        (pl.col("claim") == claim) & ~pl.col("kind").is_in(["training", "claim"]) & pl.col("pvalue").is_not_null()
    )
    keys = family.get_column("measurement").to_list()
    steps = table.filter((pl.col("claim") == claim) & (pl.col("kind") == "training"))
    for row in steps.iter_rows(named=True):  # on skew-robust p-values, as the card's procedure adjusts
        pvalues = family.get_column("pvalue_robust").to_numpy().copy()
        at = keys.index(row["measurement"].split("|step=")[0])
        pvalues[at] = row["pvalue_robust"]
        assert row["pvalue_holm"] == pytest.approx(multipletests(pvalues, method="holm")[1][at])
    # the family-wise count of the card has no training row in it
    from harness.scorecard import ScorecardRow
    from harness.scorecard.family import card_families

    rows = [ScorecardRow(**r) for r in table.iter_rows(named=True)]
    without = [r for r in rows if r.kind != "training"]
    assert card_families(rows) == card_families(without)


def test_since_when_the_kind_held_is_said_per_curve(card) -> None:
    _, table = card
    training = table.filter(pl.col("kind") == "training")
    curve_keys = ["claim", "reading", "study", "size", "group"]
    for _, curve in training.partition_by(curve_keys, as_dict=True).items():
        curve = curve.sort("step")
        kinds = curve.get_column("verdict_kind").to_list()
        since = stable_from(curve.get_column("step").to_list(), kinds)
        assert set(curve.get_column("stable_from").to_list()) == {since}
        first = next(i for i in range(len(kinds)) if all(k == kinds[-1] for k in kinds[i:]))
        assert since == STEPS[first]  # oracle: the first index from which every kind is the last
        words = curve.get_column("where")[0]
        if since == STEPS[0]:
            assert words.startswith(f"{kinds[-1]} at every evaluation (4 evaluations, steps 250 to 1,000)")
        elif since == STEPS[-1]:
            assert "only at the last evaluation" in words and "more training could change it" in words
        else:
            assert words.startswith(f"{kinds[-1]} from step {since:,} on")
    assert stable_from([250, 500, 750], ["absent", "smaller", "smaller"]) == 500


def test_tau_is_read_per_initial_value_over_training() -> None:
    """A study that sweeps tau's initial value: one curve per initial value, each with its own
    start, in the tau claim's rows and figure."""
    study, _ = ladder_study(GAINS, seeds=4, steps=STEPS, sizes={"nano": (2, 2, 64)}, rng=4)

    def sweep(frame: pl.DataFrame, tau_column: str) -> pl.DataFrame:
        ega = frame.filter(pl.col("variant") == "ega")
        others = frame.filter(pl.col("variant") != "ega").with_columns(pl.lit(None, dtype=pl.Float64).alias("tau_init"))
        swept = [
            ega.with_columns(
                pl.lit(t).alias("tau_init"),
                (pl.col("trial_id") + f"_tau{t}").alias("trial_id"),
                (pl.col(tau_column) + t * 0.5).alias(tau_column),
            )
            for t in (-0.5, 0.0, 0.7)
        ]
        return pl.concat([others, *swept], how="diagonal_relaxed")

    swept = StudyResults(
        "sweep", sweep(study.frame, "tau_mean"), AnalysisSettings(), curves=sweep(study.curves, "tau_mean")
    )
    table = scorecard_table([swept])
    tau = table.filter((pl.col("claim") == "tau-035") & (pl.col("kind") == "training"))
    assert sorted(set(tau.get_column("group").to_list())) == ["tau_init=-0.5", "tau_init=0", "tau_init=0.7"]
    starts = dict(tau.select("group", "start").unique().iter_rows())
    assert starts == {"tau_init=-0.5": -0.5, "tau_init=0": 0.0, "tau_init=0.7": 0.7}
    assert tau.height == 3 * len(STEPS)
    # the contrasts read the runs at tau's reference initial value (0), at every step
    gain = table.filter((pl.col("claim") == "ega-gain-mope-paper") & (pl.col("kind") == "training"))
    assert gain.height == len(STEPS) and set(gain.get_column("n_seeds").to_list()) == {4}


def test_the_scorecard_writes_a_figure_per_claim_over_training_and_against_size(card, tmp_path: Path) -> None:
    _, table = card
    document = scorecard_document(table, load_claims(), ["ladder"])
    figures = {b.name for s in document.sections for b in s.blocks if isinstance(b, Figure)}
    for claim in CORE:
        assert f"training-{claim}" in figures
    for claim in ("superadditivity", "ega-gain-mope-paper", "mope-gain", "ega-mope-gain"):
        assert f"predicted-{claim}" in figures
    files = write_outputs(tmp_path / "card", table, document)
    assert {f"{name}.png" for name in figures} <= {p.name for p in files}
    for path in files:
        assert path.is_file() and path.stat().st_size > 0
    html = (tmp_path / "card" / "scorecard.html").read_text()
    assert html.count("data:image/png;base64,") == len(figures)
    markdown = (tmp_path / "card" / "scorecard.md").read_text()
    assert "![training-tau-035](training-tau-035.png)" in markdown and "## Over training" in markdown


def test_the_study_report_has_the_effects_over_training(card, tmp_path: Path) -> None:
    study, _ = card
    settings = AnalysisSettings()
    report = build_report(study.frame, settings=settings, out_dir=tmp_path / "report", curves=study.curves)
    assert {"effects_over_training", "tau_over_training"} <= set(report.png_paths)
    effects = pl.read_parquet(report.table_paths["effects_over_training"])
    assert sorted(set(effects.get_column("step").to_list())) == list(STEPS)
    # each step's effect is the analysis' own on that step's table (oracle: the mean paired gain)
    for step, frame in step_frames(study.curves):
        nano = frame.filter(pl.col("size") == "nano").pivot(on="variant", index="seed", values="val_loss")
        want = float(np.mean((nano["baseline"] - nano["ega"]).to_numpy()))
        got = effects.filter(
            (pl.col("step") == step) & (pl.col("size") == "nano") & (pl.col("effect") == "ega vs baseline")
        )
        assert got.item(0, "estimate") == pytest.approx(want)
    assert "Over training" in report.html_path.read_text()
    assert "## Over training" in report.markdown
