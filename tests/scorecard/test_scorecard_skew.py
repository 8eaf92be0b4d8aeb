"""The rates the scorecard's rules are held to: seeds skewed as much as the card guards against
(lognormal of the card's shape) with a true 0 sign at most 6 % of rows at 4 seeds, the shape check
withholds nothing (chosen by calibration and power), an ordering at a fifth of its margin is never
replicated, a true slope of 0.01 per doubling is (almost) never flat, the skew-robust table is what its definition says,
and a whole simulated card of a published design is read by the scorecard itself."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from scorecard_sim import row_of, simulated_study

from harness.analysis.paired_tests import t_interval
from harness.bench.simulate import scorecard as simulate
from harness.scorecard import scorecard_table
from harness.scorecard.calibration import load_calibration, skew_robust_critical, skew_robust_pvalue
from harness.scorecard.verdicts import Intervals, classify_effect

SIGNED = ("replicated", "smaller", "larger", "reversed")
PUBLISHED = Path(__file__).resolve().parents[2] / "published"


def _scenario(name: str) -> simulate.Scenario:
    return next(s for s in simulate.SCENARIOS if s.name.startswith(name))


def test_skewed_seeds_with_a_true_zero_sign_at_most_6_percent_of_rows_at_4_seeds() -> None:
    """Lognormal seeds of the shape the rows are read at (the shipped floor's), a true 0."""
    from harness.scorecard.calibration import skew_floor, skew_sigma_used

    sigma = skew_sigma_used(skew_floor())
    gen = np.random.default_rng(5)
    values = simulate.skewed_values(gen, (6000, 4), sd=0.02, sigma=sigma)
    _, p = t_interval(values, axis=-1)
    signed = float(np.mean(skew_robust_pvalue(p, 4, sigma=sigma) < 0.05))
    assert signed <= 0.06, signed
    bare = float(np.mean(p < 0.05))  # the bare t-interval signs more of them
    assert bare > signed


def test_the_shape_checks_level_was_chosen_by_calibration_and_power() -> None:
    """Withholding on the shape check (any level) buys no power at the card's shape: level 0 is best."""
    rows = simulate.shape_level_table((4, 6), (0.0, 0.10), reps=20_000, rng=11)
    for n in (4, 6):
        off, on = (next(r for r in rows if r["seeds"] == n and r["level"] == lv) for lv in (0.0, 0.10))
        assert off["power"] >= on["power"] - 0.01, (off, on)
        assert on["fires_on_normal"] == pytest.approx(0.10, abs=0.01)


def test_an_ordering_at_a_fifth_of_its_margin_is_never_replicated() -> None:
    rows = simulate.kinds_table([_scenario("ordering")], (4, 6, 10), reps=1000, rng=7)
    fifth = [r for r in rows if r.truth == "a fifth of the margin"]
    assert fifth and all(r.rates["replicated"] == 0.0 for r in fifth), [r.rates for r in fifth]
    twice = [r for r in rows if r.truth == "twice the margin" and r.seeds == 10]
    assert twice[0].rates["replicated"] > 0.8  # and a clear win still replicates


def test_ega_beats_db2_at_plus_0004_reads_negligible_not_replicated() -> None:
    """The card, at 10 seeds and a tight sd: the difference is shown, but within the claim's
    0.02: smaller, negligible by its margin (rng 1: at rng 0 the shape check's false alarm, about
    one study in ten, withholds the row instead)."""
    gains = {"ega": 0.100, "ega-db2": 0.096, "mope": -0.03, "ega-mope": 0.1}
    study = simulated_study(gains, seeds=10, sd=0.0005, rng=1)
    row = row_of(scorecard_table([study]), "ega-beats-db2")
    assert row["ci_low"] > 0 and row["verdict_kind"] == "smaller", row["verdict"]
    assert "negligible by this claim's margin" in row["verdict"]
    clear = simulated_study({**gains, "ega-db2": 0.05}, seeds=10, sd=0.0005, rng=1)
    assert row_of(scorecard_table([clear]), "ega-beats-db2")["verdict_kind"] == "replicated"


def test_a_true_slope_of_001_per_doubling_is_almost_never_flat() -> None:
    table = simulate.flat_table(reps=1000, rng=8)
    for row in table["rows"]:
        if row["truth"] == "slope 0.01 per doubling":
            assert row["rates"]["flat"] <= 0.002, row  # was 23 % of cards at the published noise
        if row["truth"] == "slope 0 per doubling" and row["seeds"] == 10:
            assert row["rates"]["flat"] > 0.4, row  # a flat truth still reads flat with seeds enough
    assert table["span"] == pytest.approx(np.log2(4.76 / 0.80), abs=0.05)


def test_the_skew_robust_table_holds_its_level_and_the_shipped_one_is_full_size() -> None:
    table = simulate.skew_robust_table((4, 10), sigmas=(0.5, 1.0), reps=4000, rng=9)
    data = {"skew_robust": table}
    gen = np.random.default_rng(10)
    for sigma in (0.5, 1.0):
        for n in (4, 10):
            q = table["quantiles"][f"{sigma:g}"][str(n)]
            assert all(b >= a for a, b in zip(q, q[1:], strict=False))  # |t| grows as the tail shrinks
            values = simulate.skewed_values(gen, (4000, n), sigma=sigma)
            _, p = t_interval(values, axis=-1)
            rate = float(np.mean(skew_robust_pvalue(p, n, data, sigma=sigma) < 0.05))
            assert rate <= 0.05 + 3 * (0.05 * 0.95 / 4000) ** 0.5, (sigma, n, rate)
    assert skew_robust_critical(4, 0.05, data, sigma=1.0) > skew_robust_critical(4, 0.05, data, sigma=0.5)
    assert skew_robust_critical(4, 0.05, data, sigma=0.3) == skew_robust_critical(4, 0.05, data, sigma=0.5)
    shipped = load_calibration()["skew_robust"]
    assert shipped["reps"] >= 100_000 and set(shipped["quantiles"]["0.5"]) >= {"2", "4", "10", "30"}
    assert skew_robust_critical(4, 0.05) > skew_robust_critical(10, 0.05) > skew_robust_critical(30, 0.05) - 1e-9


def test_a_sign_the_robust_interval_does_not_share_is_withheld() -> None:
    """t = 4.5 at 4 seeds: the t-interval excludes 0, the skew-robust one (lognormal shape 0.65) does not."""
    from scipy import stats

    from harness.analysis.results_types import ConfidenceInterval

    se, n = 0.01, 4
    half = float(stats.t.isf(0.025, n - 1)) * se
    iv = Intervals(
        0.045, ConfidenceInterval(0.045 - half, 0.045 + half), ConfidenceInterval(0.03, 0.06), n,
        pvalue=float(2 * stats.t.sf(4.5, n - 1)), skew_sigma=0.65,
    )  # fmt: skip
    verdict = classify_effect(iv, sign="+", paper_value=0.092, margin=0.02)
    assert iv.ci.excludes(0.0) and not iv.robust.excludes(0.0)
    assert verdict.kind == "inconclusive" and not verdict.signed and "the sign is withheld" in verdict.words


def test_a_whole_card_of_a_published_design_is_read_by_the_scorecard() -> None:
    from harness.bench.simulate.scorecard_cards import card_rates, design_from_published, simulated_card

    design = design_from_published(PUBLISHED / "long-cpu-2026-12-02")
    assert {("nano", "val_loss"), ("nano", "tau_mean")} <= set(design.sd) and design.template.height == 8
    frame = simulated_card(design, 4, np.random.default_rng(0), truth="null", noise="normal")
    assert frame.height == 32 and set(frame.get_column("variant")) == set(design.template.get_column("variant"))
    ega = frame.filter((pl.col("variant") == "ega") & (pl.col("tau_init") == 0.7))
    assert ega.get_column("tau_mean").mean() == pytest.approx(0.7, abs=0.1)  # null: tau stays where it started
    rates = card_rates(design, 4, cards=2, truth="papers", rng=1)
    assert rates["cards"] == 2 and "ega-gain-ega-paper" in rates["towards_paper"]
    assert 0.0 <= rates["contrast_rows_signed_after"] <= rates["contrast_rows_signed_before"] <= 1.0


def test_the_shipped_whole_cards_meet_issue_39s_rates() -> None:
    """The stored output of the cards part (benchmarks/calibration.py --part cards): null cards
    of both published designs show any signed verdict in at most 10 % of 500 cards at 4 seeds and
    5 % at 10, and the card's procedure never adds a sign (after <= before)."""
    rows = load_calibration()["cards"]
    nulls = [r for r in rows if r["truth"] == "null" and r["noise"] == "normal"]
    assert {r["design"] for r in nulls} == {"long-cpu", "ladder-cpu"}
    for r in nulls:
        assert r["any_signed"] <= (0.10 if r["seeds"] == 4 else 0.05), r
        assert r["cards"] >= (500 if r["seeds"] == 4 else 50), r
    for r in rows:
        assert r["contrast_rows_signed_after"] <= r["contrast_rows_signed_before"], r
    papers = [r for r in rows if r["truth"] == "papers" and r["seeds"] == 10]
    assert papers and all(r["towards_paper"]["ega-gain-ega-paper"] > 0.5 for r in papers)  # power is reported


def test_the_cards_part_keeps_each_chunk_and_adds_only_new_ones(tmp_path: Path, monkeypatch) -> None:
    """An interrupted or enlarged cards run resumes from its cache: the chunks already counted are
    read back (no simulation runs for them), a line cut short is simulated again, and the rates
    equal those of a run without the cache."""
    import harness.bench.simulate.scorecard_cards as sim

    cache = tmp_path / "chunks.jsonl"
    first = sim.designs_table(PUBLISHED, cards=1, power_cards=1, seeds=(4,), rng=3, jobs=1, cache=cache)
    lines = cache.read_text().splitlines()
    assert len(lines) == 6  # 2 designs x (null, skewed null, papers) at 4 seeds, one card each

    def no_simulation(*_args):
        raise AssertionError("a cached chunk was simulated again")

    monkeypatch.setattr(sim, "_chunk", no_simulation)
    assert sim.designs_table(PUBLISHED, cards=1, power_cards=1, seeds=(4,), rng=3, jobs=1, cache=cache) == first
    monkeypatch.undo()
    cache.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][: len(lines[-1]) // 2])  # cut by an interrupt
    assert sim.designs_table(PUBLISHED, cards=1, power_cards=1, seeds=(4,), rng=3, jobs=1, cache=cache) == first


@pytest.mark.slow
def test_a_whole_combined_card_is_simulated_and_read_by_the_scorecard_itself() -> None:
    """One card of the combined design at EGA +0.012 in every cell: the EGA claim's row as a whole
    excludes the papers' +0.103 and shows the positive sign (the benchmark's rates rest on this)."""
    import sys

    sys.path.insert(0, str(PUBLISHED.parent / "benchmarks"))
    from calibration import combined_studies

    from harness.bench.simulate.scorecard_cards import combined_counts

    counts = combined_counts(combined_studies(), truth="EGA +0.012 everywhere", noise="normal", cards=1, rng=3)
    assert counts["cards"] == 1 and counts["excluded"] == 1 and counts["positive"] == 1, counts
