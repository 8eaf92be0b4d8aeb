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
