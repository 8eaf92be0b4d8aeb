"""Do the learned MOPE widths fall into a few scales (character, word, clause, sentence)?

MOPE's pair i has a Gaussian window ``exp(-b^2 / (2 sigma_i^2))``: ``sigma_i`` is the
distance (in characters) over which the pair sees. The paper reads its learned sigmas as
four clusters. Here ``log(sigma)`` (scales are multiplicative) is fitted by Gaussian
mixtures with k = 1..max_clusters components (``sklearn.mixture.GaussianMixture``) and k
is chosen by the lowest BIC, which charges each extra cluster its 3 parameters, so four
clusters are reported only when the data support them. The centres are then set beside
the corpus's mean word, clause and sentence lengths.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import polars as pl

from harness.analysis.results_types import MopeScalesResult, readonly_array
from harness.errors import InputError


def _sigmas(values: Any, column: str) -> np.ndarray:
    if isinstance(values, pl.DataFrame):
        if column not in values.columns:
            raise InputError(f"MOPE table has no column {column!r}; columns present: {', '.join(values.columns)}")
        values = values.get_column(column).drop_nulls().to_numpy()
    arr = np.asarray(values, dtype=float).ravel()
    arr = arr[np.isfinite(arr)]
    if arr.size == 0:
        raise InputError("no learned MOPE sigma to cluster (empty input)")
    if np.any(arr <= 0):
        raise InputError("MOPE sigma must be positive to take its log")
    return arr


def mope_scales(
    sigmas: Any,
    *,
    max_clusters: int = 6,
    criterion: str = "bic",
    corpus_lengths: Mapping[str, float] | None = None,
    column: str = "sigma",
    rng: Any = None,
) -> MopeScalesResult:
    """Cluster the learned MOPE widths on a log scale.

    Parameters
    ----------
    sigmas : array-like or polars.DataFrame
        Learned sigma values (positions); a table's ``column`` is used.
    max_clusters : int
        Largest k tried (capped at half the number of values, at least 1).
    criterion : {"bic", "aic"}
        Mixture selection criterion: lowest wins.
    corpus_lengths : mapping, optional
        Named length scales in characters, e.g. ``{"character": 1, "word": 5.4,
        "clause": 38, "sentence": 95}``; each centre is matched to the nearest in log distance.
    rng : None, int or numpy.random.Generator
        Seeds the mixture's initialisation.
    """
    from sklearn.mixture import GaussianMixture

    if criterion not in ("bic", "aic"):
        raise InputError(f"mope_scales: criterion must be 'bic' or 'aic', got {criterion!r}")
    if max_clusters < 1:
        raise InputError(f"mope_scales: max_clusters must be >= 1, got {max_clusters}")
    values = _sigmas(sigmas, column)
    x = np.log(values).reshape(-1, 1)  # (n, 1): one feature, log sigma
    seed = int(np.random.default_rng(rng).integers(2**31 - 1))
    n_distinct = len(np.unique(np.round(x, 12)))
    k_max = max(1, min(max_clusters, len(values) // 2, n_distinct))
    scores: dict[int, float] = {}
    fits = {}
    for k in range(1, k_max + 1):
        gm = GaussianMixture(n_components=k, covariance_type="full", n_init=3, random_state=seed, reg_covar=1e-4).fit(x)
        scores[k] = float(gm.bic(x) if criterion == "bic" else gm.aic(x))
        fits[k] = gm
    best = min(scores, key=scores.get)
    gm = fits[best]
    order = np.argsort(gm.means_.ravel())
    centres = np.exp(gm.means_.ravel()[order])
    weights = gm.weights_[order]
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    labels = rank[gm.predict(x)]
    lengths = dict(corpus_lengths or {})
    nearest: tuple = ()
    if lengths:
        names = list(lengths)
        logs = np.log(np.array([lengths[n] for n in names], dtype=float))
        nearest = tuple(names[int(np.argmin(np.abs(logs - math.log(c))))] for c in centres)
    message = "" if len(values) >= 10 else f"only {len(values)} sigma values: the number of clusters is fragile"
    return MopeScalesResult(
        k=best,
        centres=readonly_array(centres),
        weights=readonly_array(weights),
        labels=np.asarray(labels),
        scores=scores,
        criterion=criterion,
        n=len(values),
        corpus_lengths=lengths,
        nearest_scale=nearest,
        method=f"Gaussian mixture on log(sigma), k=1..{k_max} by lowest {criterion.upper()}",
        message=message,
    )


__all__ = ["mope_scales"]
