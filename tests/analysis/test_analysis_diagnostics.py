"""The report labels a diagnostic's rows (ega-leaky: a gain the leak fakes, not a model's)."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from harness.analysis.results_types import AnalysisSettings
from harness.report import build_report, label_diagnostic_rows


def test_report_labels_every_row_of_a_diagnostic_and_no_other(tmp_path: Path, make_study) -> None:
    means = {"baseline": 1.47, "ega": 1.46, "mope": 1.49, "ega-mope": 1.45, "ega-leaky": 1.30}
    df = make_study(seeds=5, means=means)
    report = build_report(df, settings=AnalysisSettings(n_resamples=999), out_dir=tmp_path / "r")
    effects = pl.read_parquet(report.table_paths["effects"])
    labels = dict(zip(effects.get_column("treatment"), effects.get_column("effect"), strict=False))
    assert labels["ega-leaky"] == "ega-leaky vs baseline [leaks future tokens]"
    assert "leaks future tokens" not in labels["ega"] and "leaks future tokens" not in labels["mope"]
    assert "ega-leaky vs baseline [leaks future tokens]" in report.markdown


def test_an_inline_variant_with_a_leaky_gate_is_labelled_through_the_gate_column() -> None:
    df = pl.DataFrame(
        {"variant": ["baseline", "rope-leaky", "rope-ega"], "gate": ["none", "ega-leaky", "ega"], "seed": [0, 0, 0]}
    )
    effects = pl.DataFrame(
        {"treatment": ["rope-leaky", "rope-ega"], "effect": ["rope-leaky vs baseline", "rope-ega vs baseline"]}
    )
    labelled = label_diagnostic_rows(effects, df).get_column("effect").to_list()
    assert labelled == ["rope-leaky vs baseline [leaks future tokens]", "rope-ega vs baseline"]
    assert label_diagnostic_rows(effects, df.drop("gate")).equals(effects)  # no gate column, no registry name
