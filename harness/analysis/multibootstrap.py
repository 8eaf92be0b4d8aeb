"""A contrast's interval from resampling seeds *and* evaluation windows (Sellam et al.,
2022, "The MultiBERTs"): :func:`multi_bootstrap` on a window-loss table, and its
interval :func:`multi_bootstrap_interval` on a (seeds, windows) contrast matrix. Like every
bootstrap over seeds it is shown only from :data:`BOOTSTRAP_MIN_SEEDS` seeds.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import polars as pl

from harness.analysis.contrasts import check_confidence, interaction_weights, sort_key
from harness.analysis.results import cell_columns, require_columns, require_table, require_variants, unfinished_mask
from harness.analysis.results_types import (
    BOOTSTRAP_MIN_SEEDS,
    BOOTSTRAP_SMALL_N,
    MULTI_BOOTSTRAP,
    NEEDS_TWO_SEEDS,
    PAPERS_FACTORIAL,
    ConfidenceInterval,
    ContrastResult,
    TestResult,
    readonly_array,
)
from harness.errors import InputError


def multi_bootstrap_interval(
    d: np.ndarray, *, confidence: float = 0.95, n_resamples: int = 2000, rng: Any = None
) -> ConfidenceInterval:
    """Percentile interval of the multi-bootstrap of a (seeds, windows) contrast matrix
    ``d``: each replicate draws seeds and windows with replacement (counts c_s, c_w) and
    computes ``sum_sw c_s d[s, w] c_w / (n_s n_w)``."""
    rng = np.random.default_rng(rng)
    n_s, n_w = d.shape
    # counts of each seed / window in every replicate: (B, S) and (B, W)
    seed_counts = rng.multinomial(n_s, np.full(n_s, 1.0 / n_s), size=n_resamples)
    window_counts = rng.multinomial(n_w, np.full(n_w, 1.0 / n_w), size=n_resamples)
    replicates = np.einsum("bs,sw,bw->b", seed_counts, d, window_counts) / (n_s * n_w)  # (B,)
    alpha = 1.0 - confidence
    low, high = np.quantile(replicates, [alpha / 2, 1 - alpha / 2])
    return ConfidenceInterval(float(low), float(high))


def multi_bootstrap(
    windows: pl.DataFrame,
    *,
    treatment: str | None = None,
    control: str = PAPERS_FACTORIAL.base,
    base: str = PAPERS_FACTORIAL.base,
    a: str = PAPERS_FACTORIAL.a,
    b: str = PAPERS_FACTORIAL.b,
    ab: str = PAPERS_FACTORIAL.ab,
    loss: str = "loss",
    confidence: float = 0.95,
    n_resamples: int = 2000,
    rng: Any = None,
) -> ContrastResult:
    """A contrast's interval from resampling seeds *and* evaluation windows.

    The per-seed t-interval treats the evaluation set as fixed; the multi-bootstrap
    (Sellam et al., 2022, "The MultiBERTs") also resamples it. With D[s, w] the contrast
    on window w of seed s (windows are the same for every variant and seed, so the
    contrast is paired in both), each replicate draws seeds and windows with replacement
    (counts c_s, c_w) and computes ``sum_sw c_s D[s,w] c_w / (n_s n_w)``; the interval is
    the percentile interval of the replicates (:func:`multi_bootstrap_interval`). Like
    every bootstrap over seeds it is shown only from 10 seeds: below, it under-covers.

    ``windows`` is long: ``variant, seed, window`` and ``loss`` (one cell: filter first);
    ``treatment`` given: the main effect ``L_control - L_treatment``, else the
    interaction ``L_a + L_b - L_base - L_ab``.
    """
    check_confidence(confidence)
    windows = require_table(windows, "window-loss table")
    require_columns(windows, ("variant", "seed", "window", loss), "window-loss table")
    cells = cell_columns(windows)
    if cells and windows.select(cells).unique().height > 1:
        raise InputError(
            f"multi_bootstrap works on one cell; the window-loss table has several ({', '.join(cells)}): "
            "filter it to one"
        )
    if treatment is None:
        weights, name, kind = interaction_weights(base, a, b, ab), f"interaction {a} x {b}", "interaction"
    else:
        weights, name, kind = {control: 1.0, treatment: -1.0}, f"{treatment} vs {control}", "main_effect"
    require_variants(windows, tuple(weights), "window-loss table")
    d, seeds, dropped = _contrast_matrix(windows, weights, loss)
    rng = np.random.default_rng(rng)
    n_s, n_w = d.shape
    seed_values = d.mean(axis=1) if n_w else np.zeros(0)
    why_not = ""
    ci = None
    if n_s < 2:
        why_not = f"{n_s} seed(s): {NEEDS_TWO_SEEDS}"
    elif n_w == 0:
        why_not = "no evaluation window common to every variant and seed"
    elif n_s < BOOTSTRAP_MIN_SEEDS:
        why_not = BOOTSTRAP_SMALL_N
    else:
        ci = multi_bootstrap_interval(d, confidence=confidence, n_resamples=n_resamples, rng=rng)
    notes = [why_not]
    if dropped:
        notes.append(f"dropped {len(dropped)} incomplete seed block(s) (seeds {', '.join(map(str, dropped))})")
    estimate = float(d.mean()) if d.size else math.nan
    method = f"multi-bootstrap over {n_s} seeds x {n_w} windows, percentile, {n_resamples} replicates"
    return ContrastResult(
        name=name,
        kind=kind,
        metric=f"{loss} (per window)",
        estimate=estimate,
        n_seeds=n_s,
        per_seed=readonly_array(seed_values),
        seeds=tuple(seeds),
        method=method,
        tests={MULTI_BOOTSTRAP: TestResult(estimate, ci, None, method, why_not)},
        verdict_test=MULTI_BOOTSTRAP,
        n_dropped=len(dropped),
        dropped_seeds=dropped,
        sd=float(np.std(seed_values, ddof=1)) if n_s >= 2 else None,
        confidence=confidence,
        message="; ".join(m for m in notes if m),
    )


def _contrast_matrix(
    windows: pl.DataFrame, weights: dict[str, float], loss: str
) -> tuple[np.ndarray, list[Any], tuple[Any, ...]]:
    """The contrast ``D[s, w] = sum_v weights[v] L_v[s, w]`` of every complete seed on the windows
    common to all its variants (finished runs, finite losses), the seeds it holds, and the seeds
    dropped as incomplete."""
    variants = tuple(weights)
    rows = windows.filter(pl.col("variant").is_in(list(variants)))
    if "status" in rows.columns:
        rows = rows.filter(~unfinished_mask(rows))
    rows = rows.filter(pl.col(loss).is_not_null() & pl.col(loss).is_finite())
    all_seeds = sorted(
        set(windows.filter(pl.col("variant").is_in(list(variants))).get_column("seed").to_list()), key=sort_key
    )
    # windows common to every (variant, seed) of a complete seed
    per_seed: dict[Any, dict[str, dict[int, float]]] = {}
    for rec in rows.select("variant", "seed", "window", loss).iter_rows():
        per_seed.setdefault(rec[1], {}).setdefault(rec[0], {})[int(rec[2])] = float(rec[3])
    seeds = [s for s in all_seeds if s in per_seed and all(v in per_seed[s] for v in variants)]
    dropped = tuple(s for s in all_seeds if s not in seeds)
    common = sorted(set.intersection(*(set(per_seed[s][v]) for s in seeds for v in variants))) if seeds else []
    if not seeds or not common:
        return np.zeros((len(seeds), 0)), seeds, dropped
    w = np.array([weights[v] for v in variants])
    losses = np.array([[[per_seed[s][v][k] for k in common] for s in seeds] for v in variants])  # (V, S, W)
    return np.tensordot(w, losses, axes=1), seeds, dropped  # (S, W): the contrast per seed and window


__all__ = ["multi_bootstrap", "multi_bootstrap_interval"]
