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
