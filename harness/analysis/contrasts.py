"""Paired-seed contrasts with confidence intervals: main effects, the 2x2 interaction,
a multi-bootstrap over seeds and evaluation windows, a table over all cells with Holm
correction, trends against model size and context length, and the seeds a study needs.

Pairing. Trials that share a cell (dataset, size, context length) and a seed form a
*seed block*: the same data order and evaluation windows for every variant, so a
contrast is computed within each block and only its seed-to-seed spread matters. A
block with a missing, diverged or failed trial (``status`` not ``finished``, or no value)
is dropped whole and counted (``n_dropped``): a contrast from an incomplete block would
mix seeds. When a table holds several cells, each seed's contrast is the mean over the
cells that are complete *for that seed*; a cell complete for no seed is excluded and
named, and does not empty the pooled contrast. :func:`effects_table` gives each cell
separately. A diverged run is itself a finding (:func:`harness.analysis.divergence_table`):
a contrast over the survivors says it is conditional on them.

Intervals. The t-interval over seeds covers well from 2 seeds; a bootstrap interval over
seeds is shown only from 10 seeds (BCa), since below that it under-covers badly; zero
spread across seeds gives "no test possible", never an interval of width zero.

Signs. Lower loss is better. ``main_effect`` = L_control - L_treatment (positive: the
treatment helps); ``interaction_contrast`` = L_a + L_b - L_base - L_ab (positive:
superadditive, the combination gains more than the sum of the two single changes).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import polars as pl
from scipy import stats

from harness.analysis.results import (
    cell_columns,
    cell_label,
    diverged_mask,
    numeric_column,
    require_columns,
    require_table,
    require_variants,
    unfinished_mask,
)
from harness.analysis.results_types import (
    BOOTSTRAP_MIN_SEEDS,
    BOOTSTRAP_SMALL_N,
    NEEDS_TWO_SEEDS,
    NOT_DISTINGUISHABLE,
    SETTLED,
    AnalysisSettings,
    ConfidenceInterval,
    ContrastKind,
    ContrastResult,
    SeedsNeededResult,
    TrendResult,
    has_spread,
    readonly_array,
)
from harness.errors import InputError

Alternative = Literal["two-sided", "less", "greater"]
_BOOTSTRAP_BATCH_FLOATS = 20_000_000  # resampled values held at once by a batched bootstrap (160 MB)


# ----------------------------------------------------------------------------- blocks
@dataclass(frozen=True)
class SeedBlocks:
    """Seed blocks of some variants: ``values[i, j]`` = metric of variant j in the i-th
    complete block ``keys[i] = (cell values, seed)``.

    ``dropped`` holds the (cell values, seed) of incomplete blocks and ``missing`` the
    variants each of them lacks (not run, not finished or no value); ``all_cells`` every
    cell seen for these variants; ``n_diverged`` the runs of these variants whose
    status is ``diverged``.
    """

    cells: tuple[str, ...]  # cell column names
    keys: list[tuple[tuple, Any]]
    values: np.ndarray  # (n_blocks, n_variants)
    variants: tuple[str, ...]
    dropped: list[tuple[tuple, Any]]
    all_cells: list[tuple]
    missing: dict[tuple[tuple, Any], tuple[str, ...]] = field(default_factory=dict)
    n_diverged: int = 0


def _check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise InputError(f"confidence must lie in (0, 1), got {confidence}")


def _check_alternative(alternative: str) -> None:
    if alternative not in ("two-sided", "less", "greater"):
        raise InputError(f"alternative must be 'two-sided', 'less' or 'greater', got {alternative!r}")


def _refuse_duplicates(rows: pl.DataFrame, key_cols: list[str]) -> None:
    dup = rows.group_by(key_cols).len().filter(pl.col("len") > 1)
    if not dup.height:
        return
    first = dup.row(0, named=True)
    block = ", ".join(f"{k}={first[k]!r}" for k in key_cols)
    design = ("study", "tau_init", "position", "gate", "scoring", "dataset", "size", "context_length")
    same = rows.filter(*(pl.col(k) == first[k] for k in key_cols))
    varying = [c for c in design if c in rows.columns and c not in key_cols and same.get_column(c).n_unique() > 1]
    hint = (
        f" (they differ in {', '.join(varying)}: filter the table or pass by=[...] to split cells)" if varying else ""
    )
    raise InputError(f"{dup.height} duplicate trial(s) for one variant and seed in a cell, e.g. {block}{hint}")


def seed_blocks(df: pl.DataFrame, variants: Sequence[str], metric: str, by: Sequence[str] | None) -> SeedBlocks:
    """Group the rows of ``variants`` into seed blocks (one per cell and seed), keeping
    the complete ones: every variant finished with a finite ``metric``."""
    df = require_table(df)
    require_columns(df, ("variant", "seed", metric))
    numeric_column(df, metric)
    require_variants(df, variants)
    cells = cell_columns(df, by)
    rows = df.filter(pl.col("variant").is_in(list(variants)))
    value = pl.col(metric).cast(pl.Float64)
    rows = rows.with_columns(
        (~unfinished_mask(rows) & value.is_not_null() & value.is_finite().fill_null(False)).alias("__ok"),
    )
    _refuse_duplicates(rows, [*cells, "seed", "variant"])
    index = {v: j for j, v in enumerate(variants)}
    table: dict[tuple[tuple, Any], list[float | None]] = {}
    for rec in rows.select([*cells, "seed", "variant", metric, "__ok"]).iter_rows(named=True):
        key = (tuple(rec[c] for c in cells), rec["seed"])
        slot = table.setdefault(key, [None] * len(variants))
        slot[index[rec["variant"]]] = float(rec[metric]) if rec["__ok"] else None
    keys, values, dropped, missing = [], [], [], {}
    for key in sorted(table, key=_sort_key):
        slot = table[key]
        if any(v is None for v in slot) or key[1] is None:
            dropped.append(key)
            missing[key] = tuple(v for v, x in zip(variants, slot, strict=True) if x is None)
        else:
            keys.append(key)
            values.append(slot)
    all_cells = sorted({k[0] for k in table}, key=_sort_key)
    arr = np.array(values, dtype=float).reshape(len(values), len(variants))  # (n_blocks, n_variants)
    return SeedBlocks(cells, keys, arr, tuple(variants), dropped, all_cells, missing, int(diverged_mask(rows).sum()))


def _sort_key(item: Any) -> Any:
    """Sort mixed/None values deterministically."""
    if isinstance(item, tuple):
        return tuple(_sort_key(x) for x in item)
    return (item is None, str(type(item)), item if item is not None else 0)


@dataclass(frozen=True)
class _PerSeed:
    values: np.ndarray  # (n_seeds,): the contrast of each seed, mean over its complete cells
    seeds: tuple
    dropped_seeds: tuple  # seeds with no complete cell
    n_cells: int  # cells with at least one complete block
    excluded_cells: tuple[str, ...]  # labels of cells where no seed is complete, with what is missing
    partial_seeds: tuple  # seeds averaged over fewer than n_cells cells


def _per_seed(blocks: SeedBlocks, weights: np.ndarray) -> _PerSeed:
    """Per-seed contrast: the mean over the cells that are complete *for that seed*. A cell
    complete for no seed is excluded (named, with the variants it lacks); it does not
    empty the pooled contrast."""
    contrast = blocks.values @ weights if len(blocks.keys) else np.zeros(0)  # (n_blocks,)
    by_seed: dict[Any, list[float]] = {}
    for (_, seed), c in zip(blocks.keys, contrast, strict=True):
        by_seed.setdefault(seed, []).append(float(c))
    used_cells = {cell for cell, _ in blocks.keys}
    excluded = []
    for cell in blocks.all_cells:
        if cell in used_cells:
            continue
        lacking = set.intersection(*(set(m) for (c, _), m in blocks.missing.items() if c == cell))
        what = f"no finished {', '.join(v for v in blocks.variants if v in lacking)}" if lacking else "no complete seed"
        excluded.append(f"{cell_label(blocks.cells, cell)} ({what})")
    seeds = sorted(by_seed, key=_sort_key)
    dropped = {seed for _, seed in blocks.dropped if seed is not None and seed not in by_seed}
    return _PerSeed(
        values=np.array([np.mean(by_seed[s]) for s in seeds], dtype=float),
        seeds=tuple(seeds),
        dropped_seeds=tuple(sorted(dropped, key=_sort_key)),
        n_cells=max(len(used_cells), 1),
        excluded_cells=tuple(excluded),
        partial_seeds=tuple(s for s in seeds if len(by_seed[s]) < len(used_cells)),
    )


# ----------------------------------------------------------------------------- statistics
def t_interval(
    values: np.ndarray,
    *,
    confidence: float = 0.95,
    alternative: str = "two-sided",
    popmean: float = 0.0,
    axis: int = -1,
) -> tuple[ConfidenceInterval, Any]:
    """The t-interval of the mean and the one-sample t-test p-value against ``popmean``
    (``scipy.stats.ttest_1samp``), along ``axis``: floats for one sample, arrays for a
    batch (the calibration simulates thousands of studies in one call)."""
    res = stats.ttest_1samp(values, popmean, alternative=alternative, axis=axis)
    ci = res.confidence_interval(confidence_level=confidence)
    if np.ndim(res.pvalue) == 0:
        return ConfidenceInterval(float(ci.low), float(ci.high)), float(res.pvalue)
    return ConfidenceInterval(ci.low, ci.high), res.pvalue


def bootstrap_interval(
    values: np.ndarray,
    *,
    confidence: float = 0.95,
    n_resamples: int = 9999,
    rng: Any = None,
    method: str = "BCa",
    axis: int = -1,
) -> ConfidenceInterval:
    """Bootstrap interval of the mean over seeds (``scipy.stats.bootstrap``), along
    ``axis``. The report shows only BCa, and only from :data:`BOOTSTRAP_MIN_SEEDS` seeds:
    below that both BCa and percentile under-cover (benchmarks/calibration.py)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # degenerate resamples give NaN: the caller checks
        res = stats.bootstrap(
            (values,),
            np.mean,
            n_resamples=n_resamples,
            confidence_level=confidence,
            method=method,
            rng=rng,
            axis=axis,
            vectorized=True,
            batch=max(1, min(n_resamples, _BOOTSTRAP_BATCH_FLOATS // max(1, np.size(values)))),
        )
    ci = res.confidence_interval
    if np.ndim(ci.low) == 0:
        return ConfidenceInterval(float(ci.low), float(ci.high))
    return ConfidenceInterval(ci.low, ci.high)


def sign_flip_pvalue(
    values: np.ndarray, *, alternative: str = "two-sided", n_resamples: int = 9999, rng: Any = None, axis: int = -1
) -> Any:
    """Paired permutation test: under H0 each seed's contrast is as likely to have either
    sign (``scipy.stats.permutation_test``, statistic the mean). Exact (all 2^n sign
    patterns) when 2^n <= n_resamples, else random flips. Along ``axis`` for a batch."""
    res = stats.permutation_test(
        (values,),
        lambda x, axis: np.mean(x, axis=axis),
        permutation_type="samples",
        vectorized=True,
        n_resamples=n_resamples,
        alternative=alternative,
        rng=rng,
        axis=axis,
    )
    return float(res.pvalue) if np.ndim(res.pvalue) == 0 else res.pvalue


def _shown_bootstrap(values: np.ndarray, confidence: float, n_resamples: int, rng: np.random.Generator):
    """(interval, method, note): BCa from BOOTSTRAP_MIN_SEEDS seeds, nothing below."""
    if len(values) < BOOTSTRAP_MIN_SEEDS:
        return None, None, BOOTSTRAP_SMALL_N
    ci = bootstrap_interval(values, confidence=confidence, n_resamples=n_resamples, rng=rng, method="BCa")
    if not (np.isfinite(ci.low) and np.isfinite(ci.high)):
        return None, None, "BCa bootstrap interval undefined (degenerate resamples)"
    return ci, "BCa", ""


def _summarise(
    values: np.ndarray,
    *,
    confidence: float,
    alternative: str,
    n_resamples: int,
    rng: np.random.Generator,
) -> dict[str, Any]:
    """Estimate, t-interval, bootstrap interval and sign-flip p-value of per-seed values."""
    n = len(values)
    out: dict[str, Any] = dict(
        estimate=math.nan,
        confidence_interval=None,
        pvalue=None,
        bootstrap_interval=None,
        bootstrap_method=None,
        permutation_pvalue=None,
        sd=None,
        message="",
    )
    if n == 0:
        out["message"] = "no complete seed block: every seed lacks a finished trial of some variant"
        return out
    out["estimate"] = float(np.mean(values))
    if n < 2:
        out["message"] = f"1 seed: {NEEDS_TWO_SEEDS}"
        return out
    out["sd"] = float(np.std(values, ddof=1))
    if not has_spread(values):
        out["message"] = "every seed gives the same contrast (zero spread): no test possible"
        return out
    out["confidence_interval"], out["pvalue"] = t_interval(values, confidence=confidence, alternative=alternative)
    out["bootstrap_interval"], out["bootstrap_method"], note = _shown_bootstrap(values, confidence, n_resamples, rng)
    out["permutation_pvalue"] = sign_flip_pvalue(values, alternative=alternative, n_resamples=n_resamples, rng=rng)
    notes = [note]
    if n < 6 and alternative == "two-sided":
        notes.append(f"{n} seeds: the smallest possible sign-flip p-value is {2 / 2**n:.3g}")
    out["message"] = "; ".join(m for m in notes if m)
    return out


def _block_notes(blocks: SeedBlocks, per: _PerSeed) -> list[str]:
    """What was dropped, excluded or averaged, in words."""
    notes = []
    if blocks.dropped:
        labels = [
            f"seed {seed}" + (f" at {cell_label(blocks.cells, cell)}" if len(blocks.all_cells) > 1 else "")
            for cell, seed in blocks.dropped[:10]
        ]
        more = f", ... ({len(blocks.dropped)} in all)" if len(blocks.dropped) > 10 else ""
        notes.append(f"dropped {len(blocks.dropped)} incomplete seed block(s) ({', '.join(labels)}{more})")
    if per.excluded_cells:
        notes.append(f"excluded cell(s) {'; '.join(per.excluded_cells)}")
    if per.n_cells > 1:
        notes.append(f"averaged over {per.n_cells} cells ({', '.join(blocks.cells)}) within each seed")
    if per.partial_seeds:
        notes.append(f"seed(s) {', '.join(map(str, per.partial_seeds))} averaged over their complete cells only")
    if blocks.n_diverged:
        notes.append(f"conditional on the runs that converged: {blocks.n_diverged} run(s) diverged")
    return notes


def _contrast(
    df: pl.DataFrame,
    weights: Mapping[str, float],
    *,
    name: str,
    kind: ContrastKind,
    metric: str,
    confidence: float,
    rng: Any,
    by: Sequence[str] | None,
    alternative: str,
    n_resamples: int,
) -> ContrastResult:
    _check_confidence(confidence)
    _check_alternative(alternative)
    if n_resamples < 1:
        raise InputError(f"n_resamples must be >= 1, got {n_resamples}")
    rng = np.random.default_rng(rng)
    variants = tuple(weights)
    blocks = seed_blocks(df, variants, metric, by)
    per = _per_seed(blocks, np.array([weights[v] for v in variants], dtype=float))
    summary = _summarise(per.values, confidence=confidence, alternative=alternative, n_resamples=n_resamples, rng=rng)
    notes = [summary.pop("message"), *_block_notes(blocks, per)]
    cell = dict(zip(blocks.cells, blocks.all_cells[0], strict=False)) if len(blocks.all_cells) == 1 else {}
    method = f"paired t over seeds ({alternative}); BCa bootstrap over seeds (from {BOOTSTRAP_MIN_SEEDS}); sign-flip"
    return ContrastResult(
        name=name,
        kind=kind,
        metric=metric,
        n_seeds=len(per.values),
        per_seed=readonly_array(per.values),
        seeds=per.seeds,
        method=method,
        n_dropped=len(blocks.dropped),
        dropped_seeds=per.dropped_seeds,
        confidence=confidence,
        n_cells=per.n_cells,
        cell=cell,
        message="; ".join(m for m in notes if m),
        n_diverged=blocks.n_diverged,
        excluded_cells=per.excluded_cells,
        **summary,
    )


def interaction_weights(
    base: str = "baseline", a: str = "ega", b: str = "mope", ab: str = "ega-mope"
) -> dict[str, float]:
    """I = L_a + L_b - L_base - L_ab (positive = superadditive)."""
    return {base: -1.0, a: 1.0, b: 1.0, ab: -1.0}


def interaction_contrast(
    df: pl.DataFrame,
    *,
    base: str = "baseline",
    a: str = "ega",
    b: str = "mope",
    ab: str = "ega-mope",
    metric: str = "val_loss",
    confidence: float = 0.95,
    rng: Any = None,
    by: Sequence[str] | None = None,
    alternative: Alternative = "two-sided",
    n_resamples: int = 9999,
) -> ContrastResult:
    """The 2x2 interaction contrast with paired seeds.

    Per seed s, ``I_s = L_a + L_b - L_base - L_ab``: the combination's gain over the
    base, ``L_base - L_ab``, minus the sum of the single gains, ``(L_base - L_a) +
    (L_base - L_b)``. Positive = superadditive. The mean over seeds gets a t-interval
    (``scipy.stats.ttest_1samp``), a bootstrap interval over seeds (BCa; percentile with
    fewer than 10 seeds) and a sign-flip permutation p-value (exact for <= 13 seeds).

    Parameters
    ----------
    df : polars.DataFrame
        Needs ``variant``, ``seed`` and ``metric``; uses ``status`` and the cell columns
        (dataset, size, context_length) when present.
    base, a, b, ab : str
        The factorial's variants: ``a`` and ``b`` each change one component of ``base``,
        ``ab`` changes both.
    rng : None, int or numpy.random.Generator
        Randomness of the bootstrap and the (non-exact) permutation test.
    by : sequence of str, optional
        Cell columns (default: those of dataset, size, context_length present).

    Returns
    -------
    ContrastResult
        With one seed the estimate and the message "needs at least 2 seeds", no interval.

    Examples
    --------
    The papers' single-seed TinyShakespeare losses:

    >>> import polars as pl
    >>> df = pl.DataFrame({"variant": ["baseline", "ega", "mope", "ega-mope"], "seed": [0] * 4,
    ...                    "val_loss": [1.4742, 1.3821, 1.5060, 1.3550]})
    >>> res = interaction_contrast(df)
    >>> round(res.estimate, 4), res.confidence_interval, res.verdict
    (0.0589, None, 'no test possible (1 seed)')
    """
    names = (base, a, b, ab)
    if len(set(names)) != 4:
        raise InputError(f"interaction_contrast: base, a, b, ab must be four different variants, got {names}")
    return _contrast(
        df,
        interaction_weights(base, a, b, ab),
        name=f"interaction {a} x {b}",
        kind="interaction",
        metric=metric,
        confidence=confidence,
        rng=rng,
        by=by,
        alternative=alternative,
        n_resamples=n_resamples,
    )


def main_effect(
    df: pl.DataFrame,
    treatment: str,
    control: str = "baseline",
    *,
    metric: str = "val_loss",
    confidence: float = 0.95,
    rng: Any = None,
    by: Sequence[str] | None = None,
    alternative: Alternative = "two-sided",
    n_resamples: int = 9999,
) -> ContrastResult:
    """The gain of ``treatment`` over ``control`` with paired seeds:
    ``gain_s = L_control - L_treatment`` (positive = the treatment lowers the loss).
    Same intervals and tests as :func:`interaction_contrast`."""
    if treatment == control:
        raise InputError(f"main_effect: treatment and control are the same variant {treatment!r}")
    return _contrast(
        df,
        {control: 1.0, treatment: -1.0},
        name=f"{treatment} vs {control}",
        kind="main_effect",
        metric=metric,
        confidence=confidence,
        rng=rng,
        by=by,
        alternative=alternative,
        n_resamples=n_resamples,
    )


def linear_contrast(
    df: pl.DataFrame,
    weights: Mapping[str, float],
    *,
    name: str = "contrast",
    metric: str = "val_loss",
    confidence: float = 0.95,
    rng: Any = None,
    by: Sequence[str] | None = None,
    alternative: Alternative = "two-sided",
    n_resamples: int = 9999,
) -> ContrastResult:
    """Any paired contrast ``sum_v weights[v] * L_v`` per seed (e.g. an ablation against
    the combined model). Main effect and interaction are special cases."""
    if not weights:
        raise InputError("linear_contrast: weights is empty")
    return _contrast(
        df,
        dict(weights),
        name=name,
        kind="contrast",
        metric=metric,
        confidence=confidence,
        rng=rng,
        by=by,
        alternative=alternative,
        n_resamples=n_resamples,
    )


# ----------------------------------------------------------------------------- multi-bootstrap
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
    control: str = "baseline",
    base: str = "baseline",
    a: str = "ega",
    b: str = "mope",
    ab: str = "ega-mope",
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
    _check_confidence(confidence)
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
    variants = tuple(weights)
    require_variants(windows, variants, "window-loss table")
    rows = windows.filter(pl.col("variant").is_in(list(variants)))
    if "status" in rows.columns:
        rows = rows.filter(~unfinished_mask(rows))
    rows = rows.filter(pl.col(loss).is_not_null() & pl.col(loss).is_finite())
    all_seeds = sorted(
        set(windows.filter(pl.col("variant").is_in(list(variants))).get_column("seed").to_list()), key=_sort_key
    )
    # windows common to every (variant, seed) of a complete seed
    per_seed: dict[Any, dict[str, dict[int, float]]] = {}
    for rec in rows.select("variant", "seed", "window", loss).iter_rows():
        per_seed.setdefault(rec[1], {}).setdefault(rec[0], {})[int(rec[2])] = float(rec[3])
    seeds = [s for s in all_seeds if s in per_seed and all(v in per_seed[s] for v in variants)]
    dropped = tuple(s for s in all_seeds if s not in seeds)
    common = sorted(set.intersection(*(set(per_seed[s][v]) for s in seeds for v in variants))) if seeds else []
    rng = np.random.default_rng(rng)
    w = np.array([weights[v] for v in variants])
    if not seeds or not common:
        d = np.zeros((len(seeds), 0))
    else:
        losses = np.array([[[per_seed[s][v][k] for k in common] for s in seeds] for v in variants])  # (V, S, W)
        d = np.tensordot(w, losses, axes=1)  # (S, W): the contrast per seed and window
    n_s, n_w = d.shape
    seed_values = d.mean(axis=1) if n_w else np.zeros(0)
    estimate = float(d.mean()) if d.size else math.nan
    notes = []
    ci = None
    if n_s < 2:
        notes.append(f"{n_s} seed(s): {NEEDS_TWO_SEEDS}")
    elif n_w == 0:
        notes.append("no evaluation window common to every variant and seed")
    elif n_s < BOOTSTRAP_MIN_SEEDS:
        notes.append(BOOTSTRAP_SMALL_N)
    else:
        ci = multi_bootstrap_interval(d, confidence=confidence, n_resamples=n_resamples, rng=rng)
    if dropped:
        notes.append(f"dropped {len(dropped)} incomplete seed block(s) (seeds {', '.join(map(str, dropped))})")
    return ContrastResult(
        name=name,
        kind=kind,
        metric=f"{loss} (per window)",
        estimate=estimate,
        confidence_interval=ci,
        pvalue=None,
        n_seeds=n_s,
        per_seed=readonly_array(seed_values),
        seeds=tuple(seeds),
        method=f"multi-bootstrap over {n_s} seeds x {n_w} windows, percentile, {n_resamples} replicates",
        n_dropped=len(dropped),
        dropped_seeds=dropped,
        sd=float(np.std(seed_values, ddof=1)) if n_s >= 2 else None,
        confidence=confidence,
        message="; ".join(notes),
    )


# ----------------------------------------------------------------------------- effects table
def effects_table(
    df: pl.DataFrame,
    by: Sequence[str] | None = None,
    *,
    control: str | None = None,
    treatments: Sequence[str] | None = None,
    settings: AnalysisSettings | None = None,
    metric: str | None = None,
    confidence: float | None = None,
    rng: Any = None,
    holm_family: Literal["table", "effect"] = "table",
    n_resamples: int | None = None,
) -> pl.DataFrame:
    """Every effect in every cell, with Holm-adjusted p-values.

    Per cell (``by``; default: dataset, size, context_length present): the main effect
    of each treatment against ``control`` (default ``settings.base``; treatments
    default: every other variant in the table) and, where the cell holds the four
    factorial variants of ``settings``, the interaction contrast. The t-test p-values
    are adjusted with Holm's step-down method (``statsmodels.stats.multitest.multipletests``)
    across the whole table (``holm_family="table"``) or across cells for each effect
    (``"effect"``).

    Returns a polars table: the cell columns, ``treatment, control`` and the fields of
    :meth:`ContrastResult.to_row`, plus ``pvalue_holm`` and ``reject_holm``; a verdict
    whose interval excludes 0 but whose Holm-adjusted p does not reject says so.
    """
    from statsmodels.stats.multitest import multipletests

    settings = settings or AnalysisSettings()
    metric = metric or settings.metric
    confidence = confidence if confidence is not None else settings.confidence
    n_resamples = n_resamples if n_resamples is not None else settings.n_resamples
    control = control or settings.base
    if holm_family not in ("table", "effect"):
        raise InputError(f"holm_family must be 'table' or 'effect', got {holm_family!r}")
    df = require_table(df)
    require_columns(df, ("variant", "seed", metric))
    cells = cell_columns(df, by)
    present = [v for v in dict.fromkeys(df.get_column("variant").drop_nulls().to_list())]
    if treatments is None:
        require_variants(df, [control])
        order = [settings.a, settings.b, settings.ab]
        treatments = [v for v in order if v in present] + sorted(v for v in present if v not in order and v != control)
    else:
        require_variants(df, [control, *treatments])
    rng = np.random.default_rng(rng if rng is not None else settings.seed)
    factorial = (settings.base, settings.a, settings.b, settings.ab)
    groups = df.partition_by(list(cells), as_dict=True, maintain_order=True) if cells else {(): df}
    rows = []
    for key, cell_df in sorted(groups.items(), key=lambda kv: _sort_key(kv[0])):
        cell = dict(zip(cells, key, strict=False))
        in_cell = set(cell_df.get_column("variant").to_list())
        common = dict(metric=metric, confidence=confidence, rng=rng, by=cells, n_resamples=n_resamples)
        if control in in_cell:
            for treatment in treatments:
                if treatment in in_cell and treatment != control:
                    res = main_effect(cell_df, treatment, control, **common)
                    rows.append({**cell, "treatment": treatment, "control": control, **res.to_row()})
        if all(v in in_cell for v in factorial):
            res = interaction_contrast(
                cell_df, base=settings.base, a=settings.a, b=settings.b, ab=settings.ab, **common
            )
            rows.append({**cell, "treatment": settings.ab, "control": settings.base, **res.to_row()})
    if not rows:
        raise InputError(f"no cell holds {control!r} and a treatment: nothing to compare")
    table = pl.DataFrame(rows, infer_schema_length=None)
    pvals = table.get_column("pvalue").cast(pl.Float64).to_numpy()
    adjusted = np.full(len(pvals), np.nan)
    reject = np.zeros(len(pvals), dtype=bool)
    families = (
        np.zeros(len(pvals), dtype=int)
        if holm_family == "table"
        else np.unique(table.get_column("effect").to_numpy(), return_inverse=True)[1]
    )
    for fam in np.unique(families):
        idx = np.flatnonzero((families == fam) & np.isfinite(pvals))
        if len(idx):
            rej, adj, _, _ = multipletests(pvals[idx], alpha=1.0 - confidence, method="holm")
            adjusted[idx], reject[idx] = adj, rej
    # an interval that excludes 0 in one cell of many may not survive the correction: say so
    lost = [
        kind == SETTLED and np.isfinite(p) and not r
        for kind, p, r in zip(table.get_column("verdict_kind").to_list(), adjusted, reject, strict=False)
    ]
    verdicts = [
        f"{v} — not significant after Holm" if gone else v
        for v, gone in zip(table.get_column("verdict").to_list(), lost, strict=True)
    ]
    kinds = [
        NOT_DISTINGUISHABLE if gone else kind
        for kind, gone in zip(table.get_column("verdict_kind").to_list(), lost, strict=True)
    ]
    return table.with_columns(
        pl.Series("pvalue_holm", adjusted).fill_nan(None),
        pl.Series("reject_holm", reject),
        pl.Series("verdict", verdicts, dtype=pl.String),
        pl.Series("verdict_kind", kinds, dtype=pl.String),
    )


# ----------------------------------------------------------------------------- trends
def effect_trend(
    df: pl.DataFrame,
    *,
    against: str = "context_length",
    treatment: str | None = None,
    control: str = "baseline",
    base: str = "baseline",
    a: str = "ega",
    b: str = "mope",
    ab: str = "ega-mope",
    metric: str = "val_loss",
    confidence: float = 0.95,
    by: Sequence[str] | None = None,
    method: Literal["per-seed", "cluster"] = "per-seed",
) -> TrendResult:
    """Does an effect grow or shrink with model size or context length? The slope of the
    per-cell effect against ``log(x)`` (``against``: ``"params"`` or ``"context_length"``),
    with its interval.

    ``treatment`` given: the main effect ``L_control - L_treatment``; else the
    interaction ``L_a + L_b - L_base - L_ab``. The x of a cell for ``params`` is the
    mean parameter count of ``control`` (or ``base``) there. Other cell columns that
    vary (e.g. dataset) enter as fixed effects (one intercept per level).

    Method. ``"per-seed"`` (default): a slope is fitted by least squares within each
    seed across its complete cells, and the slopes get a t-interval over seeds. Cells of
    one seed share its data order (and, at one size, its initial weights), so they are
    correlated, while seeds are independent: one slope per seed is the unit of
    replication, the interval has n_seeds - 1 degrees of freedom and needs no model of
    the within-seed correlation; with a balanced design the mean slope equals the pooled
    OLS slope. ``"cluster"``: pooled OLS over (cell, seed) points with seed-clustered
    standard errors (statsmodels, t with n_seeds - 1 df), a cross-check; cluster-robust
    errors are biased low with the handful of seeds a study has, hence not the default.
    """
    _check_confidence(confidence)
    if against not in ("params", "context_length") and against not in getattr(df, "columns", ()):
        raise InputError(
            f"effect_trend: against must be 'params', 'context_length' or a numeric column, got {against!r}"
        )
    if method not in ("per-seed", "cluster"):
        raise InputError(f"effect_trend: method must be 'per-seed' or 'cluster', got {method!r}")
    if treatment is None:
        weights, name = interaction_weights(base, a, b, ab), f"interaction {a} x {b}"
        reference = base
    else:
        weights, name = {control: 1.0, treatment: -1.0}, f"{treatment} vs {control}"
        reference = control
    df = require_table(df)
    require_columns(df, (against,))
    numeric_column(df, against)
    cells = cell_columns(df, by)
    if against != "params" and against not in cells:
        cells = (*cells, against)
    if against == "params" and not cells:
        raise InputError("effect_trend against params needs cell columns (e.g. size) to group trials")
    blocks = seed_blocks(df, tuple(weights), metric, cells)
    points, controls = _trend_points(df, blocks, weights, cells, against, reference)
    distinct_x = sorted({p[1] for p in points})
    if len(distinct_x) < 2:
        raise InputError(
            f"effect_trend: need at least 2 distinct values of {against} among complete cells, got {len(distinct_x)}"
        )
    levels = sorted({p[3] for p in points}, key=_sort_key)
    slopes, intercepts, used, seeds_all = _per_seed_slopes(points, levels)
    notes = []
    if blocks.dropped:
        notes.append(f"dropped {len(blocks.dropped)} incomplete (cell, seed) block(s)")
    if len(used) < len(seeds_all):
        notes.append(f"{len(seeds_all) - len(used)} seed(s) lack the cells for a slope")
    if method == "cluster":
        fit = _cluster_fit(points, levels, confidence, against)
    else:
        fit = _per_seed_fit(slopes, intercepts, confidence, against)
    notes += fit.pop("notes")
    if controls and len(levels) > 1:
        fit["method"] += f", fixed effects for {', '.join(controls)}"
    return TrendResult(
        effect=name,
        against=against,
        metric=metric,
        n_seeds=len(used) if method == "per-seed" else len(seeds_all),
        per_seed=readonly_array(slopes),
        seeds=tuple(used),
        x_values=readonly_array(np.exp(np.array(distinct_x))),
        cell_estimates=readonly_array([np.mean([p[2] for p in points if p[1] == lx]) for lx in distinct_x]),
        n_dropped=len(blocks.dropped),
        confidence=confidence,
        message="; ".join(notes),
        n_diverged=blocks.n_diverged,
        **fit,
    )


def _trend_points(
    df: pl.DataFrame,
    blocks: SeedBlocks,
    weights: Mapping[str, float],
    cells: Sequence[str],
    against: str,
    reference: str,
) -> tuple[list[tuple], list[str]]:
    """(seed, log x, contrast, levels of the other cell columns) of every complete block,
    and the names of those other columns (fixed effects)."""
    w = np.array([weights[v] for v in blocks.variants])
    contrast = blocks.values @ w if len(blocks.keys) else np.zeros(0)  # (n_blocks,)
    if against == "params":  # x of a cell: the reference variant's mean parameter count there
        ref = df.filter(pl.col("variant") == reference)
        xs = {
            tuple(k): float(np.nanmean(g.get_column("params").cast(pl.Float64).to_numpy()))
            for k, g in (ref.partition_by(list(cells), as_dict=True).items())
        }
    else:
        xs = {cell: float(cell[list(cells).index(against)]) for cell in blocks.all_cells}
    if any(not (x > 0) for c, x in xs.items() if c in blocks.all_cells):
        raise InputError(f"effect_trend: {against} must be positive in every cell to take its log")
    controls = [c for c in cells if c != against and not (against == "params" and c == "size")]
    points = []
    for (cell, seed), y in zip(blocks.keys, contrast, strict=True):
        cd = dict(zip(cells, cell, strict=True))
        points.append((seed, math.log(xs[cell]), float(y), tuple(cd[c] for c in controls)))
    return points, controls


def _trend_design(points: Sequence[tuple], levels: Sequence[tuple]) -> np.ndarray:
    """Intercept, log x and one indicator per level of the other cell columns but the first."""
    cols = [np.ones(len(points)), np.array([p[1] for p in points])]
    for lev in levels[1:]:
        cols.append(np.array([1.0 if p[3] == lev else 0.0 for p in points]))
    return np.column_stack(cols)  # (n_points, 2 + n_levels - 1)


def _per_seed_slopes(points: Sequence[tuple], levels: Sequence[tuple]) -> tuple[np.ndarray, list, list, list]:
    """Least-squares slope and intercept within each seed that has the cells to separate
    the slope from the fixed effects; the seeds used and all seeds."""
    seeds_all = sorted({p[0] for p in points}, key=_sort_key)
    slopes, intercepts, used = [], [], []
    for seed in seeds_all:
        pts = [p for p in points if p[0] == seed]
        X = _trend_design(pts, levels)
        if np.linalg.matrix_rank(X) < X.shape[1]:
            continue
        coef, *_ = np.linalg.lstsq(X, np.array([p[2] for p in pts]), rcond=None)
        slopes.append(coef[1])
        intercepts.append(coef[0])
        used.append(seed)
    return np.array(slopes, dtype=float), intercepts, used, seeds_all


def _per_seed_fit(slopes: np.ndarray, intercepts: list, confidence: float, against: str) -> dict[str, Any]:
    """The mean per-seed slope with its t-interval over seeds."""
    fit: dict[str, Any] = dict(
        estimate=float(np.mean(slopes)) if len(slopes) else math.nan,
        intercept=float(np.mean(intercepts)) if intercepts else math.nan,
        confidence_interval=None,
        pvalue=None,
        method=f"per-seed OLS slope on log({against}), t-interval over seeds",
        notes=[],
    )
    if len(slopes) < 2:
        fit["notes"].append(f"{len(slopes)} seed slope(s): {NEEDS_TWO_SEEDS}")
    elif not has_spread(slopes):
        fit["notes"].append("every seed gives the same slope (zero spread): no test possible")
    else:
        fit["confidence_interval"], fit["pvalue"] = t_interval(slopes, confidence=confidence)
    return fit


def _cluster_fit(points: Sequence[tuple], levels: Sequence[tuple], confidence: float, against: str) -> dict[str, Any]:
    """Pooled OLS over (cell, seed) points with seed-clustered standard errors."""
    import statsmodels.api as sm

    X = _trend_design(points, levels)
    y = np.array([p[2] for p in points])
    groups = np.unique(np.array([str(p[0]) for p in points]), return_inverse=True)[1]
    n_groups = len(np.unique(groups))
    fit: dict[str, Any] = dict(confidence_interval=None, pvalue=None, notes=[])
    if n_groups < 2:
        fit["notes"].append(NEEDS_TWO_SEEDS)
        ols = sm.OLS(y, X).fit()
    else:
        ols = sm.OLS(y, X).fit(cov_type="cluster", cov_kwds={"groups": groups}, use_t=True)
        low, high = ols.conf_int(alpha=1 - confidence)[1]
        fit["confidence_interval"], fit["pvalue"] = ConfidenceInterval(float(low), float(high)), float(ols.pvalues[1])
    fit.update(
        estimate=float(ols.params[1]),
        intercept=float(ols.params[0]),
        method=f"pooled OLS of the effect on log({against}), seed-clustered SE (t, {n_groups - 1} df)",
    )
    return fit


# ----------------------------------------------------------------------------- power
def sd_interval(sd: float, df: int, confidence: float = 0.95) -> ConfidenceInterval:
    """Chi-square confidence interval of a normal standard deviation estimated with
    ``df`` degrees of freedom: ``sd sqrt(df / chi2_{1-a/2, df})`` to ``sd sqrt(df / chi2_{a/2, df})``.
    With 3 seeds (df = 2) at 95 % it spans 0.52 sd to 6.3 sd."""
    if df < 1:
        raise InputError(f"sd_interval: needs at least 1 degree of freedom, got {df}")
    alpha = 1.0 - confidence
    low = sd * math.sqrt(df / stats.chi2.ppf(1.0 - alpha / 2.0, df))
    high = sd * math.sqrt(df / stats.chi2.ppf(alpha / 2.0, df))
    return ConfidenceInterval(float(low), float(high))


def _seeds_for(d: float, power: float, alpha: float, alternative: str, max_seeds: int) -> int | None:
    """Smallest n >= 2 whose one-sample t-test on n per-seed contrasts reaches ``power``
    at standardised effect ``d`` (None beyond ``max_seeds``)."""
    from statsmodels.stats.power import TTestPower

    analysis = TTestPower()

    def power_at(n: int) -> float:
        return float(analysis.power(effect_size=d, nobs=n, alpha=alpha, alternative=alternative))

    if math.isinf(d) or power_at(2) >= power:
        return 2
    lo, hi = 2, 4
    while power_at(hi) < power:  # exponential search, then bisection on integers
        if hi >= max_seeds:
            return None
        lo, hi = hi, min(2 * hi, max_seeds)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if power_at(mid) < power else (lo, mid)
    return hi


def seeds_needed(
    result: ContrastResult | None = None,
    *,
    effect: float | None = None,
    sd: float | None = None,
    sd_df: int | None = None,
    power: float = 0.8,
    alpha: float | None = None,
    alternative: Literal["two-sided", "larger", "smaller"] = "two-sided",
    max_seeds: int = 10_000,
) -> SeedsNeededResult:
    """How many seeds a paired study needs to detect ``effect`` with probability
    ``power`` at level ``alpha``.

    Give ``effect`` as the *smallest effect of interest* (``analysis.smallest_effect``):
    planning at the observed estimate (the default when ``effect`` is None) is post-hoc
    power, which only restates the p-value; the result is then flagged ``post_hoc``.

    The per-seed contrast has seed-to-seed standard deviation ``sd`` (default: the
    observed one of ``result``, with ``sd_df = n_seeds - 1``); a one-sample t-test on n
    per-seed contrasts has power ``P(|T| > t_{1-alpha/2, n-1})`` with T noncentral
    t(n-1, d sqrt(n)), d = effect / sd (``statsmodels.stats.power.TTestPower``). The
    answer is the smallest integer n >= 2 reaching ``power``. An estimated sd is itself
    uncertain (with 3 seeds, by a factor 0.5 to 6): ``n_seeds_range`` gives the seeds
    needed at the two ends of its chi-square ``1 - alpha`` interval (:func:`sd_interval`).
    """
    if not 0.0 < power < 1.0:
        raise InputError(f"seeds_needed: power must lie in (0, 1), got {power}")
    if alpha is None:
        alpha = 1.0 - result.confidence if result is not None else 0.05
    if not 0.0 < alpha < 1.0:
        raise InputError(f"seeds_needed: alpha must lie in (0, 1), got {alpha}")
    if alternative not in ("two-sided", "larger", "smaller"):
        raise InputError(f"seeds_needed: alternative must be 'two-sided', 'larger' or 'smaller', got {alternative!r}")
    post_hoc = effect is None
    if effect is None:
        if result is None:
            raise InputError("seeds_needed: give effect= (the smallest effect of interest) or a ContrastResult")
        effect = result.estimate
    if sd is None:
        if result is None or result.sd is None:
            raise InputError("seeds_needed: the seed-to-seed sd is unknown (needs a result with >= 2 seeds, or sd=)")
        sd = result.sd
        sd_df = result.n_seeds - 1 if sd_df is None else sd_df
    effect, sd = float(effect), float(sd)
    if not math.isfinite(effect) or not math.isfinite(sd) or sd < 0:
        raise InputError(f"seeds_needed: effect and sd must be finite and sd >= 0, got effect={effect}, sd={sd}")
    method = "one-sample t-test power on per-seed contrasts (statsmodels TTestPower)"
    common = dict(effect=effect, sd=sd, power=power, alpha=alpha, alternative=alternative, method=method)
    common.update(post_hoc=post_hoc, sd_df=sd_df)
    if effect == 0.0:
        return SeedsNeededResult(n_seeds=None, effect_size=0.0, message="an effect of 0 cannot be detected", **common)
    if sd == 0.0:
        return SeedsNeededResult(n_seeds=2, effect_size=math.inf, message="zero seed-to-seed spread", **common)
    d = effect / sd
    if alternative == "two-sided":
        d = abs(d)
    elif (alternative == "larger") != (d > 0):
        message = f"a one-sided '{alternative}' test cannot detect an effect of sign {effect:+g}"
        return SeedsNeededResult(n_seeds=None, effect_size=d, message=message, **common)
    n = _seeds_for(d, power, alpha, alternative, max_seeds)
    message = "" if n is not None else f"more than {max_seeds} seeds needed"
    interval = n_range = None
    if sd_df is not None and sd_df >= 1:
        interval = sd_interval(sd, sd_df, 1.0 - alpha)
        # a smaller sd needs fewer seeds: the range runs from the interval's low end to its high end
        n_range = tuple(_seeds_for(d * sd / bound, power, alpha, alternative, max_seeds) for bound in interval)
    return SeedsNeededResult(
        n_seeds=n, effect_size=d, message=message, sd_interval=interval, n_seeds_range=n_range, **common
    )


# ----------------------------------------------------------------------------- primary
def primary_effect(df: pl.DataFrame, settings: AnalysisSettings | None = None, *, rng: Any = None) -> ContrastResult:
    """The study's primary hypothesis (``settings.primary``; the interaction when none is
    declared) computed on a results table with the settings' metric, confidence and
    resampling: :func:`interaction_contrast` of the settings' factorial, or
    :func:`main_effect` of ``treatment`` against ``control``. Its verdict is read at the
    unadjusted level; a sequential study tests this contrast.

    Examples
    --------
    >>> from harness.analysis import AnalysisSettings
    >>> settings = AnalysisSettings.from_mapping({"primary": {"treatment": "ega", "control": "baseline"}})
    >>> primary_effect(df, settings).estimate                # doctest: +SKIP
    """
    settings = settings or AnalysisSettings()
    primary = settings.primary_or_default()
    common = dict(
        metric=settings.metric,
        confidence=settings.confidence,
        n_resamples=settings.n_resamples,
        rng=rng if rng is not None else settings.seed,
    )
    if primary.kind == "interaction":
        return interaction_contrast(df, base=settings.base, a=settings.a, b=settings.b, ab=settings.ab, **common)
    return main_effect(df, str(primary.treatment), str(primary.control), **common)


__all__ = [
    "SeedBlocks",
    "bootstrap_interval",
    "effect_trend",
    "effects_table",
    "interaction_contrast",
    "interaction_weights",
    "linear_contrast",
    "main_effect",
    "multi_bootstrap",
    "multi_bootstrap_interval",
    "primary_effect",
    "sd_interval",
    "seed_blocks",
    "seeds_needed",
    "sign_flip_pvalue",
    "t_interval",
]
