"""``harness scorecard`` on a real tiny study (nano, 10 steps, local Ray, MLflow on SQLite):
a row for every claim, the files written, the run logged and linked; bad input exits 2
naming it, with nothing half-written."""

from __future__ import annotations

import io
from pathlib import Path

import harness_support
import polars as pl
import pytest

from harness.cli import main
from harness.mlflow_client import TrackingClient
from harness.scorecard import CLAIM_KINDS, SCORECARD_SCHEMA, load_claims

FACTORIAL = ["baseline", "ega", "mope", "ega-mope"]


def _run_cli(*args: str) -> int:
    try:
        main(list(args))
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


@pytest.fixture(scope="module")
def tiny_study(tmp_path_factory: pytest.TempPathFactory, shared_data_dir: Path, local_ray: None):
    """The tiny study with the papers' 2x2 (nano, T=32, 10 steps, 2 seeds), run for real."""
    from harness.studies.runner import run_study

    root = tmp_path_factory.mktemp("scorecard-study")
    # The final evaluation reads the curves' windows (by default it reads the whole split), so the
    # training rows' last step is the cells' reading.
    train = {**harness_support.TINY["train"], "final_eval_windows": harness_support.TINY["train"]["eval_windows"]}
    spec = harness_support.write_spec(root / "tiny.yaml", variants=FACTORIAL, name="tiny-scorecard", train=train)
    uri = f"sqlite:///{root / 'mlflow.db'}"
    outcome = run_study(
        spec, tracking_uri=uri, storage_path=str(root / "results"), stream=io.StringIO(), live=False, report=False
    )
    assert outcome.status == "finished", outcome
    return outcome, uri, root


@pytest.mark.slow
def test_a_finished_study_gives_a_row_for_every_claim(tiny_study, tmp_path: Path, capsys) -> None:
    outcome, _, _ = tiny_study
    out = tmp_path / "card"
    assert _run_cli("scorecard", "--from", str(outcome.study_dir), "--out", str(out), "--no-log") == 0
    printed = capsys.readouterr().out
    table = pl.read_parquet(out / "scorecard.parquet")
    claims = {c.id for c in load_claims()}
    assert set(table.get_column("claim").to_list()) == claims
    for claim in claims:
        assert claim in printed
    must = ["claim", "paper", "paper_value", "dataset", "size", "params", "context_length", "n_seeds", "estimate"]
    assert set(must + ["ci_low", "ci_high", "verdict", "verdict_kind", "kind"]) <= set(table.columns)
    reading = pl.col("reading").str.starts_with("A")
    superadditivity = table.filter(pl.col("claim") == "superadditivity").filter(reading)
    whole = superadditivity.filter(pl.col("kind") == "claim").row(0, named=True)  # the claim as a whole first
    assert whole["levels"] == 1 and whole["estimate"] is not None
    measured = superadditivity.filter(pl.col("kind") == "cell").row(0, named=True)
    assert measured["n_seeds"] == 2 and measured["size"] == "nano"
    assert measured["verdict_kind"] in CLAIM_KINDS and measured["verdict_kind"] != "not measured"
    assert table.schema == pl.Schema(SCORECARD_SCHEMA)  # the schema the typed row derives
    assert measured["at_paper_setting"] is False and "2 seeds" in measured["verdict"]
    assert (out / "scorecard.html").read_text().count("superadditivity") >= 1
    assert "| claim |" in (out / "scorecard.md").read_text()


CORE_READINGS = ("superadditivity", "ega-gain-mope-paper", "mope-gain", "ega-mope-gain", "tau-035", "open-fraction-36")


@pytest.mark.slow
def test_a_real_study_is_read_at_every_evaluation_with_its_figures(tiny_study, tmp_path: Path, capsys) -> None:
    """Issue 30: `training` rows over every evaluation step of the curves for the core claims,
    a figure per claim, `not predictable` (one size) with its reason; the report has them too."""
    outcome, uri, _ = tiny_study
    out = tmp_path / "card"
    assert _run_cli("scorecard", "--from", str(outcome.study_dir), "--out", str(out), "--no-log") == 0
    printed = capsys.readouterr().out
    table = pl.read_parquet(out / "scorecard.parquet")
    curves = pl.read_parquet(Path(outcome.study_dir) / "curves.parquet")
    steps = sorted(set(curves.get_column("step").to_list()))
    assert len(steps) >= 2
    for claim in CORE_READINGS:
        rows = table.filter((pl.col("claim") == claim) & (pl.col("kind") == "training"))
        rows = rows.filter(pl.col("reading").str.starts_with("A"))
        assert sorted(rows.get_column("step").to_list()) == steps, claim
        assert rows.get_column("stable_from").drop_nulls().len() == rows.height
        assert (out / f"training-{claim}.png").is_file()
    last = table.filter((pl.col("kind") == "training") & (pl.col("step") == steps[-1]))
    cells = table.filter(pl.col("kind") == "cell")
    for row in last.filter(pl.col("claim") == "superadditivity").iter_rows(named=True):
        cell = cells.filter((pl.col("claim") == "superadditivity") & (pl.col("reading") == row["reading"]))
        assert row["estimate"] == pytest.approx(cell.item(0, "estimate"), rel=1e-5)  # float32 in the curve
    predicted = table.filter((pl.col("claim") == "superadditivity") & (pl.col("kind") == "predicted")).row(
        0, named=True
    )
    assert predicted["verdict"].startswith("not predictable: 1 size measured; a prediction across sizes needs 3")
    assert "held since" in printed and "What was measured" in printed
    # a study folder written before curves.parquet existed: its curves are rebuilt from the
    # trials' reports, in memory (the folder is left as it is)
    import shutil

    old = tmp_path / "old-study"
    shutil.copytree(outcome.study_dir, old)
    (old / "curves.parquet").unlink()
    assert _run_cli("scorecard", "--from", str(old), "--out", str(tmp_path / "old-card"), "--no-log") == 0
    rebuilt = pl.read_parquet(tmp_path / "old-card" / "scorecard.parquet").filter(pl.col("kind") == "training")
    assert rebuilt.height == table.filter(pl.col("kind") == "training").height and not (old / "curves.parquet").exists()
    report = tmp_path / "report"
    args = ["report", "tiny-scorecard", "--from", str(outcome.study_dir), "--tracking-uri", uri, "--out", str(report)]
    assert _run_cli(*args, "--no-log", "--no-windows") == 0
    assert (report / "effects_over_training.png").is_file() and (report / "tau_over_training.png").is_file()
    assert "Over training" in (report / "report.html").read_text()


@pytest.mark.slow
def test_the_scorecard_run_is_logged_and_linked_from_the_study(tiny_study, tmp_path: Path, capsys) -> None:
    outcome, uri, _ = tiny_study
    code = _run_cli("scorecard", "--study", "tiny-scorecard", "--tracking-uri", uri, "--out", str(tmp_path / "c"))
    assert code == 0
    client = TrackingClient(uri)
    experiment = client.get_experiment_by_name("scorecard")
    runs = client.search_runs([experiment.experiment_id], filter_string="tags.`harness.role` = 'scorecard'")
    assert len(runs) == 1
    run = runs[0]
    # the printed link has its host (a terminal makes it clickable): where `harness ui` serves the store
    url = f"http://127.0.0.1:5000/#/experiments/{experiment.experiment_id}/runs/{run.info.run_id}?workflowType="
    assert f"View it: harness ui --tracking-uri {uri}  ->  {url}" in capsys.readouterr().out
    assert run.info.status == "FINISHED"
    assert run.info.run_name.startswith("scorecard 20") and run.info.run_name.endswith(" (tiny-scorecard)")
    assert run.data.tags["harness.read.tiny-scorecard"] == outcome.parent_run_id
    note = run.data.tags["mlflow.note.content"]
    assert "superadditivity" in note and "direction asserted against 0" in note and not note.endswith("…")
    names = {f.path for f in client.list_artifacts(run.info.run_id)}
    assert {"scorecard.html", "scorecard.parquet", "scorecard.md"} <= names
    # read from MLflow, the learned MOPE widths are there: the cluster claim is measured
    table = pl.read_parquet(tmp_path / "c" / "scorecard.parquet")
    clusters = table.filter(pl.col("claim") == "mope-four-scales").row(0, named=True)
    assert clusters["kind"] == "cell" and clusters["estimate"] >= 1 and "exact" in clusters["interval"]
    parent = client.get_run(outcome.parent_run_id).data.tags
    assert parent["harness.scorecard_run"] == run.info.run_id
    # the link opens MLflow's model-training view, as every run link the harness writes (this study
    # ran without its report: no verdict table to put it in, so the description's last line)
    assert parent["mlflow.note.content"].rstrip().endswith(f"runs/{run.info.run_id}?workflowType=machine_learning)")


@pytest.mark.slow
def test_a_study_read_from_its_folder_is_linked_to_the_scorecard(tiny_study, tmp_path: Path) -> None:
    # after the test above (one scorecard run already there): --from a study directory finds the
    # parent run its harness_study.json records and links it when logging into the same store
    outcome, uri, _ = tiny_study
    code = _run_cli("scorecard", "--from", str(outcome.study_dir), "--tracking-uri", uri, "--out", str(tmp_path / "c"))
    assert code == 0
    client = TrackingClient(uri)
    experiment = client.get_experiment_by_name("scorecard")
    runs = client.search_runs([experiment.experiment_id], order_by=["attributes.start_time DESC"])
    latest = runs[0]
    assert latest.data.tags["harness.read.tiny-scorecard"] == outcome.parent_run_id
    assert client.get_run(outcome.parent_run_id).data.tags["harness.scorecard_run"] == latest.info.run_id


@pytest.mark.slow
def test_every_trial_run_holds_its_resolved_params(tiny_study) -> None:
    """MLflow can compare and plot across scale on its own: no trial param is an unset override."""
    outcome, uri, _ = tiny_study
    client = TrackingClient(uri)
    runs = client.search_runs(
        [outcome.experiment_id], filter_string=f"tags.`mlflow.parentRunId` = '{outcome.parent_run_id}'"
    )
    assert len(runs) == 8
    for run in runs:
        params, tags = run.data.params, run.data.tags
        assert {k: params[k] for k in ("position", "gate", "scoring")} == {
            k: tags[k] for k in ("position", "gate", "scoring")
        }
        assert (params["n_layer"], params["n_head"], params["d_model"]) == ("2", "2", "64")
        assert params["context_length"] == "32" and params["attention_dropout"] == "0.0"
        assert int(params["num_parameters"]) == int(run.data.metrics["num_parameters"])
        assert "None" not in {params[k] for k in ("position", "gate", "scoring", "n_layer", "n_head", "d_model")}
    ega_mope = next(r for r in runs if r.data.tags["variant"] == "ega-mope").data.params
    assert (ega_mope["position"], ega_mope["gate"]) == ("mope", "ega")


def test_bad_input_exits_2_naming_it_and_writes_nothing(tmp_path: Path, capsys) -> None:
    out = tmp_path / "card"
    not_a_study = tmp_path / "folder"
    not_a_study.mkdir()
    assert _run_cli("scorecard", "--from", str(not_a_study), "--out", str(out), "--no-log") == 2
    assert "without results.parquet" in capsys.readouterr().err
    assert _run_cli("scorecard", "--from", str(tmp_path / "missing"), "--out", str(out)) == 2
    assert "no such file" in capsys.readouterr().err
    # an unknown study in a store that exists: named, and no scorecard run created
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = TrackingClient(uri)
    client.create_experiment("other")
    assert _run_cli("scorecard", "--study", "nope", "--tracking-uri", uri, "--out", str(out)) == 2
    assert "no study named 'nope'" in capsys.readouterr().err
    assert client.get_experiment_by_name("scorecard") is None
    # no store at all
    assert _run_cli("scorecard", "--tracking-uri", f"sqlite:///{tmp_path / 'none.db'}", "--out", str(out)) == 2
    assert not out.exists() and not (tmp_path / "none.db").exists()
    assert not list(tmp_path.glob(".card-*"))


def test_a_results_parquet_of_two_studies_is_read_as_two(tmp_path: Path, capsys) -> None:
    from scorecard_sim import simulated_study

    one = simulated_study({"ega": 0.09, "mope": -0.03, "ega-mope": 0.12}, seeds=6).frame
    two = one.with_columns(pl.lit("other").alias("study"), pl.lit(512).cast(pl.Int64).alias("context_length"))
    path = tmp_path / "results.parquet"
    pl.concat([one, two]).write_parquet(path)
    assert _run_cli("scorecard", "--from", str(path), "--out", str(tmp_path / "card"), "--no-log") == 0
    assert "against 2 studies (other, sim)" in capsys.readouterr().out
    table = pl.read_parquet(tmp_path / "card" / "scorecard.parquet")
    rows = table.filter((pl.col("claim") == "ega-gain-mope-paper") & (pl.col("kind") == "cell"))
    assert sorted(rows.get_column("study").to_list()) == ["other", "sim"]
    assert rows.filter(pl.col("study") == "sim").row(0, named=True)["at_paper_setting"] is True


@pytest.mark.parametrize("seeds", [2, 4])
def test_a_clean_scorecard_run_warns_of_nothing(seeds: int, tmp_path: Path, capsys) -> None:
    """A published study read at 2 seeds (the smoke study's count: one degree of freedom) and at
    its 4: no Python warning is raised (numpy's and scipy's included) and nothing reaches stderr."""
    import warnings

    published = Path(__file__).resolve().parents[2] / "published" / "ladder-cpu-2026-12-02"
    (tmp_path / "study").mkdir()
    table = pl.read_parquet(published / "results.parquet").filter(pl.col("seed") < seeds)
    table.write_parquet(tmp_path / "study" / "results.parquet")
    (tmp_path / "study" / "spec.yaml").write_text((published / "spec.yaml").read_text())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        code = _run_cli("scorecard", "--from", str(tmp_path / "study"), "--out", str(tmp_path / "card"), "--no-log")
    assert code == 0
    assert capsys.readouterr().err == ""
