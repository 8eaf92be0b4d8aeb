"""Divergence as a finding: how often each variant's training diverged, with an exact
interval, and whether it diverges more often than the control.

A run that diverged (its loss went non-finite; ``status == "diverged"``) is not missing
data: a variant that diverges more often is less usable, and every paired contrast over
the runs that converged is conditional on survival. A run that *failed* (the trial
crashed or Tune gave up) or did not finish says nothing about the variant and is left
out of the counts.
"""

from __future__ import annotations

import polars as pl
from scipy import stats

from harness.analysis.results import DIVERGED, FINISHED, require_columns, require_table
from harness.errors import InputError

DIVERGENCE_COLUMNS = ("variant", "n_runs", "n_diverged", "rate", "ci_low", "ci_high", "fisher_pvalue")


def divergence_table(df: pl.DataFrame, *, control: str | None = "baseline", confidence: float = 0.95) -> pl.DataFrame:
    """One row per variant: ``variant, n_runs, n_diverged, rate, ci_low, ci_high,
    fisher_pvalue``.

    ``n_runs`` counts the runs that ended by training's own verdict (``finished`` or
    ``diverged``; a missing status counts as finished), ``rate = n_diverged / n_runs``,
    ``[ci_low, ci_high]`` its exact Clopper-Pearson interval at ``confidence``
    (``scipy.stats.binomtest(...).proportion_ci(method="exact")``: it covers at least
    the nominal level for every n and rate). ``fisher_pvalue`` is the two-sided Fisher
    exact test of the variant's 2x2 table (diverged, converged) against ``control``'s
    (``scipy.stats.fisher_exact``; null for the control itself, or when ``control`` is
    None or not in the table); p-values are not adjusted across variants.

    Examples
    --------
    >>> import polars as pl
    >>> df = pl.DataFrame({"variant": ["baseline"] * 4 + ["ega"] * 4,
    ...                    "status": ["finished"] * 4 + ["diverged", "diverged", "finished", "finished"]})
    >>> divergence_table(df).select("variant", "n_diverged", "rate").rows()
    [('baseline', 0, 0.0), ('ega', 2, 0.5)]
    """
    if not 0.0 < confidence < 1.0:
        raise InputError(f"divergence_table: confidence must lie in (0, 1), got {confidence}")
    df = require_table(df)
    require_columns(df, ("variant",))
    status = (
        pl.col("status").cast(pl.String).str.to_lowercase().fill_null(FINISHED)
        if "status" in df.columns
        else pl.lit(FINISHED)
    )
    counts = (
        df.filter(pl.col("variant").is_not_null())
        .with_columns(status.alias("__status"))
        .group_by("variant", maintain_order=True)
        .agg(
            pl.col("__status").is_in([FINISHED, DIVERGED]).sum().alias("n_runs"),
            (pl.col("__status") == DIVERGED).sum().alias("n_diverged"),
        )
    )
    by_variant = {v: (int(n), int(k)) for v, n, k in counts.iter_rows()}
    reference = by_variant.get(control) if control is not None else None
    rows = []
    for variant, (n, k) in by_variant.items():
        low = high = rate = fisher = None
        if n > 0:
            rate = k / n
            ci = stats.binomtest(k, n).proportion_ci(confidence_level=confidence, method="exact")
            low, high = float(ci.low), float(ci.high)
            if reference is not None and variant != control and reference[0] > 0:
                n_c, k_c = reference
                fisher = float(stats.fisher_exact([[k, n - k], [k_c, n_c - k_c]]).pvalue)
        rows.append(
            {
                "variant": variant,
                "n_runs": n,
                "n_diverged": k,
                "rate": rate,
                "ci_low": low,
                "ci_high": high,
                "fisher_pvalue": fisher,
            }
        )
    schema = {
        "variant": pl.String,
        "n_runs": pl.Int64,
        "n_diverged": pl.Int64,
        "rate": pl.Float64,
        "ci_low": pl.Float64,
        "ci_high": pl.Float64,
        "fisher_pvalue": pl.Float64,
    }
    return pl.DataFrame(rows, schema=schema)


__all__ = ["DIVERGENCE_COLUMNS", "divergence_table"]
