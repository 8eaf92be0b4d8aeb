"""The numbers the scorecard states about its own error rates, read from data a simulation wrote.

``calibration.json`` (shipped with the package) is written by ``benchmarks/calibration.py``
from the simulations of :mod:`harness.bench.simulate.scorecard`; nothing here is typed in by hand:

- ``skew_robust``: the null distribution of the studentized mean of strongly skewed per-seed
  values (lognormal, sigma = 1, mean 0) at each number of seeds, jointly with the shape check:
  ``quantiles[n][j]`` is the value that |t| exceeds, *with the check quiet*, in ``tails[j]`` of
  simulated studies. It gives a row its skew-robust p (:func:`skew_robust_pvalue`) and its
  skew-robust interval (:func:`skew_robust_critical`);
- ``skewed_t_false_positive``: where the shape check fires on strongly skewed per-seed values
  (lognormal, sigma = 1, mean 0: the truth is 0), how often the 95 % t-interval still excludes
  0, at each number of seeds: the false-positive rate a t-based claim would carry there
  (:func:`skewed_false_positive`);
- ``family_wise``: under a global null (no effect anywhere), the share of simulated cards
  with at least one signed verdict after the card's procedure (:mod:`harness.scorecard.family`),
  by the number of claim families, the rows per family and the seeds (:func:`family_wise_rate`);
- ``kinds``: the rate of each verdict kind under known truths (docs/calibration.md shows it);
- ``prediction``: a prediction at the papers' size and 5,000 steps at the published ladder's
  noise: the candidate surfaces' rates under each truth and issue 38's test (docs/calibration.md
  shows them; a card states the rates of its own design at its own noise, simulated when it is
  made: :mod:`harness.analysis.surface_calibration`).

A missing or unreadable file is not an error: the scorecard then states no rate and says so,
and, having no skew-robust critical value, signs nothing (:func:`skew_robust_pvalue` is 1).
"""

from __future__ import annotations

import json
import math
from bisect import bisect_right
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

import numpy as np
from scipy import stats

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


def _skew_table(data: dict[str, Any] | None) -> tuple[np.ndarray, dict[int, np.ndarray]] | None:
    """The stored skew-robust table, parsed (the shipped one once: :func:`_shipped_skew_table`)."""
    if data is None:
        return _shipped_skew_table()
    table = data.get("skew_robust")
    if not table:
        return None
    quantiles = {int(n): np.asarray(q, dtype=float) for n, q in table["quantiles"].items()}
    return np.asarray(table["tails"], dtype=float), quantiles


@lru_cache(maxsize=1)
def _shipped_skew_table() -> tuple[np.ndarray, dict[int, np.ndarray]] | None:
    return _skew_table(load_calibration() or {})


def _quantiles_at(quantiles: dict[int, np.ndarray], n_seeds: int) -> np.ndarray:
    """The simulated |t| quantiles at ``n_seeds`` (beyond the simulated numbers: the nearest
    one below it, whose tails are heavier: at more seeds the shape check catches more skew)."""
    measured = sorted(quantiles)
    return quantiles[max((n for n in measured if n <= n_seeds), default=measured[0])]


def skew_robust_pvalue(pvalue: Any, n_seeds: int, data: dict[str, Any] | None = None) -> Any:
    """The skew-robust p of a two-sided t-test p-value ``pvalue`` (float or array) at
    ``n_seeds`` seeds: ``max(p_t, G_n(|t|))`` with ``G_n(x)`` the simulated share of studies of
    lognormal (sigma 1) seeds of mean 0 whose |t| reaches x with the shape check quiet, read
    conservatively off the stored grid (the smallest stored tail whose quantile |t| reaches).
    Valid, under the null, both for normal seeds (``p_t``) and for seeds that skewed (``G_n``):
    ``P(shape quiet and p <= a) <= a``. NaN stays NaN; 1 without stored data (no sign)."""
    p = np.asarray(pvalue, dtype=float)
    table = _skew_table(data)
    if table is None or n_seeds < 2:
        out = np.where(np.isnan(p), np.nan, 1.0)
    else:
        tails, quantiles = table
        q = _quantiles_at(quantiles, n_seeds)
        t_abs = stats.t.isf(np.clip(p, 1e-300, 1.0) / 2.0, n_seeds - 1)
        reached = t_abs[..., None] >= q  # (..., tails): the grid points |t| reaches
        g = np.where(reached, tails, 1.0).min(axis=-1)
        out = np.where(np.isnan(p), np.nan, np.maximum(p, g))
    return float(out) if np.ndim(out) == 0 else out


def skew_robust_critical(n_seeds: int, alpha: float, data: dict[str, Any] | None = None) -> float | None:
    """The critical value of |t| at two-sided level ``alpha`` that holds both for normal seeds
    and for lognormal (sigma 1) ones with the shape check quiet: ``max(t_{n-1, 1 - alpha/2},
    G_n^-1(alpha))`` (the stored quantile at the largest tail not above ``alpha``); None
    without stored data or below 2 seeds."""
    if data is None:
        return _shipped_critical(n_seeds, alpha)
    return _critical(_skew_table(data), n_seeds, alpha)


@lru_cache(maxsize=256)
def _shipped_critical(n_seeds: int, alpha: float) -> float | None:
    return _critical(_shipped_skew_table(), n_seeds, alpha)


def _critical(table: tuple[np.ndarray, dict[int, np.ndarray]] | None, n_seeds: int, alpha: float) -> float | None:
    if table is None or n_seeds < 2:
        return None
    tails, quantiles = table
    q = _quantiles_at(quantiles, n_seeds)
    at = np.flatnonzero(tails <= alpha + 1e-12)
    robust = float(q[at[0]]) if at.size else math.inf
    return max(float(stats.t.isf(alpha / 2.0, n_seeds - 1)), robust)


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
    "skew_robust_critical",
    "skew_robust_pvalue",
    "skewed_false_positive",
]
