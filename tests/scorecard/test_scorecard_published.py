"""Every card in ``published/`` is what today's rules read from the tables published beside
it (a combined card: from its sources' tables, listed in ``sources.txt``): a change to the
scorecard's rules that changes a published verdict fails here until the card (and the manual's
words about it) are read again (docs/scorecard.md, "A real scorecard")."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from harness.scorecard import scorecard_table
from harness.scorecard.cli import studies_from_path

PUBLISHED = Path(__file__).resolve().parents[2] / "published"
FOLDERS = sorted(p for p in PUBLISHED.iterdir() if (p / "scorecard" / "scorecard.parquet").is_file())
#: What a row is, and what it says.
KEY = ["study", "claim", "reading", "kind", "size", "context_length", "group", "step"]
SAYS = ["n_seeds", "estimate", "ci_low", "ci_high", "verdict_kind", "verdict"]


def test_there_is_a_published_card() -> None:
    assert FOLDERS, f"no published card under {PUBLISHED}"


def tables_of(folder: Path) -> list[Path]:
    """The results tables a published card was read from: its own, or for a combined card
    (``sources.txt``, one published folder a line) each source's, in the order listed."""
    sources = folder / "sources.txt"
    if not sources.is_file():
        return [folder / "results.parquet"]
    return [PUBLISHED / name.strip() / "results.parquet" for name in sources.read_text().splitlines() if name.strip()]


def test_a_combined_card_names_published_sources() -> None:
    for folder in FOLDERS:
        tables = tables_of(folder)
        assert tables and all(t.is_file() for t in tables), f"{folder.name}: a source has no results.parquet"


@pytest.mark.slow
@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_a_published_card_is_what_todays_rules_read_from_its_tables(folder: Path) -> None:
    read = scorecard_table([study for table in tables_of(folder) for study in studies_from_path(table)])
    published = pl.read_parquet(folder / "scorecard" / "scorecard.parquet")

    def rows(table: pl.DataFrame) -> pl.DataFrame:
        return table.select(KEY + SAYS).sort(KEY, nulls_last=True)

    assert_frame_equal(rows(read), rows(published), check_exact=False)  # default tolerances: 1e-5 relative


def test_the_combined_card_reads_each_claim_as_a_whole_and_says_where_the_papers_value_is_excluded() -> None:
    """Each core effect claim has a row over its independent cells; every effect row whose 95 %
    interval excludes the papers' value says so in its words (with or without the sign)."""
    from harness.scorecard.claims import CORE_IDS, load_claims

    (folder,) = sorted(PUBLISHED.glob("combined-*/scorecard"))
    card = pl.read_parquet(folder / "scorecard.parquet")
    effects = {c.id for c in load_claims() if c.kind in ("contrast", "interaction") and not c.figure}
    core_effects = {c for c in effects if any(c == core or c.startswith(f"{core}-") for core in CORE_IDS)}
    measured = set(card.filter(pl.col("kind") == "cell").get_column("claim").to_list())
    whole = set(card.filter(pl.col("kind") == "claim").get_column("claim").to_list())
    assert core_effects & measured <= whole, sorted((core_effects & measured) - whole)
    rows = card.filter(
        pl.col("kind").is_in(["cell", "claim"])
        & pl.col("claim").is_in(list(effects))
        & pl.col("paper_value").is_not_null()
    )
    for row in rows.iter_rows(named=True):
        lo, hi, v = row["ci_low"], row["ci_high"], row["paper_value"]
        if lo is not None and not lo <= v <= hi:
            assert f"paper's {v:+.3f}" in row["verdict"] and "exclude" in row["verdict"], row["verdict"]


def test_every_published_card_states_the_dropout_its_studies_ran() -> None:
    """The papers state no dropout; each card says what its evidence trained with, read from
    the study specs beside the tables (``attention_dropout`` unset is the residual value)."""
    import yaml

    for folder in FOLDERS:
        card = (folder / "scorecard" / "scorecard.md").read_text()
        for table in tables_of(folder):
            train = yaml.safe_load((table.parent / "spec.yaml").read_text()).get("train", {})
            residual = float(train.get("dropout", 0.2))
            attention = float(train.get("attention_dropout", residual))
            words = f"residual {residual:g}, on attention weights {attention:g}"
            line = next(x for x in card.splitlines() if x.startswith("Dropout the studies trained with"))
            assert words in line and table.parent.name.rsplit("-2026", 1)[0] in line, (folder.name, line)


def test_dropout_words_group_the_studies_by_what_they_ran() -> None:
    from harness.scorecard.pooling import dropout_words

    recipes = {
        "a": {"dropout": 0.2, "attention_dropout": 0.0},
        "b": {"dropout": 0.2, "attention_dropout": None},
        "c": {"dropout": 0.2, "attention_dropout": 0.0},
        "d": None,
    }
    assert dropout_words(recipes) == (
        "residual 0.2, on attention weights 0 (a, c); residual 0.2, on attention weights 0.2 (b); not recorded (d)"
    )
