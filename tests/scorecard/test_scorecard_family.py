"""One family per claim (Holm, as statsmodels computes it), identical readings counted once, the
card's family-wise rate and a shape-flagged row's false-positive rate read from the data the
calibration simulation wrote; and no scorecard verdict stronger than the report's on skewed seeds."""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from numpy.testing import assert_allclose
from scorecard_sim import row_of, simulated_study

from harness.analysis import main_effect
from harness.scorecard import ScorecardRow, StudyResults, scorecard_rows, scorecard_table
from harness.scorecard.calibration import family_wise_rate, load_calibration, skewed_false_positive
from harness.scorecard.document import family_words
from harness.scorecard.family import adjust_within_claims, card_families, holm_adjusted

PACKAGE = Path(__file__).resolve().parents[2] / "harness"
DIRECTIONAL = {"replicated", "smaller", "larger", "reversed"}


def test_holm_matches_statsmodels_on_a_batch_of_families() -> None:
    from statsmodels.stats.multitest import multipletests

    p = np.random.default_rng(0).uniform(0, 0.2, (50, 7))
    want = np.array([multipletests(row, method="holm")[1] for row in p])
    assert_allclose(holm_adjusted(p), want)


def _row(claim: str, p: float, kind: str = "smaller", signed: bool = True) -> ScorecardRow:
    return ScorecardRow(
        claim, "ega", "A", "sim", "cell", "...", estimate=0.01, ci_low=0.001, ci_high=0.02, pvalue=p,
        verdict_kind=kind, verdict=f"{kind}: ...", signed=signed, settled="settled", n_seeds=6,
    )  # fmt: skip


def test_a_claims_rows_are_adjusted_together_and_a_lost_one_says_so() -> None:
    rows = [_row("a", 0.01), _row("a", 0.03), _row("a", 0.04), _row("b", 0.04), _row("a", 0.5, "absent", False)]
    out = adjust_within_claims(rows)
    assert [r.pvalue_holm for r in out] == pytest.approx([0.04, 0.09, 0.09, 0.04, 0.5])
    assert [r.verdict_kind for r in out] == ["smaller", "inconclusive", "inconclusive", "smaller", "absent"]
    assert "not significant after Holm (p=0.09)" in out[1].verdict and "was smaller" in out[1].verdict
    assert "the claim's 4 rows" in out[1].verdict and out[1].settled == "not distinguishable"


def test_identical_readings_count_once() -> None:
    """EGA's gain in the EGA paper (+0.103) and in the MOPE paper (+0.092) read one contrast:
    one measurement, one family, counted once in the summary."""
    study = simulated_study({"ega": 0.05, "mope": -0.03, "ega-mope": 0.08}, seeds=6)
    rows = scorecard_rows([study])
    a = next(r for r in rows if r.claim == "ega-gain-ega-paper" and r.kind == "cell")
    b = next(r for r in rows if r.claim == "ega-gain-mope-paper" and r.kind == "cell")
    assert a.measurement == b.measurement and a.estimate == b.estimate
    card = card_families(rows)
    claims_with_tests = {r.claim for r in rows if r.pvalue is not None}
    assert card.families == len(claims_with_tests) - 1  # the second EGA gain adds no new family
    assert card.seeds == 6


def test_the_summary_states_the_cards_family_wise_rate_from_the_simulation() -> None:
    data = load_calibration()
    assert data is not None, "harness/scorecard/calibration.json is missing: run benchmarks/calibration.py"
    study = simulated_study({"ega": 0.05, "mope": -0.03, "ega-mope": 0.08}, seeds=4)
    rows = scorecard_rows([study])
    card = card_families(rows)
    rate = family_wise_rate(card.families, card.rows_per_family, card.seeds)
    stored = data["family_wise"]["rates"][str(rate.rows_per_family)][str(rate.seeds)][card.families - 1]
    assert rate.rate == stored
    words = family_words(rows)
    assert f"{stored:.0%} of such cards show at least one signed verdict" in words
    assert f"{card.families} claim families" in words


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


def test_no_package_module_imports_the_scorecards_simulation() -> None:
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "simulate.py" and path.parent.name == "scorecard":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            if "harness.scorecard.simulate" in names:
                offenders.append(str(path))
    assert not offenders, offenders


def test_the_simulations_measure_what_the_table_says() -> None:
    from harness.scorecard import simulate

    rows = simulate.kinds_table(simulate.SCENARIOS[:1], (10,), reps=600, rng=3)
    at_value = next(r for r in rows if r.truth == "paper value")
    assert at_value.rates["replicated"] > 0.75 and at_value.rates["reversed"] == 0.0
    at_zero = next(r for r in rows if r.truth == "0 (no effect)")
    assert at_zero.rates["replicated"] + at_zero.rates["smaller"] + at_zero.rates["larger"] <= 0.05
    curves = simulate.family_wise_curves(4, (1, 4), families=10, reps=600, rng=np.random.default_rng(4))
    se = (0.05 * 0.95 / 600) ** 0.5
    for k in (1, 4):
        assert curves[k][0] <= 0.05 + 3.5 * se  # one family: Holm keeps its 5 %
        assert np.all(np.diff(curves[k]) >= 0)  # more families, more chances
    assert curves[1][9] > 0.25  # ten families: far above 5 %


def test_the_shipped_data_is_what_the_benchmark_writes(tmp_path: Path) -> None:
    import subprocess
    import sys

    root = PACKAGE.parent
    out = tmp_path / "scorecard-calibration.json"
    for part in ("scorecard", "prediction"):  # the second adds its entry, keeping the first's
        cmd = [sys.executable, str(root / "benchmarks" / "calibration.py"), "--part", part, "--reps", "20"]
        done = subprocess.run(
            [*cmd, "--quiet", "--out", str(tmp_path / "c.json"), "--scorecard-data", str(out)],
            capture_output=True,
            text=True,
            cwd=root,
        )
        assert done.returncode == 0, done.stderr
    fresh = json.loads(out.read_text())
    shipped = load_calibration()
    assert set(fresh) == set(shipped)
    assert set(fresh["prediction"]) == set(shipped["prediction"])
    assert set(fresh["prediction"]["done_when"]) == set(shipped["prediction"]["done_when"])
    assert set(fresh["family_wise"]["rates"]) == set(shipped["family_wise"]["rates"])
    assert set(fresh["skewed_t_false_positive"]["rates"]) == set(shipped["skewed_t_false_positive"]["rates"])
    assert family_wise_rate(3, 2, 6, fresh) is not None and dataclasses.is_dataclass(family_wise_rate(3, 2, 6, fresh))


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
