"""What the scorecard prints and writes (issue 31, items 5 and 6): claims and rows counted
apart, whole numbers as whole numbers, runs named by time and the studies read, links into
MLflow's model-training view, and a terminal that leads with what was measured."""

from __future__ import annotations

import re

import polars as pl
from scorecard_sim import FACTORIAL, LADDER, simulated_study, zoo_params

from harness.report import render_markdown, render_terminal
from harness.scorecard import load_claims, scorecard_table
from harness.scorecard.document import VERDICT_ROWS, count_words, scorecard_document
from harness.scorecard.sections import value_text
from harness.scorecard.terminal import terminal_document
from harness.scorecard.tracking import RUN_NAME_MAX_CHARS, run_link, run_name


def _study():
    params = zoo_params(FACTORIAL, {"nano": LADDER["nano"]})
    offsets = {v: params[v, "nano"] - params["baseline", "nano"] for v in FACTORIAL}
    gains = {"ega": 0.09, "mope": -0.03, "ega-mope": 0.12}
    return simulated_study(gains, seeds=6, sizes={"nano": params["baseline", "nano"]}, params=offsets)


def test_numbers_are_written_as_what_they_are() -> None:
    assert value_text(0.0026, "parameters", "<") == "0.26 %"
    assert value_text(12480.0, "parameters", "=") == "12,480"
    assert value_text(67.0, "parameters", "=") == "67"
    assert value_text(4.0, "clusters", "=") == "4"
    assert value_text(0.059, "val_loss", "+") == "+0.0590"
    assert value_text(None, "val_loss", "+") is None and value_text(float("nan"), "val_loss", "+") is None


def test_counts_print_as_whole_numbers_in_every_rendering() -> None:
    table = scorecard_table([_study()])
    document = scorecard_document(table, load_claims(), ["sim"])
    markdown = render_markdown(document)
    count = table.filter((pl.col("claim") == "ega-parameter-count") & (pl.col("kind") == "cell")).row(0, named=True)
    per_head = int(count["estimate"])
    assert per_head == count["estimate"]  # d + 3 at nano's width: a whole number
    lines = [x for x in markdown.splitlines() if x.startswith(("| ega-parameter-count |", "| **ega-parameter-count"))]
    summary, cell = lines[0], next(x for x in lines if "nano" in x)
    assert "| 66 |" in summary  # the paper's d + 2 at nano's width d = 64
    assert f"| {per_head} |" in cell and f"{per_head}.0000" not in cell
    assert not re.search(r"\+\d{1,3}(,\d{3})+\.0000", markdown)  # no "+12,480.0000" anywhere
    overhead = [
        x for x in markdown.splitlines() if x.startswith(("| ega-parameter-overhead |", "| **ega-parameter-overhead**"))
    ]
    measured = next(x for x in overhead if "nano" in x)
    assert "| < 0.26 % |" in overhead[0] and re.search(r"\| 0\.\d+ % \|", measured)


def test_claims_and_rows_are_counted_apart() -> None:
    table = scorecard_table([_study()])
    words = count_words(table, ["sim"])
    claims = table.get_column("claim").n_unique()
    measured = table.filter(pl.col("kind").is_in(VERDICT_ROWS)).get_column("claim").n_unique()
    head = f"{claims} claims against 1 study (sim): {measured} measured, {claims - measured} not measured."
    assert words.startswith(head)
    rows = table.filter(pl.col("kind").is_in(VERDICT_ROWS))
    keyed = rows.with_columns(pl.coalesce("measurement", pl.col("claim") + pl.col("reading")).alias("m"))
    n = keyed.unique(["m", "verdict_kind"]).height
    assert f" {n} rows read them (cells, trends, predictions;" in words
    counted = sum(
        int(k)
        for k in re.findall(
            r"(\d+) (?:replicated|smaller|larger|reversed|absent|not resolvable|"
            r"inconclusive|not predictable|grows|shrinks|flat|difference)",
            words,
        )
    )
    assert counted == n  # the kinds add up to the rows, and "not measured" is not among them
    assert "not measured," not in words.split(".", 1)[1]


def test_the_terminal_leads_with_what_was_measured() -> None:
    table = scorecard_table([_study()])
    text = render_terminal(terminal_document(table, ["sim"]))
    lines = text.splitlines()
    folded = lines.index("Not measured by the studies read (one line per study that would):")
    measured = table.filter(pl.col("kind").is_in(VERDICT_ROWS)).get_column("claim").unique().to_list()
    for claim in measured:  # each measured claim has its table, above the folded line
        assert any(line.startswith(claim) for line in lines[:folded]), claim
    unmeasured = set(table.get_column("claim").to_list()) - set(measured)
    rest = " ".join(lines[folded + 1 : -1])  # the folded lines, wrapped to the terminal's width
    studies = [f"studies/{item}" for item in rest.split("- studies/")[1:]]
    named = {c.strip() for line in studies for c in line.split(": ", 1)[1].split(", ")}
    assert named == unmeasured
    assert len(studies) == len({line.split(" would")[0] for line in studies})  # one line per study
    assert "not measured:" not in text  # the unmeasured claims' long words stay in the files
    assert lines[-1] == "Every row with its words: scorecard.html, scorecard.md and scorecard.parquet."


def test_runs_are_named_by_time_and_what_they_read_and_links_open_the_training_view() -> None:
    name = run_name(["long-cpu", "ladder-cpu"], when=0.0)
    assert re.fullmatch(r"scorecard \d{4}-\d\d-\d\d \d\d:\d\d \(long-cpu, ladder-cpu\)", name)
    assert len(run_name([f"study-{i}" for i in range(40)])) <= RUN_NAME_MAX_CHARS
    assert run_link("3", "abc") == "#/experiments/3/runs/abc?workflowType=machine_learning"


def test_two_study_folders_are_read_together_and_every_figure_is_written(tmp_path, capsys) -> None:
    """`harness scorecard --from A --from B`: each folder's results and curves, one table per
    claim and study in the terminal, and a PNG for every figure the page shows."""
    from scorecard_sim import ladder_study

    from harness.cli import main

    folders = []
    for name, sizes in (("ladder", LADDER), ("long", {"nano": LADDER["nano"]})):
        study, _ = ladder_study({"ega": (0.01, 0.01), "ega-mope": (0.012, 0.012)}, seeds=4, sizes=sizes)
        folder = tmp_path / name
        folder.mkdir()
        study.frame.with_columns(pl.lit(name).alias("study")).write_parquet(folder / "results.parquet")
        study.curves.with_columns(pl.lit(name).alias("study")).write_parquet(folder / "curves.parquet")
        folders += ["--from", str(folder)]
    out = tmp_path / "card"
    try:
        main(["scorecard", *folders, "--out", str(out), "--no-log"])
    except SystemExit as exc:
        assert not exc.code
    printed = capsys.readouterr().out
    assert "against 2 studies (ladder, long)" in printed
    assert "superadditivity in ladder (" in printed and "superadditivity in long (" in printed
    html = (out / "scorecard.html").read_text()
    shown = re.findall(r"<img alt='([\w-]+)'", html)
    assert shown and sorted(p.stem for p in out.glob("*.png")) == sorted(shown)
    table = pl.read_parquet(out / "scorecard.parquet")
    assert set(table.filter(pl.col("kind") == "training").get_column("study").to_list()) == {"ladder", "long"}
    predicted = table.filter((pl.col("kind") == "predicted") & (pl.col("claim") == "superadditivity"))
    says = dict(predicted.select("study", "verdict").iter_rows())  # no recorded recipes: each read alone
    assert says["long"].startswith("not predictable: 1 size measured")
    assert dict(predicted.select("study", "levels").iter_rows())["ladder"] == 3
