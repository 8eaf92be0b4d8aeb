"""Does a new run's learned EGA threshold tau land near 0.35? Does tau depend on the
size, context, corpus or initial value? And is the fraction of open gates a property of
the text or just the Gaussian tail above tau?

The EGA gate on key j is ``g_j = sigmoid(alpha (e~_j - tau))`` with ``e~_j`` a
z-normalised energy, so a gate is open (g_j > 1/2) exactly when ``e~_j > tau``. If the
normalised energies were standard normal, head h would open for a fraction
``1 - Phi(tau_h)`` of the keys whatever the corpus: 0.363 at tau = 0.35, the papers'
"36 % of tokens". The analysis sets the measured open fraction beside the mean over
heads of that tail and beside the corpus's content-word fraction (and a synthetic
corpus's true salient fraction), so the two readings can be told apart.

The seed is the unit throughout (docs/statistics.md): the runs of one seed (variants,
cells) are averaged before any interval or test. "Stable" is a claim about new runs and
uses a prediction interval; "equivalent" is a claim about the mean and uses TOST;
"converges whatever X" needs the mean inside the band at every level of X.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl
from scipy import stats

from harness.analysis.multiplicity import holm_adjusted
from harness.analysis.paired_tests import TOST, TTest
from harness.analysis.results import (
    at_reference_tau_init,
    cell_label,
    numeric_column,
    require_columns,
    require_table,
    require_variants,
    unfinished_mask,
)
from harness.analysis.results_types import (
    NEEDS_TWO_SEEDS,
    ConfidenceInterval,
    has_spread,
    readonly_array,
)
from harness.analysis.tau_types import CellStability, HeterogeneityResult, OpenFractionResult, TauStabilityResult
from harness.errors import InputError

DEFAULT_FACTORS = ("size", "context_length", "dataset", "tau_init", "variant")
RUN_COLUMNS = ("variant", "dataset", "size", "context_length", "tau_init")  # what tells a seed's runs apart
CONTENT_FRACTION_COLUMN = "content_fraction"  # the corpus's content-word fraction, per run
GROUND_TRUTH_COLUMN = "salient_fraction"  # true salient fraction (synthetic-salience), per run
HEADS_COLUMN = "tau_heads"  # every head's tau of a run (list column)


# ----------------------------------------------------------------------------- primitives
def prediction_interval(values: np.ndarray, *, confidence: float = 0.95, axis: int = -1) -> ConfidenceInterval:
    """The t prediction interval for one new draw from the population of ``values``:
    ``mean +- t_{(1+confidence)/2, n-1} s sqrt(1 + 1/n)`` (normal data: it covers a new
    seed's value with probability ``confidence``). Along ``axis`` for a batch."""
    values = np.asarray(values, dtype=float)
    n = values.shape[axis]
    if n < 2:
        raise InputError(f"prediction_interval: {NEEDS_TWO_SEEDS}")
    mean = values.mean(axis=axis)
    half = stats.t.ppf(0.5 + confidence / 2.0, n - 1) * values.std(axis=axis, ddof=1) * math.sqrt(1.0 + 1.0 / n)
    if np.ndim(mean) == 0:
        return ConfidenceInterval(float(mean - half), float(mean + half))
    return ConfidenceInterval(mean - half, mean + half)


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


def _level_key(level: Any) -> tuple:
    try:
        return (0, float(level), "")
    except (TypeError, ValueError):
        return (1, 0.0, str(level))


# ----------------------------------------------------------------------------- heterogeneity
def _seed_level_matrix(rows: pl.DataFrame, column: str, levels: list[str]) -> tuple[np.ndarray, tuple, tuple]:
    """(n_complete_seeds, n_levels) means of each seed at each level, the complete seeds
    (those that ran every level) and the seeds dropped for lacking a level."""
    means = rows.group_by("seed", "__level").agg(pl.col(column).cast(pl.Float64).mean())
    table: dict[Any, dict[str, float]] = {}
    for seed, level, value in means.iter_rows():
        table.setdefault(seed, {})[level] = value
    complete = sorted(s for s, by in table.items() if len(by) == len(levels))
    dropped = tuple(sorted(s for s in table if s not in complete))
    matrix = np.array([[table[s][lev] for lev in levels] for s in complete], dtype=float)
    return matrix.reshape(len(complete), len(levels)), tuple(complete), dropped


def greenhouse_geisser_epsilon(matrix: np.ndarray) -> Any:
    """Greenhouse-Geisser's sphericity epsilon of a (..., seeds, levels) matrix: with S the
    k x k covariance of the levels across seeds,
    ``eps = k^2 (mean diag S - mean S)^2 / ((k - 1) (sum S_ij^2 - 2 k sum_i mean_j(S_ij)^2 + k^2 mean(S)^2))``,
    1 under sphericity, down to 1 / (k - 1); the F test's degrees of freedom are multiplied
    by it (Greenhouse & Geisser 1959). Along the leading axes for a batch."""
    x = np.asarray(matrix, dtype=float)
    n, k = x.shape[-2:]
    centred = x - x.mean(axis=-2, keepdims=True)
    cov = np.einsum("...si,...sj->...ij", centred, centred) / (n - 1)  # (..., k, k)
    mean_all = cov.mean(axis=(-2, -1))
    mean_diag = np.trace(cov, axis1=-2, axis2=-1) / k
    row_means = cov.mean(axis=-1)  # (..., k)
    num = (k * (mean_diag - mean_all)) ** 2
    den = (k - 1) * (np.sum(cov**2, axis=(-2, -1)) - 2 * k * np.sum(row_means**2, axis=-1) + k**2 * mean_all**2)
    with np.errstate(invalid="ignore", divide="ignore"):
        eps = np.clip(num / den, 1.0 / (k - 1), 1.0)
    return float(eps) if np.ndim(eps) == 0 else eps


def _rm_anova_pvalue(matrix: np.ndarray) -> tuple[float, float]:
    """Repeated-measures ANOVA (``statsmodels`` ``AnovaRM``) on a (seeds, levels) matrix,
    with the Greenhouse-Geisser correction: (p, epsilon). Without it the test assumes
    sphericity, and seed-specific slopes across the levels (common when the levels are
    sizes or contexts) make it reject a true null 8-12 % of the time."""
    import pandas as pd
    from statsmodels.stats.anova import AnovaRM

    n, k = matrix.shape
    long = pd.DataFrame({"seed": np.repeat(np.arange(n), k), "level": np.tile(np.arange(k), n), "y": matrix.ravel()})
    table = AnovaRM(long, "y", "seed", within=["level"]).fit().anova_table
    f, df1, df2 = (float(table[c].iloc[0]) for c in ("F Value", "Num DF", "Den DF"))
    eps = greenhouse_geisser_epsilon(matrix) if k > 2 else 1.0
    if math.isnan(f) or math.isnan(eps):
        return math.nan, eps
    return float(stats.f.sf(f, df1 * eps, df2 * eps)), eps


def _crossed_test(matrix: np.ndarray) -> tuple[float | None, str, float | None, str]:
    """(p, test, rank p, rank test) with the seed as a blocking factor."""
    p, eps = _rm_anova_pvalue(matrix)
    test = f"RM-ANOVA (Greenhouse-Geisser ε={eps:.2f})" if matrix.shape[1] > 2 else "RM-ANOVA"
    if matrix.shape[1] >= 3:
        rank_test, rank_p = "Friedman", float(stats.friedmanchisquare(*matrix.T).pvalue)
    else:
        diff = matrix[:, 1] - matrix[:, 0]
        rank_test = "Wilcoxon signed-rank"
        rank_p = float(stats.wilcoxon(diff).pvalue) if np.any(diff != 0) else None
    return (None if math.isnan(p) else p), test, rank_p, rank_test


def _level_equivalence(samples: list[np.ndarray], reference: float | None, margin: float | None) -> float | None:
    """Largest over levels of the TOST p of the level's per-seed values against the band
    (intersection-union: below alpha, every level's mean is inside the band)."""
    if reference is None or margin is None:
        return None
    if any(len(s) < 2 or not has_spread(s) for s in samples):
        return None
    tost = TOST(reference, margin)
    return max(tost.run(s).p_value for s in samples)


def tau_heterogeneity(
    df: pl.DataFrame,
    factor: str,
    *,
    column: str = "tau_mean",
    variants: Sequence[str] | None = None,
    reference: float | None = None,
    margin: float | None = None,
    confidence: float = 0.95,
) -> HeterogeneityResult:
    """Does tau differ across the levels of ``factor`` (size, context, corpus, initial
    value...)? The unit is the seed: each seed's runs are averaged within each level first.

    - Seeds *crossed* with the levels (a seed runs several levels; in a study grid every
      seed runs every level): repeated-measures ANOVA on the seed x level means
      (``statsmodels.stats.anova.AnovaRM``) with the Greenhouse-Geisser correction of its
      degrees of freedom (:func:`greenhouse_geisser_epsilon`: sphericity is not assumed,
      so seed-specific slopes across the levels keep the 5 % level), with Friedman's
      test (two levels: Wilcoxon's signed-rank test) as the rank check. Seeds missing a
      level are dropped and named.
    - Seeds *nested* in the levels (each seed runs one level): one-way ANOVA on the
      per-seed means (``scipy.stats.f_oneway``), Kruskal-Wallis as the rank check.
    - No ``seed`` column: the runs are the units (said in ``message``).

    With ``reference`` and ``margin``, each level's mean is also tested for equivalence
    to ``reference`` +- ``margin`` (TOST per level; ``equivalence_pvalue`` is the largest
    p): the only basis for "converges to the reference whatever ``factor``". A missing
    ``tau_init`` is the level "default".
    """
    rows, _ = _gated_rows(df, column, variants)
    require_columns(rows, (factor,))
    rows = rows.with_columns(pl.col(factor).cast(pl.String).fill_null("default").alias("__level"))
    levels = sorted(set(rows.get_column("__level").to_list()), key=_level_key)
    base = dict(factor=factor, levels=tuple(levels), reference=reference, margin=margin, alpha=1.0 - confidence)
    if len(levels) < 2:
        message = f"one level of {factor} only"
        return HeterogeneityResult(
            **base, group_means=(), group_sizes=(), design="", test="", pvalue=None, message=message
        )
    if "seed" not in rows.columns:
        samples = [
            rows.filter(pl.col("__level") == lev).get_column(column).cast(pl.Float64).to_numpy() for lev in levels
        ]
        return _independent_groups(base, samples, "runs", "no seed column: the runs are treated as independent units")
    seeds_per = rows.group_by("seed").agg(pl.col("__level").n_unique().alias("k"))
    if int(seeds_per.get_column("k").max()) == 1:  # every seed ran one level: nested
        per_seed = rows.group_by("seed", "__level").agg(pl.col(column).cast(pl.Float64).mean())
        samples = [per_seed.filter(pl.col("__level") == lev).get_column(column).to_numpy() for lev in levels]
        return _independent_groups(base, samples, "nested", "")
    matrix, seeds, dropped = _seed_level_matrix(rows, column, levels)
    common = dict(base, design="crossed", n_seeds=len(seeds), dropped_seeds=dropped)
    common.update(group_means=tuple(matrix.mean(axis=0).tolist()), group_sizes=(len(seeds),) * len(levels))
    note = f"seed(s) {', '.join(map(str, dropped))} lack a level of {factor}: dropped" if dropped else ""
    if len(seeds) < 2:
        message = f"no test possible (fewer than 2 seeds ran every level of {factor})"
        return HeterogeneityResult(**common, test="RM-ANOVA", pvalue=None, message=message)
    if not has_spread(matrix.ravel()):
        return HeterogeneityResult(**common, test="RM-ANOVA", pvalue=None, message="no test possible (zero spread)")
    p, test, rank_p, rank_test = _crossed_test(matrix)
    message = note if p is not None else "no test possible (zero spread within seeds)"
    return HeterogeneityResult(
        **common,
        test=test,
        pvalue=p,
        rank_test=rank_test,
        rank_pvalue=rank_p,
        equivalence_pvalue=_level_equivalence(list(matrix.T), reference, margin),
        message=message,
    )


def _independent_groups(base: dict[str, Any], samples: list[np.ndarray], design: str, note: str) -> HeterogeneityResult:
    """One-way ANOVA and Kruskal-Wallis across independent groups (seed means or runs)."""
    unit = "run" if design == "runs" else "seed"
    common = dict(base, design=design, n_seeds=int(sum(len(s) for s in samples)))
    common.update(group_means=tuple(float(np.mean(s)) for s in samples), group_sizes=tuple(len(s) for s in samples))
    test = "ANOVA on runs" if design == "runs" else "ANOVA on seed means"
    if min(len(s) for s in samples) < 2:
        message = f"no test possible (a level of {base['factor']} has a single {unit})"
        return HeterogeneityResult(**common, test=test, pvalue=None, message=message)
    if not has_spread(np.concatenate(samples)):
        return HeterogeneityResult(**common, test=test, pvalue=None, message="no test possible (zero spread)")
    p = float(stats.f_oneway(*samples).pvalue)
    rank_p = float(stats.kruskal(*samples).pvalue)
    return HeterogeneityResult(
        **common,
        test=test,
        pvalue=None if math.isnan(p) else p,
        rank_test="Kruskal-Wallis",
        rank_pvalue=None if math.isnan(rank_p) else rank_p,
        equivalence_pvalue=_level_equivalence(samples, base["reference"], base["margin"]),
        message=note if not math.isnan(p) else "no test possible (zero spread within levels)",
    )


def _holm(results: list[HeterogeneityResult]) -> list[HeterogeneityResult]:
    """Holm's adjustment across the factors tested, of the difference p-values and of
    the per-level equivalence p-values (:func:`~harness.analysis.multiplicity.holm_adjusted`)."""

    adjusted: dict[str, dict[int, float]] = {"pvalue_holm": {}, "equivalence_pvalue_holm": {}}
    for name, attr in (("pvalue_holm", "pvalue"), ("equivalence_pvalue_holm", "equivalence_pvalue")):
        idx = [i for i, r in enumerate(results) if getattr(r, attr) is not None]
        if idx:
            adj = holm_adjusted(np.array([getattr(results[i], attr) for i in idx], dtype=float))
            adjusted[name] = dict(zip(idx, map(float, adj), strict=True))
    return [
        dataclasses.replace(
            r,
            pvalue_holm=adjusted["pvalue_holm"].get(i),
            equivalence_pvalue_holm=adjusted["equivalence_pvalue_holm"].get(i),
        )
        for i, r in enumerate(results)
    ]


# ----------------------------------------------------------------------------- open fraction
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


def gaussian_tails(rows: pl.DataFrame, column: str = "tau_mean") -> tuple[np.ndarray, int]:
    """Per run, what standard-normal energies would open: the mean over heads of
    ``1 - Phi(tau_h)`` from ``tau_heads``, or ``1 - Phi(tau_mean)`` for a run without
    per-head taus. Returns the tails and the number of runs that fell back."""
    fallback = stats.norm.sf(rows.get_column(column).cast(pl.Float64).to_numpy())
    if HEADS_COLUMN not in rows.columns:
        return fallback, rows.height
    tails = fallback.copy()
    n_fallback = 0
    for i, heads in enumerate(rows.get_column(HEADS_COLUMN).to_list()):
        values = np.asarray([h for h in (heads or []) if h is not None], dtype=float)
        if values.size and np.all(np.isfinite(values)):
            tails[i] = float(np.mean(stats.norm.sf(values)))
        else:
            n_fallback += 1
    return tails, n_fallback


def open_fraction_analysis(
    df: pl.DataFrame,
    *,
    column: str = "tau_mean",
    variants: Sequence[str] | None = None,
    confidence: float = 0.95,
    content_fraction: float | Mapping[str, float] | None = None,
    ground_truth: float | Mapping[str, float] | None = None,
) -> OpenFractionResult:
    """The measured open fraction beside the Gaussian tail of each run, the mean over its
    heads of ``1 - Phi(tau_h)`` (:func:`gaussian_tails`; ``1 - Phi(tau_mean)`` only for
    runs without ``tau_heads``, and ``message`` says so). Per-seed means of
    ``open_fraction - tail`` get a t-interval and a t-test: an interval covering 0 says
    the fraction is *consistent with* the tail (which does not make the tail its cause),
    one excluding 0 that it *differs*. Beside them the content-word fraction
    (``content_fraction``: a float, a dataset -> fraction mapping, or the column
    ``content_fraction``) and the synthetic ground truth (``ground_truth`` or the column
    ``salient_fraction``)."""
    rows, _ = _gated_rows(df, column, variants)
    require_columns(rows, ("open_fraction",))
    rows = rows.filter(pl.col("open_fraction").is_not_null() & pl.col("open_fraction").is_finite())
    if rows.height == 0:
        raise InputError("no finished gated run has an open_fraction value")
    tails, n_fallback = gaussian_tails(rows, column)
    rows = rows.with_columns(pl.Series("__tail", tails)).with_columns(
        (pl.col("open_fraction") - pl.col("__tail")).alias("__diff")
    )
    open_units, _ = _unit_means(rows, "open_fraction")
    diff_units, _ = _unit_means(rows, "__diff")
    ci = diff_ci = diff_p = None
    notes = []
    if n_fallback == rows.height:
        reference = "1 - Phi(mean tau) (no tau_heads in the table)"
        notes.append("no per-head taus (tau_heads): the tail is 1 - Phi(mean tau), biased when heads differ")
    elif n_fallback:
        reference = "mean over heads of 1 - Phi(tau_h)"
        notes.append(f"{n_fallback} run(s) without tau_heads use 1 - Phi(mean tau)")
    else:
        reference = "mean over heads of 1 - Phi(tau_h)"
    if has_spread(open_units):
        c = stats.ttest_1samp(open_units, 0.0).confidence_interval(confidence_level=confidence)
        ci = ConfidenceInterval(float(c.low), float(c.high))
    if has_spread(diff_units):
        res = stats.ttest_1samp(diff_units, 0.0)
        c = res.confidence_interval(confidence_level=confidence)
        diff_ci, diff_p = ConfidenceInterval(float(c.low), float(c.high)), float(res.pvalue)
    else:
        notes.insert(0, "no test possible (1 seed)" if len(diff_units) < 2 else "no test possible (zero spread)")
    return OpenFractionResult(
        estimate=float(np.mean(open_units)),
        confidence_interval=ci,
        gaussian_tail=float(np.mean(tails)),
        difference=float(np.mean(diff_units)),
        difference_interval=diff_ci,
        difference_pvalue=diff_p,
        n_runs=rows.height,
        content_fraction=_mean_known(rows, CONTENT_FRACTION_COLUMN, content_fraction),
        ground_truth=_mean_known(rows, GROUND_TRUTH_COLUMN, ground_truth),
        confidence=confidence,
        message="; ".join(notes),
        reference_method=reference,
        n_seeds=len(diff_units),
        difference_per_seed=readonly_array(diff_units),
    )


# ----------------------------------------------------------------------------- stability
def _stability_numbers(units: np.ndarray, reference: float, margin: float, confidence: float) -> dict[str, Any]:
    """t-interval and t-test against ``reference``, TOST against the band with its (1 - 2 alpha) interval."""
    t = TTest(confidence, popmean=reference).run(units)
    tost = TOST(reference, margin, confidence).run(units)
    return dict(
        confidence_interval=t.interval,
        pvalue=t.p_value,
        tost_pvalue=tost.p_value,
        equivalent=bool(tost.rejects(1.0 - confidence)),
        equivalence_interval=tost.interval,
    )


def stability_cells(rows: pl.DataFrame, column: str = "tau_mean") -> list[tuple[str, pl.DataFrame]]:
    """The cells of a design with several gated runs per seed: the runs grouped by the
    columns of :data:`RUN_COLUMNS` that vary (``[]`` when every seed has one run, or
    without seeds). A seed with several runs in one cell is averaged there."""
    if "seed" not in rows.columns or rows.height == 0 or int(rows.group_by("seed").len().get_column("len").max()) < 2:
        return []
    varying = [c for c in RUN_COLUMNS if c in rows.columns and rows.get_column(c).n_unique() > 1]
    if not varying:
        return [("all runs", rows)]
    groups = rows.partition_by(varying, as_dict=True, maintain_order=True)
    return [(cell_label(varying, key), groups[key]) for key in sorted(groups, key=lambda k: tuple(map(_level_key, k)))]


def _cell_stability(label: str, runs: pl.DataFrame, column: str, band: tuple[float, float], confidence: float):
    """One cell: the prediction interval over its per-seed taus, its runs inside the band."""
    units, _ = _unit_means(runs, column)
    values = runs.get_column(column).cast(pl.Float64).to_numpy()
    inside = float(np.mean((values >= band[0]) & (values <= band[1])))
    pi = prediction_interval(units, confidence=confidence) if has_spread(units) else None
    stable = pi is not None and pi.inside(*band)
    return CellStability(label, len(units), pi, inside, stable)


def _where_new_runs_land(rows: pl.DataFrame, units: np.ndarray, column: str, band: tuple, confidence: float) -> dict:
    """Prediction interval(s), ``stable`` and the share inside the band, of the units the
    claim is about: seeds with one run per seed, each cell's runs otherwise."""
    cells = stability_cells(rows, column)
    if not cells:
        pi = prediction_interval(units, confidence=confidence)
        inside = float(np.mean((units >= band[0]) & (units <= band[1])))
        unit = "seeds" if "seed" in rows.columns else "runs"
        return dict(prediction_interval=pi, stable=pi.inside(*band), within_band_fraction=inside, band_unit=unit)
    per_cell = tuple(_cell_stability(label, runs, column, band, confidence) for label, runs in cells)
    envelope = None
    if all(c.prediction_interval is not None for c in per_cell):
        envelope = ConfidenceInterval(
            min(c.prediction_interval.low for c in per_cell), max(c.prediction_interval.high for c in per_cell)
        )
    values = rows.get_column(column).cast(pl.Float64).to_numpy()
    return dict(
        prediction_interval=envelope,
        stable=all(c.stable for c in per_cell),
        within_band_fraction=float(np.mean((values >= band[0]) & (values <= band[1]))),
        band_unit="runs",
        cells=per_cell,
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

    Each run's tau is its mean over layers and heads (``tau_mean``). Seeds are the independent units: the runs of
    one seed (several variants or cells) are averaged first. The mean gets a t-interval, a two-sided t-test against
    ``reference`` (``pvalue``) and a TOST equivalence test against the band ``[reference - margin, reference +
    margin]`` (``tost_pvalue``, with its (1 - 2 alpha) interval; ``equivalent`` below alpha = ``1 - confidence``).
    Stability is a claim about where a new seed's run lands, so it uses prediction intervals, which must lie inside
    the band (``stable``). With one gated run per seed: the t prediction interval for a new seed's tau
    (:func:`prediction_interval`). With several gated runs per seed (variants, sizes, contexts: the cells of
    :func:`stability_cells`) the seed mean hides where a run lands: one prediction interval per cell, over that
    cell's seeds, and every one must lie inside the band. ``within_band_fraction`` is the share already inside it of
    the seeds (one run per seed) or of the runs (several). Heterogeneity across each of ``factors`` present with >=
    2 levels (:func:`tau_heterogeneity`, seeds as units, Holm-adjusted across the factors), and the open fraction
    against the Gaussian tail when ``open_fraction`` is present.

    Runs that did not finish, or without a tau, of a gated variant are dropped and counted; variants without a gate
    (tau null everywhere) are ignored.

    Parameters
    ----------
    df : polars.DataFrame
        The results table (``seed``, ``column``; the factors and ``open_fraction`` if present).
    reference, margin : float
        The band: ``reference`` +- ``margin`` (the paper's 0.35 +- 0.05).
    confidence : float
        Level of the intervals; the tests' alpha is ``1 - confidence``.
    variants, column, factors
        The gated variants read (default: all with a tau), the run's tau, the columns tested for heterogeneity.
    content_fraction, ground_truth : float or mapping corpus -> float, optional
        Set beside the open fraction: the content-word fraction, a synthetic corpus's truth.

    Returns
    -------
    TauStabilityResult
        The mean's interval and tests (``equivalent``), the prediction interval(s) and ``stable``,
        ``heterogeneity``, ``open_fraction``, ``verdict`` and ``verdict_kind``.

    Examples
    --------
    Forty seeds scattered around 0.35 with sd 0.10: the mean is equivalent, a new run is
    not predictably inside the band.

    >>> import numpy as np, polars as pl
    >>> tau = np.random.default_rng(1).normal(0.35, 0.10, 40)
    >>> res = tau_stability(pl.DataFrame({"seed": range(40), "tau_mean": tau}))
    >>> res.equivalent, res.stable
    (True, False)
    """
    _check_band(confidence, margin)
    rows, n_dropped = _gated_rows(df, column, variants)
    mean_rows, mean_tau_init = _mean_rows(rows)
    units, seeds = _unit_means(mean_rows, column)
    numbers = _band_numbers(rows, units, column, reference, margin, confidence, n_dropped)
    return TauStabilityResult(
        estimate=float(np.mean(units)),
        reference=reference,
        margin=margin,
        n_seeds=len(units),
        n_runs=rows.height,
        per_seed=readonly_array(units),
        seeds=seeds,
        method=_method_words(rows, mean_tau_init, reference, margin, bool(numbers.get("cells"))),
        n_dropped=n_dropped,
        confidence=confidence,
        mean_tau_init=mean_tau_init,
        **_beside_the_band(rows, factors, column, reference, margin, confidence, content_fraction, ground_truth),
        **numbers,
    )


def _check_band(confidence: float, margin: float) -> None:
    """A level in (0, 1) and a positive margin, else an InputError naming the value."""
    if not 0.0 < confidence < 1.0:
        raise InputError(f"confidence must lie in (0, 1), got {confidence}")
    if not margin > 0:
        raise InputError(f"margin must be positive, got {margin}")


def _beside_the_band(
    rows: pl.DataFrame,
    factors: Sequence[str],
    column: str,
    reference: float,
    margin: float,
    confidence: float,
    content_fraction: float | Mapping[str, float] | None,
    ground_truth: float | Mapping[str, float] | None,
) -> dict[str, Any]:
    """What a tau result sets beside the mean: the spread over heads, the heterogeneity across each
    factor present with >= 2 levels (Holm-adjusted across the factors), and the open fraction
    against the Gaussian tail when the table has ``open_fraction``."""
    heterogeneity = [
        tau_heterogeneity(rows, f, column=column, reference=reference, margin=margin, confidence=confidence)
        for f in factors
        if f in rows.columns and rows.get_column(f).n_unique() >= 2
    ]
    open_fraction = None
    if "open_fraction" in rows.columns and rows.get_column("open_fraction").drop_nulls().len():
        open_fraction = open_fraction_analysis(
            rows, column=column, confidence=confidence, content_fraction=content_fraction, ground_truth=ground_truth
        )
    return dict(head_spread=_head_spread(rows), heterogeneity=tuple(_holm(heterogeneity)), open_fraction=open_fraction)


def _band_numbers(
    rows: pl.DataFrame,
    units: np.ndarray,
    column: str,
    reference: float,
    margin: float,
    confidence: float,
    n_dropped: int,
) -> dict[str, Any]:
    """The mean's tests (:func:`_stability_numbers`) and where new runs land
    (:func:`_where_new_runs_land`) over the per-seed taus ``units``, or the defaults and the
    reason no test is possible (fewer than 2 seeds, zero spread); the ``message`` also counts
    the ``n_dropped`` unfinished runs, and ``n_band_units`` is how many seeds or runs the band
    was read over."""
    numbers: dict[str, Any] = dict(
        confidence_interval=None, pvalue=None, tost_pvalue=None, equivalent=False, stable=False
    )
    message = ""
    if len(units) < 2:
        message = f"{len(units)} seed: {NEEDS_TWO_SEEDS}"
    elif not has_spread(units):
        message = "every seed has the same tau (zero spread): no test possible"
    else:
        numbers = _stability_numbers(units, reference, margin, confidence)
        numbers.update(_where_new_runs_land(rows, units, column, (reference - margin, reference + margin), confidence))
    if n_dropped:
        message = "; ".join(m for m in (message, f"dropped {n_dropped} unfinished gated run(s)") if m)
    unit = "seeds" if "seed" in rows.columns else "runs"
    numbers["n_band_units"] = len(units) if numbers.get("band_unit", unit) == "seeds" else rows.height
    return dict(numbers, message=message)


def _method_words(
    rows: pl.DataFrame, mean_tau_init: float | None, reference: float, margin: float, per_cell: bool
) -> str:
    """How the result was reached, over seeds (or runs, in a table without seeds)."""
    unit = "seeds" if "seed" in rows.columns else "runs"
    at_init = f" at tau_init = {mean_tau_init:g}" if mean_tau_init is not None else ""
    where = "t prediction interval " + ("per cell for a new seed's run" if per_cell else "for a new seed")
    return f"over {unit} of the per-run mean tau{at_init}: t-interval, TOST vs {reference:g} ± {margin:g}, {where}"


def _mean_rows(rows: pl.DataFrame) -> tuple[pl.DataFrame, float | None]:
    """The runs the mean reads: all of them, or those at the reference initial value when tau
    starts at several (:func:`~harness.analysis.results.at_reference_tau_init`); runs that end
    in different places by design would make a pooled mean describe no run."""
    if "tau_init" not in rows.columns or rows.get_column("tau_init").drop_nulls().n_unique() < 2:
        return rows, None
    return at_reference_tau_init(rows)


def _head_spread(rows: pl.DataFrame) -> float | None:
    """Mean over runs of the sd of tau across the run's heads."""
    if "tau_head_sd" in rows.columns and rows.get_column("tau_head_sd").drop_nulls().len():
        return float(rows.get_column("tau_head_sd").drop_nulls().mean())
    if HEADS_COLUMN in rows.columns:
        sds = [
            float(np.std(h, ddof=1)) for h in rows.get_column(HEADS_COLUMN).to_list() if h is not None and len(h) > 1
        ]
        return float(np.mean(sds)) if sds else None
    return None


def tau_runs(df: pl.DataFrame, *, column: str = "tau_mean") -> pl.DataFrame:
    """Per-run tau, the spread of its heads, its Gaussian tail (:func:`gaussian_tails`)
    and the open fraction (plots, tables)."""
    rows, _ = _gated_rows(df, column, None)
    if HEADS_COLUMN in rows.columns and "tau_head_min" not in rows.columns:
        heads = pl.col(HEADS_COLUMN)
        rows = rows.with_columns(
            heads.list.std().alias("tau_head_sd"),
            heads.list.min().alias("tau_head_min"),
            heads.list.max().alias("tau_head_max"),
        )
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
    return rows.select(keep).with_columns(pl.Series("gaussian_tail", gaussian_tails(rows, column)[0]))


__all__ = [
    "gaussian_tails",
    "greenhouse_geisser_epsilon",
    "open_fraction_analysis",
    "prediction_interval",
    "tau_heterogeneity",
    "tau_runs",
    "tau_stability",
]
