"""Divergence as a finding: how often each variant's training diverged, with an interval
that covers, and whether it diverges more often than the control.

A run that diverged (its loss went non-finite; ``status == "diverged"``) is not missing
data: a variant that diverges more often is less usable, and every paired contrast over
the runs that converged is conditional on survival. A run that *failed* (the trial
crashed or Tune gave up) or did not finish says nothing about the variant and is left
out of the counts.

The seed is the unit here too. The runs of one seed (its cells, its variants) share a data
order and an initialisation, and the seeds that diverge in one cell tend to diverge in the
others: counting runs as independent trials makes the interval too narrow and the test too
eager (at an intra-seed correlation of 0.5, a run-level Clopper-Pearson interval from 10
seeds x 6 cells covers about 83 %). So, with a ``seed`` column, each seed contributes its
rate (diverged runs / runs of that seed), and:

- the interval is Clopper-Pearson at the seed level: ``k = sum of the per-seed rates``
  out of ``n = seeds``, ``[Beta_{a/2}(k, n - k + 1), Beta_{1-a/2}(k + 1, n - k)]``. With
  one run per seed it is the exact binomial interval; with several it is the exact
  interval of the worst case (every run of a seed diverging together), so it covers
  whatever the intra-seed correlation (``benchmarks/calibration.py`` measures it);
- the test against the control is the sign-flip (paired permutation) test of the
  per-seed rate differences over the seeds both ran: exact under the null that the
  variant and the control are exchangeable within a seed, whatever the correlation.

Without a ``seed`` column the runs are the units (exact binomial interval, Fisher's exact
test), and the ``test`` column says so.
"""

from __future__ import annotations

import numpy as np
import polars as pl
from scipy import stats

from harness.analysis.paired_tests import sign_flip_pvalue
from harness.analysis.results import DIVERGED, FINISHED, require_columns, require_table
from harness.errors import InputError

DIVERGENCE_COLUMNS = ("variant", "n_runs", "n_diverged", "n_seeds", "rate", "ci_low", "ci_high", "pvalue", "test")
SEED_TEST = "sign-flip test of the per-seed rate differences"
RUN_TEST = "Fisher exact test (runs as units: no seed column)"
_SCHEMA = {
    "variant": pl.String,
    "n_runs": pl.Int64,
    "n_diverged": pl.Int64,
    "n_seeds": pl.Int64,
    "rate": pl.Float64,
    "ci_low": pl.Float64,
    "ci_high": pl.Float64,
    "pvalue": pl.Float64,
    "test": pl.String,
}


def seed_level_interval(k, n: int, confidence: float = 0.95) -> tuple:
    """Clopper-Pearson interval of a rate from ``n`` units with ``k`` (possibly
    fractional: a sum of per-seed rates) events: ``[Beta_{a/2}(k, n - k + 1),
    Beta_{1-a/2}(k + 1, n - k)]``, 0 and 1 at the ends. Integer ``k``: the exact
    binomial interval (``scipy.stats.binomtest(...).proportion_ci(method="exact")``).
    ``k`` may be an array (a batch of studies): the bounds are then arrays."""
    alpha = 1.0 - confidence
    k = np.asarray(k, dtype=float)
    with np.errstate(invalid="ignore"):  # the ends are set below
        low = np.where(k <= 0, 0.0, stats.beta.ppf(alpha / 2.0, np.maximum(k, 1e-300), n - k + 1.0))
        high = np.where(k >= n, 1.0, stats.beta.ppf(1.0 - alpha / 2.0, k + 1.0, np.maximum(n - k, 1e-300)))
    if k.ndim == 0:
        return float(low), float(high)
    return low, high


def divergence_method(confidence: float, control: str) -> str:
    """The report's sentence on how the divergence table was computed."""
    return (
        f"Runs that diverged, per variant, with the seed as the unit: the rate is the mean of the per-seed rates, "
        f"its {confidence:.0%} interval Clopper-Pearson over seeds (it covers whatever the correlation between "
        f"a seed's runs), the p-value a sign-flip test of the per-seed rate differences against {control} "
        "(unadjusted; the test column names it). Failed runs (infrastructure) are not counted."
    )


def _status_counts(df: pl.DataFrame) -> pl.DataFrame:
    """Runs that ended by training's own verdict and diverged runs, per variant (and seed)."""
    status = (
        pl.col("status").cast(pl.String).str.to_lowercase().fill_null(FINISHED)
        if "status" in df.columns
        else pl.lit(FINISHED)
    )
    keys = ["variant", "seed"] if "seed" in df.columns else ["variant"]
    return (
        df.filter(pl.col("variant").is_not_null())
        .with_columns(status.alias("__status"))
        .group_by(keys, maintain_order=True)
        .agg(
            pl.col("__status").is_in([FINISHED, DIVERGED]).sum().alias("n_runs"),
            (pl.col("__status") == DIVERGED).sum().alias("n_diverged"),
        )
        .filter(pl.col("n_runs") > 0)
    )


def _seed_rates(counts: pl.DataFrame, variant: str) -> dict:
    rows = counts.filter(pl.col("variant") == variant)
    return {s: k / n for s, n, k in rows.select("seed", "n_runs", "n_diverged").iter_rows()}


def _seed_test(rates: dict, control_rates: dict | None) -> float | None:
    """Sign-flip p of the per-seed rate differences over the seeds both ran (all zero: 1)."""
    if control_rates is None:
        return None
    shared = sorted(set(rates) & set(control_rates), key=str)
    if not shared:
        return None
    diff = np.array([rates[s] - control_rates[s] for s in shared])
    if not np.any(diff != 0.0):
        return 1.0
    return float(sign_flip_pvalue(diff, rng=np.random.default_rng(0)))


def divergence_table(df: pl.DataFrame, *, control: str | None = "baseline", confidence: float = 0.95) -> pl.DataFrame:
    """One row per variant: ``variant, n_runs, n_diverged, n_seeds, rate, ci_low, ci_high,
    pvalue, test`` (see the module docstring for the seed as the unit).

    ``n_runs`` counts the runs that ended by training's own verdict (``finished`` or
    ``diverged``; a missing status counts as finished) and ``n_seeds`` the seeds they
    come from. ``rate`` is the mean of the per-seed rates (with the same number of runs
    per seed: diverged runs / runs), ``[ci_low, ci_high]`` its seed-level Clopper-Pearson
    interval at ``confidence`` (:func:`seed_level_interval`); ``pvalue`` tests the variant
    against ``control`` (null for the control itself, or when ``control`` is None or not in
    the table; not adjusted across variants) with the test named in ``test``.

    Examples
    --------
    >>> import polars as pl
    >>> df = pl.DataFrame({"variant": ["baseline"] * 4 + ["ega"] * 4, "seed": [0, 1, 2, 3] * 2,
    ...                    "status": ["finished"] * 4 + ["diverged", "diverged", "finished", "finished"]})
    >>> divergence_table(df).select("variant", "n_diverged", "rate").rows()
    [('baseline', 0, 0.0), ('ega', 2, 0.5)]
    """
    if not 0.0 < confidence < 1.0:
        raise InputError(f"divergence_table: confidence must lie in (0, 1), got {confidence}")
    df = require_table(df)
    require_columns(df, ("variant",))
    counts = _status_counts(df)
    by_seed = "seed" in df.columns
    variants = list(dict.fromkeys(counts.get_column("variant").to_list()))
    rows = []
    for variant in variants:
        sub = counts.filter(pl.col("variant") == variant)
        n_runs, n_div = int(sub.get_column("n_runs").sum()), int(sub.get_column("n_diverged").sum())
        row = {"variant": variant, "n_runs": n_runs, "n_diverged": n_div, "pvalue": None, "test": None}
        has_control = control is not None and control in variants and variant != control
        if by_seed:
            rates = _seed_rates(counts, variant)
            rate = float(np.mean(list(rates.values())))
            row.update(n_seeds=len(rates), rate=rate)
            row["ci_low"], row["ci_high"] = seed_level_interval(rate * len(rates), len(rates), confidence)
            if has_control:
                row["pvalue"] = _seed_test(rates, _seed_rates(counts, control))
                row["test"] = SEED_TEST if row["pvalue"] is not None else "no test possible (no seed in common)"
        else:
            ci = stats.binomtest(n_div, n_runs).proportion_ci(confidence_level=confidence, method="exact")
            row.update(n_seeds=None, rate=n_div / n_runs, ci_low=float(ci.low), ci_high=float(ci.high))
            if has_control:
                ref = counts.filter(pl.col("variant") == control)
                n_c, k_c = int(ref.get_column("n_runs").sum()), int(ref.get_column("n_diverged").sum())
                row["pvalue"] = float(stats.fisher_exact([[n_div, n_runs - n_div], [k_c, n_c - k_c]]).pvalue)
                row["test"] = RUN_TEST
        rows.append(row)
    return pl.DataFrame(rows, schema=_SCHEMA)


__all__ = ["DIVERGENCE_COLUMNS", "divergence_method", "divergence_table", "seed_level_interval"]
