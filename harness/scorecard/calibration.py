"""The numbers the scorecard states about its own error rates, read from data a simulation wrote.

``calibration.json`` (shipped with the package) is written by ``benchmarks/calibration.py``
from the simulations of :mod:`harness.bench.simulate.scorecard`; nothing here is typed in by hand:

- ``skew_robust``: the null distribution of the studentized mean of skewed per-seed values
  (lognormal of shape sigma, mean 0) at each shape and number of seeds: ``quantiles[sigma][n][j]``
  is the value that |t| exceeds in ``tails[j]`` of simulated studies. A row reads it at the skew
  its card's seeds allow (:func:`skew_sigma_used`): its skew-robust p (:func:`skew_robust_pvalue`)
  and its skew-robust interval (:func:`skew_robust_critical`);
- ``skew_floor``: the upper bound on that skew measured from the published studies' seeds
  (:func:`harness.analysis.skew.skew_sigma_bound`), the least any card guards against
  (:func:`skew_floor`);
- ``skewed_t_false_positive``: where the shape check fires on strongly skewed per-seed values
  (lognormal, sigma = 1, mean 0: the truth is 0), how often the 95 % t-interval still excludes
  0, at each number of seeds (docs/calibration.md shows it);
- ``family_wise``: under a global null (no effect anywhere), the share of simulated cards
  with at least one signed verdict after the card's procedure (:mod:`harness.scorecard.family`),
  by the number of claim families, the rows per family and the seeds (docs/calibration.md);
- ``null_cards`` and ``combined_cards``: whole simulated cards of the published combined design read
  by the scorecard itself: the share of null cards showing a direction against 0 (the card states
  it: :func:`null_card_rates`) and each truth's rates for the EGA claim's row as a whole;
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


#: The lognormal shape a card guards against when it has no estimate of its own: the floor
#: (``calibration.json``'s ``skew_floor``, measured from ``published/``), else this.
DEFAULT_SKEW_SIGMA = 0.5

SkewTable = tuple[np.ndarray, dict[float, dict[int, np.ndarray]]]


def skew_floor(data: dict[str, Any] | None = None) -> float:
    """The lognormal shape every card guards against at least: the upper bound measured from the
    published studies' seeds (``benchmarks/calibration.py``), else :data:`DEFAULT_SKEW_SIGMA`."""
    data = load_calibration() if data is None else data
    floor = (data or {}).get("skew_floor", {}).get("sigma")
    return float(floor) if floor is not None else DEFAULT_SKEW_SIGMA


def shipped_configurations(data: dict[str, Any] | None = None) -> list[np.ndarray]:
    """The published studies' contrasts the floor was measured on, standardised (mean 0, sd 1)."""
    data = load_calibration() if data is None else data
    return [np.asarray(u, dtype=float) for u in (data or {}).get("skew_floor", {}).get("configurations", [])]


def _skew_table(data: dict[str, Any] | None) -> SkewTable | None:
    """The stored skew-robust tables by shape, parsed (the shipped ones once: :func:`_shipped_skew_table`)."""
    if data is None:
        return _shipped_skew_table()
    table = data.get("skew_robust")
    if not table or not isinstance(next(iter(table["quantiles"].values()), None), dict):
        return None  # none, or the older single-shape form
    quantiles = {
        float(sigma): {int(n): np.asarray(q, dtype=float) for n, q in by_n.items()}
        for sigma, by_n in table["quantiles"].items()
    }
    return np.asarray(table["tails"], dtype=float), quantiles


@lru_cache(maxsize=1)
def _shipped_skew_table() -> SkewTable | None:
    return _skew_table(load_calibration() or {})


def skew_sigma_used(sigma: float | None, data: dict[str, Any] | None = None) -> float | None:
    """The simulated shape a row at skew ``sigma`` is read at: the smallest stored shape at or above
    it (the largest stored beyond them; None without data). ``sigma`` None: the floor."""
    table = _skew_table(data)
    if table is None:
        return None
    sigma = skew_floor(data) if sigma is None else float(sigma)
    stored = sorted(table[1])
    return next((s for s in stored if s >= sigma - 1e-12), stored[-1])


def _quantiles_at(table: SkewTable, n_seeds: int, sigma: float | None, data: dict[str, Any] | None) -> np.ndarray:
    """The simulated |t| quantiles at ``n_seeds`` and the shape read for ``sigma`` (beyond the
    simulated numbers of seeds: the nearest one below it, whose tails are heavier)."""
    by_n = table[1][skew_sigma_used(sigma, data)]  # type: ignore[index]
    measured = sorted(by_n)
    return by_n[max((n for n in measured if n <= n_seeds), default=measured[0])]


def skew_robust_pvalue(
    pvalue: Any, n_seeds: int, data: dict[str, Any] | None = None, *, sigma: float | None = None
) -> Any:
    """The skew-robust p of a two-sided t-test p-value ``pvalue`` (float or array) at ``n_seeds``
    seeds: ``max(p_t, G_n(|t|))`` with ``G_n(x)`` the simulated share of studies of lognormal
    seeds of shape ``sigma`` (None: the card floor, :func:`skew_floor`) and mean 0 whose |t|
    reaches x, read conservatively off the stored grid (the smallest stored tail whose quantile
    |t| reaches). Valid, under the null, both for normal seeds (``p_t``) and for seeds skewed up
    to that shape (``G_n``). NaN stays NaN; 1 without stored data (no sign)."""
    p = np.asarray(pvalue, dtype=float)
    table = _skew_table(data)
    if sigma is not None and sigma <= 0:  # no skew to guard against: the t-test's own p
        out = p
    elif table is None or n_seeds < 2:
        out = np.where(np.isnan(p), np.nan, 1.0)
    else:
        tails = table[0]
        q = _quantiles_at(table, n_seeds, sigma, data)
        t_abs = stats.t.isf(np.clip(p, 1e-300, 1.0) / 2.0, n_seeds - 1)
        reached = t_abs[..., None] >= q  # (..., tails): the grid points |t| reaches
        g = np.where(reached, tails, 1.0).min(axis=-1)
        out = np.where(np.isnan(p), np.nan, np.maximum(p, g))
    return float(out) if np.ndim(out) == 0 else out


def skew_robust_critical(
    n_seeds: int, alpha: float, data: dict[str, Any] | None = None, *, sigma: float | None = None
) -> float | None:
    """The critical value of |t| at two-sided level ``alpha`` that holds both for normal seeds
    and for lognormal ones of shape ``sigma`` (None: the card floor): ``max(t_{n-1, 1 - alpha/2},
    G_n^-1(alpha))`` (the stored quantile at the largest tail not above ``alpha``); None
    without stored data or below 2 seeds."""
    if data is None:
        return _shipped_critical(n_seeds, alpha, sigma)
    return _critical(_skew_table(data), n_seeds, alpha, sigma, data)


@lru_cache(maxsize=1024)
def _shipped_critical(n_seeds: int, alpha: float, sigma: float | None) -> float | None:
    return _critical(_shipped_skew_table(), n_seeds, alpha, sigma, None)


def _critical(
    table: SkewTable | None, n_seeds: int, alpha: float, sigma: float | None, data: dict[str, Any] | None
) -> float | None:
    if n_seeds < 2:
        return None
    if sigma is not None and sigma <= 0:  # no skew to guard against: the t's own critical value
        return float(stats.t.isf(alpha / 2.0, n_seeds - 1))
    if table is None:
        return None
    q = _quantiles_at(table, n_seeds, sigma, data)
    at = np.flatnonzero(table[0] <= alpha + 1e-12)
    robust = float(q[at[0]]) if at.size else math.inf
    return max(float(stats.t.isf(alpha / 2.0, n_seeds - 1)), robust)


def null_card_rates(data: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The simulated null cards of the published combined design (``benchmarks/calibration.py``):
    ``{"cards": N, "seeds": n, "rates": {noise: share of cards with a direction against 0}}``."""
    data = load_calibration() if data is None else data
    return (data or {}).get("null_cards")


__all__ = [
    "CALIBRATION_FILE",
    "load_calibration",
    "null_card_rates",
    "DEFAULT_SKEW_SIGMA",
    "shipped_configurations",
    "skew_floor",
    "skew_robust_critical",
    "skew_robust_pvalue",
    "skew_sigma_used",
]
