"""The document model and its three renderers on documents built by hand: one document
gives the HTML page, the markdown and the terminal text, and the three hold the same
verdicts (words and kinds), the same paragraphs and notes; each renderer's own rules
(great-tables colours, markdown escapes and emphasis, the terminal's width)."""

from __future__ import annotations

import re

import polars as pl
import pytest
from report_pages import MINUS, cell_background, html_tables, table_cell

from harness.analysis.results_types import NOT_DISTINGUISHABLE, NOT_TESTABLE, SETTLED
from harness.report.document import Document, Figure, Note, Paragraph, Section, Table
from harness.report.html import KIND_COLOURS, render_html
from harness.report.markdown import render_markdown
from harness.report.terminal import render_terminal

PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 16
KIND_BY_EMPHASIS = {"**": SETTLED, "_": NOT_TESTABLE, "": NOT_DISTINGUISHABLE}


def _claims() -> Table:
    frame = pl.DataFrame(
        {
            "effect": ["interaction (superadd.) *", "my_variant gain", "tau"],
            "estimate": [0.06, -0.01, 0.3],
            "unit": ["nats", "nats", ""],
            "ci_low": [0.02, -0.05, None],
            "ci_high": [0.1, 0.03, None],
            "pvalue": [0.01, 0.5, None],
            "test": ["t", "t", "TOST"],
            "n_seeds": [5, 5, 1],
            "verdict": [
                "superadditive (95% CI excludes 0)",
                "not distinguishable from control — a long tail of words " * 2,
                "no test possible (1 seed)",
            ],
            "verdict_kind": [SETTLED, NOT_DISTINGUISHABLE, NOT_TESTABLE],
            "signed": [True, True, False],
            "primary": [True, False, False],
        }
    )
    return Table(
        frame,
        kind_column="verdict_kind",
        signed=("estimate", "ci_low"),
        signed_rows="signed",
        bold_rows="primary",
        merge={"estimate": "{estimate}<< {unit}>>", "pvalue": "{pvalue}<< ({test})>>"},
        labels={"pvalue": "p (test)"},
        missing={"estimate": "n/a", "pvalue": "n/a", "n_seeds": ""},
        caption="t: paired t-test over seeds",
    )


def _document() -> Document:
    verdicts = Section(
        "verdicts",
        "Verdicts: demo",
        (Paragraph("How to read it: a **gain** is `L(control) - L(treatment)`."), _claims()),
    )
    other = Section(
        "other",
        "Other",
        (Note("runs dropped: 2", kind="caution"), Figure("forest", PNG, caption="effects per cell")),
    )
    return Document("Demo report", (verdicts, other), notes=(Note("tau section skipped: no tau"),))


def _html_verdicts(page: str) -> list[tuple[str, str]]:
    (table,) = html_tables(page)
    colours = {fill: kind for kind, (fill, _) in KIND_COLOURS.items()}
    return [
        (table_cell(r, "verdict")["text"], colours[cell_background(table_cell(r, "verdict"))]) for r in table["rows"]
    ]


def _markdown_verdicts(text: str) -> list[tuple[str, str]]:
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| effect")]
    out = []
    for row in rows[1:]:  # the first is the alignment rule
        cell = row.rstrip(" |").rsplit(" | ", 1)[1]
        mark = "**" if cell.startswith("**") else "_" if cell.startswith("_") else ""
        words = cell[len(mark) : len(cell) - len(mark)] if mark else cell
        out.append((re.sub(r"\\(.)", r"\1", words), KIND_BY_EMPHASIS[mark]))
    return out


def _terminal_verdicts(text: str) -> list[tuple[str, str]]:
    joined = " ".join(text.split())
    kinds = "|".join(map(re.escape, KIND_COLOURS))
    return [
        (m.group(1).strip(), m.group(2))
        for m in re.finditer(rf"((?:superadditive|not distinguishable from|no test)[^\[]*) \[({kinds})\]", joined)
    ]


def test_one_document_renders_the_same_verdicts_and_notes_everywhere() -> None:
    doc = _document()
    page, markdown, terminal = render_html(doc), render_markdown(doc), render_terminal(doc, notes=True)
    want = [(v, k) for v, k in zip(_claims().frame["verdict"], _claims().frame["verdict_kind"], strict=True)]
    normalised = [(" ".join(v.split()), k) for v, k in want]
    assert [(" ".join(v.split()), k) for v, k in _html_verdicts(page)] == normalised
    assert [(" ".join(v.split()), k) for v, k in _markdown_verdicts(markdown)] == normalised
    assert _terminal_verdicts(terminal) == normalised
    for text in ("runs dropped: 2", "tau section skipped: no tau"):
        assert text in page and text in markdown and text in " ".join(terminal.split())
    reading = "How to read it: a"
    assert "<p>How to read it: a <b>gain</b> is <code>L(control) - L(treatment)</code>.</p>" in page
    assert "How to read it: a **gain** is `L(control) - L(treatment)`." in markdown
    assert reading in terminal and "**" not in terminal


def test_html_formats_merges_and_colours_by_kind() -> None:
    page = render_html(_document())
    assert not re.search(r"@import|<link|<script|url\(|https?://", page)
    assert page.count("data:image/png;base64,") == 1 and "<figcaption>effects per cell</figcaption>" in page
    (table,) = html_tables(page)
    assert table["labels"] == ["effect", "estimate", "95% CI", "p (test)", "seeds", "verdict"]
    primary, mine, tau = table["rows"]
    assert "bold" in primary[0]["style"] and all("bold" not in c["style"] for c in mine)  # bold_rows
    assert "bold" in table_cell(primary, "verdict")["style"]  # settled: bold, as markdown shows it
    assert "bold" not in table_cell(tau, "verdict")["style"]
    assert table_cell(primary, "estimate")["text"] == "+0.0600 nats"
    assert table_cell(mine, "estimate")["text"] == f"{MINUS}0.0100 nats"
    assert table_cell(tau, "estimate")["text"] == "0.3000"  # unsigned row, no unit
    assert table_cell(primary, "ci_low")["text"] == "[+0.0200, +0.1000]"
    assert table_cell(tau, "ci_low")["text"] == "n/a" and table_cell(tau, "pvalue")["text"] == "n/a"
    assert table_cell(primary, "pvalue")["text"] == "0.01 (t)"
    for row, kind in zip(table["rows"], (SETTLED, NOT_DISTINGUISHABLE, NOT_TESTABLE), strict=True):
        assert cell_background(table_cell(row, "verdict")) == KIND_COLOURS[kind][0]
    assert "t: paired t-test over seeds" in page and "Verdict colours:" in page


def test_markdown_escapes_emphasises_and_fits_a_length() -> None:
    text = render_markdown(_document())
    lines = text.splitlines()
    assert lines[0] == "# Demo report" and "## Verdicts: demo" in lines and "## Notes" in lines
    assert "| effect | estimate | 95% CI | p (test) | seeds | verdict |" in lines
    assert "| **interaction (superadd.)** \\* | +0.0600 nats | [+0.0200, +0.1000] | 0.01 (t) | 5 | " in text
    assert "| my\\_variant gain | -0.0100 nats | [-0.0500, +0.0300] | 0.5 (t) | 5 | not distinguishable" in text
    assert "| tau | 0.3000 | n/a | n/a | 1 | _no test possible (1 seed)_ |" in lines
    assert "![forest](forest.png)" in lines and "> runs dropped: 2" in lines
    assert sum("Verdicts in **bold**" in line for line in lines) == 1  # the key, once

    only = render_markdown(_document(), sections=("verdicts",), title=False, level=3, notes=False)
    assert only.startswith("### Verdicts: demo") and "runs dropped" not in only and "## Notes" not in only

    long = Document("d", (Section("v", "V", (_claims(),) * 6),))
    full = render_markdown(long)
    short = render_markdown(long, max_chars=len(full) - 200)
    assert len(short) <= len(full) - 200 and short.count("\n| ") == full.count("\n| ")  # words shortened, rows kept
    assert "…" in short
    assert len(render_markdown(long, max_chars=300)) <= 300
    assert render_markdown(long, max_rows=1).count("| tau |") == 0


def test_terminal_fits_the_width_and_keeps_narrow_tables_on_one_line() -> None:
    doc = _document()
    text = render_terminal(doc, sections=("verdicts",))
    assert text.splitlines()[0] == "Verdicts: demo"
    assert max(len(line) for line in text.splitlines()) <= 100
    header = next(line for line in text.splitlines() if line.lstrip().startswith("effect"))
    assert "verdict" not in header  # too wide: the verdict goes under its row
    narrow = Table(pl.DataFrame({"variant": ["a", "b"], "rate": [0.25, 0.5]}), percent=("rate",))
    lines = render_terminal(Document("x", (Section("d", "Divergence", (narrow,)),))).splitlines()
    assert lines[1].split() == ["variant", "rate"] and lines[2].split() == ["a", "25.0%"]
    coloured = render_terminal(doc, sections=("verdicts",), colour=True)
    assert "\x1b[1;32m     superadditive (95% CI excludes 0) [settled]\x1b[0m" in coloured  # bold green


def test_the_model_refuses_what_it_cannot_render() -> None:
    frame = pl.DataFrame({"effect": ["a"], "verdict": ["v"], "verdict_kind": ["maybe"]})
    with pytest.raises(ValueError, match="verdict kinds must be among"):
        Table(frame, kind_column="verdict_kind")
    with pytest.raises(ValueError, match=r"columns \['nope'\] are not in the frame"):
        Table(frame, bold_rows="nope")
    with pytest.raises(ValueError, match=r"columns \['unit'\] are not in the frame"):
        Table(frame, merge={"verdict": "{verdict}<< {unit}>>"})
    with pytest.raises(ValueError, match="Note.kind"):
        Note("x", kind="warning")
    with pytest.raises(TypeError, match="blocks must be"):
        Section("s", "S", ("plain text",))
    with pytest.raises(ValueError, match="section keys must be distinct"):
        Document("d", (Section("s", "S"), Section("s", "T")))
    with pytest.raises(KeyError, match="no section"):
        render_markdown(Document("d", (Section("s", "S"),)), sections=("missing",))
