"""Each verdict kind comes out where a simulated study's known truth puts it, and
replicated/reversed are not claimed more often than the intervals' error rates allow when
the truth sits on the boundary."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from scorecard_sim import row_of, simulated_study

from harness.analysis import t_interval
from harness.scorecard import scorecard_table
from harness.scorecard.compute import where_it_holds
from harness.scorecard.verdicts import Intervals, classify_effect, classify_exact, classify_level, classify_trend

# the EGA + MOPE paper's EGA gain: +0.092 nats
CLAIM = "ega-gain-mope-paper"


@pytest.mark.parametrize(
    ("gain", "sd", "seeds", "kind"),
    [
        (0.092, 0.005, 10, "replicated"),
        (0.030, 0.005, 10, "smaller"),
        (0.200, 0.005, 10, "larger"),
        (-0.050, 0.005, 10, "reversed"),
        (0.000, 0.003, 10, "absent"),
        (0.010, 0.060, 3, "inconclusive"),
    ],
)
def test_each_kind_where_the_truth_puts_it(gain: float, sd: float, seeds: int, kind: str) -> None:
    study = simulated_study({"ega": gain, "mope": -0.03, "ega-mope": gain + 0.03}, sd=sd, seeds=seeds)
    row = row_of(scorecard_table([study]), CLAIM)
    assert row["verdict_kind"] == kind, row["verdict"]
    assert row["verdict"].startswith(kind)
    assert row["n_seeds"] == seeds and row["paper_value"] == pytest.approx(0.092)
    assert row["at_paper_setting"] is True
    assert math.isclose(row["estimate"], gain, abs_tol=6 * sd)
    if kind == "absent":
        assert "TOST" in row["interval"] and row["equivalence_high"] <= 0.02
    else:
        assert row["interval"] == f"95% t-interval over {seeds} seeds"
    if seeds < 6:
        assert f"{seeds} seeds" in row["verdict"]


def test_not_measured_names_the_study_that_would() -> None:
    study = simulated_study({"ega": 0.09})  # no mope: the 2x2 claims cannot be read
    table = scorecard_table([study])
    row = row_of(table, "superadditivity", kind="not measured", reading="A")
    assert row["verdict_kind"] == "not measured" and row["study"] == "superadditivity"
    assert "studies/superadditivity.yaml" in row["verdict"] and row["estimate"] is None
    # every claim has at least one row
    claims = set(table.get_column("claim").to_list())
    from harness.scorecard import load_claims

    assert claims == {c.id for c in load_claims()}


def test_a_null_claim_replicates_on_equivalence_and_a_bound_on_the_count() -> None:
    near = Intervals(0.001, None, None, 10)
    assert classify_effect(near, sign="0", paper_value=0.0, margin=0.02).kind == "inconclusive"
    iv = Intervals(
        0.001, *[t_interval(np.array([0.0, 0.002, -0.001, 0.003, 0.001]), confidence=c)[0] for c in (0.95, 0.9)], 5
    )
    assert classify_effect(iv, sign="0", paper_value=0.0, margin=0.02).kind == "replicated"
    assert classify_exact(0.00258, sign="<", paper_value=0.0026, what="params").kind == "replicated"
    assert classify_exact(0.00261, sign="<", paper_value=0.0026, what="params").kind == "larger"
    assert classify_exact(12_432, sign="=", paper_value=12_480, what="params").kind == "smaller"


@pytest.mark.parametrize(
    ("values", "kind"),
    [
        ([0.001, 0.004, 0.002, 0.003, 0.0], "absent"),  # tau stayed at its start, 0
        ([0.10, 0.12, 0.11, 0.09, 0.10], "smaller"),  # moved, stopped short of 0.35 +- 0.05
        ([0.34, 0.37, 0.33, 0.36, 0.35], "replicated"),
        ([0.60, 0.62, 0.61, 0.63, 0.60], "larger"),
        ([-0.20, -0.22, -0.19, -0.21, -0.20], "reversed"),
    ],
)
def test_tau_against_its_band(values: list[float], kind: str) -> None:
    per_seed = np.array(values)
    iv = Intervals(float(per_seed.mean()), *[t_interval(per_seed, confidence=c)[0] for c in (0.95, 0.9)], 5)
    assert classify_level(iv, paper_value=0.35, band=0.05, null=0.0).kind == kind


def test_tau_and_open_fraction_rows_from_a_study() -> None:
    gen = np.random.default_rng(3)
    study = simulated_study({"ega": 0.05, "mope": -0.03, "ega-mope": 0.08}, seeds=8)
    frame = study.frame.with_columns(
        pl.when(pl.col("variant").str.contains("ega"))
        .then(pl.Series(gen.normal(0.003, 0.002, study.frame.height)))
        .otherwise(None)
        .alias("tau_mean"),
        pl.when(pl.col("variant").str.contains("ega"))
        .then(pl.Series(gen.normal(0.5, 0.004, study.frame.height)))
        .otherwise(None)
        .alias("open_fraction"),
        pl.lit(0.0).alias("tau_init"),
    )
    table = scorecard_table([type(study)("sim", frame, study.settings)])
    assert row_of(table, "tau-035")["verdict_kind"] == "absent"  # tau never left 0: the CPU measurement
    assert row_of(table, "open-fraction-36")["verdict_kind"] == "absent"  # half the gates open


def test_a_trend_row_says_where_the_claim_holds() -> None:
    sizes = {"nano": 100_000, "mini": 400_000, "paper": 1_600_000, "big": 6_400_000}
    study = simulated_study(
        {"ega": 0.092, "mope": -0.03, "ega-mope": 0.12},
        sizes=sizes,
        slope={"ega": -0.01},
        sd=0.004,
        seeds=8,
        smallest_effect=0.005,
    )
    table = scorecard_table([study])
    trend = row_of(table, CLAIM, kind="trend")
    assert trend["factor"] == "params" and trend["verdict_kind"] == "shrinks", trend["verdict"]
    assert trend["estimate"] == pytest.approx(-0.01, abs=0.003)  # per doubling
    assert trend["where"].startswith("smaller at 3 of 4 sizes") and "replicated at the smallest" in trend["where"]
    flat = row_of(table, "mope-gain", kind="trend")
    assert flat["verdict_kind"] == "flat"


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
    from harness.scorecard.compute import StudyResults

    study = simulated_study({"ega": 0.05, "mope": -0.03, "ega-mope": 0.08}, seeds=4)
    frame = study.frame.with_columns(  # tau logged, but no run finished: nothing to read
        pl.when(pl.col("variant") == "ega").then(0.1).otherwise(None).alias("tau_mean"),
        pl.when(pl.col("variant") == "ega").then(pl.lit("failed")).otherwise(pl.col("status")).alias("status"),
    )
    row = row_of(scorecard_table([StudyResults("sim", frame, study.settings)]), "tau-035")
    assert row["verdict_kind"] == "inconclusive" and "no finished run" in row["verdict"]


def test_a_trend_from_two_levels_is_worded_as_a_difference() -> None:
    from harness.analysis.results_types import ConfidenceInterval

    iv = Intervals(0.03, ConfidenceInterval(0.01, 0.05), ConfidenceInterval(0.015, 0.045), 10)
    two = classify_trend(iv, sign="+", margin=0.005, factor="params", levels=2)
    three = classify_trend(iv, sign="+", margin=0.005, factor="params", levels=3)
    assert two.kind == three.kind == "grows"
    assert "2 levels: a difference, not a slope" in two.words
    assert "not a slope" not in three.words


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
