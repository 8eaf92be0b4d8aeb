"""MLflow's first views, their parts read without a server (issue 41; the browser test is
tests/studies/test_studies_mlflow_first_view.py): each core effect over training as the parent
run's metrics, ending at the verdict (issue 54: in a real SQLite store), the end-of-run numbers
under names that sort after the curves (and the results rebuild reading both spellings), the
scorecard's link beside the report's in a study's verdict table, and no column of dashes in the
scorecard run's description."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from harness.analysis.over_training import effects_over_training
from harness.analysis.results import METRIC_COLUMNS
from harness.analysis.results_types import AnalysisSettings
from harness.mlflow_client import mlflow_metric_key
from harness.report import build_report, log_report, render_markdown
from harness.report.effect_metrics import effect_claim, effect_metrics
from harness.report.sections_training import curve_ends
from harness.scorecard.document import description_document
from harness.scorecard.tracking import LINK_PREFIX, with_scorecard_link

REPO = Path(__file__).resolve().parents[2]
PUBLISHED = REPO / "published"


@pytest.fixture(scope="module")
def ladder_effects() -> pl.DataFrame:
    return effects_over_training(pl.read_parquet(PUBLISHED / "ladder-cpu-2026-12-02" / "curves.parquet"))


def test_each_core_effect_and_its_band_at_every_evaluation_step(ladder_effects: pl.DataFrame) -> None:
    by_step = effect_metrics(ladder_effects)
    assert sorted(by_step) == sorted(ladder_effects.get_column("step").unique().to_list())
    last = by_step[max(by_step)]
    for claim in ("superadditivity", "ega-gain", "mope-gain", "ega-mope-gain"):
        for size in ("nano", "L3H4d96", "L4H4d128"):  # three sizes: the cell in the name
            name = f"effect/{claim}/{size}"
            assert last[f"{name}/lo"] <= last[name] <= last[f"{name}/hi"], name
    row = ladder_effects.filter(
        (pl.col("effect") == "ega vs baseline") & (pl.col("size") == "nano") & (pl.col("step") == max(by_step))
    ).row(0, named=True)
    assert last["effect/ega-gain/nano"] == pytest.approx(row["estimate"])
    # several cells: each cell's curve ends at its row of the effects per cell (the final windows)
    final = pl.read_parquet(PUBLISHED / "ladder-cpu-2026-12-02" / "report" / "effects.parquet")
    ends = effect_metrics(ladder_effects, curve_ends(ladder_effects, final, ["dataset", "size", "context_length"]))
    cell = final.filter((pl.col("effect") == "ega vs baseline") & (pl.col("size") == "nano")).row(0, named=True)
    end = ends[max(ends)]
    assert (end["effect/ega-gain/nano"], end["effect/ega-gain/nano/lo"]) == (cell["estimate"], cell["ci_low"])
    assert {k: v for k, v in ends.items() if k != max(ends)} == {k: v for k, v in by_step.items() if k != max(ends)}
    one_cell = effect_metrics(ladder_effects.filter(pl.col("size") == "nano"))
    assert "effect/ega-gain" in one_cell[max(one_cell)] and "effect/ega-gain/hi" in one_cell[max(one_cell)]
    assert effect_claim("interaction ega x mope") == "superadditivity"


def _periodic_curves(df: pl.DataFrame, steps: tuple[int, ...]) -> pl.DataFrame:
    """The study's curves: at each step the final loss plus what training has left and the noise
    of a few periodic windows, so that the last periodic point is not the verdict."""
    gen = np.random.default_rng(7)
    frames = [
        df.with_columns(
            step=pl.lit(step),
            val_loss=pl.col("val_loss") + 0.2 * (steps[-1] - step) / steps[-1] + gen.normal(0, 0.02, df.height),
        )
        for step in steps
    ]
    return pl.concat(frames).select(
        "study", "trial_id", "dataset", "size", "context_length", "variant", "seed", "step", "val_loss"
    )


def test_each_effects_chart_ends_at_its_verdict(
    tmp_path: Path, sqlite_tracking_uri: str, make_study, mlflow_study
) -> None:
    """The last ``effect/<claim>`` point and its band are the verdict's estimate and interval (the
    final evaluation's windows), the earlier points the periodic curve's; the figure is on the run."""
    from mlflow import MlflowClient

    df = make_study(seeds=4).with_columns(val_windows=pl.lit(1742))
    steps = (100, 200, 300)
    pid = mlflow_study(sqlite_tracking_uri, df)
    report = build_report(
        df,
        settings=AnalysisSettings(n_resamples=99),
        out_dir=tmp_path / "r",
        curves=_periodic_curves(df, steps),
        eval_windows=64,
    )
    log_report(report, run_id=pid, tracking_uri=sqlite_tracking_uri)
    client = MlflowClient(tracking_uri=sqlite_tracking_uri)
    assert "report/effects_over_training.png" in {f.path for f in client.list_artifacts(pid, "report")}
    periodic = pl.read_parquet(report.table_paths["effects_over_training"])
    verdicts = {v.effect: v for v in report.verdicts}
    labels = {"ega-gain": "ega gain", "mope-gain": "mope gain", "ega-mope-gain": "ega-mope gain"}
    for claim, label in {**labels, "superadditivity": "interaction (superadd.)"}.items():
        verdict = verdicts[label]
        history = {
            end: {m.step: m.value for m in client.get_metric_history(pid, f"effect/{claim}{end}")}
            for end in ("", "/lo", "/hi")
        }
        assert all(sorted(h) == list(steps) for h in history.values()), history
        ci = verdict.confidence_interval
        assert (history[""][300], history["/lo"][300], history["/hi"][300]) == (verdict.estimate, ci.low, ci.high)
        rows = periodic.filter(pl.col("effect").map_elements(effect_claim, return_dtype=pl.String) == claim).sort(
            "step"
        )
        assert [history[""][s] for s in steps[:-1]] == rows["estimate"].to_list()[:-1]  # the periodic curve
        assert rows["estimate"][-1] != verdict.estimate  # read on other windows: the end is the verdict's


def test_end_of_run_numbers_sort_after_the_curves_and_are_read_back_either_way() -> None:
    assert mlflow_metric_key("final/val_loss") == "final_val_loss" and mlflow_metric_key("val/loss") == "val/loss"
    # MLflow's run page: groups by the part before the last "/", sorted; slash-less names last
    assert "/" not in mlflow_metric_key("final/tokens_per_s")
    assert METRIC_COLUMNS["final_val_loss"] == METRIC_COLUMNS["final/val_loss"] == "val_loss"
    assert list(METRIC_COLUMNS).index("final_val_loss") < list(METRIC_COLUMNS).index("final/val_loss")


def test_the_scorecard_link_goes_beside_the_report_link() -> None:
    table = "| effect ([full report](#/r)) | estimate, 2 seeds |\n| :-- | --: |\n| ega gain | +0.01 |\n"
    once = with_scorecard_link(table, "#/s1")
    assert once.splitlines()[0] == "| effect ([full report](#/r), [scorecard](#/s1)) | estimate, 2 seeds |"
    assert with_scorecard_link(once, "#/s2") == with_scorecard_link(table, "#/s2")  # one link, the latest
    other = with_scorecard_link("a study without its report", "#/s")
    assert other.endswith(f"{LINK_PREFIX} [the scorecard that read this study last](#/s)")


@pytest.mark.parametrize("card", ["long-cpu-2026-12-02", "ladder-cpu-2026-12-02"])
def test_the_scorecard_description_has_no_column_of_dashes(card: str) -> None:
    table = pl.read_parquet(PUBLISHED / card / "scorecard" / "scorecard.parquet")
    text = render_markdown(description_document(table, [card.rsplit("-", 3)[0]]), max_chars=7000)
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines() if line.startswith("| ")]
    header, body = rows[0], rows[2:]
    assert body, text
    empty = [header[j] for j in range(len(header)) if all(r[j] in ("–", "", "-") for r in body)]
    assert not empty, f"columns with nothing in them: {empty}"
