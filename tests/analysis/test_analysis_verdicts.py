"""What each verdict may say, case by case: zero spread, incomplete cells, no bootstrap
below 10 seeds, the primary hypothesis and the Holm-adjusted headline family, divergence
as a finding, seeds needed at the smallest effect of interest, and the spec's
``analysis.primary`` / ``analysis.smallest_effect``."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import yaml
from numpy.testing import assert_allclose
from scipy import stats

from harness.analysis import (
    AnalysisSettings,
    PrimaryHypothesis,
    divergence_table,
    effect_trend,
    interaction_contrast,
    main_effect,
    primary_effect,
    sd_interval,
    seeds_needed,
)
from harness.analysis.divergence import DIVERGENCE_COLUMNS, SEED_TEST, seed_level_interval
from harness.bench.simulate import designs
from harness.bench.simulate.calibration import clopper_pearson_coverage
from harness.errors import InputError
from harness.report import Verdict, build_report, headline_family

FORBIDDEN = ("explains", "suffices", "converges whatever", "no effect", "no detectable")


def _with_status(df: pl.DataFrame, status: str, condition: pl.Expr) -> pl.DataFrame:
    return df.with_columns(pl.when(condition).then(pl.lit(status)).otherwise(pl.col("status")).alias("status"))


def _claims_nothing_forbidden(text: str) -> None:
    lowered = text.lower()
    assert not [w for w in FORBIDDEN if w in lowered], [w for w in FORBIDDEN if w in lowered]


# ----------------------------------------------------------------------------- zero spread
def test_zero_spread_is_no_test_possible_never_excludes_0(tmp_path: Path) -> None:
    per_seed = {
        "baseline": [1.5, 1.6, 1.7],
        "ega": [1.4, 1.5, 1.6],
        "mope": [1.5, 1.6, 1.7],
        "ega-mope": [1.3, 1.4, 1.5],
    }
    df = pl.DataFrame(
        [{"variant": v, "seed": s, "val_loss": x} for v, xs in per_seed.items() for s, x in enumerate(xs)]
    )
    for res in (main_effect(df, "ega", rng=0), interaction_contrast(df, rng=0)):
        assert res.n_seeds == 3 and res.confidence_interval is None and res.pvalue is None
        assert res.verdict == "no test possible (zero spread)"
    report = build_report(df, out_dir=tmp_path / "r")
    assert report.verdict_table.count("no test possible (zero spread)") == 4
    words = " ".join(v.verdict for v in report.verdicts)  # the table's reading paragraph names "superadditive"
    assert "excludes 0" not in words and "superadditive" not in words
    # the same for a trend: every seed's slope equal
    rows = [
        {"variant": v, "seed": s, "context_length": t, "val_loss": 1.5 + s - (0.1 * k if v == "ega" else 0.0)}
        for s in range(3)
        for k, t in enumerate((128, 256), start=1)
        for v in ("baseline", "ega")
    ]
    trend = effect_trend(pl.DataFrame(rows), against="context_length", treatment="ega")
    assert trend.confidence_interval is None and trend.verdict == "no test possible (zero spread)"


# ----------------------------------------------------------------------------- incomplete cells
def test_a_cell_missing_a_variant_for_every_seed_is_excluded_not_fatal(make_study) -> None:
    df = make_study(seeds=5, contexts=(128, 256), rng=3)
    df = _with_status(df, "failed", (pl.col("variant") == "mope") & (pl.col("context_length") == 256))
    res = interaction_contrast(df, rng=0)
    only_128 = interaction_contrast(df.filter(pl.col("context_length") == 128), rng=0)
    assert res.n_seeds == 5 and res.n_cells == 1 and res.dropped_seeds == ()
    assert_allclose(res.per_seed, only_128.per_seed)
    assert res.excluded_cells == ("tinyshakespeare/nano/T=256 (no finished mope)",)
    assert "excluded cell(s) tinyshakespeare/nano/T=256 (no finished mope)" in res.message
    assert res.n_dropped == 5 and res.confidence_interval is not None
    # ega's gain does not involve mope: both cells count
    assert main_effect(df, "ega", rng=0).n_cells == 2


def test_each_seed_uses_the_cells_complete_for_it(make_study) -> None:
    df = make_study(seeds=4, contexts=(128, 256), rng=4)
    broken = _with_status(
        df, "failed", (pl.col("variant") == "mope") & (pl.col("context_length") == 256) & (pl.col("seed") == 1)
    )
    res = interaction_contrast(broken, rng=0)
    cells = {t: interaction_contrast(df.filter(pl.col("context_length") == t), rng=0).per_seed for t in (128, 256)}
    expected = (cells[128] + cells[256]) / 2
    expected[1] = cells[128][1]  # seed 1 is complete at T=128 only
    assert_allclose(res.per_seed, expected, atol=1e-12)
    assert res.n_seeds == 4 and res.n_dropped == 1 and res.n_cells == 2
    assert "seed(s) 1 averaged over their complete cells only" in res.message
    assert "dropped 1 incomplete seed block(s) (seed 1 at tinyshakespeare/nano/T=256)" in res.message


# ----------------------------------------------------------------------------- bootstrap
def test_no_bootstrap_interval_in_the_report_below_10_seeds(tmp_path: Path, make_study) -> None:
    few = build_report(make_study(seeds=5, rng=1), settings=AnalysisSettings(n_resamples=499), out_dir=tmp_path / "a")
    assert not [k for k in few.headline_metrics if "boot" in k]
    assert pl.read_parquet(few.table_paths["effects"]).get_column("boot_low").null_count() == 16 // 4
    contrasts = pl.read_parquet(few.table_paths["contrasts"])
    assert contrasts.get_column("boot_low").is_null().all()
    assert "boot_low" not in few.markdown  # the shown table drops the empty columns
    many = build_report(make_study(seeds=12, rng=1), settings=AnalysisSettings(n_resamples=499), out_dir=tmp_path / "b")
    assert "superadditivity/boot_low" in many.headline_metrics
    assert pl.read_parquet(many.table_paths["contrasts"]).get_column("boot_low").is_not_null().all()


# ----------------------------------------------------------------------------- primary and Holm
def test_the_primary_row_is_unadjusted_and_the_rest_holm_adjusted(tmp_path: Path, make_study) -> None:
    from statsmodels.stats.multitest import multipletests

    df = make_study(seeds=4, rng=2)
    report = build_report(df, settings=AnalysisSettings(n_resamples=199), out_dir=tmp_path / "r")
    first, *rest = report.verdicts
    assert first.effect == "interaction (superadd.)" and first.role == "primary" and first.pvalue_holm is None
    raw = [v.pvalue for v in rest if v.pvalue is not None]
    assert_allclose([v.pvalue_holm for v in rest if v.pvalue is not None], multipletests(raw, method="holm")[1])
    lines = report.verdict_table.splitlines()
    assert lines[2].lstrip().startswith("interaction (superadd.) *")
    assert "p (test)" in lines[1] and "Holm p" in lines[1]
    assert "(t)" in report.verdict_table and "(TOST)" in report.verdict_table and "(diff t)" in report.verdict_table
    caption = "* primary hypothesis (unadjusted); Holm p: the other rows adjusted as one family"
    assert caption in " ".join(report.verdict_table.split())  # the table's caption, wrapped to the terminal
    table = pl.read_parquet(report.table_paths["verdicts"])
    assert table.get_column("role").to_list()[0] == "primary"
    assert set(table.get_column("test").drop_nulls()) >= {
        "paired t-test over seeds",
        "two one-sided t-tests (equivalence to the band)",
    }
    assert report.headline_metrics["primary/estimate"] == pytest.approx(
        report.headline_metrics["superadditivity/estimate"]
    )
    _claims_nothing_forbidden(report.markdown)
    assert "## Divergence" not in report.markdown  # no run diverged
    # no smallest effect of interest stated: the seeds-needed figure is labelled post-hoc and not a headline
    needed = pl.read_parquet(report.table_paths["seeds_needed"])
    assert "seeds_needed (post-hoc)" in needed.columns and "observed_effect (post-hoc)" in needed.columns
    assert not [k for k in report.headline_metrics if k.endswith("seeds_needed")]
    assert "No smallest effect of interest stated" in report.markdown


def test_a_main_effect_as_primary(tmp_path: Path, make_study) -> None:
    df = make_study(seeds=4, rng=2)
    gain = AnalysisSettings.from_mapping({"primary": {"treatment": "ega", "control": "baseline"}})
    report = build_report(df, settings=gain, out_dir=tmp_path / "g")
    assert report.verdicts[0].effect == "ega gain" and report.verdicts[0].role == "primary"
    interaction = next(v for v in report.verdicts if v.effect.startswith("interaction"))
    assert interaction.role == "secondary" and interaction.pvalue_holm is not None
    # a control other than the base: the primary gets its own row, from the public primary_effect
    other = AnalysisSettings(primary=PrimaryHypothesis("main_effect", "ega-mope", "ega"))
    report2 = build_report(df, settings=other, out_dir=tmp_path / "o")
    assert report2.verdicts[0].effect == "ega-mope vs ega" and report2.verdicts[0].role == "primary"
    expected = main_effect(df, "ega-mope", "ega", rng=0)
    assert primary_effect(df, other).estimate == pytest.approx(expected.estimate)
    assert report2.headline_metrics["primary/estimate"] == pytest.approx(expected.estimate)
    assert_allclose(primary_effect(df).per_seed, interaction_contrast(df).per_seed)


def test_a_claim_that_does_not_survive_holm_says_so() -> None:
    ci = (0.01, 0.2)
    verdicts = [
        Verdict("gain a", 0.1, ci, 0.03, 5, "better than control (95% CI excludes 0)", role="primary", claim=True),
        Verdict("gain b", 0.1, ci, 0.03, 5, "better than control (95% CI excludes 0)", claim=True),
        Verdict("gain c", 0.1, ci, 0.04, 5, "better than control (95% CI excludes 0)", claim=True),
        Verdict("gain d", 0.0, None, 0.5, 5, "not distinguishable from control"),
    ]
    primary, b, c, d = headline_family(verdicts)
    assert primary.verdict == "better than control (95% CI excludes 0)" and primary.pvalue_holm is None
    assert (b.pvalue_holm, c.pvalue_holm, d.pvalue_holm) == pytest.approx((0.09, 0.09, 0.5))
    # the claim words go; what is left is the estimate and its interval before adjustment
    assert b.verdict == "not significant after Holm (p=0.09): estimate +0.1 [+0.010, +0.200] before adjustment"
    assert b.kind == "not distinguishable" and "better" not in b.verdict
    assert d.verdict == "not distinguishable from control"


def test_spec_primary_and_smallest_effect_are_validated_naming_the_field(tmp_path: Path) -> None:
    from harness.cli import main
    from harness.studies.spec.study_spec import parse_spec

    base = {
        "name": "t",
        "datasets": ["tinyshakespeare"],
        "variants": ["baseline", "ega", "mope", "ega-mope"],
        "seeds": 2,
        "sizes": ["nano"],
        "context_lengths": [32],
    }
    analysis = {"primary": {"treatment": "ega", "control": "baseline"}, "smallest_effect": 0.02}
    good = parse_spec(yaml.safe_dump({**base, "analysis": analysis}))
    settings = AnalysisSettings.from_mapping(good.analysis_settings())
    assert settings.primary == PrimaryHypothesis("main_effect", "ega", "baseline") and settings.smallest_effect == 0.02
    default = AnalysisSettings.from_mapping(parse_spec(yaml.safe_dump(base)).analysis_settings())
    assert default.primary == PrimaryHypothesis("interaction")
    cases = [
        ({"primary": {"treatment": "rope", "control": "baseline"}}, "analysis.primary.treatment is 'rope'"),
        ({"primary": {"treatmnt": "ega", "control": "baseline"}}, "analysis.primary.treatmnt: unknown key"),
        ({"primary": 3}, "analysis.primary: expected 'interaction' or a main effect"),
        ({"primary": {"treatment": "ega", "control": "ega"}}, "treatment and control are the same variant"),
        ({"smallest_effect": -0.01}, "analysis.smallest_effect: Input should be greater than 0"),
        ({"smallest_effect": "small"}, "analysis.smallest_effect"),
    ]
    for analysis, needle in cases:
        spec = tmp_path / "bad.yaml"
        spec.write_text(yaml.safe_dump({**base, "analysis": analysis}))
        with pytest.raises(SystemExit) as exit_info:
            main(["run", str(spec), "--dry-run"])
        assert exit_info.value.code == 2, analysis
        with pytest.raises(InputError, match="bad.yaml") as err:
            parse_spec(spec.read_text(), source=str(spec))
        assert needle in str(err.value), (needle, str(err.value))
    no_factorial = {**base, "variants": ["ega", "ega-mope"], "analysis": {"primary": "interaction"}}
    with pytest.raises(InputError, match="analysis.primary is 'interaction', but the study has no 2x2 factorial"):
        parse_spec(yaml.safe_dump(no_factorial))
    with pytest.raises(InputError, match="smallest_effect"):
        AnalysisSettings(smallest_effect=0.0)


# ----------------------------------------------------------------------------- divergence
def test_divergence_table_is_clopper_pearson_and_a_sign_flip_test_per_seed(make_study) -> None:
    df = make_study(seeds=6, rng=5)
    df = _with_status(df, "diverged", (pl.col("variant") == "ega") & (pl.col("seed") < 4))
    df = _with_status(df, "failed", (pl.col("variant") == "mope") & (pl.col("seed") == 0))
    table = divergence_table(df)
    assert table.columns == list(DIVERGENCE_COLUMNS)
    rows = {r["variant"]: r for r in table.iter_rows(named=True)}
    ega = rows["ega"]
    # one run per seed: the seed-level interval is the exact binomial one
    ci = stats.binomtest(4, 6).proportion_ci(confidence_level=0.95, method="exact")
    assert (ega["n_runs"], ega["n_diverged"], ega["n_seeds"], ega["rate"]) == (6, 4, 6, pytest.approx(4 / 6))
    assert (ega["ci_low"], ega["ci_high"]) == pytest.approx((ci.low, ci.high))
    # per-seed differences (1, 1, 1, 1, 0, 0): of the 16 sign patterns of the four non-zero
    # ones, 2 reach |mean| >= 4/6
    assert ega["pvalue"] == pytest.approx(2 / 16) and ega["test"] == SEED_TEST
    assert rows["mope"]["n_runs"] == 5  # the failed run says nothing about the variant
    assert rows["baseline"]["pvalue"] is None and rows["baseline"]["ci_low"] == 0.0
    assert divergence_table(df, control=None).get_column("pvalue").is_null().all()
    # without seeds the runs are the units: Fisher's exact test, said in the test column
    runs = divergence_table(df.drop("seed")).row(by_predicate=pl.col("variant") == "ega", named=True)
    assert runs["pvalue"] == pytest.approx(stats.fisher_exact([[4, 2], [0, 6]]).pvalue) and "Fisher" in runs["test"]
    with pytest.raises(InputError, match="confidence"):
        divergence_table(df, confidence=95)


def test_several_runs_per_seed_count_the_seed_once() -> None:
    """3 seeds x 4 cells: seed 0 diverges in every cell, the others never. Runs as units
    would give 4 of 12; the seed-level interval uses k = 1 of n = 3."""
    rows = [
        {"variant": v, "seed": s, "cell": c, "status": "diverged" if (v == "ega" and s == 0) else "finished"}
        for v in ("baseline", "ega")
        for s in range(3)
        for c in range(4)
    ]
    ega = divergence_table(pl.DataFrame(rows)).row(1, named=True)
    ci = stats.binomtest(1, 3).proportion_ci(confidence_level=0.95, method="exact")
    assert (ega["n_runs"], ega["n_diverged"], ega["n_seeds"]) == (12, 4, 3)
    assert (ega["ci_low"], ega["ci_high"]) == pytest.approx((ci.low, ci.high))
    assert seed_level_interval(0.5, 3) == pytest.approx(
        (stats.beta.ppf(0.025, 0.5, 3.5), stats.beta.ppf(0.975, 1.5, 2.5))
    )


@pytest.mark.parametrize("n", [5, 10])
def test_clustered_divergence_keeps_the_level_and_the_coverage(n: int) -> None:
    """Intra-seed correlation 0.5 across 6 cells, no true difference: the seed-level
    interval covers at least 95 % and the per-seed sign-flip test rejects at most 5 %
    (run-level counting: the interval covers about 72 %, Fisher rejects about 20 %)."""
    reps = 400
    gen = np.random.default_rng(60 + n)
    se = 3.5 * math.sqrt(0.05 * 0.95 / reps)
    assert designs.seed_divergence_coverage(n, reps, gen) >= 0.95 - se
    assert designs.seed_divergence_false_positive(n, reps, gen) <= 0.05 + se
    assert designs.seed_divergence_coverage(n, reps, gen, by_seed=False) < 0.85


@pytest.mark.parametrize("n", [2, 3, 5, 10, 20])
def test_clopper_pearson_covers_at_least_95_percent_for_every_rate(n: int) -> None:
    """Exact, not simulated: the worst coverage over rates 0.01..0.99."""
    assert clopper_pearson_coverage(n) >= 0.95


def test_report_shows_divergence_and_conditions_the_contrasts_on_survival(tmp_path: Path, make_study) -> None:
    df = _with_status(make_study(seeds=4, rng=6), "diverged", (pl.col("variant") == "ega") & (pl.col("seed") == 2))
    report = build_report(df, settings=AnalysisSettings(n_resamples=199), out_dir=tmp_path / "d")
    assert "## Divergence" in report.markdown and "divergence" in report.table_paths
    assert report.headline_metrics["ega/divergence_rate"] == pytest.approx(0.25)
    gain = next(v for v in report.verdicts if v.effect == "ega gain")
    assert "; conditional on the runs that converged (1 diverged)" in gain.verdict
    mope = next(v for v in report.verdicts if v.effect == "mope gain")
    assert "conditional" not in mope.verdict  # mope and baseline never diverged


# ----------------------------------------------------------------------------- seeds needed
def test_seeds_needed_at_the_smallest_effect_with_a_range_from_the_sd() -> None:
    from statsmodels.stats.power import TTestPower

    lo, hi = sd_interval(1.0, 2)  # 3 seeds
    assert (lo, hi) == pytest.approx((math.sqrt(2 / stats.chi2.ppf(0.975, 2)), math.sqrt(2 / stats.chi2.ppf(0.025, 2))))
    assert 0.5 < lo < 0.55 and 6.0 < hi < 6.5  # the "a factor of 0.5 to 6"
    per_seed = {"baseline": [1.50, 1.52, 1.49], "ega": [1.46, 1.50, 1.47]}
    df = pl.DataFrame(
        [{"variant": v, "seed": s, "val_loss": x} for v, xs in per_seed.items() for s, x in enumerate(xs)]
    )
    res = main_effect(df, "ega", rng=0)
    need = seeds_needed(res, effect=0.02)
    assert not need.post_hoc and need.sd_df == 2
    assert_allclose(need.sd_interval, sd_interval(res.sd, 2), rtol=1e-12)

    def solve(sd: float) -> int:
        return max(2, math.ceil(TTestPower().solve_power(effect_size=0.02 / sd, power=0.8, alpha=0.05)))

    assert need.n_seeds == solve(res.sd)
    assert need.n_seeds_range == (solve(need.sd_interval.low), solve(need.sd_interval.high))
    assert need.n_seeds_range[0] <= need.n_seeds <= need.n_seeds_range[1]
    post = seeds_needed(res)
    assert post.post_hoc and post.effect == pytest.approx(res.estimate)


def test_report_plans_seeds_at_the_smallest_effect(tmp_path: Path, make_study) -> None:
    df = make_study(seeds=3, rng=8)
    planned = build_report(df, settings=AnalysisSettings(smallest_effect=0.02, n_resamples=199), out_dir=tmp_path / "p")
    table = pl.read_parquet(planned.table_paths["seeds_needed"])
    assert {"smallest_effect", "seeds_needed", "seeds_needed_low", "seeds_needed_high", "sd_ci_low"} <= set(
        table.columns
    )
    assert table.get_column("smallest_effect").to_list() == [0.02] * table.height
    assert "superadditivity/seeds_needed" in planned.headline_metrics
    assert "smallest effect of interest, 0.02" in planned.markdown


def test_harness_report_reads_primary_and_smallest_effect_from_the_spec(
    tmp_path: Path, sqlite_tracking_uri: str, make_study, mlflow_study, capsys
) -> None:
    from harness.cli import main

    spec = "name: synthetic\nanalysis:\n  primary: {treatment: ega, control: baseline}\n  smallest_effect: 0.03\n"
    mlflow_study(sqlite_tracking_uri, make_study(seeds=3, rng=9), spec_yaml=spec)
    with pytest.raises(SystemExit) as exit_info:
        main(["report", "synthetic", "--tracking-uri", sqlite_tracking_uri, "--out", str(tmp_path / "o"), "--no-log"])
    assert exit_info.value.code in (0, None)
    out = capsys.readouterr().out
    assert " ega gain *" in out
    needed = pl.read_parquet(tmp_path / "o" / "seeds_needed.parquet")
    assert needed.get_column("smallest_effect").to_list()[0] == 0.03
    assert np.isfinite(needed.get_column("seed_sd").to_numpy()).all()
