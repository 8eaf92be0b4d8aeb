"""Planning: how many seeds a paired study needs to detect the smallest effect of
interest (:func:`seeds_needed`), with the uncertainty of the seed-to-seed sd shown
(:func:`sd_interval`). An observed-effect (post-hoc) figure is flagged as such.
"""

from __future__ import annotations

import math
from typing import Literal

from scipy import stats

from harness.analysis.results_types import ConfidenceInterval, ContrastResult, SeedsNeededResult
from harness.errors import InputError


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


__all__ = ["sd_interval", "seeds_needed"]
