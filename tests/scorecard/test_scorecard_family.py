"""The card's procedure (claims as a whole first, Benjamini-Hochberg at 10 % across their families,
Holm within a selected claim, as statsmodels computes them), no signed row without a signed kind,
the card's rate, the skew-robust p read from the data the calibration simulation wrote, and a
shape-flagged row signed only where the skew-robust interval excludes 0."""

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
from harness.scorecard.calibration import load_calibration, skew_robust_critical, skew_robust_pvalue
from harness.scorecard.document import family_words
from harness.scorecard.family import CARD_RATE, adjust_card, card_families, card_procedure
from harness.scorecard.verdicts import SIGNED_KINDS

PACKAGE = Path(__file__).resolve().parents[2] / "harness"
DIRECTIONAL = {"replicated", "smaller", "larger", "reversed"}


def test_holm_and_benjamini_hochberg_match_statsmodels_on_a_batch_of_families() -> None:
    from statsmodels.stats.multitest import multipletests

    p = np.random.default_rng(0).uniform(0, 0.2, (12, 7))  # statsmodels collects garbage per Holm call
    assert_allclose(holm_adjusted(p), np.array([multipletests(row, method="holm")[1] for row in p]))
    assert_allclose(bh_adjusted(p), np.array([multipletests(row, method="fdr_bh")[1] for row in p]))


def _row(
    claim: str, p: float, kind: str = "smaller", signed: bool = True, seeds: int = 6, row_kind: str = "cell", key=None
) -> ScorecardRow:
    return ScorecardRow(
        claim, "ega", "A", "sim", row_kind, "...", estimate=0.01, ci_low=0.001, ci_high=0.02, pvalue=p / 2,
        pvalue_robust=p, verdict_kind=kind, verdict=f"{kind}: ...", signed=signed, settled="settled", n_seeds=seeds,
        measurement=key,
    )  # fmt: skip


def test_the_cards_procedure_against_statsmodels() -> None:
    """Claims without a claim row: Simes within a claim, Benjamini-Hochberg at 10 % across claims,
    Holm within a selected claim at 10 % R / F, all on the rows' skew-robust p-values."""
    from statsmodels.stats.multitest import multipletests

    p = {"a": [0.001, 0.02, 0.04], "b": [0.03], "c": [0.4, 0.5], "d": [0.0002]}
    rows = [_row(c, x) for c, ps in p.items() for x in ps] + [_row("a", 0.5, "absent", False)]
    out, proc = adjust_card(rows)
    assert proc.families == 4 and proc.alpha == CARD_RATE == 0.10
    simes = {c: min(multipletests(ps + ([0.5] if c == "a" else []), method="fdr_bh")[1]) for c, ps in p.items()}
    card = dict(zip(simes, multipletests(list(simes.values()), method="fdr_bh")[1], strict=True))
    assert {k.removeprefix("claim "): v for k, v in proc.family_p.items()} == pytest.approx(simes)
    assert {k.removeprefix("claim "): v for k, v in proc.card_p.items()} == pytest.approx(card)
    selected = {c for c, q in card.items() if q < 0.10}
    assert {k.removeprefix("claim ") for k in proc.selected} == selected
    assert proc.level == pytest.approx(0.10 * len(selected) / 4)
    for row in out:
        family = p[row.claim] + ([0.5] if row.claim == "a" else [])
        holm = multipletests(family, method="holm")[1][family.index(row.pvalue_robust)]
        assert row.pvalue_holm == pytest.approx(holm) and row.pvalue_card == pytest.approx(card[row.claim])
        keeps = row.claim in selected and row.pvalue_holm < proc.level
        if row.verdict_kind != "absent":
            assert (row.verdict_kind == "smaller") == keeps == row.signed, row
    lost = [r for r in out if r.claim == "c"]
    assert all("not significant across the card" in r.verdict and "was smaller" in r.verdict for r in lost)


def test_a_claim_row_is_its_familys_p_and_two_claims_reading_the_same_cells_are_one_family() -> None:
    """Two claims whose claim rows read the same cells count once across the card; a claim row keeps
    its sign with its family selected, and its cells are held to Holm at 10 % R / F."""
    rows = [
        _row("x", 0.001, row_kind="claim", key="claim|cells-1"), _row("x", 0.2),
        _row("y", 0.001, row_kind="claim", key="claim|cells-1"), _row("y", 0.2),
        _row("z", 0.6, row_kind="claim", key="claim|cells-2"), _row("z", 0.003),
    ]  # fmt: skip
    out, proc = adjust_card(rows)
    assert proc.families == 2  # x and y: one family
    assert proc.family_of[("x", "A")] == proc.family_of[("y", "A")] != proc.family_of[("z", "A")]
    heads = {r.claim: r for r in out if r.kind == "claim"}
    assert heads["x"].signed and heads["y"].signed and not heads["z"].signed
    assert "not significant across the card" in heads["z"].verdict
    z_cell = next(r for r in out if r.claim == "z" and r.kind == "cell")
    assert not z_cell.signed  # its family was not selected, however small its own p
    x_cell = next(r for r in out if r.claim == "x" and r.kind == "cell")
    assert not x_cell.signed and f"held to {proc.level:.3g}" in x_cell.verdict  # 0.2 > 0.10 x 1 / 2


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
    one measurement, counted once in the summary and once as a family across the card."""
    study = simulated_study({"ega": 0.05, "mope": -0.03, "ega-mope": 0.08}, seeds=6)
    rows = scorecard_rows([study])
    a = next(r for r in rows if r.claim == "ega-gain-ega-paper" and r.kind == "cell")
    b = next(r for r in rows if r.claim == "ega-gain-mope-paper" and r.kind == "cell")
    assert a.measurement == b.measurement and a.estimate == b.estimate
    proc = card_procedure(rows)
    assert proc.family_of[("ega-gain-ega-paper", a.reading)] == proc.family_of[("ega-gain-mope-paper", b.reading)]
    card = card_families(rows)
    assert card.families == proc.families and card.seeds == 6


def test_the_summary_states_the_procedure_and_its_simulated_rate() -> None:
    data = load_calibration()
    assert data is not None, "harness/scorecard/calibration.json is missing: run benchmarks/calibration.py"
    study = simulated_study({"ega": 0.05, "mope": -0.03, "ega-mope": 0.08}, seeds=4)
    rows = scorecard_rows([study])
    card = card_families(rows)
    words = family_words(rows)
    assert f"{card.families} claim families" in words and "Benjamini-Hochberg" in words
    assert "at most 10% of such cards show one" in words
    null = data.get("null_cards")
    if null is not None:
        for rate in null["rates"].values():
            assert f"{rate:.1%}" in words and rate <= 0.10


def test_the_skew_shape_read_is_the_stored_one_at_or_above_the_cards() -> None:
    from harness.scorecard.calibration import skew_floor, skew_sigma_used

    q = [0.0, 4.0, 7.0, 15.0]
    data = {
        "skew_robust": {
            "tails": [1.0, 0.1, 0.05, 0.01],
            "quantiles": {"0.5": {"4": q}, "1": {"4": [x * 2 for x in q]}},
        },
        "skew_floor": {"sigma": 0.4},
    }
    assert skew_floor(data) == 0.4 and skew_sigma_used(None, data) == 0.5  # the floor, read at 0.5
    assert skew_sigma_used(0.6, data) == 1.0 and skew_sigma_used(3.0, data) == 1.0  # beyond: the largest
    assert skew_robust_critical(4, 0.05, data, sigma=0.7) == pytest.approx(14.0)
    assert skew_robust_critical(4, 0.05, data, sigma=0.0) == pytest.approx(stats.t.isf(0.025, 3))  # no skew


def test_the_skew_robust_p_is_read_conservatively_off_the_grid() -> None:
    """Between stored tails the larger one; never below the t's own p; 1 without data."""
    data = {"skew_robust": {"tails": [1.0, 0.1, 0.05, 0.01], "quantiles": {"0.5": {"4": [0.0, 4.0, 7.0, 15.0]}}}}
    t_p = lambda t, n=4: float(2 * stats.t.sf(t, n - 1))  # noqa: E731 - the t p of |t| at n seeds
    assert skew_robust_pvalue(t_p(5.0), 4, data, sigma=0.5) == pytest.approx(0.1)
    assert skew_robust_pvalue(t_p(7.5), 4, data, sigma=0.5) == pytest.approx(0.05)
    assert skew_robust_pvalue(t_p(20.0), 4, data, sigma=0.5) == pytest.approx(0.01)  # beyond the grid: its last
    assert skew_robust_pvalue(0.5, 4, data, sigma=0.5) == pytest.approx(1.0) and skew_robust_pvalue(0.5, 4, {}) == 1.0
    assert skew_robust_pvalue(t_p(5.0, 9), 9, data, sigma=0.5) == pytest.approx(0.1)  # more seeds: nearest below
    assert skew_robust_critical(4, 0.05, data, sigma=0.5) == pytest.approx(7.0)
    assert skew_robust_critical(4, 0.5, data, sigma=0.5) == pytest.approx(4.0)  # the largest stored tail <= 0.5
    low = {"skew_robust": {"tails": [1.0, 0.1], "quantiles": {"0.5": {"4": [0.0, 1.0]}}}}
    assert skew_robust_critical(4, 0.1, low, sigma=0.5) == pytest.approx(stats.t.isf(0.05, 3))  # never below t's
    assert skew_robust_critical(4, 0.05, {}) is None


def test_a_shape_flagged_row_says_so_and_its_sign_rests_on_the_skew_robust_interval() -> None:
    """Per-seed gains with an outlier: the shape check fires; the scorecard says so beside the
    verdict with the sign-flip p beside the t p, and signs only where the skew-robust interval
    excludes 0 (the check itself withholds nothing: docs/calibration.md)."""
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
    assert report.confidence_interval.low > 0 and report.shape.fires
    table = scorecard_table([StudyResults("sim", frame)])
    row = table.filter((pl.col("claim") == "ega-gain-mope-paper") & (pl.col("kind") == "cell")).row(0, named=True)
    assert "per-seed values skewed or with an outlier" in row["verdict"] and "sign-flip p=" in row["verdict"]
    robust_excludes = row["robust_low"] > 0 or row["robust_high"] < 0
    assert bool(row["signed"]) <= robust_excludes


def test_skewed_seeds_are_signed_only_where_the_skew_robust_interval_excludes_0() -> None:
    """Seeds as skewed as the published floor allows (lognormal of shape 0.5), a true 0: about the
    level. (A lone contrast skewed beyond the floor, shape 1, is not bounded by its own 8 seeds:
    docs/calibration.md says so.)"""
    gen = np.random.default_rng(21)
    signed = 0
    for i in range(30):
        gains = gen.lognormal(0.0, 0.5, 8) * 0.01 - 0.01 * np.exp(0.125)  # skewed, mean 0
        rows = [
            {"dataset": "tinyshakespeare", "size": "paper", "context_length": 256, "variant": v, "seed": s,
             "val_loss": 1.5 - (g if v == "ega" else 0.0), "steps": 5000, "status": "finished"}
            for s, g in enumerate(gains) for v in ("baseline", "ega")
        ]  # fmt: skip
        frame = pl.DataFrame(rows)
        row = row_of(scorecard_table([StudyResults(f"skew{i}", frame)]), "ega-gain-mope-paper")
        if row["verdict_kind"] in DIRECTIONAL:
            signed += 1
            assert row["robust_low"] > 0 or row["robust_high"] < 0, row["verdict"]
    assert signed <= 3  # a true 0: about the level, not the bare t's share


def test_the_simulations_measure_what_the_table_says() -> None:
    from harness.bench.simulate import scorecard as simulate

    rows = simulate.kinds_table(simulate.SCENARIOS[:1], (10,), reps=600, rng=3)
    at_value = next(r for r in rows if r.truth == "paper value")
    assert at_value.rates["replicated"] > 0.75 and at_value.rates["reversed"] == 0.0
    at_zero = next(r for r in rows if r.truth == "0 (no effect)")
    assert at_zero.rates["replicated"] + at_zero.rates["smaller"] + at_zero.rates["larger"] <= 0.05
    curves = simulate.family_wise_curves(10, (1, 4), families=10, reps=600, rng=np.random.default_rng(4))
    se = (0.10 * 0.90 / 600) ** 0.5
    for k in (1, 4):
        assert max(curves[k]) <= CARD_RATE + 3.5 * se  # Benjamini-Hochberg holds the null card at 10 %


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
    assert "direction asserted against 0" in text and "Not measured by the studies read:" in text
    assert "tau-035" in text
