"""Does a verdict mean what it says? Simulated studies with known truth, run through the
intervals and tests the report uses, at 2, 3, 5, 10 and 20 seeds, in the simplest design
(one run per seed, normal per-seed values) and in the designs real studies have
(:mod:`harness.bench.simulate.designs`: several runs per seed, seed-clustered
divergence, seed-specific slopes, skewed per-seed values).

Each procedure is measured on what it claims: an interval by its *coverage* (how often
it contains the truth; nominal 0.95), a test by its *false-positive rate* when its null
hypothesis holds (nominal at most 0.05). Per-seed values are normal with a seed-level
random effect where the design has one; every procedure is the analysis's own: the paired
tests the contrasts run (:mod:`harness.analysis.paired_tests`: :class:`~harness.analysis.paired_tests.TTest`,
:class:`~harness.analysis.paired_tests.BCa`, :class:`~harness.analysis.paired_tests.SignFlip`,
:class:`~harness.analysis.paired_tests.TOST`, :class:`~harness.analysis.paired_tests.Shapiro`),
:func:`~harness.analysis.multibootstrap.multi_bootstrap_interval`,
:func:`~harness.analysis.tau.prediction_interval`,
``scipy.stats.f_oneway`` on seed means as in :func:`~harness.analysis.tau.tau_heterogeneity`,
``scipy.stats.binomtest`` as in :func:`~harness.analysis.divergence.divergence_table`)
called on a whole batch of simulated studies at once. The one exception is the
repeated-measures ANOVA, whose F statistic is computed here in closed form for speed and
checked against ``statsmodels`` ``AnovaRM`` (what the report calls) on the first studies
of every batch.

``benchmarks/calibration.py`` prints the table, writes it as JSON and regenerates the
README's "Calibration" section.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats

from harness.analysis.multibootstrap import multi_bootstrap_interval
from harness.analysis.paired_tests import TOST, BCa, SignFlip, TTest
from harness.analysis.results_types import BOOTSTRAP_MIN_SEEDS
from harness.analysis.tau import greenhouse_geisser_epsilon, prediction_interval
from harness.bench.simulate import designs

SEEDS: tuple[int, ...] = (2, 3, 5, 10, 20)
CONFIDENCE = 0.95
ALPHA = 0.05
_CHUNK = 500  # simulated studies per vectorised call (bounds the memory of resampling tests)


@dataclass(frozen=True)
class CalibrationRow:
    """One procedure's measured rate at each number of seeds (``rates[n]``, None where
    the procedure is undefined), from ``reps`` simulated studies per n (Monte-Carlo
    standard error ``sqrt(r (1 - r) / reps)``; ``exact`` rows are computed, not simulated)."""

    procedure: str
    measures: str
    nominal: str
    shown: str
    rates: dict[int, float | None]
    reps: int
    exact: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "procedure": self.procedure,
            "measures": self.measures,
            "nominal": self.nominal,
            "shown": self.shown,
            "reps": self.reps,
            "exact": self.exact,
            "rates": {str(n): r for n, r in self.rates.items()},
            **self.extra,
        }


def _chunked(reps: int, rng: np.random.Generator, draw: Callable[[int, np.random.Generator], np.ndarray]) -> float:
    """Mean of the per-study 0/1 outcomes that ``draw(size, rng)`` returns, in chunks."""
    hits, done = 0.0, 0
    while done < reps:
        size = min(_CHUNK, reps - done)
        hits += float(np.sum(draw(size, rng)))
        done += size
    return hits / reps


# ----------------------------------------------------------------------------- intervals
def t_coverage(n: int, reps: int, rng: np.random.Generator) -> float:
    """Coverage of the mean by the 95 % t-interval over n seeds."""

    def draw(size: int, g: np.random.Generator) -> np.ndarray:
        ci = TTest(CONFIDENCE).run(g.normal(0.0, 1.0, (size, n))).interval
        return (ci.low <= 0.0) & (0.0 <= ci.high)

    return _chunked(reps, rng, draw)


def prediction_coverage(n: int, reps: int, rng: np.random.Generator) -> float:
    """How often the 95 % prediction interval from n seeds holds a new seed's value."""

    def draw(size: int, g: np.random.Generator) -> np.ndarray:
        values = g.normal(0.0, 1.0, (size, n + 1))
        pi = prediction_interval(values[:, :n], confidence=CONFIDENCE)
        new = values[:, n]
        return (pi.low <= new) & (new <= pi.high)

    return _chunked(reps, rng, draw)


def bootstrap_coverage(n: int, reps: int, rng: np.random.Generator, method: str, n_resamples: int = 999) -> float:
    """Coverage of the mean by the 95 % bootstrap interval over n seeds (``method``:
    ``"percentile"`` or ``"BCa"``); an undefined (NaN) interval counts as a miss."""

    def draw(size: int, g: np.random.Generator) -> np.ndarray:
        values = g.normal(0.0, 1.0, (size, n))
        ci = BCa(CONFIDENCE, n_resamples, method=method, min_seeds=1).run(values, rng=g).interval
        return np.nan_to_num((ci.low <= 0.0) & (0.0 <= ci.high), nan=0.0)

    return _chunked(reps, rng, draw)


def multi_bootstrap_coverage(
    n: int, reps: int, rng: np.random.Generator, n_windows: int = 32, n_resamples: int = 999
) -> float:
    """Coverage of the mean contrast by the multi-bootstrap over n seeds and
    ``n_windows`` evaluation windows: ``d[s, w] = u_s + v_w + e_sw`` with seed, window
    and residual effects of sd 1, 0.5 and 0.5 (true mean 0)."""
    covered = 0
    for _ in range(reps):
        d = rng.normal(0.0, 1.0, (n, 1)) + rng.normal(0.0, 0.5, (1, n_windows)) + rng.normal(0.0, 0.5, (n, n_windows))
        ci = multi_bootstrap_interval(d, confidence=CONFIDENCE, n_resamples=n_resamples, rng=rng)
        covered += ci.low <= 0.0 <= ci.high
    return covered / reps


def clopper_pearson_coverage(n: int, rates: Sequence[float] = tuple(np.linspace(0.01, 0.99, 99))) -> float:
    """Exact (not simulated) worst-case coverage over ``rates`` of the 95 % Clopper-Pearson
    interval of a divergence rate from n runs: ``min_p sum_k Binom(k; n, p) 1[p in CI(k)]``."""
    bounds = [stats.binomtest(k, n).proportion_ci(confidence_level=CONFIDENCE, method="exact") for k in range(n + 1)]
    low = np.array([b.low for b in bounds])
    high = np.array([b.high for b in bounds])
    k = np.arange(n + 1)
    worst = 1.0
    for p in rates:
        inside = (low <= p) & (p <= high)
        worst = min(worst, float(np.sum(stats.binom.pmf(k, n, p) * inside)))
    return worst


# ----------------------------------------------------------------------------- tests
def sign_flip_false_positive(n: int, reps: int, rng: np.random.Generator, n_resamples: int = 1024) -> float:
    """Rejection rate at alpha 0.05 of the sign-flip test when the true contrast is 0
    (exact enumeration up to 10 seeds)."""

    def draw(size: int, g: np.random.Generator) -> np.ndarray:
        return SignFlip(n_resamples=n_resamples).run(g.normal(0.0, 1.0, (size, n)), rng=g).rejects(ALPHA)

    return _chunked(reps, rng, draw)


def tost_false_equivalence(n: int, reps: int, rng: np.random.Generator, margin: float = 0.05) -> float:
    """Rate of declaring tau's mean equivalent to 0.35 +- margin when it sits on the edge
    of the band (0.35 + margin), seed-to-seed sd = margin: nominal at most 0.05."""

    def draw(size: int, g: np.random.Generator) -> np.ndarray:
        values = g.normal(0.35 + margin, margin, (size, n))
        return TOST(0.35, margin).run(values).rejects(ALPHA)

    return _chunked(reps, rng, draw)


def _heterogeneity_data(size: int, n: int, g: np.random.Generator, levels: int, runs: int, crossed: bool) -> np.ndarray:
    """(size, seeds, levels) seed x level means of tau under H0 (no level effect): a seed
    effect of sd 1 (shared across levels when crossed) and ``runs`` runs per seed and
    level with noise sd 0.5, averaged within the seed as the analysis does."""
    seed_effect = g.normal(0.0, 1.0, (size, n, 1 if crossed else levels))
    runs_noise = g.normal(0.0, 0.5, (size, n, levels, runs)).mean(axis=-1)
    return seed_effect + runs_noise


def rm_anova_pvalues(y: np.ndarray, *, greenhouse_geisser: bool = True) -> np.ndarray:
    """Repeated-measures one-way ANOVA p-values of a batch ``y`` (studies, seeds, levels):
    ``F = (SS_level / (k-1)) / (SS_error / ((k-1)(n-1)))`` with the seed as the blocking
    factor, the closed form of ``statsmodels`` ``AnovaRM`` for one within factor; with
    ``greenhouse_geisser`` (what the report uses) both degrees of freedom are multiplied by
    :func:`~harness.analysis.tau.greenhouse_geisser_epsilon`."""
    _, n, k = y.shape
    grand = y.mean(axis=(1, 2), keepdims=True)
    ss_level = n * np.sum((y.mean(axis=1, keepdims=True) - grand) ** 2, axis=(1, 2))
    ss_seed = k * np.sum((y.mean(axis=2, keepdims=True) - grand) ** 2, axis=(1, 2))
    ss_error = np.sum((y - grand) ** 2, axis=(1, 2)) - ss_level - ss_seed
    df1, df2 = k - 1, (k - 1) * (n - 1)
    eps = greenhouse_geisser_epsilon(y) if greenhouse_geisser and k > 2 else 1.0
    return stats.f.sf((ss_level / df1) / (ss_error / df2), df1 * eps, df2 * eps)


def _check_against_anovarm(y: np.ndarray, p: np.ndarray, count: int = 3) -> None:
    import pandas as pd
    from statsmodels.stats.anova import AnovaRM

    _, n, k = y.shape
    for i in range(min(count, len(y))):
        long = pd.DataFrame({"seed": np.repeat(np.arange(n), k), "level": np.tile(np.arange(k), n), "y": y[i].ravel()})
        expected = float(AnovaRM(long, "y", "seed", within=["level"]).fit().anova_table["Pr > F"].iloc[0])
        if not math.isclose(expected, float(p[i]), rel_tol=1e-8, abs_tol=1e-12):
            raise AssertionError(f"closed-form RM-ANOVA p {p[i]} differs from AnovaRM's {expected}")


def slopes_false_positive(
    n: int, reps: int, rng: np.random.Generator, *, levels: int = 4, greenhouse_geisser: bool = True
) -> float:
    """Rejection rate at alpha 0.05 with seed-specific slopes across the levels (non-spherical
    repeated measures): ``y[s, l] = u_s + b_s x_l + e`` with u, b of sd 1, e of sd 0.3,
    x evenly spaced in [-1, 1], no level effect on average."""
    x = np.linspace(-1.0, 1.0, levels)

    def draw(size: int, g: np.random.Generator) -> np.ndarray:
        y = g.normal(0, 1, (size, n, 1)) + g.normal(0, 1, (size, n, 1)) * x + g.normal(0, 0.3, (size, n, levels))
        return rm_anova_pvalues(y, greenhouse_geisser=greenhouse_geisser) < ALPHA

    return _chunked(reps, rng, draw)


def heterogeneity_false_positive(
    n: int, reps: int, rng: np.random.Generator, *, crossed: bool, levels: int = 3, runs: int = 2
) -> float:
    """Rejection rate at alpha 0.05 when tau does not depend on the factor: crossed
    seeds (RM-ANOVA on seed x level means) or nested seeds (``n`` seeds per level,
    one-way ANOVA on the seed means)."""

    def draw(size: int, g: np.random.Generator) -> np.ndarray:
        y = _heterogeneity_data(size, n, g, levels, runs, crossed)
        if crossed:
            _check_against_anovarm(y, rm_anova_pvalues(y, greenhouse_geisser=False))
            p = rm_anova_pvalues(y)
        else:
            p = stats.f_oneway(*np.moveaxis(y, 2, 0), axis=1).pvalue
        return p < ALPHA

    return _chunked(reps, rng, draw)


# ----------------------------------------------------------------------------- table
@dataclass(frozen=True)
class Procedure:
    """An interval or test of the report and how to measure it: ``measure(n, reps, rng)``
    (``exact``: computed, ``reps`` unused); ``reps_share`` scales the studies simulated
    (the multi-bootstrap resamples each study separately, so it gets fewer)."""

    name: str
    measures: str
    nominal: str
    shown: str
    measure: Callable[[int, int, np.random.Generator], float]
    exact: bool = False
    reps_share: float = 1.0


_ASSUMED = "every contrast (assumes symmetric values)"
DESIGN_PROCEDURES: tuple[Procedure, ...] = (
    Procedure(
        "prediction interval per cell, 95 %, 2 runs per seed",
        "coverage of a new seed's run in the cell",
        "0.95",
        "tau stability, several runs per seed",
        designs.cell_prediction_coverage,
    ),
    Procedure(
        "'stable', cells at 0.32 / 0.38, run sd 0.02",
        "false-stability rate",
        "≤ 0.05",
        "tau stability, several runs per seed",
        designs.two_cell_stable_claims,
    ),
    Procedure(
        "RM-ANOVA uncorrected, seed-specific slopes, 4 levels",
        "false-positive rate",
        "0.05",
        "never",
        lambda n, r, g: slopes_false_positive(n, r, g, greenhouse_geisser=False),
    ),
    Procedure(
        "RM-ANOVA (Greenhouse-Geisser), seed-specific slopes, 4 levels",
        "false-positive rate",
        "≤ 0.05",
        "tau heterogeneity",
        slopes_false_positive,
    ),
    Procedure(
        "Clopper-Pearson over runs, 6 cells per seed, ICC 0.5",
        "coverage",
        "≥ 0.95",
        "never",
        lambda n, r, g: designs.seed_divergence_coverage(n, r, g, by_seed=False),
    ),
    Procedure(
        "Clopper-Pearson over seeds, 6 cells per seed, ICC 0.5",
        "coverage",
        "≥ 0.95",
        "divergence rate",
        designs.seed_divergence_coverage,
    ),
    Procedure(
        "Fisher over runs, 6 cells per seed, ICC 0.5, α = 0.05",
        "false-positive rate",
        "≤ 0.05",
        "never",
        designs.fisher_clustered_false_positive,
        reps_share=0.25,
    ),
    Procedure(
        "sign-flip on per-seed rates, ICC 0.5, α = 0.05",
        "false-positive rate",
        "≤ 0.05",
        "divergence test",
        designs.seed_divergence_false_positive,
    ),
    *(
        proc
        for kind in ("exponential", "lognormal")
        for proc in (
            Procedure(
                f"t-interval, 95 %, {kind}",
                "coverage",
                "0.95",
                _ASSUMED,
                designs.by_shape(designs.skewed_t_coverage, kind),
            ),
            Procedure(
                f"sign-flip test, α = 0.05, {kind}",
                "false-positive rate",
                "≤ 0.05",
                _ASSUMED,
                designs.by_shape(designs.skewed_sign_flip_false_positive, kind),
            ),
            Procedure(
                f"confidence sequence, looks 2..n, {kind}",
                "false-exclusion rate",
                "≤ 0.05",
                "sequential primary (assumes normal values)",
                designs.by_shape(designs.skewed_confidence_sequence, kind),
            ),
            Procedure(
                f"shape check (Shapiro-Wilk p < 0.10), {kind}",
                "firing rate",
                "high",
                "beside every verdict",
                designs.by_shape(designs.shape_check_rate, kind),
            ),
            Procedure(
                f"t claim where the shape check is quiet, {kind}",
                "false-claim rate",
                "≤ 0.05",
                "every contrast, trend",
                designs.by_shape(designs.skewed_guarded_claims, kind),
            ),
        )
    ),
    Procedure(
        "shape check (Shapiro-Wilk p < 0.10), normal",
        "false-alarm rate",
        "0.10",
        "beside every verdict",
        designs.by_shape(designs.shape_check_rate, "normal"),
    ),
)

_FROM_10 = f"from {BOOTSTRAP_MIN_SEEDS} seeds"
PROCEDURES: tuple[Procedure, ...] = (
    Procedure("t-interval, 95 %", "coverage", "0.95", "every contrast, trend, tau mean", t_coverage),
    Procedure("prediction interval, 95 %", "coverage of a new seed", "0.95", "tau stability", prediction_coverage),
    Procedure(
        "bootstrap percentile, 95 %",
        "coverage",
        "0.95",
        "never",
        lambda n, r, g: bootstrap_coverage(n, r, g, "percentile"),
    ),
    Procedure("bootstrap BCa, 95 %", "coverage", "0.95", _FROM_10, lambda n, r, g: bootstrap_coverage(n, r, g, "BCa")),
    Procedure("multi-bootstrap, 95 %", "coverage", "0.95", _FROM_10, multi_bootstrap_coverage, reps_share=0.25),
    Procedure("sign-flip test, α = 0.05", "false-positive rate", "≤ 0.05", "every contrast", sign_flip_false_positive),
    Procedure(
        "TOST, α = 0.05, mean on the margin", "false-equivalence rate", "≤ 0.05", "tau mean", tost_false_equivalence
    ),
    Procedure(
        "RM-ANOVA (Greenhouse-Geisser), crossed seeds, α = 0.05",
        "false-positive rate",
        "≤ 0.05",
        "tau heterogeneity",
        lambda n, r, g: heterogeneity_false_positive(n, r, g, crossed=True),
    ),
    Procedure(
        "ANOVA on seed means, nested, α = 0.05",
        "false-positive rate",
        "0.05",
        "tau heterogeneity",
        lambda n, r, g: heterogeneity_false_positive(n, r, g, crossed=False),
    ),
    Procedure(
        "Clopper-Pearson, 95 % (n = seeds, one run each)",
        "worst-case coverage",
        "≥ 0.95",
        "divergence rate",
        lambda n, r, g: clopper_pearson_coverage(n),
        exact=True,
    ),
    *DESIGN_PROCEDURES,
)


def calibration_table(
    seeds: Sequence[int] = SEEDS,
    *,
    reps: int = 2000,
    rng: Any = 0,
    procedures: Sequence[Procedure] = PROCEDURES,
    progress: Callable[[str], None] | None = None,
) -> list[CalibrationRow]:
    """Every interval and test of the report (``procedures``) at each number of seeds,
    from ``reps`` simulated studies each (one generator ``rng`` for all)."""
    gen = np.random.default_rng(rng)
    rows = []
    for proc in procedures:
        used = 0 if proc.exact else max(1, int(reps * proc.reps_share))
        rates: dict[int, float | None] = {}
        for n in seeds:
            rates[n] = float(proc.measure(n, used, gen))
            if progress is not None:
                progress(f"{proc.name}: n={n} -> {rates[n]:.3f}")
        rows.append(CalibrationRow(proc.name, proc.measures, proc.nominal, proc.shown, rates, used, proc.exact))
    return rows


def monte_carlo_se(rate: float, reps: int) -> float:
    """Standard error of a simulated rate."""
    return math.sqrt(max(rate * (1.0 - rate), 1e-12) / reps)


def markdown_table(rows: Sequence[CalibrationRow], seeds: Sequence[int] = SEEDS) -> str:
    """The README's table: one row per procedure, one column per number of seeds."""
    head = ["procedure", "measures", "nominal", *(f"n={n}" for n in seeds), "shown in the report"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = ["n/a" if r.rates.get(n) is None else f"{r.rates[n]:.3f}" for n in seeds]
        lines.append("| " + " | ".join([r.procedure, r.measures, r.nominal, *cells, r.shown]) + " |")
    return "\n".join(lines)


__all__ = [
    "PROCEDURES",
    "SEEDS",
    "CalibrationRow",
    "Procedure",
    "bootstrap_coverage",
    "calibration_table",
    "clopper_pearson_coverage",
    "heterogeneity_false_positive",
    "markdown_table",
    "monte_carlo_se",
    "multi_bootstrap_coverage",
    "prediction_coverage",
    "rm_anova_pvalues",
    "sign_flip_false_positive",
    "t_coverage",
    "tost_false_equivalence",
]
