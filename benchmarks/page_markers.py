"""The docs sections a benchmark regenerates: its output between two HTML-comment markers
in a page of the manual (``benchmarks/calibration.py`` writes docs/calibration.md,
``benchmarks/sequential.py`` docs/sequential.md). The benchmarks run as scripts
(``python benchmarks/X.py``), so they import this module by its name."""

from __future__ import annotations

from pathlib import Path


def write_between_markers(path: Path, block: str, *, begin: str, end: str, name: str, hint: str) -> None:
    """Replace the text of ``path`` from ``begin`` to ``end`` (markers included) with
    ``begin``, a blank line, ``block``, a blank line and ``end``. Without both markers, in
    that order, nothing is written: SystemExit names the ``name`` markers and ``hint``
    (where to add them)."""
    text = path.read_text()
    start, stop = text.find(begin), text.find(end)
    if start < 0 or stop < start:
        raise SystemExit(f"{path} has no {name} markers ({begin!r} ... {end!r}): {hint}")
    path.write_text(text[:start] + f"{begin}\n\n{block}\n\n{end}" + text[stop + len(end) :])
