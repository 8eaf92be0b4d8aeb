"""The report's sections return their output and draw from generators of their own: each
section's resampling comes from ``section_rng(settings.seed, its name)``, whatever the other
sections draw (oracle: the same analysis called directly with that generator), and the
sequential design re-reads the primary verdict in the open (build_report applies it)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
from polars.testing import assert_frame_equal

from harness.analysis.contrasts import effects_table, main_effect
from harness.analysis.multibootstrap import multi_bootstrap
from harness.analysis.results_types import AnalysisSettings
from harness.analysis.sequential import SequentialSummary
from harness.report import build_report
from harness.report.sections import SectionDraft, joined, section_rng

SETTINGS = AnalysisSettings(n_resamples=199)


def _windows(df: pl.DataFrame, n: int = 8) -> pl.DataFrame:
    """Per-window losses of every trial: its loss plus window noise (the multi-bootstrap's input)."""
    gen = np.random.default_rng(5)
    rows = [
        {"variant": r["variant"], "seed": r["seed"], "window": w, "loss": r["val_loss"] + gen.normal(0.0, 0.02)}
        for r in df.iter_rows(named=True)
        for w in range(n)
    ]
    return pl.DataFrame(rows)


def test_a_section_draws_what_its_own_generator_gives(tmp_path: Path, make_study) -> None:
    """Oracles: the first pooled contrast, the effects per cell and the multi-bootstrap each
    equal the analysis called directly with a fresh generator of the section's name."""
    df = make_study(seeds=12, rng=4)
    windows = _windows(df)
    report = build_report(df, settings=SETTINGS, out_dir=tmp_path / "r", window_losses=windows)
    common = dict(metric=SETTINGS.metric, confidence=SETTINGS.confidence, n_resamples=SETTINGS.n_resamples)
    first = main_effect(df, SETTINGS.a, SETTINGS.base, rng=section_rng(SETTINGS.seed, "contrasts"), **common)
    assert report.results[SETTINGS.a].bootstrap_interval == first.bootstrap_interval
    assert report.results[SETTINGS.a].permutation_pvalue == first.permutation_pvalue
    cells = effects_table(
        df, settings=SETTINGS, rng=section_rng(SETTINGS.seed, "cells"), primary=SETTINGS.primary_or_default()
    )
    assert_frame_equal(report.results["effects"].select("boot_low", "boot_high"), cells.select("boot_low", "boot_high"))
    both = multi_bootstrap(
        windows, **SETTINGS.factorial, confidence=SETTINGS.confidence, rng=section_rng(SETTINGS.seed, "multi_bootstrap")
    )
    low, high = both.confidence_interval
    assert report.headline_metrics["superadditivity/multiboot_low"] == low
    assert report.headline_metrics["superadditivity/multiboot_high"] == high


def test_more_draws_in_one_section_leave_the_others_draws_alone(tmp_path: Path, make_study) -> None:
    """A primary hypothesis outside the standard contrasts makes the pooled contrasts draw once
    more (its own contrast); the multi-bootstrap, a later section, draws the same."""
    df = make_study(seeds=12, rng=4)
    windows = _windows(df)
    plain = build_report(df, settings=SETTINGS, out_dir=tmp_path / "plain", window_losses=windows)
    other = AnalysisSettings(n_resamples=199, primary={"treatment": "ega-mope", "control": "ega"})
    more = build_report(df, settings=other, out_dir=tmp_path / "more", window_losses=windows)
    assert "primary" in more.results and "primary" not in plain.results  # the extra draws
    for key in ("superadditivity/multiboot_low", "superadditivity/multiboot_high"):
        assert more.headline_metrics[key] == plain.headline_metrics[key]


def test_the_sequential_design_rereads_only_the_primary_verdict(tmp_path: Path, make_study) -> None:
    """The contrasts make the verdicts; the sequential design's reading replaces the primary's
    interval, test and words; the other verdicts keep their numbers (words: descriptive)."""
    df = make_study(seeds=8, rng=2)
    stop = SequentialSummary("stop when settled", 8.0, 8, "settled", "settled after 8 seeds")
    fixed = build_report(df, settings=SETTINGS, out_dir=tmp_path / "f")
    seq = build_report(df, settings=SETTINGS, out_dir=tmp_path / "s", sequential=stop)
    (primary,) = [v for v in seq.verdicts if v.role == "primary"]
    (fixed_primary,) = [v for v in fixed.verdicts if v.role == "primary"]
    assert primary.test == "anytime t" and primary.estimate == fixed_primary.estimate
    assert primary.confidence_interval != fixed_primary.confidence_interval  # the anytime-valid one is wider
    assert primary.confidence_interval.low < fixed_primary.confidence_interval.low
    others = {v.effect: v for v in seq.verdicts if v.role != "primary"}
    for v in fixed.verdicts:
        if v.role != "primary":
            assert others[v.effect].confidence_interval == v.confidence_interval
            assert others[v.effect].pvalue == v.pvalue


def test_outputs_join_in_order_and_a_draft_is_frozen_when_done() -> None:
    first, second = SectionDraft(), SectionDraft()
    first.notes.append("a")
    first.headline["x"] = 1.0
    second.notes.append("b")
    second.headline["y"] = 2.0
    out = joined([first.done(), second.done()])
    assert out.notes == ("a", "b") and list(out.headline) == ["x", "y"]
    done = first.done()
    first.notes.append("later")
    assert done.notes == ("a",)  # what a section returned does not change afterwards
    assert section_rng(0, "cells").integers(1 << 30) == section_rng(0, "cells").integers(1 << 30)
    assert section_rng(0, "cells").integers(1 << 30) != section_rng(0, "contrasts").integers(1 << 30)


def test_the_study_section_says_how_many_windows_the_final_losses_rest_on(tmp_path: Path, make_study) -> None:
    """The overview names the final evaluation's validation windows (per context length where
    they differ), and says so when a table written before they were kept cannot tell."""
    df = make_study(seeds=3, rng=1)
    text = build_report(df, settings=SETTINGS, out_dir=tmp_path / "old").markdown_path.read_text()
    assert "how many validation windows they rest on was not kept" in text
    df = df.with_columns(val_windows=pl.lit(870, dtype=pl.Int64))
    text = build_report(df, settings=SETTINGS, out_dir=tmp_path / "new").markdown_path.read_text()
    assert "final losses: each on 870 validation windows" in text


def test_a_study_without_a_factorial_gets_no_note_about_the_interaction(tmp_path: Path, make_study) -> None:
    """baseline and ega only: a study that named no factorial is told nothing about an interaction
    it never asked for; one that asked (the default, as ``harness report`` of a bare table) is told
    which factorial variants are missing."""
    df = make_study(seeds=3, means={"baseline": 1.50, "ega": 1.40}, rng=5)
    plain = build_report(df, settings=SETTINGS, out_dir=tmp_path / "plain", interaction_asked=False)
    assert not any("interaction" in note for note in plain.notes), plain.notes
    assert "interaction skipped" not in plain.markdown and "ega gain" in plain.verdict_table
    asked = build_report(df, settings=SETTINGS, out_dir=tmp_path / "asked")
    assert "interaction skipped: factorial variant(s) mope, ega-mope not in the table" in asked.notes
