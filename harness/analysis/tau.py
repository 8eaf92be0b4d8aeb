"""Is the learned EGA threshold tau really about 0.35, whatever the run? And is the
fraction of open gates a property of the text or just the Gaussian tail above tau?

The EGA gate on key j is ``g_j = sigmoid(alpha (e~_j - tau))`` with ``e~_j`` a
z-normalised energy, so a gate is open (g_j > 1/2) exactly when ``e~_j > tau``. If the
normalised energies were standard normal, the open fraction would be ``1 - Phi(tau)``
whatever the corpus: 0.363 at tau = 0.35, the papers' "36 % of tokens". The analysis
sets the measured open fraction beside that tail and beside the corpus's content-word
fraction (and a synthetic corpus's true salient fraction), so the two explanations can
be told apart.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl
from scipy import stats

from harness.analysis.results import numeric_column, require_columns, require_table, require_variants, unfinished_mask
from harness.analysis.results_types import (
    NEEDS_TWO_SEEDS,
    ConfidenceInterval,
    HeterogeneityResult,
    OpenFractionResult,
    TauStabilityResult,
    _readonly,
    has_spread,
)
from harness.errors import InputError

DEFAULT_FACTORS = ("size", "context_length", "dataset", "tau_init", "variant")
CONTENT_FRACTION_COLUMN = "content_fraction"  # the corpus's content-word fraction, per run
GROUND_TRUTH_COLUMN = "salient_fraction"  # true salient fraction (synthetic-salience), per run


def tost_pvalue(values: np.ndarray, low: float, high: float) -> float:
    """Two one-sided t-tests (Schuirmann): H0 mean <= low, and H0 mean >= high.

    ``p = max(P(T_{n-1} >= (m - low)/se), P(T_{n-1} <= (m - high)/se))``; below alpha
    the mean lies within (low, high) at level alpha, i.e. the (1 - 2 alpha) interval
    lies inside the bounds.
    """
    p_low = stats.ttest_1samp(values, low, alternative="greater").pvalue
    p_high = stats.ttest_1samp(values, high, alternative="less").pvalue
    return float(max(p_low, p_high))


def _gated_rows(df: pl.DataFrame, column: str, variants: Sequence[str] | None) -> tuple[pl.DataFrame, int]:
    """Finished runs with a finite tau, and how many runs of gated variants were dropped."""
    df = require_table(df)
    require_columns(df, (column,))
    numeric_column(df, column)
    if variants is not None:
        require_columns(df, ("variant",))
        require_variants(df, variants)
        df = df.filter(pl.col("variant").is_in(list(variants)))
    tau = pl.col(column).cast(pl.Float64)
    has_tau = tau.is_not_null() & tau.is_finite().fill_null(False)
    if "variant" in df.columns:  # a variant with a tau somewhere is gated: its other runs count as dropped
        gated = set(df.filter(has_tau).get_column("variant").to_list())
        candidates = df.filter(pl.col("variant").is_in(list(gated)))
    else:
        candidates = df
    ok = candidates.filter(~unfinished_mask(candidates)).filter(has_tau)
    if ok.height == 0:
        raise InputError(
            f"no finished run has a learned tau (column {column!r} is empty): "
            "the study needs a variant with an EGA gate"
        )
    return ok, candidates.height - ok.height


def _unit_means(rows: pl.DataFrame, column: str) -> tuple[np.ndarray, tuple]:
    """Per-seed means (seeds are the independent units) or per-run values without seeds."""
    if "seed" not in rows.columns:
        values = rows.get_column(column).cast(pl.Float64).to_numpy()
        return values, tuple(range(len(values)))
    per = rows.group_by("seed").agg(pl.col(column).cast(pl.Float64).mean()).sort("seed")
    return per.get_column(column).to_numpy(), tuple(per.get_column("seed").to_list())


def tau_heterogeneity(
    df: pl.DataFrame, factor: str, *, column: str = "tau_mean", variants: Sequence[str] | None = None
) -> HeterogeneityResult:
    """Does tau differ across the levels of ``factor`` (size, context, corpus, initial
    value...)? One-way ANOVA (``scipy.stats.f_oneway``) and Kruskal-Wallis
    (``scipy.stats.kruskal``) over per-run values; a missing ``tau_init`` is the level
    "default"."""
    rows, _ = _gated_rows(df, column, variants)
    require_columns(rows, (factor,))
    levels_col = pl.col(factor).cast(pl.String).fill_null("default")
    groups = rows.with_columns(levels_col.alias("__level")).partition_by("__level", as_dict=True)
    ordered = sorted(groups.items(), key=lambda kv: _level_key(kv[0][0]))
    levels = tuple(k[0] for k, _ in ordered)
    samples = [g.get_column(column).cast(pl.Float64).to_numpy() for _, g in ordered]
    means = tuple(float(np.mean(s)) for s in samples)
    sizes = tuple(len(s) for s in samples)
    if len(samples) < 2:
        return HeterogeneityResult(factor, levels, means, sizes, None, None, f"one level of {factor} only")
    if min(sizes) < 2:
        return HeterogeneityResult(
            factor, levels, means, sizes, None, None, f"a level of {factor} has a single run: no within-level spread"
        )
    if np.ptp(np.concatenate(samples)) == 0:
        return HeterogeneityResult(factor, levels, means, sizes, None, None, "all runs have the same tau")
    anova = float(stats.f_oneway(*samples).pvalue)
    kruskal = float(stats.kruskal(*samples).pvalue)
    return HeterogeneityResult(
        factor, levels, means, sizes, None if math.isnan(anova) else anova, None if math.isnan(kruskal) else kruskal
    )


def _level_key(level: Any) -> tuple:
    try:
        return (0, float(level), "")
    except (TypeError, ValueError):
        return (1, 0.0, str(level))


def _mean_known(rows: pl.DataFrame, column: str, given: float | Mapping[str, float] | None) -> float | None:
    """A corpus-level number: ``given`` (a float, or per dataset, averaged over the runs),
    else the mean of ``column`` when the table has it."""
    if isinstance(given, Mapping):
        if "dataset" not in rows.columns:
            return float(np.mean(list(given.values()))) if given else None
        vals = [given[d] for d in rows.get_column("dataset").to_list() if d in given]
        return float(np.mean(vals)) if vals else None
    if given is not None:
        return float(given)
    if column in rows.columns:
        vals = rows.get_column(column).cast(pl.Float64).drop_nulls().to_numpy()
        return float(np.mean(vals)) if len(vals) else None
    return None


def open_fraction_analysis(
    df: pl.DataFrame,
    *,
    column: str = "tau_mean",
    variants: Sequence[str] | None = None,
    confidence: float = 0.95,
    content_fraction: float | Mapping[str, float] | None = None,
    ground_truth: float | Mapping[str, float] | None = None,
) -> OpenFractionResult:
    """The measured open fraction beside the Gaussian tail ``1 - Phi(tau)`` of each run
    (per-seed means of ``open_fraction - (1 - Phi(tau))`` with a t-interval: an interval
    covering 0 says the tail alone explains it), and beside the content-word fraction
    (``content_fraction``: a float, a dataset -> fraction mapping, or the column
    ``content_fraction``) and the synthetic ground truth (``ground_truth`` or the column
    ``salient_fraction``)."""
    rows, _ = _gated_rows(df, column, variants)
    require_columns(rows, ("open_fraction",))
    rows = rows.filter(pl.col("open_fraction").is_not_null() & pl.col("open_fraction").is_finite())
    if rows.height == 0:
        raise InputError("no finished gated run has an open_fraction value")
    rows = rows.with_columns(
        pl.Series("__tail", stats.norm.sf(rows.get_column(column).cast(pl.Float64).to_numpy())),
    ).with_columns((pl.col("open_fraction") - pl.col("__tail")).alias("__diff"))
    open_units, _ = _unit_means(rows, "open_fraction")
    diff_units, _ = _unit_means(rows, "__diff")
    ci = diff_ci = diff_p = None
    message = ""
    if has_spread(open_units):
        c = stats.ttest_1samp(open_units, 0.0).confidence_interval(confidence_level=confidence)
        ci = ConfidenceInterval(float(c.low), float(c.high))
    if has_spread(diff_units):
        res = stats.ttest_1samp(diff_units, 0.0)
        c = res.confidence_interval(confidence_level=confidence)
        diff_ci, diff_p = ConfidenceInterval(float(c.low), float(c.high)), float(res.pvalue)
    else:
        message = NEEDS_TWO_SEEDS if len(diff_units) < 2 else "zero spread across seeds"
    return OpenFractionResult(
        estimate=float(np.mean(open_units)),
        confidence_interval=ci,
        gaussian_tail=float(rows.get_column("__tail").mean()),
        difference=float(np.mean(diff_units)),
        difference_interval=diff_ci,
        difference_pvalue=diff_p,
        n_runs=rows.height,
        content_fraction=_mean_known(rows, CONTENT_FRACTION_COLUMN, content_fraction),
        ground_truth=_mean_known(rows, GROUND_TRUTH_COLUMN, ground_truth),
        confidence=confidence,
        message=message,
    )


def tau_stability(
    df: pl.DataFrame,
    *,
    reference: float = 0.35,
    margin: float = 0.05,
    confidence: float = 0.95,
    variants: Sequence[str] | None = None,
    column: str = "tau_mean",
    factors: Sequence[str] = DEFAULT_FACTORS,
    content_fraction: float | Mapping[str, float] | None = None,
    ground_truth: float | Mapping[str, float] | None = None,
) -> TauStabilityResult:
    """The learned threshold tau across runs, against ``reference`` +- ``margin``.

    Each run's tau is its mean over layers and heads (``tau_mean``; the spread over
    heads is ``tau_head_sd`` when the table has it). Seeds are the independent units:
    the runs of one seed (several variants or cells) are averaged first. The mean gets a
    t-interval, a two-sided t-test against ``reference`` (``pvalue``) and a TOST
    equivalence test against ``[reference - margin, reference + margin]``
    (``tost_pvalue``; ``equivalent`` when it is below ``1 - confidence``). Heterogeneity
    across each of ``factors`` present with >= 2 levels (ANOVA and Kruskal-Wallis), and
    the open fraction against ``1 - Phi(tau)`` when ``open_fraction`` is present.

    Runs that did not finish, or without a tau, of a gated variant are dropped and
    counted; variants without a gate (tau null everywhere) are ignored.
    """
    if not 0.0 < confidence < 1.0:
        raise InputError(f"confidence must lie in (0, 1), got {confidence}")
    if not margin > 0:
        raise InputError(f"margin must be positive, got {margin}")
    rows, n_dropped = _gated_rows(df, column, variants)
    units, seeds = _unit_means(rows, column)
    n = len(units)
    estimate = float(np.mean(units))
    ci = pvalue = tost = None
    message = ""
    if n < 2:
        message = f"{n} seed: {NEEDS_TWO_SEEDS}"
    elif not has_spread(units):
        ci = ConfidenceInterval(estimate, estimate)
        message = "every seed has the same tau (zero spread): no test is possible"
    else:
        res = stats.ttest_1samp(units, reference)
        c = res.confidence_interval(confidence_level=confidence)
        ci, pvalue = ConfidenceInterval(float(c.low), float(c.high)), float(res.pvalue)
        tost = tost_pvalue(units, reference - margin, reference + margin)
    heterogeneity = []
    for factor in factors:
        if factor in rows.columns and rows.get_column(factor).n_unique() >= 2:
            heterogeneity.append(tau_heterogeneity(rows, factor, column=column))
    open_fraction = None
    if "open_fraction" in rows.columns and rows.get_column("open_fraction").drop_nulls().len():
        open_fraction = open_fraction_analysis(
            rows, column=column, confidence=confidence, content_fraction=content_fraction, ground_truth=ground_truth
        )
    head_spread = None
    if "tau_head_sd" in rows.columns and rows.get_column("tau_head_sd").drop_nulls().len():
        head_spread = float(rows.get_column("tau_head_sd").drop_nulls().mean())
    if n_dropped:
        message = "; ".join(m for m in (message, f"dropped {n_dropped} unfinished gated run(s)") if m)
    unit = "seeds" if "seed" in rows.columns else "runs"
    return TauStabilityResult(
        estimate=estimate,
        confidence_interval=ci,
        pvalue=pvalue,
        tost_pvalue=tost,
        equivalent=bool(tost is not None and tost < 1.0 - confidence),
        reference=reference,
        margin=margin,
        n_seeds=n,
        n_runs=rows.height,
        per_seed=_readonly(units),
        seeds=seeds,
        method=f"t-interval over {unit} of the per-run mean tau; TOST vs {reference:g} ± {margin:g}",
        head_spread=head_spread,
        heterogeneity=tuple(heterogeneity),
        open_fraction=open_fraction,
        n_dropped=n_dropped,
        confidence=confidence,
        message=message,
    )


def tau_runs(df: pl.DataFrame, *, column: str = "tau_mean") -> pl.DataFrame:
    """Per-run tau, its Gaussian tail ``1 - Phi(tau)`` and the open fraction (plots, tables)."""
    rows, _ = _gated_rows(df, column, None)
    keep = [
        c
        for c in (
            "study",
            "trial_id",
            "dataset",
            "size",
            "context_length",
            "variant",
            "seed",
            "tau_init",
            column,
            "tau_head_sd",
            "tau_head_min",
            "tau_head_max",
            "open_fraction",
            CONTENT_FRACTION_COLUMN,
            GROUND_TRUTH_COLUMN,
        )
        if c in rows.columns
    ]
    return rows.select(keep).with_columns(
        pl.Series("gaussian_tail", stats.norm.sf(rows.get_column(column).cast(pl.Float64).to_numpy())),
    )


__all__ = ["open_fraction_analysis", "tau_heterogeneity", "tau_runs", "tau_stability", "tost_pvalue"]
