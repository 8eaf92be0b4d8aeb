"""The tables of a report's HTML page as data (importable as ``report_pages``: pytest puts
``tests/`` on the path): every great-tables ``<table>`` with its column labels, row groups
and body rows, each cell's text, style and ``headers``."""

from __future__ import annotations

import re
from html.parser import HTMLParser

MINUS = "\u2212"  # great-tables writes negative numbers with the minus sign


class _Tables(HTMLParser):
    """Every <table> of a page: its column labels, row groups and body rows (each cell's
    text, style and ``headers``)."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[dict] = []
        self._cell: dict | None = None
        self._row: list[dict] | None = None
        self._in_head = False
        self._in_foot = False

    def handle_starttag(self, tag: str, attrs: list) -> None:
        a = dict(attrs)
        if tag == "table":
            self.tables.append({"class": a.get("class", ""), "labels": [], "groups": [], "rows": []})
        elif tag == "thead":
            self._in_head = True
        elif tag in ("tbody", "tfoot"):  # source notes are not rows
            self._in_head = False
            self._in_foot = tag == "tfoot"
        elif tag == "tr" and self.tables and not self._in_head and not self._in_foot:
            self._row = []
        elif tag in ("td", "th") and self.tables:
            self._cell = {"tag": tag, "style": a.get("style") or "", "headers": a.get("headers") or "", "text": ""}
            self._cell["class"] = a.get("class") or ""

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            cell, self._cell = self._cell, None
            cell["text"] = cell["text"].strip()
            table = self.tables[-1]
            if self._in_head:
                if "gt_col_heading" in cell["class"] or "gt_column_spanner" in cell["class"]:
                    table["labels"].append(cell["text"])
            elif "gt_group_heading" in cell["class"]:
                table["groups"].append(cell["text"])
            elif self._row is not None:
                self._row.append(cell)
        elif tag == "tr" and self._row is not None:
            if self._row:
                self.tables[-1]["rows"].append(self._row)
            self._row = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell["text"] += data


def html_tables(page: str) -> list[dict]:
    parser = _Tables()
    parser.feed(page)
    return parser.tables


def table_cell(row: list[dict], column: str) -> dict:
    (cell,) = [c for c in row if c["headers"].endswith(f"-{column}")]
    return cell


def cell_background(cell: dict) -> str:
    match = re.search(r"background-color:\s*(#[0-9a-fA-F]{6})", cell["style"])
    assert match, cell
    return match.group(1).lower()
