"""The numbers the scorecard states about its own error rates, read from data a simulation wrote.

``calibration.json`` (shipped with the package) is written by ``benchmarks/calibration.py``
from the simulations of :mod:`harness.scorecard.simulate`; nothing here is typed in by hand:

- ``skewed_t_false_positive``: where the shape check fires on strongly skewed per-seed values
  (lognormal, sigma = 1, mean 0: the truth is 0), how often the 95 % t-interval still excludes
  0, at each number of seeds: the false-positive rate a t-based claim would carry there
  (:func:`skewed_false_positive`);
- ``family_wise``: under a global null (no effect anywhere), the share of simulated cards
  with at least one signed verdict, by the number of claim families, the rows per family
  (adjusted together with Holm's method) and the seeds (:func:`family_wise_rate`);
- ``kinds``: the rate of each verdict kind under known truths (docs/calibration.md shows it);
- ``prediction``: a prediction at the papers' size and 5,000 steps at the published ladder's
  noise: the candidate surfaces' rates under each truth and issue 38's test (docs/calibration.md
  shows them; a card states the rates of its own design at its own noise, simulated when it is
  made: :mod:`harness.analysis.surface_calibration`).

A missing or unreadable file is not an error: the scorecard then states no rate and says so.
"""

from __future__ import annotations

import json
from bisect import bisect_right
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

CALIBRATION_FILE = "calibration.json"


@lru_cache(maxsize=1)
def load_calibration() -> dict[str, Any] | None:
    """The packaged calibration data (None when the file is missing or unreadable)."""
    try:
        text = resources.files("harness.scorecard").joinpath(CALIBRATION_FILE).read_text(encoding="utf-8")
        data = json.loads(text)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def skewed_false_positive(n_seeds: int, data: dict[str, Any] | None = None) -> float | None:
    """The measured false-positive rate of a t-interval claim on shape-flagged, strongly skewed
    per-seed values at ``n_seeds`` seeds (the nearest measured number of seeds at or below it;
    None below the smallest or without data)."""
    data = load_calibration() if data is None else data
    table = (data or {}).get("skewed_t_false_positive", {}).get("rates", {})
    measured = sorted(int(n) for n in table)
    i = bisect_right(measured, n_seeds)
    return None if i == 0 else float(table[str(measured[i - 1])])


@dataclass(frozen=True)
class FamilyWiseRate:
    """The card's family-wise rate under a global null, and the simulated card it was read at
    (``families`` claim families of ``rows_per_family`` rows at ``seeds`` seeds)."""

    rate: float
    families: int
    rows_per_family: int
    seeds: int
    reps: int


def _at_or_above(grid: list[int], value: int) -> int:
    """The smallest grid value >= ``value`` (the largest one when none is)."""
    return next((g for g in grid if g >= value), grid[-1])


def _at_or_below(grid: list[int], value: int) -> int:
    """The largest grid value <= ``value`` (the smallest one when none is)."""
    below = [g for g in grid if g <= value]
    return below[-1] if below else grid[0]


def family_wise_rate(
    families: int, rows_per_family: int, seeds: int, data: dict[str, Any] | None = None
) -> FamilyWiseRate | None:
    """The simulated share of cards with at least one signed verdict under a global null, for a
    card of ``families`` claim families with up to ``rows_per_family`` rows each at ``seeds``
    seeds: read at the simulated card with at least as many rows per family and at most as
    many seeds (more rows or fewer seeds do not lower it), and exactly ``families`` families
    (None beyond the simulated number, or without data)."""
    data = load_calibration() if data is None else data
    table = (data or {}).get("family_wise")
    if not table or families < 1:
        return None
    rates = table["rates"]
    k = _at_or_above(sorted(int(x) for x in rates), max(rows_per_family, 1))
    by_seeds = rates[str(k)]
    n = _at_or_below(sorted(int(x) for x in by_seeds), seeds)
    curve = by_seeds[str(n)]
    if families > len(curve):
        return None
    return FamilyWiseRate(float(curve[families - 1]), families, k, n, int(table["reps"]))


__all__ = [
    "CALIBRATION_FILE",
    "FamilyWiseRate",
    "family_wise_rate",
    "load_calibration",
    "skewed_false_positive",
]
