"""The report's tables, rendered by great-tables: the verdict table (primary row marked,
verdicts coloured by the kind the statistics gave them, never by their words), the other
tables (intervals, units, bits, grouping by cell, p-values as the terminal writes them),
the page self-contained; and the parent run's markdown description."""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import polars as pl
import pytest
from report_pages import MINUS
from report_pages import cell_background as _background
from report_pages import html_tables as _tables
from report_pages import table_cell as _cell

from harness.analysis import AnalysisSettings, interaction_contrast, main_effect
from harness.analysis.results_types import (
    NOT_DISTINGUISHABLE,
    NOT_TESTABLE,
    SETTLED,
    ConfidenceInterval,
    ContrastResult,
    format_interval,
    format_pvalue,
)
from harness.report import (
    DESCRIPTION_MAX_CHARS,
    Report,
    Verdict,
    build_report,
    headline_family,
    parent_description,
)
from harness.report.html import KIND_COLOURS, strip_external_resources, table_html
from harness.report.verdict import verdict_table


def _gt(text: str) -> str:
    return text.replace("-", MINUS)


# ----------------------------------------------------------------------------- kinds
def test_verdict_kinds_follow_the_statistics(tmp_path: Path, make_study) -> None:
    """ega helps (its interval excludes 0: settled), mope does nothing (not
    distinguishable); one seed: nothing testable. Oracle: the contrasts themselves."""
    means = {"baseline": 1.50, "ega": 1.40, "mope": 1.50, "ega-mope": 1.40}
    df = make_study(seeds=6, means=means, rng=3)
    report = build_report(df, settings=AnalysisSettings(n_resamples=99), out_dir=tmp_path / "r")
    by_effect = {v.effect: v for v in report.verdicts}
    oracle = {
        "interaction (superadd.)": interaction_contrast(df, rng=0),
        "ega gain": main_effect(df, "ega", "baseline", rng=0),
        "mope gain": main_effect(df, "mope", "baseline", rng=0),
    }
    for label, res in oracle.items():
        v = by_effect[label]
        settled = res.confidence_interval.excludes(0.0) and (v.role == "primary" or v.pvalue_holm < 0.05)
        assert v.kind == (SETTLED if settled else NOT_DISTINGUISHABLE), (label, v)
        assert v.unit == "nats"
    assert by_effect["ega gain"].kind == SETTLED and by_effect["mope gain"].kind == NOT_DISTINGUISHABLE
    tau = report.results["tau"]
    assert by_effect["tau"].kind == (SETTLED if tau.equivalent else NOT_DISTINGUISHABLE)
    verdicts = pl.read_parquet(report.table_paths["verdicts"])
    assert verdicts["kind"].to_list() == [v.kind for v in report.verdicts]

    one_seed = build_report(make_study(seeds=1, means=means), out_dir=tmp_path / "one")
    assert one_seed.verdicts and {v.kind for v in one_seed.verdicts} == {NOT_TESTABLE}

    # the per-cell table carries the kind of each row, after Holm's adjustment
    effects = pl.read_parquet(report.table_paths["effects"])
    for row in effects.iter_rows(named=True):
        settled = row["ci_low"] > 0 or row["ci_high"] < 0
        assert row["verdict_kind"] == (SETTLED if settled and row["reject_holm"] else NOT_DISTINGUISHABLE), row


def test_the_primary_reads_the_same_in_every_table(tmp_path: Path, make_study) -> None:
    """One cell: the per-cell table's interaction is the primary hypothesis itself, marked and
    unadjusted there as in the verdict table (same p, same kind), never "not significant after
    Holm" beside a settled headline; the other rows of the cell stay in the Holm family."""
    means = {"baseline": 1.50, "ega": 1.45, "mope": 1.47, "ega-mope": 1.395}
    df = make_study(seeds=6, means=means, rng=5)
    settings = AnalysisSettings(n_resamples=99, primary="interaction")
    report = build_report(df, settings=settings, out_dir=tmp_path / "r")
    (headline,) = [v for v in report.verdicts if v.role == "primary"]
    effects = pl.read_parquet(report.table_paths["effects"])
    (cell,) = effects.filter(pl.col("kind") == "interaction").iter_rows(named=True)
    assert cell["role"] == "primary" and cell["pvalue_holm"] is None
    assert cell["pvalue"] == pytest.approx(headline.pvalue) and cell["verdict_kind"] == headline.kind
    assert "after Holm" not in cell["verdict"]
    others = effects.filter(pl.col("role") == "secondary")
    assert others.height == 3 and others.get_column("pvalue_holm").null_count() == 0
    from statsmodels.stats.multitest import multipletests

    want = multipletests(others.get_column("pvalue").to_numpy(), method="holm")[1]
    assert others.get_column("pvalue_holm").to_list() == pytest.approx(list(want))


def test_a_claim_lost_to_holm_is_not_settled() -> None:
    ci = ConfidenceInterval(0.01, 0.2)
    rows = [
        Verdict("primary", 0.1, ci, 0.04, 5, "better than control (95% CI excludes 0)", role="primary", claim=True),
        Verdict("a", 0.1, ci, 0.04, 5, "better than control (95% CI excludes 0)", claim=True),
        Verdict("b", 0.1, ci, 0.03, 5, "better than control (95% CI excludes 0)", claim=True),
        Verdict("c", 0.0, None, None, 1, "no test possible (1 seed)"),
    ]
    assert [v.kind for v in rows] == [SETTLED, SETTLED, SETTLED, NOT_TESTABLE]  # derived when not given
    adjusted = headline_family(rows)
    assert adjusted[0].kind == SETTLED and adjusted[0].pvalue_holm is None  # the primary: unadjusted
    assert [v.kind for v in adjusted[1:]] == [NOT_DISTINGUISHABLE, NOT_DISTINGUISHABLE, NOT_TESTABLE]
    assert all("not significant after Holm" in v.verdict for v in adjusted[1:3])
    with pytest.raises(ValueError, match="kind"):
        Verdict("x", 0.0, None, None, 1, "?", kind="maybe")


# ----------------------------------------------------------------------------- verdict table
def test_verdict_colours_come_from_the_kind_not_the_words() -> None:
    ci = ConfidenceInterval(0.05, 0.15)
    words = "superadditive (95% CI excludes 0)"
    verdicts = [
        Verdict("interaction (superadd.)", 0.1, ci, 0.01, 5, words, role="primary", kind=NOT_TESTABLE, unit="nats"),
        Verdict("ega gain", -0.02, ci, 0.2, 5, "no test possible (zero spread)", kind=SETTLED, unit="nats"),
        Verdict("tau", 0.35, None, None, 1, "no test possible (1 seed)", signed=False, test="TOST"),
    ]
    (table,) = _tables(table_html(verdict_table(verdicts, confidence=0.9)))
    assert "gt_table" in table["class"]
    assert table["labels"] == ["effect", "estimate", "90% CI", "p (test)", "Holm p", "seeds", "verdict"]
    primary, ega, tau = table["rows"]
    # Bold means settled in every rendering: the primary row is marked by its "*" only (its
    # verdict is not testable here), the settled verdict of ega is bold, nothing else is.
    assert primary[0]["text"] == "interaction (superadd.) *"
    assert all("bold" not in c["style"] for c in primary + tau)
    assert [c for c in ega if "bold" in c["style"]] == [_cell(ega, "verdict")]
    for row, kind in ((primary, NOT_TESTABLE), (ega, SETTLED), (tau, NOT_TESTABLE)):
        assert _background(_cell(row, "verdict")) == KIND_COLOURS[kind][0]
    assert _cell(primary, "estimate")["text"] == "+0.1000 nats"  # the unit merged into the estimate
    assert _cell(ega, "estimate")["text"] == f"{MINUS}0.0200 nats"
    assert _cell(primary, "ci_low")["text"] == "[+0.0500, +0.1500]"
    assert _cell(primary, "pvalue")["text"] == "0.01 (t)"
    assert _cell(tau, "estimate")["text"] == "0.3500"  # unsigned
    assert _cell(tau, "ci_low")["text"] == "n/a" and _cell(tau, "pvalue")["text"] == "n/a"


def test_report_page_renders_every_table_with_great_tables(tmp_path: Path, make_study) -> None:
    df = make_study(seeds=5, contexts=(128, 256), rng=7)
    diverged = (pl.col("variant") == "mope") & (pl.col("seed") == 4) & (pl.col("context_length") == 256)
    df = df.with_columns(pl.when(diverged).then(pl.lit("diverged")).otherwise(pl.col("status")).alias("status"))
    report = build_report(df, settings=AnalysisSettings(n_resamples=99, smallest_effect=0.02), out_dir=tmp_path / "rep")
    page = report.html_path.read_text()
    assert "<pre" not in page  # no preformatted text block: a real table
    assert not re.search(r"@import|<link|<script|url\(|https?://", page), "the page loads something from outside"
    tables = _tables(page)
    assert len(tables) >= 6 and all("gt_table" in t["class"] for t in tables)
    verdicts = tables[0]
    assert [r[0]["text"] for r in verdicts["rows"]] == [
        f"{v.effect} *" if v.role == "primary" else v.effect for v in report.verdicts
    ]
    for row, v in zip(verdicts["rows"], report.verdicts, strict=True):
        assert _background(_cell(row, "verdict")) == KIND_COLOURS[v.kind][0]
        assert _cell(row, "verdict")["text"] == v.verdict
        assert _cell(row, "ci_low")["text"] == _gt(format_interval(v.confidence_interval, v.signed, 4))
        assert _cell(row, "pvalue")["text"] == f"{format_pvalue(v.pvalue)} ({v.test})"

    # the contrasts: a loss effect in nats with its value in bits beside it, one interval column
    contrasts = next(t for t in tables if "bits" in t["labels"] and not t["groups"])
    assert {"effect", "estimate", "nats", "bits", "95% CI (nats)", "p", "permutation p"} <= set(contrasts["labels"])
    pooled = {r.name: r for r in report.results.values() if isinstance(r, ContrastResult)}
    for row in contrasts["rows"]:
        res = pooled[row[0]["text"]]
        assert _cell(row, "estimate")["text"] == _gt(f"{res.estimate:+.4f}")
        assert _cell(row, "estimate__bits")["text"] == _gt(f"{res.estimate / math.log(2):+.4f}")
        assert _cell(row, "ci_low")["text"] == _gt(format_interval(res.confidence_interval, True, 4))
        assert _background(_cell(row, "verdict")) == KIND_COLOURS[res.verdict_kind][0]

    # the effects per cell, grouped by cell
    effects = pl.read_parquet(report.table_paths["effects"])
    per_cell = next(t for t in tables if t["groups"])
    assert per_cell["groups"] == [f"tinyshakespeare / nano / T={t}" for t in (128, 256)]
    assert len(per_cell["rows"]) == effects.height
    for row, want in zip(per_cell["rows"], effects.iter_rows(named=True), strict=True):
        primary = want["role"] == "primary"  # the interaction: marked, and unadjusted as in the verdict table
        assert row[0]["text"] == want["effect"] + (" *" if primary else "")
        assert (want["pvalue_holm"] is None) == primary
        if not primary:
            assert _cell(row, "pvalue_holm")["text"] == format_pvalue(want["pvalue_holm"])
        assert _background(_cell(row, "verdict")) == KIND_COLOURS[want["verdict_kind"]][0]

    # divergence rates as percentages, their exact interval too
    divergence = next(t for t in tables if "rate" in t["labels"])
    (mope,) = [r for r in divergence["rows"] if r[0]["text"] == "mope"]
    rate = pl.read_parquet(report.table_paths["divergence"]).filter(pl.col("variant") == "mope").row(0, named=True)
    assert _cell(mope, "rate")["text"] == f"{100 * rate['rate']:.1f}%"
    assert _cell(mope, "ci_low")["text"] == f"[{100 * rate['ci_low']:.1f}%, {100 * rate['ci_high']:.1f}%]"
    seeds = next(t for t in tables if "seed sd (nats)" in t["labels"])
    assert "smallest effect (nats)" in seeds["labels"] and "sd 95% CI (nats)" in seeds["labels"]


def test_strip_external_resources() -> None:
    page = (
        "<style>@import url('https://fonts.googleapis.com/css2?family=IBM+Plex+Mono');"
        "td{background:url(https://x.example/a.png)}</style><link rel='stylesheet' href='https://x.example/s.css'>"
        "<script src='https://x.example/s.js'></script><td style='color:red'>kept</td>"
    )
    out = strip_external_resources(page)
    assert "http" not in out and "<link" not in out and "<script" not in out
    assert "<td style='color:red'>kept</td>" in out


# ----------------------------------------------------------------------------- description
def _report(verdicts: list[Verdict], **kwargs) -> Report:
    return Report(Path("."), Path("report.html"), Path("summary.md"), "", {}, {}, {}, tuple(verdicts), "", **kwargs)


def test_parent_description_holds_the_verdict_table() -> None:
    ci = ConfidenceInterval(0.02, 0.1)
    verdicts = headline_family(
        [
            Verdict(
                "interaction (superadd.)",
                0.06,
                ci,
                0.01,
                5,
                "superadditive (95% CI excludes 0)",
                role="primary",
                claim=True,
                unit="nats",
            ),  # fmt: skip
            Verdict(
                "my_variant gain",
                -0.01,
                ConfidenceInterval(-0.05, 0.03),
                0.5,
                5,
                "not distinguishable from control",
                unit="nats",
            ),  # fmt: skip
            Verdict("tau", 0.3, None, None, 1, "no test possible (1 seed)", signed=False, test="TOST"),
        ]
    )
    text = parent_description(_report(verdicts, heading="demo — 5 seeds"), report_link="#/x/report.html")
    lines = text.splitlines()
    # the table alone, its first header linking the full report; the words shortened to the claim
    assert lines[0] == "| effect ([full report](#/x/report.html)) | estimate, 5 seeds | 95% CI | verdict |"
    assert lines[2] == (
        "| interaction (superadd.) \\* | +0.0600 nats | [+0.0200, +0.1000] | **superadditive (95% CI excludes 0)** |"
    )
    assert lines[3] == "| my\\_variant gain | -0.0100 nats | [-0.0500, +0.0300] | not distinguishable from control |"
    assert lines[4] == "| tau | 0.3000 | n/a | _no test possible (1 seed)_ |"
    assert len(lines) == 5

    # longer than MLflow keeps: the words are shortened, every row stays
    long = [dataclasses.replace(v, verdict=v.verdict + " and more" * 400) for v in verdicts * 4]
    text = parent_description(_report(long))
    assert len(text) <= DESCRIPTION_MAX_CHARS and text.count("\n| ") == 1 + len(long)  # rule, rows
