"""The study report is one document: built by ``build_report`` from a synthetic study, its
HTML page, its markdown and its terminal text hold the same verdicts (words and kinds),
the same notes and every paragraph of every section."""

from __future__ import annotations

import html
from pathlib import Path

from report_pages import cell_background, html_tables, table_cell

from harness.analysis import AnalysisSettings
from harness.report import KIND_COLOURS, build_report, render_terminal
from harness.report.document import Note, Paragraph
from harness.report.html import inline_markdown
from harness.report.markdown import escape
from harness.report.verdict import VERDICTS_KEY

EMPHASIS = {"settled": "**{}**", "not testable": "_{}_", "not distinguishable": "{}"}


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_every_output_of_a_study_report_holds_the_same_verdicts_notes_and_sentences(tmp_path: Path, make_study) -> None:
    # no ega-mope: the interaction is skipped with a note; 3 seeds: few, several kinds
    df = make_study(seeds=3, means={"baseline": 1.50, "ega": 1.40, "mope": 1.50}, rng=5)
    report = build_report(df, settings=AnalysisSettings(n_resamples=99), out_dir=tmp_path / "r")
    doc = report.document
    assert doc is not None and doc.sections[0].key == VERDICTS_KEY
    assert {v.kind for v in report.verdicts} >= {"settled", "not distinguishable"}
    assert report.notes and any("interaction skipped" in n for n in report.notes)
    page, markdown = report.html_path.read_text(), report.markdown_path.read_text()
    terminal = _flat(render_terminal(doc, notes=True))
    assert markdown == report.markdown and _flat(report.verdict_table) in terminal

    # the verdicts: the HTML's colours, the markdown's emphasis, the terminal's tags
    verdict_rows = html_tables(page)[0]["rows"]
    colours = {fill: kind for kind, (fill, _) in KIND_COLOURS.items()}
    assert [
        (table_cell(r, "verdict")["text"], colours[cell_background(table_cell(r, "verdict"))]) for r in verdict_rows
    ] == [(v.verdict, v.kind) for v in report.verdicts]
    verdict_part = markdown.split("## Verdicts", 1)[1].split("\n## ", 1)[0]
    for v in report.verdicts:
        assert f"| {EMPHASIS[v.kind].format(escape(v.verdict))} |" in verdict_part, v
        assert f"{_flat(v.verdict)} [{v.kind}]" in terminal, v

    # the notes, and every sentence of every section, in all three
    for note in report.notes:
        assert html.escape(note) in page and f"- {note}" in markdown and _flat(note) in terminal
    blocks = [b for s in doc.sections for b in s.blocks if isinstance(b, (Paragraph, Note))]
    assert len(blocks) >= 8
    for block in blocks:
        assert inline_markdown(block.text) in page and block.text in markdown, block
        assert _flat(block.text.replace("**", "").replace("`", "")) in terminal, block
