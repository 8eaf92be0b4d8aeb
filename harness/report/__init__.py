"""Reports as documents: one document model, its renderers, and the study report.

A report is a :class:`~harness.report.document.Document` (sections of paragraphs, tables,
figures and notes); :func:`render_html`, :func:`render_markdown` and
:func:`render_terminal` turn one document into the HTML page, the markdown (``summary.md``,
the MLflow run description) and the terminal text, so a sentence written once appears in
every output that shows its section.

Layer: above :mod:`harness.analysis` (whose statistics the report reads) and below
``harness.scorecard`` and :mod:`harness.studies`; ``harness.analysis`` never imports it.

The names below are imported lazily (:mod:`harness.lazy_exports`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.lazy_exports import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "document": ["Document", "Section", "Paragraph", "Table", "Figure", "Note"],
        "html": ["render_html", "KIND_COLOURS"],
        "markdown": ["render_markdown"],
        "terminal": ["render_terminal"],
        "verdict": ["Verdict", "headline_family", "format_verdict_table", "verdict_footer", "TEST_ABBREVIATIONS"],
        "study": ["Report", "build_report", "log_report", "parent_description", "DESCRIPTION_MAX_CHARS"],
        "sections_effects": ["label_diagnostic_rows"],
    },
)

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs
    from harness.report.document import Document, Figure, Note, Paragraph, Section, Table
    from harness.report.html import KIND_COLOURS, render_html
    from harness.report.markdown import render_markdown
    from harness.report.sections_effects import label_diagnostic_rows
    from harness.report.study import DESCRIPTION_MAX_CHARS, Report, build_report, log_report, parent_description
    from harness.report.terminal import render_terminal
    from harness.report.verdict import (
        TEST_ABBREVIATIONS,
        Verdict,
        format_verdict_table,
        headline_family,
        verdict_footer,
    )
