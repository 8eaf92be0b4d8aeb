"""Each verdict kind comes out where a simulated study's known truth puts it, through the
real functions (simulated per-seed data -> the report's contrasts -> the scorecard); a margin
per claim; an interval that excludes 0 decides the sign; levels judged by the band and runs as
runs; replicated/reversed not claimed more often than the intervals' error rates allow."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from scipy import stats
from scorecard_sim import row_of, simulated_study, with_columns

from harness.analysis import t_interval
from harness.analysis.results_types import ConfidenceInterval
from harness.analysis.tau import prediction_interval
from harness.scorecard import scorecard_table
from harness.scorecard.compute import where_it_holds
from harness.scorecard.verdicts import (
    Intervals,
    classify_effect,
    classify_exact,
    classify_level,
    classify_trend,
    effect_kinds,
    level_kinds,
    trend_kinds,
)

# the EGA + MOPE paper's EGA gain: +0.092 nats, margin 0.02
CLAIM = "ega-gain-mope-paper"
DIRECTIONAL = {"replicated", "smaller", "larger", "reversed"}


def _iv(values, *, start: float = 0.0, runs: bool = False, band: tuple[float, float] = (0.30, 0.40)) -> Intervals:
    """The intervals the analysis gives for per-seed ``values`` (no shape check: normal by construction)."""
    v = np.asarray(values, dtype=float)
    ci, p = t_interval(v, popmean=start)
    eq, _ = t_interval(v, confidence=0.90)
    pi = prediction_interval(v) if runs else None
    stable = None if pi is None else pi.inside(*band)
    return Intervals(float(v.mean()), ci, eq, len(v), pvalue=p, sd=float(v.std(ddof=1)), prediction=pi, stable=stable)


@pytest.mark.parametrize(
    ("gain", "sd", "seeds", "kind"),
    [
        (0.092, 0.005, 10, "replicated"),
        (0.030, 0.005, 10, "smaller"),
        (0.200, 0.005, 10, "larger"),
        (-0.050, 0.005, 10, "reversed"),
        (0.000, 0.003, 10, "absent"),
        (0.012, 0.030, 10, "below"),  # the sign not shown, the paper's +0.092 excluded
        (0.010, 0.060, 3, "not resolvable"),
    ],
)
def test_each_kind_where_the_truth_puts_it(gain: float, sd: float, seeds: int, kind: str) -> None:
    study = simulated_study({"ega": gain, "mope": -0.03, "ega-mope": gain + 0.03}, sd=sd, seeds=seeds, rng=1)
    row = row_of(scorecard_table([study]), CLAIM)
    assert row["verdict_kind"] == kind, row["verdict"]
    assert row["verdict"].startswith(kind)
    assert row["n_seeds"] == seeds and row["paper_value"] == pytest.approx(0.092) and row["margin"] == 0.02
    assert row["at_paper_setting"] is True
    assert math.isclose(row["estimate"], gain, abs_tol=6 * sd)
    if kind in ("absent", "not resolvable"):
        assert "TOST" in row["interval"]
    elif kind in DIRECTIONAL:  # a sign rests on the t-interval and its skew-robust widening
        assert row["interval"].startswith(f"95% t-interval over {seeds} seeds (skew-robust: |t| > ")
        assert row["signed"] is True and row["robust_low"] <= row["ci_low"] and row["robust_high"] >= row["ci_high"]
    else:
        assert row["interval"] == f"95% t-interval over {seeds} seeds"
    if kind == "not resolvable":
        assert "seeds needed" in row["verdict"] and "observed seed sd" in row["verdict"]
    if seeds < 6:
        assert f"{seeds} seeds" in row["verdict"]


def test_a_small_claim_replicates_under_its_own_margin() -> None:
    """Truth +0.007 for the paper's +0.007 (convolution attention), 10 seeds, small sd: the
    claim's own margin (0.0035), not a study-wide 0.02, so the row is replicated, not absent."""
    study = simulated_study({"ega-mope": 0.10, "ega-mope-lagged": 0.107}, sd=0.001, seeds=10, rng=2)
    row = row_of(scorecard_table([study]), "lagged-attention-gain")
    assert row["margin"] == pytest.approx(0.0035)
    assert row["verdict_kind"] == "replicated", row["verdict"]
    assert row["ci_low"] > 0 and row["ci_low"] <= 0.007 <= row["ci_high"]


def test_an_effect_that_is_there_is_never_absent() -> None:
    """Truth +0.010 against the paper's +0.092 with an interval that excludes 0: smaller (the
    interval decides the sign), its words saying it is negligible by the claim's margin."""
    study = simulated_study({"ega": 0.010, "mope": -0.03, "ega-mope": 0.04}, sd=0.003, seeds=10, rng=3)
    row = row_of(scorecard_table([study]), CLAIM)
    assert row["ci_low"] > 0, row
    assert row["verdict_kind"] == "smaller", row["verdict"]
    assert "nonzero but within ±0.02: negligible by this claim's margin" in row["verdict"]
    reversed_row = row_of(
        scorecard_table([simulated_study({"ega": -0.010, "mope": -0.03, "ega-mope": 0.0}, sd=0.003, rng=3)]), CLAIM
    )
    assert reversed_row["verdict_kind"] == "reversed", reversed_row["verdict"]


def test_the_effect_rule_on_a_grid_of_intervals() -> None:
    """The vectorised rule against its definition: an interval excluding 0 always gets a
    directional kind; absent only with equivalence and an interval covering 0."""
    gen = np.random.default_rng(4)
    centre, half = gen.normal(0, 0.05, 5000), gen.uniform(0.001, 0.05, 5000)
    lo, hi = centre - half, centre + half
    elo, ehi = centre - 0.8 * half, centre + 0.8 * half
    kinds = effect_kinds(lo, hi, elo, ehi, sign="+", paper_value=0.092, margin=0.02)
    excludes = (lo > 0) | (hi < 0)
    assert set(kinds[excludes]) <= DIRECTIONAL
    assert not (set(kinds[~excludes]) & DIRECTIONAL)
    absent = kinds == "absent"
    assert np.all((elo[absent] >= -0.02) & (ehi[absent] <= 0.02) & ~excludes[absent])
    unresolvable = kinds == "not resolvable"
    assert np.all((ehi - elo)[unresolvable] > 0.04) and not np.any(excludes[unresolvable])


def test_a_null_claim_replicates_on_equivalence_and_a_bound_on_the_count() -> None:
    near = Intervals(0.001, None, None, 10)
    assert classify_effect(near, sign="0", paper_value=0.0, margin=0.02).kind == "inconclusive"
    iv = _iv([0.0, 0.002, -0.001, 0.003, 0.001])
    assert classify_effect(iv, sign="0", paper_value=0.0, margin=0.02).kind == "replicated"
    assert classify_effect(_iv([0.05, 0.06, 0.055, 0.052]), sign="0", paper_value=0.0, margin=0.02).kind == "larger"
    assert classify_exact(0.00258, sign="<", paper_value=0.0026, what="params").kind == "replicated"
    assert classify_exact(0.00261, sign="<", paper_value=0.0026, what="params").kind == "larger"
    assert classify_exact(12_432, sign="=", paper_value=12_480, what="params").kind == "smaller"


@pytest.mark.parametrize(
    ("values", "kind"),
    [
        ([0.001, -0.002, 0.002, 0.0, -0.001], "absent"),  # tau stayed at its start, 0
        ([0.10, 0.12, 0.11, 0.09, 0.10], "smaller"),  # moved, stopped short of 0.35 +- 0.05
        ([0.34, 0.37, 0.33, 0.36, 0.35], "replicated"),
        ([0.60, 0.62, 0.61, 0.63, 0.60], "larger"),
        ([-0.20, -0.22, -0.19, -0.21, -0.20], "reversed"),
        ([0.25, 0.33, 0.28, 0.35, 0.29], "inconclusive"),  # reaches into the band: overlap alone
    ],
)
def test_tau_against_its_band(values: list[float], kind: str) -> None:
    verdict = classify_level(_iv(values), paper_value=0.35, band=0.05, start=0.0, margin=0.05)
    assert verdict.kind == kind, verdict.words
    assert "started at 0" in verdict.words and "the paper's band 0.3 to 0.4" in verdict.words


def test_a_tau_interval_that_only_overlaps_the_band_is_not_replicated() -> None:
    """True tau 0.20 against 0.30-0.40 (seed sd 0.10): the interval often reaches into the band,
    which alone never makes it replicated."""
    gen = np.random.default_rng(5)
    values = gen.normal(0.20, 0.10, (4000, 4))
    ci, _ = t_interval(values, axis=1)
    eq, _ = t_interval(values, confidence=0.90, axis=1)
    kinds = level_kinds(ci.low, ci.high, eq.low, eq.high, start=0.0, band=(0.30, 0.40), margin=0.05)
    overlaps = (ci.high >= 0.30) & (ci.low <= 0.40)
    assert overlaps.mean() > 0.3  # the case the rule is about is common
    assert np.mean(kinds == "replicated") <= 0.05, np.mean(kinds == "replicated")
    inside = (eq.low >= 0.30) & (eq.high <= 0.40)
    assert not np.any((kinds == "replicated") & ~inside)


def test_tau_is_a_claim_about_runs() -> None:
    """Runs ~ N(0.35, 0.06): the mean is in the band, but 40 % of runs are not, and the
    prediction interval says so: not replicated, and the words give both intervals."""
    values = np.random.default_rng(6).normal(0.35, 0.06, 40)
    iv = _iv(values, runs=True)
    assert iv.equivalence.inside(0.30, 0.40) and not iv.stable
    verdict = classify_level(iv, paper_value=0.35, band=0.05, start=0.0, margin=0.05, runs=True)
    assert verdict.kind == "inconclusive", verdict.words
    assert "a new seed's run falls in" in verdict.words and "prediction interval" in verdict.words
    tight = _iv(np.random.default_rng(6).normal(0.35, 0.01, 10), runs=True)
    good = classify_level(tight, paper_value=0.35, band=0.05, start=0.0, margin=0.05, runs=True)
    assert good.kind == "replicated" and "inside the band too" in good.words


def test_a_level_that_starts_in_the_band_cannot_replicate() -> None:
    values = [0.35, 0.352, 0.349, 0.351, 0.348]
    verdict = classify_level(_iv(values, start=0.35), paper_value=0.35, band=0.05, start=0.35, margin=0.05)
    assert verdict.kind == "inconclusive" and "started inside the paper's band" in verdict.words


def test_open_fractions_of_a_tau_that_never_moved_get_no_directional_kind() -> None:
    """tau stays at its initial value (-0.5, 0, 0.35, 0.7, 1.0): the open fraction is then
    1 - Phi(tau_init), its start, and no initial value gives it a directional kind."""
    gen = np.random.default_rng(7)
    inits = (-0.5, 0.0, 0.35, 0.7, 1.0)
    rows = []
    for seed in range(6):
        for tau0 in inits:
            tau = tau0 + gen.normal(0, 1e-4)
            rows.append(
                {
                    "study": "tau",
                    "dataset": "tinyshakespeare",
                    "size": "paper",
                    "params": 4_767_000,
                    "context_length": 256,
                    "variant": "ega",
                    "seed": seed,
                    "tau_init": tau0,
                    "tau_mean": tau,
                    "open_fraction": float(stats.norm.sf(tau0)) + gen.normal(0, 0.004),
                    "val_loss": 1.4,
                    "steps": 5000,
                    "status": "finished",
                }
            )
    from harness.scorecard import StudyResults

    table = scorecard_table([StudyResults("tau", pl.DataFrame(rows))])
    for claim in ("open-fraction-36", "tau-035"):
        found = table.filter((pl.col("claim") == claim) & (pl.col("kind") == "cell"))
        assert found.height == len(inits)
        assert sorted(found.get_column("group").to_list()) == sorted(f"tau_init={t:g}" for t in inits)
        kinds = dict(zip(found.get_column("group"), found.get_column("verdict_kind"), strict=True))
        assert not set(kinds.values()) & DIRECTIONAL, kinds
    starts = table.filter(pl.col("claim") == "open-fraction-36").get_column("start").to_list()
    assert sorted(starts) == pytest.approx(sorted(float(stats.norm.sf(t)) for t in inits))


def test_tau_and_open_fraction_rows_from_a_study() -> None:
    gen = np.random.default_rng(5)
    study = simulated_study({"ega": 0.05, "mope": -0.03, "ega-mope": 0.08}, seeds=8)
    gated = pl.col("variant").str.contains("ega")
    study = with_columns(
        study,
        tau_mean=pl.when(gated).then(pl.Series(gen.normal(0.0, 0.002, study.frame.height))).otherwise(None),
        open_fraction=pl.when(gated).then(pl.Series(gen.normal(0.5, 0.004, study.frame.height))).otherwise(None),
        tau_init=0.0,
    )
    table = scorecard_table([study])
    tau, open_ = row_of(table, "tau-035"), row_of(table, "open-fraction-36")
    assert tau["verdict_kind"] == "absent", tau["verdict"]  # tau never left 0: the CPU measurement
    assert open_["verdict_kind"] == "absent", open_["verdict"]  # half the gates open: where it started
    assert tau["start"] == 0.0 and open_["start"] == pytest.approx(0.5)
    assert "started at 0" in tau["verdict"] and "the paper's band 0.3 to 0.4" in tau["verdict"]


def test_a_trend_row_says_where_the_claim_holds() -> None:
    sizes = {"nano": 100_000, "mini": 400_000, "paper": 1_600_000, "big": 6_400_000}
    study = simulated_study(
        {"ega": 0.092, "mope": -0.03, "ega-mope": 0.12},
        sizes=sizes,
        slope={"ega": -0.01},
        sd=0.004,
        seeds=8,
        smallest_effect=0.005,
        rng=2,  # a study whose per-seed slopes pass the shape check (it fires in 10 % of normal ones)
    )
    table = scorecard_table([study])
    trend = row_of(table, CLAIM, kind="trend")
    assert trend["factor"] == "params" and trend["levels"] == 4
    assert trend["verdict_kind"] == "shrinks", trend["verdict"]
    assert trend["estimate"] == pytest.approx(-0.01, abs=0.003)  # per doubling
    assert trend["where"].startswith("smaller at 3 of 4 sizes") and "replicated at the smallest" in trend["where"]
    flat = row_of(table, "mope-gain", kind="trend")
    assert flat["verdict_kind"] == "flat", flat["verdict"]


def test_no_two_level_trend_is_flat() -> None:
    """Two levels give a difference, whatever its interval: never flat, grows / shrinks only in
    its words and only when the difference excludes 0."""
    gen = np.random.default_rng(8)
    centre, half = gen.normal(0, 0.01, 2000), gen.uniform(0.0005, 0.02, 2000)
    kinds = trend_kinds(
        centre - half, centre + half, centre - half / 2, centre + half / 2, sign="+", margin=0.02, levels=2
    )
    assert set(kinds) == {"difference"}
    study = simulated_study(
        {"ega": 0.09, "mope": -0.03, "ega-mope": 0.12}, sizes={"nano": 100_000, "mini": 340_000}, sd=0.002
    )
    trends = scorecard_table([study]).filter(pl.col("kind") == "trend")
    assert trends.height and set(trends.get_column("verdict_kind").to_list()) == {"difference"}
    for row in trends.iter_rows(named=True):
        assert "2 levels: a difference, not a slope" in row["verdict"]
        excludes = row["ci_low"] > 0 or row["ci_high"] < 0
        assert ("grows" in row["verdict"] or "shrinks" in row["verdict"]) == excludes, row["verdict"]
    iv = Intervals(0.03, ConfidenceInterval(0.02, 0.04), ConfidenceInterval(0.022, 0.038), 10, pvalue=1e-5)
    assert classify_trend(iv, sign="+", margin=0.005, factor="params", levels=3).kind == "grows"
    weak = Intervals(0.03, ConfidenceInterval(0.001, 0.059), ConfidenceInterval(0.007, 0.053), 10, pvalue=0.044)
    withheld = classify_trend(weak, sign="+", margin=0.005, factor="params", levels=3)
    assert withheld.kind == "inconclusive" and "skew-robust" in withheld.words and not withheld.signed


def test_a_trend_claim_is_read_only_from_two_or_more_levels_of_its_factor() -> None:
    """EGA's benefit growing with the context is a trend: from one context length it is not
    measured (naming the study that holds one level and the one that would measure it), from
    two it is a difference, never the EGA gain of a cell."""
    gains = {"ega": 0.05, "mope": -0.03, "ega-mope": 0.08}
    one = scorecard_table([simulated_study(gains, contexts=(128,))])
    rows = one.filter(pl.col("claim") == "ega-benefit-grows-with-context")
    assert rows.get_column("kind").to_list() == ["not measured"]
    words = rows.row(0, named=True)["verdict"]
    assert "one level only, T=128" in words and "studies/context.yaml" in words
    two = scorecard_table([simulated_study(gains, contexts=(128, 256), slope=None)])
    rows = two.filter(pl.col("claim") == "ega-benefit-grows-with-context")
    assert rows.get_column("kind").to_list() == ["trend"] and rows.row(0, named=True)["factor"] == "context_length"
    assert rows.row(0, named=True)["verdict_kind"] == "difference"


def _batched(truth: float, reps: int, n: int, rng: np.random.Generator) -> list[Intervals]:
    values = rng.normal(truth, 1.0, size=(reps, n))  # (reps, seeds): one simulated study a row
    ci, _ = t_interval(values, confidence=0.95, axis=1)
    eq, _ = t_interval(values, confidence=0.90, axis=1)
    return [
        Intervals(float(values[i].mean()), type(ci)(ci.low[i], ci.high[i]), type(eq)(eq.low[i], eq.high[i]), n)
        for i in range(reps)
    ]


@pytest.mark.parametrize("n", [3, 10])
def test_replicated_and_reversed_are_calibrated_on_the_boundary(n: int) -> None:
    reps, rng = 4000, np.random.default_rng(11)
    se = lambda p: math.sqrt(p * (1 - p) / reps)  # noqa: E731 - Monte-Carlo error of a rate
    # truth 0: both a replication of a + paper value and a reversal are false claims (one tail each: 2.5 %)
    kinds = [classify_effect(iv, sign="+", paper_value=1.0, margin=0.2).kind for iv in _batched(0.0, reps, n, rng)]
    for kind in ("replicated", "reversed"):
        rate = kinds.count(kind) / reps
        assert rate <= 0.025 + 3 * se(0.025), (kind, rate)
    # truth = the paper's value: "smaller" or "larger" is the interval missing it (5 %)
    kinds = [classify_effect(iv, sign="+", paper_value=3.0, margin=0.2).kind for iv in _batched(3.0, reps, n, rng)]
    rate = (kinds.count("smaller") + kinds.count("larger")) / reps
    assert rate <= 0.05 + 3 * se(0.05), rate
    # truth on the equivalence margin: "absent" is claimed at most at the TOST's level (5 %)
    kinds = [classify_effect(iv, sign="+", paper_value=3.0, margin=1.0).kind for iv in _batched(1.0, reps, n, rng)]
    rate = kinds.count("absent") / reps
    assert rate <= 0.05 + 3 * se(0.05), rate


def test_a_cell_the_analysis_refuses_is_inconclusive_not_a_failure() -> None:
    study = simulated_study({"ega": 0.05, "mope": -0.03, "ega-mope": 0.08}, seeds=4)
    study = with_columns(  # tau logged, but no run finished: nothing to read
        study,
        tau_mean=pl.when(pl.col("variant") == "ega").then(0.1).otherwise(None),
        status=pl.when(pl.col("variant") == "ega").then(pl.lit("failed")).otherwise(pl.col("status")),
    )
    row = row_of(scorecard_table([study]), "tau-035")
    assert row["verdict_kind"] == "inconclusive" and "no finished run" in row["verdict"]
    assert row["settled"] == "not testable"


def test_where_counts_sizes_not_cells_when_corpora_differ_in_parameters() -> None:
    """One preset on two corpora has two parameter counts (the vocabulary's embedding); it is
    still one size, and a size whose corpora disagree is "mixed"."""
    vocab_extra = {"tinyshakespeare": 0, "enwik8": 12_000}
    base = {"nano": 100_000, "mini": 400_000, "small": 1_600_000, "paper": 6_400_000}
    kinds = {"nano": "replicated", "mini": "absent", "small": "absent", "paper": "absent"}
    rows = [
        {"size": size, "params": params + vocab_extra[corpus], "dataset": corpus, "verdict_kind": kinds[size]}
        for size, params in base.items()
        for corpus in vocab_extra
    ]
    assert where_it_holds(rows, "params") == "absent at 3 of 4 sizes; replicated at the smallest"
    rows[-1] = {**rows[-1], "verdict_kind": "replicated"}  # the largest size now disagrees between corpora
    assert where_it_holds(rows, "params") == "absent at 2 of 4 sizes; replicated at the smallest; mixed at the largest"
    contexts = [{"context_length": t, "verdict_kind": "absent"} for t in (128, 256, 256)]
    assert where_it_holds(contexts, "context_length") == "absent at 2 of 2 context lengths"
