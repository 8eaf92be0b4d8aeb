"""The card's procedure (Holm within a claim, Benjamini-Hochberg across claims, as statsmodels
computes them), no signed row without a signed kind, the card's rate, the skew-robust p and a
shape-flagged row's false-positive rate read from the data the calibration simulation wrote; and
no scorecard verdict stronger than the report's on skewed seeds."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from numpy.testing import assert_allclose
from scipy import stats
from scorecard_sim import row_of, simulated_study

from harness.analysis import main_effect
from harness.analysis.multiplicity import bh_adjusted, holm_adjusted
from harness.scorecard import ScorecardRow, StudyResults, scorecard_rows, scorecard_table
from harness.scorecard.calibration import (
    family_wise_rate,
    load_calibration,
    skew_robust_critical,
    skew_robust_pvalue,
    skewed_false_positive,
)
from harness.scorecard.document import family_words
from harness.scorecard.family import adjust_card, card_families
from harness.scorecard.verdicts import SIGNED_KINDS

PACKAGE = Path(__file__).resolve().parents[2] / "harness"
DIRECTIONAL = {"replicated", "smaller", "larger", "reversed"}


def test_holm_and_benjamini_hochberg_match_statsmodels_on_a_batch_of_families() -> None:
    from statsmodels.stats.multitest import multipletests

    p = np.random.default_rng(0).uniform(0, 0.2, (12, 7))  # statsmodels collects garbage per Holm call
    assert_allclose(holm_adjusted(p), np.array([multipletests(row, method="holm")[1] for row in p]))
    assert_allclose(bh_adjusted(p), np.array([multipletests(row, method="fdr_bh")[1] for row in p]))


def _row(claim: str, p: float, kind: str = "smaller", signed: bool = True, seeds: int = 6) -> ScorecardRow:
    return ScorecardRow(
        claim, "ega", "A", "sim", "cell", "...", estimate=0.01, ci_low=0.001, ci_high=0.02, pvalue=p / 2,
        pvalue_robust=p, verdict_kind=kind, verdict=f"{kind}: ...", signed=signed, settled="settled", n_seeds=seeds,
    )  # fmt: skip


def test_the_cards_procedure_against_statsmodels() -> None:
    """Simes within a claim, Benjamini-Hochberg across claims, Holm within a selected claim at
    alpha R / F, all on the rows' skew-robust p-values (here twice the t's)."""
    from statsmodels.stats.multitest import multipletests

    p = {"a": [0.001, 0.02, 0.04], "b": [0.03], "c": [0.4, 0.5], "d": [0.0002]}
    rows = [_row(c, x) for c, ps in p.items() for x in ps] + [_row("a", 0.5, "absent", False)]
    out, proc = adjust_card(rows)
    assert proc.families == 4
    simes = {c: min(multipletests(ps + ([0.5] if c == "a" else []), method="fdr_bh")[1]) for c, ps in p.items()}
    card = dict(zip(simes, multipletests(list(simes.values()), method="fdr_bh")[1], strict=True))
    assert proc.claim_p == pytest.approx(simes) and proc.card_p == pytest.approx(card)
    selected = {c for c, q in card.items() if q < 0.05}
    assert proc.selected == selected and proc.level == pytest.approx(0.05 * len(selected) / 4)
    for row in out:
        family = p[row.claim] + ([0.5] if row.claim == "a" else [])
        holm = multipletests(family, method="holm")[1][family.index(row.pvalue_robust)]
        assert row.pvalue_holm == pytest.approx(holm) and row.pvalue_card == pytest.approx(card[row.claim])
        keeps = row.claim in selected and row.pvalue_holm < proc.level
        if row.verdict_kind != "absent":
            assert (row.verdict_kind == "smaller") == keeps == row.signed, row
    lost = [r for r in out if r.claim == "c"]
    assert all("not significant across the card" in r.verdict and "was smaller" in r.verdict for r in lost)
    held = next(r for r in out if r.claim == "a" and r.pvalue_robust == 0.04)
    assert "not significant after Holm" in held.verdict and f"held to {proc.level:.3g}" in held.verdict


def test_no_signed_row_lacks_a_signed_kind() -> None:
    """Whatever the procedure takes away, ``signed`` goes with it (scorecard.parquet's column)."""
    for rng in range(3):
        gains = {"ega": 0.03, "mope": -0.01, "ega-mope": 0.02, "learned-pe": 0.0, "ega-learned": 0.01}
        study = simulated_study(gains, seeds=4, sd=0.01, rng=rng, sizes={"nano": 100_000, "mini": 340_000})
        table = scorecard_table([study])
        signed = table.filter(pl.col("signed"))
        assert set(signed.get_column("verdict_kind").to_list()) <= set(SIGNED_KINDS), signed
        lost = table.filter(pl.col("verdict").str.contains("the card's procedure"))
        assert not lost.get_column("signed").any()


def test_identical_readings_share_a_measurement() -> None:
    """EGA's gain in the EGA paper (+0.103) and in the MOPE paper (+0.092) read one contrast:
    one measurement, counted once in the summary; each claim is its own family."""
    study = simulated_study({"ega": 0.05, "mope": -0.03, "ega-mope": 0.08}, seeds=6)
    rows = scorecard_rows([study])
    a = next(r for r in rows if r.claim == "ega-gain-ega-paper" and r.kind == "cell")
    b = next(r for r in rows if r.claim == "ega-gain-mope-paper" and r.kind == "cell")
    assert a.measurement == b.measurement and a.estimate == b.estimate
    card = card_families(rows)
    claims_with_tests = {r.claim for r in rows if r.pvalue is not None and r.verdict_kind != "figure"}
    assert card.families == len(claims_with_tests) and card.seeds == 6


def test_the_summary_states_the_procedure_and_its_simulated_rate() -> None:
    data = load_calibration()
    assert data is not None, "harness/scorecard/calibration.json is missing: run benchmarks/calibration.py"
    study = simulated_study({"ega": 0.05, "mope": -0.03, "ega-mope": 0.08}, seeds=4)
    rows = scorecard_rows([study])
    card = card_families(rows)
    rate = family_wise_rate(card.families, card.rows_per_family, card.seeds)
    stored = data["family_wise"]["rates"][str(rate.rows_per_family)][str(rate.seeds)][card.families - 1]
    assert rate.rate == stored <= 0.10
    words = family_words(rows)
    assert f"{stored:.1%} of such cards show at least one signed verdict" in words
    assert f"{card.families} claim families" in words and "Benjamini-Hochberg" in words


def test_the_calibration_lookups_are_conservative() -> None:
    data = {
        "skewed_t_false_positive": {"rates": {"3": 0.1, "5": 0.2, "19": 0.3}},
        "family_wise": {"reps": 10, "rates": {"1": {"4": [0.05, 0.1]}, "4": {"4": [0.06, 0.12], "10": [0.04, 0.08]}}},
    }
    assert skewed_false_positive(2, data) is None
    assert skewed_false_positive(4, data) == 0.1 and skewed_false_positive(40, data) == 0.3
    # 3 rows per family reads the simulated 4, 8 seeds the simulated 4 (fewer seeds, more rows)
    got = family_wise_rate(2, 3, 8, data)
    assert (got.rate, got.rows_per_family, got.seeds) == (0.12, 4, 4)
    assert family_wise_rate(3, 1, 4, data) is None  # more families than simulated


def test_the_skew_robust_p_is_read_conservatively_off_the_grid() -> None:
    """Between stored tails the larger one; never below the t's own p; 1 without data."""
    data = {"skew_robust": {"tails": [1.0, 0.1, 0.05, 0.01], "quantiles": {"4": [0.0, 4.0, 7.0, 15.0]}}}
    t_p = lambda t, n=4: float(2 * stats.t.sf(t, n - 1))  # noqa: E731 - the t p of |t| at n seeds
    assert skew_robust_pvalue(t_p(5.0), 4, data) == pytest.approx(0.1)
    assert skew_robust_pvalue(t_p(7.5), 4, data) == pytest.approx(0.05)
    assert skew_robust_pvalue(t_p(20.0), 4, data) == pytest.approx(0.01)  # beyond the grid: its last tail
    assert skew_robust_pvalue(0.5, 4, data) == pytest.approx(1.0) and skew_robust_pvalue(0.5, 4, {}) == 1.0
    assert skew_robust_pvalue(t_p(5.0, 9), 9, data) == pytest.approx(0.1)  # more seeds: the nearest below
    assert skew_robust_critical(4, 0.05, data) == pytest.approx(7.0)
    assert skew_robust_critical(4, 0.5, data) == pytest.approx(4.0)  # the largest stored tail not above 0.5
    low = {"skew_robust": {"tails": [1.0, 0.1], "quantiles": {"4": [0.0, 1.0]}}}
    assert skew_robust_critical(4, 0.1, low) == pytest.approx(stats.t.isf(0.05, 3))  # never below the t's own
    assert skew_robust_critical(4, 0.05, {}) is None


def test_a_shape_flagged_row_is_inconclusive_with_the_reports_words_and_its_measured_rate() -> None:
    """Per-seed gains with an outlier: the report withholds its claim, so does the scorecard,
    with the sign-flip p beside the t p and the simulated false-positive rate at its seeds."""
    gains = [0.010, 0.011, 0.009, 0.010, 0.012, 0.011, 0.010, 0.060]
    rows = []
    for seed, g in enumerate(gains):
        for variant, loss in (("baseline", 1.5), ("ega", 1.5 - g)):
            cell = {"dataset": "tinyshakespeare", "size": "paper", "context_length": 256, "steps": 5000}
            rows.append(
                {**cell, "variant": variant, "seed": seed, "val_loss": loss + 0.01 * seed, "status": "finished"}
            )
    frame = pl.DataFrame(rows)
    report = main_effect(frame, "ega", "baseline")
    assert report.confidence_interval.low > 0 and report.shape.fires and not report.claims
    row = row_of(scorecard_table([StudyResults("sim", frame)]), "ega-gain-mope-paper")
    assert row["verdict_kind"] == "inconclusive" and row["signed"] is False
    assert "claim withheld" in row["verdict"] and "sign-flip p=" in row["verdict"]
    rate = skewed_false_positive(8)
    assert f"a t claim at 8 seeds is false in {rate:.0%} of studies" in row["verdict"]


def test_skewed_seeds_get_no_signed_verdict_the_report_would_withhold() -> None:
    gen = np.random.default_rng(21)
    withheld = 0
    for i in range(30):
        gains = gen.lognormal(0.0, 1.0, 8) * 0.01 - 0.01 * np.exp(0.5)  # skewed, mean 0
        rows = [
            {"dataset": "tinyshakespeare", "size": "paper", "context_length": 256, "variant": v, "seed": s,
             "val_loss": 1.5 - (g if v == "ega" else 0.0), "steps": 5000, "status": "finished"}
            for s, g in enumerate(gains) for v in ("baseline", "ega")
        ]  # fmt: skip
        frame = pl.DataFrame(rows)
        report = main_effect(frame, "ega", "baseline")
        row = row_of(scorecard_table([StudyResults(f"skew{i}", frame)]), "ega-gain-mope-paper")
        if report.confidence_interval is not None and report.confidence_interval.excludes(0.0) and not report.claims:
            withheld += 1
            assert row["verdict_kind"] not in DIRECTIONAL, row["verdict"]
        if row["verdict_kind"] in DIRECTIONAL:
            assert report.claims
    assert withheld >= 1  # the case the rule is about occurred


def test_the_simulations_measure_what_the_table_says() -> None:
    from harness.bench.simulate import scorecard as simulate

    rows = simulate.kinds_table(simulate.SCENARIOS[:1], (10,), reps=600, rng=3)
    at_value = next(r for r in rows if r.truth == "paper value")
    assert at_value.rates["replicated"] > 0.75 and at_value.rates["reversed"] == 0.0
    at_zero = next(r for r in rows if r.truth == "0 (no effect)")
    assert at_zero.rates["replicated"] + at_zero.rates["smaller"] + at_zero.rates["larger"] <= 0.05
    curves = simulate.family_wise_curves(10, (1, 4), families=10, reps=600, rng=np.random.default_rng(4))
    se = (0.05 * 0.95 / 600) ** 0.5
    for k in (1, 4):
        assert np.all(np.diff(curves[k]) >= -3.5 * se)  # more families do not raise it past alpha
        assert max(curves[k]) <= 0.05 + 3.5 * se  # Benjamini-Hochberg holds the null card at alpha


def test_the_mlflow_description_fits_and_keeps_every_measured_claim() -> None:
    """The run's description (MLflow keeps about 8,000 characters) holds the counts, the
    family-wise rate, every measured claim and reading with its kind, and the ids not measured."""
    from harness.report import render_markdown
    from harness.scorecard.document import description_document

    gains = {"ega": 0.09, "mope": -0.03, "ega-mope": 0.12, "learned-pe": 0.0, "ega-learned": 0.05, "ega-2": 0.08}
    study = simulated_study(gains, seeds=4, sizes={"nano": 100_000, "L3H4d96": 340_000}, contexts=(64, 128))
    table = scorecard_table([study])
    text = render_markdown(description_document(table, ["sim"]), max_chars=7000)
    assert len(text) < 7000 and not text.endswith("…")
    measured = table.filter(pl.col("kind") != "not measured")
    for claim, reading in measured.select("claim", "reading").unique().iter_rows():
        assert f"| {claim} | {reading} |" in text.replace("**", ""), (claim, reading)
    assert "signed verdict" in text and "Not measured by the studies read:" in text and "tau-035" in text
