"""Words checked against numbers: every finding docs/scorecard.md states about a published card
carries what it says in a machine-readable note beside it, and the card's own rows must bear it
out. A sentence that gives a direction or a trend its card contradicts (or does not show) fails
here.

The note, an HTML comment at the end of the finding's bullet (one or more per bullet)::

    <!-- says: card=ladder-cpu claim=mope-gain kind=trend | falls; not shown -->

selects the rows of ``published/<card>-*/scorecard/scorecard.parquet`` by ``claim``, ``kind`` and
optionally ``reading`` (a prefix), ``size`` and ``group``, and asserts, of every row selected:

- ``rises`` / ``falls``: the 95 % interval lies wholly above / below 0;
- ``shown`` / ``not shown``: the row keeps / has no signed verdict after the card's procedure;
- ``below X`` / ``above X`` / ``covers X``: the 95 % interval lies wholly below / above X, or covers X;
- ``excludes X``: the 95 % interval excludes X (the papers' value, with the sign shown or not: the
  verdict words ``smaller`` / ``larger`` or ``below`` / ``above``);
- ``kind K``: the verdict's kind is K;
- ``falls across sizes`` / ``rises across sizes``: ordered by parameter count, the smallest size's
  interval lies wholly above / below the largest's (a trend the cells show without a trend row).
"""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "scorecard.md"
NOTE = re.compile(r"<!-- says: (?P<select>[^|]*)\|(?P<claims>[^>]*?) -->")
FINDINGS = re.compile(r"\*\*What it shows\*\*.*?\n\n(?P<bullets>- .*?)\n\n", re.S)  # the list up to a blank line


def _card(name: str) -> pl.DataFrame:
    (folder,) = sorted(REPO.glob(f"published/{name}-*/scorecard"))
    return pl.read_parquet(folder / "scorecard.parquet")


def _selected(select: str) -> tuple[str, pl.DataFrame]:
    keys = dict(item.split("=", 1) for item in select.split())
    rows = _card(keys.pop("card"))
    for key, value in keys.items():
        column = pl.col(key).cast(pl.String)
        rows = rows.filter(column.str.starts_with(value) if key == "reading" else column == value)
    return select.strip(), rows


def _holds(claim: str, rows: pl.DataFrame) -> str | None:
    """Why ``claim`` does not hold of ``rows`` (None: it holds)."""
    lo, hi = rows.get_column("ci_low").to_list(), rows.get_column("ci_high").to_list()
    checks = {
        "rises": all(x is not None and x > 0 for x in lo),
        "falls": all(x is not None and x < 0 for x in hi),
        "shown": all(rows.get_column("signed").fill_null(False)),
        "not shown": not any(rows.get_column("signed").fill_null(False)),
    }
    if claim in checks:
        return None if checks[claim] else f"{claim}: intervals {list(zip(lo, hi, strict=True))}"
    word, _, value = claim.partition(" ")
    if word == "kind":
        kinds = set(rows.get_column("verdict_kind").to_list())
        return None if kinds == {value} else f"kind {value}: the rows read {sorted(kinds)}"
    if claim.endswith("across sizes"):
        ordered = rows.sort("params")
        first, last = ordered.row(0, named=True), ordered.row(-1, named=True)
        ok = first["ci_low"] > last["ci_high"] if word == "falls" else first["ci_high"] < last["ci_low"]
        return None if ok else f"{claim}: {first['ci_low']}..{first['ci_high']} vs {last['ci_low']}..{last['ci_high']}"
    x = float(value)
    ok = {
        "below": all(h < x for h in hi),
        "above": all(low > x for low in lo),
        "covers": all(low <= x <= h for low, h in zip(lo, hi, strict=True)),
        "excludes": all(not low <= x <= h for low, h in zip(lo, hi, strict=True)),
    }[word]
    return None if ok else f"{claim}: intervals {list(zip(lo, hi, strict=True))}"


def check_page(text: str) -> list[str]:
    """Every note's claims against its card's rows: the problems found (empty: the page agrees)."""
    problems = []
    for note in NOTE.finditer(text):
        where, rows = _selected(note["select"])
        if rows.height == 0:
            problems.append(f"{where}: no such row in the published card")
            continue
        for claim in (c.strip() for c in note["claims"].split(";")):
            why = _holds(claim, rows)
            if why is not None:
                problems.append(f"{where}: {why}")
    return problems


def test_the_pages_findings_agree_with_their_cards() -> None:
    problems = check_page(PAGE.read_text())
    assert not problems, "docs/scorecard.md says what its card does not show:\n" + "\n".join(problems)


def test_every_finding_on_the_page_says_what_it_says() -> None:
    """Each bullet of a "What it shows" list carries at least one note: a new sentence cannot
    escape the check."""
    lists = FINDINGS.findall(PAGE.read_text())
    cards = sorted(REPO.glob("published/*/scorecard/scorecard.parquet"))
    assert len(lists) == len(cards), f"the page has one findings list per published card ({len(cards)})"
    for bullets in lists:
        for bullet in re.split(r"\n(?=- )", bullets.strip()):
            assert NOTE.search(bullet), f"a finding without a note: {bullet[:120]}"


@pytest.mark.parametrize(
    ("sentence", "note"),
    [  # the three sentences of issue 39, as their notes would have read
        (
            "MOPE turns from a cost into a gain as the model grows",
            "card=ladder-cpu claim=mope-gain kind=trend | rises",
        ),
        ("tau ... lower the larger the model", "card=ladder-cpu claim=tau-035 kind=cell | falls across sizes"),
        (
            "superadditivity as a whole covers the papers' +0.059",
            "card=combined claim=superadditivity kind=claim | covers 0.059",
        ),
        (
            "EGA on sinusoidal positions, read at its tau starts' mean",
            "card=long-cpu claim=ega-gain-ega-paper kind=cell reading=A | above 0",
        ),
    ],
)
def test_the_sentences_the_numbers_contradicted_fail_the_check(sentence: str, note: str) -> None:
    assert check_page(f"- {sentence} <!-- says: {note} -->\n"), sentence
