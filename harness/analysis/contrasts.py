"""Paired-seed contrasts with confidence intervals: main effects, the 2x2 interaction,
any linear contrast, and a table over all cells with Holm correction. Trends against
size and context live in :mod:`harness.analysis.trends`, the multi-bootstrap over seeds
and windows in :mod:`harness.analysis.multibootstrap`, the seeds a study needs in
:mod:`harness.analysis.planning`.

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import polars as pl

from harness.analysis.multiplicity import holm_adjusted
from harness.analysis.paired_tests import Alternative, BCa, Shapiro, SignFlip, TTest
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
    BCA_TEST,
    BOOTSTRAP_MIN_SEEDS,
    NEEDS_TWO_SEEDS,
    NOT_DISTINGUISHABLE,
    PAPERS_FACTORIAL,
    SETTLED,
    SHAPE_CHECK,
    SIGN_FLIP_TEST,
    T_TEST,
    AnalysisSettings,
    ConfidenceInterval,
    ContrastKind,
    ContrastResult,
    PrimaryHypothesis,
    has_spread,
    readonly_array,
)
from harness.analysis.verdict_words import not_after_holm
from harness.errors import InputError


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


def check_confidence(confidence: float) -> None:
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
    for key in sorted(table, key=sort_key):
        slot = table[key]
        if any(v is None for v in slot) or key[1] is None:
            dropped.append(key)
            missing[key] = tuple(v for v, x in zip(variants, slot, strict=True) if x is None)
        else:
            keys.append(key)
            values.append(slot)
    all_cells = sorted({k[0] for k in table}, key=sort_key)
    arr = np.array(values, dtype=float).reshape(len(values), len(variants))  # (n_blocks, n_variants)
    return SeedBlocks(cells, keys, arr, tuple(variants), dropped, all_cells, missing, int(diverged_mask(rows).sum()))


def sort_key(item: Any) -> Any:
    """Sort mixed/None values deterministically."""
    if isinstance(item, tuple):
        return tuple(sort_key(x) for x in item)
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
    seeds = sorted(by_seed, key=sort_key)
    dropped = {seed for _, seed in blocks.dropped if seed is not None and seed not in by_seed}
    return _PerSeed(
        values=np.array([np.mean(by_seed[s]) for s in seeds], dtype=float),
        seeds=tuple(seeds),
        dropped_seeds=tuple(sorted(dropped, key=sort_key)),
        n_cells=max(len(used_cells), 1),
        excluded_cells=tuple(excluded),
        partial_seeds=tuple(s for s in seeds if len(by_seed[s]) < len(used_cells)),
    )


# ----------------------------------------------------------------------------- statistics
def _no_test(n: int, values: np.ndarray) -> str:
    """Why no test runs on these per-seed values ("" when they can be tested)."""
    if n == 0:
        return "no complete seed block: every seed lacks a finished trial of some variant"
    if n < 2:
        return f"1 seed: {NEEDS_TWO_SEEDS}"
    if not has_spread(values):
        return "every seed gives the same contrast (zero spread): no test possible"
    return ""


def _summarise(
    values: np.ndarray,
    *,
    confidence: float,
    alternative: str,
    n_resamples: int,
    rng: np.random.Generator,
) -> dict[str, Any]:
    """Estimate, sd and the tests of per-seed values: the t-test, the BCa bootstrap (from
    :data:`BOOTSTRAP_MIN_SEEDS` seeds), the sign-flip test and the shape check, run in this
    order on one ``rng`` (the bootstrap draws first), with their notes as the message."""
    n = len(values)
    why_not = _no_test(n, values)
    out: dict[str, Any] = dict(
        estimate=float(np.mean(values)) if n else math.nan,
        sd=float(np.std(values, ddof=1)) if n >= 2 else None,
        tests={},
        message=why_not,
    )
    if why_not:
        return out
    tests = {
        T_TEST: TTest(confidence, alternative),
        BCA_TEST: BCa(confidence, n_resamples),
        SIGN_FLIP_TEST: SignFlip(alternative, n_resamples),
        SHAPE_CHECK: Shapiro(),
    }
    out["tests"] = {key: test.run(values, rng=rng) for key, test in tests.items()}
    out["message"] = "; ".join(out["tests"][k].note for k in (BCA_TEST, SIGN_FLIP_TEST) if out["tests"][k].note)
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
    check_confidence(confidence)
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
        alternative=alternative,
        **summary,
    )


def interaction_weights(
    base: str = PAPERS_FACTORIAL.base,
    a: str = PAPERS_FACTORIAL.a,
    b: str = PAPERS_FACTORIAL.b,
    ab: str = PAPERS_FACTORIAL.ab,
) -> dict[str, float]:
    """I = L_a + L_b - L_base - L_ab (positive = superadditive)."""
    return {base: -1.0, a: 1.0, b: 1.0, ab: -1.0}


def interaction_contrast(
    df: pl.DataFrame,
    *,
    base: str = PAPERS_FACTORIAL.base,
    a: str = PAPERS_FACTORIAL.a,
    b: str = PAPERS_FACTORIAL.b,
    ab: str = PAPERS_FACTORIAL.ab,
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
    (``scipy.stats.ttest_1samp``), a BCa bootstrap interval over seeds (only from
    :data:`BOOTSTRAP_MIN_SEEDS` seeds; none below, where every bootstrap under-covers) and a
    sign-flip permutation p-value (exact for <= 13 seeds).

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
    control: str = PAPERS_FACTORIAL.base,
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
    primary: PrimaryHypothesis | None = None,
) -> pl.DataFrame:
    """Every effect in every cell, with Holm-adjusted p-values, the primary hypothesis apart.

    Per cell (``by``; default: dataset, size, context_length present): the main effect
    of each treatment against ``control`` (default ``settings.base``; treatments
    default: every other variant in the table) and, where the cell holds the four
    factorial variants of ``settings``, the interaction contrast. The t-test p-values
    are adjusted with Holm's step-down method (``statsmodels.stats.multitest.multipletests``)
    across the whole table (``holm_family="table"``) or across cells for each effect
    (``"effect"``).

    ``primary`` (the study's primary hypothesis): its rows (the interaction, or the main effect
    of its treatment against its control, in every cell) are read at the unadjusted level, as
    the verdict table reads the primary, and are left out of the Holm family
    (``pvalue_holm`` null, ``role`` "primary"); None: every row is in the family.

    Returns a polars table: the cell columns, ``treatment, control``, ``role`` ("primary" or
    "secondary") and the fields of :meth:`ContrastResult.to_row`, plus ``pvalue_holm`` and
    ``reject_holm``; a secondary verdict whose interval excludes 0 but whose Holm-adjusted p
    does not reject loses its claim words (:func:`~harness.analysis.verdict_words.not_after_holm`).
    """
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
    treatments = _treatments(df, control, treatments, settings)
    rng = np.random.default_rng(rng if rng is not None else settings.seed)
    common = dict(metric=metric, confidence=confidence, rng=rng, by=cells, n_resamples=n_resamples)
    rows = _effect_rows(df, cells, control, treatments, settings, common)
    if not rows:
        raise InputError(f"no cell holds {control!r} and a treatment: nothing to compare")
    table = pl.DataFrame(rows, infer_schema_length=None)
    is_primary = _primary_rows(table, primary)
    table = table.with_columns(pl.Series("role", np.where(is_primary, "primary", "secondary")))
    adjusted, reject = _holm(table, is_primary, holm_family, confidence)
    return _with_holm(table, adjusted, reject)


def _treatments(
    df: pl.DataFrame, control: str, treatments: Sequence[str] | None, settings: AnalysisSettings
) -> Sequence[str]:
    """The treatments compared with ``control``: the given ones (each must be in the table), or
    every other variant present, the factorial's ``a, b, ab`` first."""
    if treatments is not None:
        require_variants(df, [control, *treatments])
        return treatments
    require_variants(df, [control])
    present = [v for v in dict.fromkeys(df.get_column("variant").drop_nulls().to_list())]
    order = [settings.a, settings.b, settings.ab]
    return [v for v in order if v in present] + sorted(v for v in present if v not in order and v != control)


def _effect_rows(
    df: pl.DataFrame,
    cells: Sequence[str],
    control: str,
    treatments: Sequence[str],
    settings: AnalysisSettings,
    common: dict[str, Any],
) -> list[dict[str, Any]]:
    """One row per cell and effect, cells in :func:`sort_key` order: each treatment's main effect
    against ``control`` where the cell holds both, then the interaction where it holds the
    factorial's four variants (``common``: the keywords every contrast shares, its ``rng`` drawn
    from in this order)."""
    factorial = (settings.base, settings.a, settings.b, settings.ab)
    groups = df.partition_by(list(cells), as_dict=True, maintain_order=True) if cells else {(): df}
    rows = []
    for key, cell_df in sorted(groups.items(), key=lambda kv: sort_key(kv[0])):
        cell = dict(zip(cells, key, strict=False))
        in_cell = set(cell_df.get_column("variant").to_list())
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
    return rows


def _holm(
    table: pl.DataFrame, is_primary: np.ndarray, holm_family: str, confidence: float
) -> tuple[np.ndarray, np.ndarray]:
    """Holm-adjusted p-values and rejections (:func:`~harness.analysis.multiplicity.holm_adjusted`,
    ``statsmodels``' ``multipletests(method="holm")``'s numbers) of the secondary rows with a
    p-value, one family for the table or one per effect; the primary rows are read at the
    unadjusted level (their adjusted p stays NaN)."""
    pvals = table.get_column("pvalue").cast(pl.Float64).to_numpy()
    adjusted = np.full(len(pvals), np.nan)
    reject = np.zeros(len(pvals), dtype=bool)
    families = (
        np.zeros(len(pvals), dtype=int)
        if holm_family == "table"
        else np.unique(table.get_column("effect").to_numpy(), return_inverse=True)[1]
    )
    for fam in np.unique(families):
        idx = np.flatnonzero((families == fam) & np.isfinite(pvals) & ~is_primary)
        if len(idx):
            adj = holm_adjusted(pvals[idx])
            adjusted[idx], reject[idx] = adj, adj <= 1.0 - confidence  # Holm's step-down rejections
    reject[is_primary] = np.nan_to_num(pvals[is_primary], nan=1.0) < 1.0 - confidence  # unadjusted
    return adjusted, reject


def _with_holm(table: pl.DataFrame, adjusted: np.ndarray, reject: np.ndarray) -> pl.DataFrame:
    """The table with ``pvalue_holm`` and ``reject_holm``, and the verdicts the correction undoes
    reworded (:func:`~harness.analysis.verdict_words.not_after_holm`)."""
    # an interval that excludes 0 in one cell of many may not survive the correction: say so
    lost = [
        kind == SETTLED and np.isfinite(p) and not r
        for kind, p, r in zip(table.get_column("verdict_kind").to_list(), adjusted, reject, strict=False)
    ]
    verdicts = [
        not_after_holm("estimate", est, ConfidenceInterval(low, high), p) if gone else v
        for v, gone, est, low, high, p in zip(
            table.get_column("verdict").to_list(),
            lost,
            table.get_column("estimate").to_list(),
            table.get_column("ci_low").to_list(),
            table.get_column("ci_high").to_list(),
            adjusted,
            strict=True,
        )
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


def _primary_rows(table: pl.DataFrame, primary: PrimaryHypothesis | None) -> np.ndarray:
    """Which rows of an effects table are the primary hypothesis (in any cell)."""
    if primary is None:
        return np.zeros(table.height, dtype=bool)
    if primary.kind == "interaction":
        return (table.get_column("kind") == "interaction").to_numpy()
    return (
        (table.get_column("kind") == "main_effect")
        & (table.get_column("treatment") == primary.treatment)
        & (table.get_column("control") == primary.control)
    ).to_numpy()


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
    "check_confidence",
    "effects_table",
    "interaction_contrast",
    "interaction_weights",
    "linear_contrast",
    "main_effect",
    "primary_effect",
    "seed_blocks",
    "sort_key",
]
