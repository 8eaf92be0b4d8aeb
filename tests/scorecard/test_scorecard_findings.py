"""The "What we found" table (harness.scorecard.findings): the README, the manual's home page
and the scorecard page show exactly what the published cards say today; a card that changes
changes the table; each row's words follow from the row's columns (a level shows its start, an
inconclusive row its reason) and its best cell is the one nearest the papers' setting."""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
import pytest

from harness.scorecard import findings as F

REPO = Path(__file__).resolve().parents[2]


def test_every_page_shows_the_table_of_the_published_cards() -> None:
    """Regenerated from published/*/scorecard/scorecard.parquet, no target changes
    (`python -m harness.scorecard.findings` rewrites them when a card changed)."""
    stale = [name for name, (now, new) in F.regenerate(REPO).items() if now != new]
    assert not stale, f"{stale}: run python -m harness.scorecard.findings"


def test_one_row_per_core_claim_linked_to_a_section_of_the_scorecard_page() -> None:
    cards = F.read_cards(REPO / "published")
    rows = F.findings(cards)
    core_claims = {c for c in cards.get_column("claim").unique() if F._core(c) is not None}
    assert [f.claim for f in rows][:2] == ["superadditivity", "ega-gain-ega-paper"]
    assert {f.claim for f in rows} == core_claims
    anchors = F.section_anchors((REPO / "docs" / "scorecard.md").read_text())
    assert set(cards.get_column("card").unique()) <= set(anchors)
    block = F.findings_markdown(cards, "scorecard.md", anchors)
    for f in rows:
        target = anchors[f.card] if f.card else anchors[""]
        assert f"[{f.claim}](scorecard.md#{target})" in block


def _copy_repo(tmp: Path) -> Path:
    for name in ("README.md", "docs/index.md", "docs/scorecard.md"):
        (tmp / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / name, tmp / name)
    shutil.copytree(REPO / "published", tmp / "published", ignore=shutil.ignore_patterns("*.png"))
    return tmp


def test_a_changed_card_changes_the_table(tmp_path: Path) -> None:
    """The table reads the cards' columns: a verdict the rules change flows through."""
    repo = _copy_repo(tmp_path)
    # tau nearest the papers' setting: ladder-long-cpu's cell, on its own card and on the combined one
    hit = (
        (pl.col("study") == "ladder-long-cpu")
        & (pl.col("claim") == "tau-035")
        & (pl.col("kind") == "cell")
        & (pl.col("size") == "L4H4d128")
    )
    every_card = sorted(repo.glob("published/*/scorecard/scorecard.parquet"))
    cards = [c for c in every_card if pl.read_parquet(c).filter(hit).height]
    assert len(cards) == 2
    for card in cards:
        table = pl.read_parquet(card)
        assert table.filter(hit).height == 1
        changed = table.with_columns(
            pl.when(hit).then(pl.lit("replicated")).otherwise(pl.col("verdict_kind")).alias("verdict_kind"),
            pl.when(hit).then(pl.lit("settled")).otherwise(pl.col("settled")).alias("settled"),
        )
        changed.write_parquet(card)
    after = F.regenerate(repo)
    now, new = after["docs/index.md"]
    assert now != new
    assert "**replicated: moved from 0 into the band 0.30–0.40**" in new


def test_markers_missing_is_an_error_naming_the_file() -> None:
    with pytest.raises(ValueError, match="docs/x.md has no"):
        F.with_block("no markers here", "table", "docs/x.md")


def _row(**values) -> dict:
    base = dict.fromkeys(pl.read_parquet(REPO / "published" / "long-cpu-2026-12-02" / F.CARD).columns)
    return {**base, "kind": "cell", "reading": "A", "at_paper_setting": False, **values}


@pytest.mark.parametrize(
    ("values", "words"),
    [
        (
            {"verdict_kind": "larger", "start": 0.5, "band": 0.03, "paper_value": 0.36},
            "larger: moved from 0.5 past the band 0.33–0.39",
        ),
        (
            {"verdict_kind": "smaller", "start": 0.0, "band": 0.05, "paper_value": 0.35},
            "smaller: moved from 0 towards the band 0.30–0.40, stopped short",
        ),
        (
            {"verdict_kind": "reversed", "start": 0.7, "band": 0.05, "paper_value": 0.35},
            "reversed: moved from 0.7 away from the band 0.30–0.40",
        ),
        (
            {"verdict_kind": "smaller", "paper_value": 0.103, "sign": "+"},
            "smaller: real, the papers' sign, but smaller",
        ),
        (
            {
                "verdict_kind": "inconclusive",
                "ci_low": 0.002,
                "pvalue_holm": 0.176,
                "verdict": "inconclusive: not significant after Holm (p=0.18): estimate ... (Holm across the "
                "claim's 5 rows; was smaller)",
            },
            "inconclusive: not significant after Holm (p\u00a0=\u00a00.18; smaller before)",
        ),
        (
            {
                "verdict_kind": "inconclusive",
                "ci_low": -0.004,
                "verdict": "inconclusive: [-0.004, +0.070]; per-seed values skewed or with an outlier ...",
            },
            "inconclusive: covers 0 and effects beyond the claim's margin",  # the shape check withholds nothing
        ),
        (
            {
                "verdict_kind": "inconclusive",
                "ci_low": 0.002,
                "n_seeds": 4,
                "verdict": "inconclusive: [+0.002, +0.024] excludes 0, but the skew-robust interval [-0.01, +0.04] "
                "covers it: at 4 seeds strongly skewed per-seed values give such a t-interval too often, so the sign "
                "is withheld",
            },
            "inconclusive: too few seeds for the sign under skew (4 seeds)",
        ),
        (
            {
                "verdict_kind": "inconclusive",
                "ci_low": 0.032,
                "pvalue_card": 0.21,
                "verdict": "inconclusive: not significant across the card (p=0.21: the claim's Simes p 0.02, "
                "Benjamini-Hochberg over the card's 9 claims): estimate +0.047 [+0.032, +0.062] before adjustment "
                "(the card's procedure; Holm across the claim's 2 rows; was smaller)",
            },
            "inconclusive: not significant across the card's claims (p\u00a0=\u00a00.21; smaller before)",
        ),
        (
            {
                "verdict_kind": "inconclusive",
                "ci_low": 0.38,
                "start": 0.5,
                "band": 0.03,
                "paper_value": 0.36,
                "verdict": "inconclusive: moved from its start, and its interval overlaps the band without ...",
            },
            "inconclusive: moved from 0.5; overlaps the band 0.33–0.39, not inside it",
        ),
        (
            {"verdict_kind": "inconclusive", "verdict": "inconclusive: no test possible (the tokens/s varied)"},
            "inconclusive: no test possible (the tokens/s varied)",
        ),
        (
            {"verdict_kind": "inconclusive", "ci_low": -0.008, "margin": 0.02, "verdict": "inconclusive: [..] covers"},
            "inconclusive: covers 0 and effects beyond ±0.02",
        ),
        (
            {
                "verdict_kind": "not resolvable",
                "n_seeds": 4,
                "margin": 0.02,
                "verdict": "not resolvable: at this precision, ...; about 19 (range 8 to 229) seeds needed",
            },
            "not resolvable: too wide at 4 seeds for ±0.02; about 19 would settle it",
        ),
        (
            {
                "verdict_kind": "not measured",
                "verdict": "not measured: no study read holds ega on ptb-char; studies/corpora.yaml measures it",
            },
            "not measured yet (studies/corpora.yaml)",
        ),
    ],
)
def test_plain_words(values: dict, words: str) -> None:
    assert F.plain_verdict(_row(**values)) == words


def test_the_best_cell_is_the_one_nearest_the_papers_setting() -> None:
    """At the papers' setting first; else the largest model, then the steps nearest theirs,
    then the most seeds; for a level, the runs started at the default tau."""
    cells = pl.DataFrame(
        [
            _row(size="big", params=800_000, steps=2000, context_length=128, n_seeds=4, group=None),
            _row(size="small", params=100_000, steps=5000, context_length=128, n_seeds=4, group=None),
            _row(size="big", params=800_000, steps=5000, context_length=128, n_seeds=2, group="tau_init=0.7"),
            _row(size="big", params=800_000, steps=5000, context_length=128, n_seeds=2, group="tau_init=0"),
        ]
    )
    best = F._best_cell(cells, 5000, 256)
    assert (best["steps"], best["group"]) == (5000, "tau_init=0")
    at_paper = cells.with_columns(pl.Series("at_paper_setting", [False, True, False, False]))
    assert F._best_cell(at_paper, 5000, 256)["size"] == "small"


def test_the_prediction_shown_rests_on_the_most_evidence_not_on_its_answer() -> None:
    """A refusal from the card that pools every study and extrapolates least wins over a number
    one study alone would give: choosing the prediction by its answer would hide the refusal."""
    rows = pl.DataFrame(
        {
            "study": ["ladder-cpu", "long-cpu + ladder-cpu + ladder-long-cpu"],
            "extrapolation": [5.9, 5.9],
            "steps_extrapolation": [2.5, None],  # None: within the steps measured
            "levels": [3, 3],
            "n_seeds": [4, 4],
            "verdict_kind": ["inconclusive", "not predictable"],
        }
    )
    best = F.best_prediction(rows)
    assert best is not None and best["verdict_kind"] == "not predictable"
