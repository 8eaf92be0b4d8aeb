"""Does a scorecard verdict mean what it says? Simulated studies of known truth run through the
scorecard's own rules, for ``benchmarks/calibration.py`` and the tests only (nothing in the
package imports this module at run time; a test checks it).

Each measurement is vectorised over thousands of simulated studies at once, with the analysis
layer's own interval functions and the scorecard's own rules
(:func:`~harness.scorecard.verdicts.effect_kinds`, :func:`~harness.scorecard.verdicts.level_kinds`,
:func:`~harness.scorecard.verdicts.trend_kinds`, the shape check, the card's procedure of
:mod:`harness.scorecard.family`):

- :func:`skew_robust_table`: the null distribution of |t| on strongly skewed per-seed values
  (lognormal, sigma = 1, mean 0) jointly with the shape check, at 2 to 30 seeds: what a row's
  skew-robust p and interval are read from;
- :func:`skew_procedures_table`: the candidates for a signed verdict on few seeds (the t-interval
  with the shape check, with the sign-flip test agreeing, the skew-robust critical value), each
  one's rate of signed verdicts on lognormal and normal seeds of mean 0 and its power: how the
  skew-robust value was chosen;
- :func:`kinds_table`: the rate of each verdict kind when the truth is the paper's value, 0, a
  tenth of it or its opposite, at 4, 6 and 10 seeds, for claims of the size the papers make, an
  ordering read against its margin, on normal and on lognormal seeds (:data:`SCENARIOS`);
- :func:`flat_table`: how often a trend across the ladder's sizes reads ``flat`` under a true
  slope per doubling (0 to 0.02) or a curved truth;
- :func:`family_wise_table`: under a global null (every effect 0, normal seeds), the share of
  cards with at least one signed verdict after the card's procedure, by claim families, rows per
  family and seeds;
- :func:`skewed_false_positives`: on strongly skewed per-seed values of mean 0, among the
  studies where the shape check fires, how often the t-interval excludes 0: the false-positive
  rate a shape-flagged t claim would carry.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.analysis.multiplicity import bh_adjusted, holm_adjusted
from harness.analysis.paired_tests import t_interval
from harness.analysis.shape import shape_check_fires, shapiro_pvalues
from harness.analysis.tau import prediction_interval
from harness.scorecard.calibration import skew_robust_critical, skew_robust_pvalue
from harness.scorecard.family import CARD_RATE, PROCEDURE
from harness.scorecard.verdicts import CLAIM_KINDS, effect_kinds, level_kinds, trend_kinds

CONFIDENCE = 0.95
ALPHA = 1.0 - CONFIDENCE
KIND_SEEDS: tuple[int, ...] = (4, 6, 10)
FAMILY_SEEDS: tuple[int, ...] = (3, 4, 6, 10, 20)
ROWS_PER_FAMILY: tuple[int, ...] = (1, 2, 4, 8)
MAX_FAMILIES = 40
SKEW_SEEDS: tuple[int, ...] = tuple(range(3, 20))
#: The numbers of seeds the skew-robust null distribution is simulated at (beyond: the last).
SKEW_TABLE_SEEDS: tuple[int, ...] = tuple(range(2, 31))
#: The tails (shares of studies) at which its |t| quantiles are stored, largest first.
SKEW_TAILS: tuple[float, ...] = (
    1.0, 0.5, 0.3, 0.2, 0.15, 0.1, 0.07, 0.05, 0.04, 0.03, 0.025, 0.02, 0.015, 0.01, 0.007, 0.005, 0.004,
    0.003, 0.0025, 0.002, 0.0015, 0.001, 7e-4, 5e-4, 3e-4, 2e-4, 1e-4,
)  # fmt: skip
_CHUNK = 250  # simulated cards per vectorised call
#: The lognormal shapes the skew-robust null distribution is simulated at: a card reads the one at or
#: above the skew its seeds allow (:func:`~harness.scorecard.calibration.skew_robust_critical`).
SKEW_SIGMAS: tuple[float, ...] = (0.25, 0.4, 0.5, 0.6, 0.65, 0.7, 0.75, 0.85, 1.0, 1.25, 1.5)


def skewed_values(gen: np.random.Generator, size: Any, sd: float = 1.0, sigma: float = 1.0) -> np.ndarray:
    """Skewed values of mean 0 and standard deviation ``sd``: a lognormal of shape ``sigma`` minus its
    mean, scaled (skewness 1.75 at sigma 0.5, 6.2 at sigma 1)."""
    scale = math.sqrt(math.expm1(sigma**2) * math.exp(sigma**2))  # the lognormal's sd
    return (gen.lognormal(0.0, sigma, size) - math.exp(sigma**2 / 2.0)) * (sd / scale)


def _abs_t(values: np.ndarray) -> np.ndarray:
    """|t| of the mean against 0 along the last axis."""
    n = values.shape[-1]
    return np.abs(values.mean(axis=-1)) / (values.std(axis=-1, ddof=1) / math.sqrt(n))


def skew_robust_table(
    seeds: Sequence[int] = SKEW_TABLE_SEEDS, *, sigmas: Sequence[float] = SKEW_SIGMAS, reps: int = 200_000, rng: Any = 0
) -> dict[str, Any]:
    """The null distributions a row's skew-robust p is read from: for each lognormal shape sigma
    and number of seeds n, on ``reps`` studies of lognormal values of mean 0, the quantiles of |t|
    at the tails of :data:`SKEW_TAILS` not below ``20 / reps`` (``quantiles[sigma][n][j]``: |t| is
    at least this in ``tails[j]`` of studies). Unconditional: the shape check withholds nothing
    (its level was chosen so, by calibration and power: :func:`shape_level_table`)."""
    gen = np.random.default_rng(rng)
    tails = [t for t in SKEW_TAILS if t >= 20.0 / reps]
    quantiles: dict[str, dict[str, list[float]]] = {}
    for sigma in sigmas:
        by_n = quantiles.setdefault(f"{sigma:g}", {})
        for n in seeds:
            parts = [
                _abs_t(skewed_values(gen, (min(10 * _CHUNK, reps - done), n), sigma=sigma))
                for done in range(0, reps, 10 * _CHUNK)
            ]
            t_abs = np.concatenate(parts)
            by_n[str(n)] = [float(q) for q in np.quantile(t_abs, 1.0 - np.asarray(tails), method="higher")]
    return {"distribution": "lognormal of shape sigma, mean 0, both orientations (|t|)", "reps": reps,
            "tails": tails, "quantiles": quantiles}  # fmt: skip


def shape_level_table(
    seeds: Sequence[int] = (4, 6, 10),
    levels: Sequence[float] = (0.0, 0.01, 0.05, 0.10),
    *,
    sigma: float = 0.5,
    effect: float = 0.012,
    sd: float = 0.007,
    reps: int = 100_000,
    rng: Any = 0,
) -> list[dict[str, Any]]:
    """How the shape check's level was chosen, by calibration and power together: for each level
    (0: the check withholds nothing), the critical |t| that holds the 5 % level both for normal
    seeds and for lognormal ones of shape ``sigma`` when a row signs only with the check quiet,
    and the power that leaves against a true ``effect`` at seed sd ``sd`` on normal seeds."""
    from scipy import stats

    gen = np.random.default_rng(rng)
    out = []
    for n in seeds:
        normal = gen.standard_normal((reps, n))
        skewed = skewed_values(gen, (reps, n), sigma=sigma)
        p_normal = shapiro_pvalues(normal + effect / sd)
        p_skewed, t_skewed = shapiro_pvalues(skewed), _abs_t(skewed)
        t_crit = float(stats.t.isf(ALPHA / 2.0, n - 1))
        for level in levels:
            quiet = p_skewed >= level if level > 0 else np.ones(reps, dtype=bool)
            critical = max(t_crit, float(np.quantile(np.where(quiet, t_skewed, 0.0), 1.0 - ALPHA)))
            quiet_normal = p_normal >= level if level > 0 else np.ones(reps, dtype=bool)
            power = float(np.mean(quiet_normal & (_abs_t(normal + effect / sd) > critical)))
            out.append({"seeds": n, "level": level, "critical": critical, "power": power, "sigma": sigma,
                        "fires_on_normal": float(np.mean(~quiet_normal))})  # fmt: skip
    return out


@dataclass(frozen=True)
class Scenario:
    """A claim as the calibration simulates it: a signed effect (``level`` False) with the
    paper's ``value`` and the claim's ``margin`` (``ordering``: no value, read against the
    margin), or a level starting at ``start`` against the band ``value +- band`` (``runs``: a
    claim about runs); per-seed values have sd ``sd`` around the truth, normal or strongly
    skewed (``noise`` "lognormal": :func:`skewed_values`)."""

    name: str
    value: float
    margin: float
    sd: float
    level: bool = False
    start: float = 0.0
    band: float = 0.0
    runs: bool = False
    noise: str = "normal"
    ordering: bool = False

    def truths(self) -> dict[str, float]:
        """The truths the table sets against the claim: its value, none, a tenth, the opposite
        (a level: of the distance from its start; an ordering: twice its margin, none, a fifth
        of its margin, the opposite)."""
        if self.ordering:
            m = self.margin
            return {
                "twice the margin": 2 * m,
                "0 (no effect)": 0.0,
                "a fifth of the margin": m / 5,
                "opposite sign": -2 * m,
            }
        move = self.value - self.start
        return {
            "paper value": self.value,
            "0 (no effect)": self.start,
            "a tenth": self.start + move / 10.0,
            "opposite sign": self.start - move,
        }

    def draw(self, truth: float, size: tuple[int, int], gen: np.random.Generator) -> np.ndarray:
        """Per-seed values (studies, seeds) around ``truth``."""
        if self.noise == "lognormal":
            return truth + skewed_values(gen, size, self.sd)
        return gen.normal(truth, self.sd, size)


#: The claims of the calibration table: the papers' large effects (EGA's +0.092, delta 0.02) on
#: normal seeds (sd 0.005, as measured on CPU) and on strongly skewed ones (sd 0.02, EGA's gain's
#: seed sd in the published runs), small ones (the ablations' +0.007, delta 0.0035), an ordering
#: ("EGA-1 clearly beats DB2": no value, delta 0.02), and tau against 0.35 +- 0.05 from 0 (run sd
#: 0.02, a claim about runs).
SCENARIOS: tuple[Scenario, ...] = (
    Scenario("effect +0.092, margin 0.02, seed sd 0.005", 0.092, 0.02, 0.005),
    Scenario("effect +0.092, margin 0.02, lognormal seeds sd 0.02", 0.092, 0.02, 0.02, noise="lognormal"),
    Scenario("effect +0.007, margin 0.0035, seed sd 0.005", 0.007, 0.0035, 0.005),
    Scenario("ordering (beats), margin 0.02, seed sd 0.005", 0.0, 0.02, 0.005, ordering=True),
    Scenario("tau 0.35 ± 0.05 from 0, margin 0.05, run sd 0.02", 0.35, 0.05, 0.02, True, 0.0, 0.05, True),
)


def robust_bounds(ci: Any, n: int, data: dict[str, Any] | None = None, confidence: float = CONFIDENCE) -> tuple:
    """The skew-robust interval of a batch of t-intervals at ``n`` seeds (as
    :attr:`~harness.scorecard.verdicts.Intervals.robust` widens one); None without data."""
    from scipy import stats

    alpha = 1.0 - confidence
    c = skew_robust_critical(n, alpha, data)
    if c is None:
        return None, None
    centre, half = (ci.low + ci.high) / 2.0, (ci.high - ci.low) / 2.0 * c / float(stats.t.isf(alpha / 2, n - 1))
    return centre - half, centre + half


def _kinds(scenario: Scenario, values: np.ndarray, data: dict[str, Any] | None = None) -> np.ndarray:
    """The scorecard's kind for each simulated study (a row of ``values``)."""
    ci, _ = t_interval(values, confidence=CONFIDENCE, axis=-1)
    eq, _ = t_interval(values, confidence=1.0 - 2.0 * ALPHA, axis=-1)
    rlo, rhi = robust_bounds(ci, values.shape[-1], data)
    if rlo is None:  # no skew-robust value: nothing is signed, as a row without one
        rlo, rhi = np.full(ci.low.shape, -np.inf), np.full(ci.low.shape, np.inf)
    bounds = {"robust_low": rlo, "robust_high": rhi}
    if scenario.level:
        low, high = scenario.value - scenario.band, scenario.value + scenario.band
        runs_ok = True
        if scenario.runs:
            pi = prediction_interval(values, confidence=CONFIDENCE, axis=-1)
            runs_ok = (pi.low >= low) & (pi.high <= high)
        kinds = level_kinds(
            ci.low, ci.high, eq.low, eq.high, start=scenario.start, band=(low, high), margin=scenario.margin,
            runs_ok=runs_ok, **bounds,
        )  # fmt: skip
    else:
        value = None if scenario.ordering else scenario.value
        kinds = effect_kinds(
            ci.low, ci.high, eq.low, eq.high, sign="+", paper_value=value, margin=scenario.margin, **bounds
        )
    return kinds  # the shape check withholds nothing (shape_level_table)


@dataclass(frozen=True)
class KindRates:
    """The rate of each kind (:data:`~harness.scorecard.verdicts.CLAIM_KINDS`) for one claim,
    truth and number of seeds, from ``reps`` simulated studies."""

    scenario: str
    truth: str
    truth_value: float
    seeds: int
    reps: int
    rates: dict[str, float]

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("scenario", "truth", "truth_value", "seeds", "reps", "rates")}


def kinds_table(
    scenarios: Sequence[Scenario] = SCENARIOS,
    seeds: Sequence[int] = KIND_SEEDS,
    *,
    reps: int = 2000,
    rng: Any = 0,
    data: dict[str, Any] | None = None,
) -> list[KindRates]:
    """The rate of each kind under each truth of each scenario, at each number of seeds
    (``data``: the calibration data with the skew-robust table; default the shipped file)."""
    gen = np.random.default_rng(rng)
    out = []
    for scenario in scenarios:
        for label, truth in scenario.truths().items():
            for n in seeds:
                kinds = _kinds(scenario, scenario.draw(truth, (reps, n), gen), data)
                rates = {k: float(np.mean(kinds == k)) for k in CLAIM_KINDS if k != "not measured"}
                out.append(KindRates(scenario.name, label, truth, n, reps, rates))
    return out


def _chunked_mean(reps: int, rng: np.random.Generator, draw: Callable[[int, np.random.Generator], np.ndarray]):
    """The mean over ``reps`` studies of what ``draw(size, rng)`` returns per study, in chunks."""
    total, done = None, 0
    while done < reps:
        size = min(_CHUNK, reps - done)
        part = np.sum(draw(size, rng), axis=0)
        total = part if total is None else total + part
        done += size
    return total / reps


def card_signed(p_robust: np.ndarray, quiet: np.ndarray, alpha: float = CARD_RATE) -> np.ndarray:
    """The card's procedure (:mod:`harness.scorecard.family`) on a batch of cards: for skew-robust
    p-values and shape checks of shape (cards, families, rows), whether each card of the first
    F families keeps any signed verdict, for F = 1 .. families: (cards, families)."""
    simes = bh_adjusted(p_robust).min(axis=-1)  # (cards, families): each claim's Simes p
    holm = holm_adjusted(p_robust)  # (cards, families, rows): within a claim, whatever F
    hits = []
    for f in range(1, p_robust.shape[1] + 1):
        selected = bh_adjusted(simes[:, :f]) < alpha  # (cards, f)
        level = alpha * selected.sum(axis=-1) / f  # (cards,)
        keeps = quiet[:, :f] & selected[..., None] & (holm[:, :f] < level[:, None, None])
        hits.append(keeps.any(axis=(-1, -2)))
    return np.stack(hits, axis=-1)


def family_wise_curves(
    n: int,
    rows_per_family: Sequence[int],
    *,
    families: int,
    reps: int,
    rng: np.random.Generator,
    data: dict[str, Any] | None = None,
) -> dict[int, list[float]]:
    """Under a global null at ``n`` seeds: for each number of rows per family k, the share of
    cards of 1 .. ``families`` claim families (k rows each) with at least one signed verdict
    after the card's procedure on skew-robust p-values, the shape check withholding flagged rows."""
    k_max = max(rows_per_family)

    def draw(size: int, g: np.random.Generator) -> np.ndarray:
        values = g.normal(0.0, 1.0, (size, families, k_max, n))  # (cards, families, rows, seeds)
        _, p = t_interval(values, confidence=CONFIDENCE, axis=-1)
        robust = skew_robust_pvalue(p, n, data)
        quiet = np.ones(robust.shape, dtype=bool)  # the shape check withholds nothing
        hits = [card_signed(robust[..., :k], quiet[..., :k]) for k in rows_per_family]
        return np.stack(hits, axis=1)  # (cards, len(rows_per_family), families)

    rates = _chunked_mean(reps, rng, draw)
    return {k: [float(r) for r in rates[i]] for i, k in enumerate(rows_per_family)}


def family_wise_table(
    seeds: Sequence[int] = FAMILY_SEEDS,
    rows_per_family: Sequence[int] = ROWS_PER_FAMILY,
    *,
    families: int = MAX_FAMILIES,
    reps: int = 1000,
    rng: Any = 0,
    data: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The family-wise rates as ``calibration.json`` stores them:
    ``rates[k][n][F - 1]`` for k rows per family, n seeds, F families."""
    gen = np.random.default_rng(rng)
    rates: dict[str, dict[str, list[float]]] = {str(k): {} for k in rows_per_family}
    for n in seeds:
        curves = family_wise_curves(n, rows_per_family, families=families, reps=reps, rng=gen, data=data)
        for k, curve in curves.items():
            rates[str(k)][str(n)] = curve
    return {"reps": reps, "alpha": CARD_RATE, "max_families": families, "procedure": PROCEDURE, "rates": rates}


def skewed_false_positives(seeds: Sequence[int] = SKEW_SEEDS, *, reps: int = 10_000, rng: Any = 0) -> dict[str, Any]:
    """Lognormal (sigma = 1) per-seed values centred on 0: among the studies whose shape check
    fires, the share whose 95 % t-interval excludes 0 (and how often the check fires)."""
    gen = np.random.default_rng(rng)
    rates, fired = {}, {}
    for n in seeds:
        values = gen.lognormal(0.0, 1.0, (reps, n)) - np.exp(0.5)  # mean 0
        flags = shape_check_fires(values)
        _, p = t_interval(values, confidence=CONFIDENCE, axis=-1)
        fired[str(n)] = float(flags.mean())
        rates[str(n)] = float(np.mean(p[flags] < ALPHA)) if flags.any() else 0.0
    return {"distribution": "lognormal, sigma 1, mean 0", "reps": reps, "rates": rates, "fires": fired}


def markdown_kinds(rows: Sequence[KindRates]) -> str:
    """The calibration page's table of kinds: one row per claim, truth and number of seeds."""
    kinds = [k for k in CLAIM_KINDS if k != "not measured"]
    head = ["claim", "truth", "seeds", *kinds]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [f"{r.rates[k]:.3f}" for k in kinds]
        lines.append("| " + " | ".join([r.scenario, f"{r.truth} ({r.truth_value:+.4g})", str(r.seeds), *cells]) + " |")
    return "\n".join(lines)


def markdown_family_wise(table: dict[str, Any], families: Sequence[int] = (1, 5, 10, 20, 30, 40)) -> str:
    """The page's table of family-wise rates: rows per family and seeds down, families across."""
    head = ["rows per family", "seeds", *(f"{f} famil{'y' if f == 1 else 'ies'}" for f in families)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for k, by_seeds in table["rates"].items():
        for n, curve in by_seeds.items():
            cells = [f"{curve[f - 1]:.3f}" if f <= len(curve) else "n/a" for f in families]
            lines.append("| " + " | ".join([k, n, *cells]) + " |")
    return "\n".join(lines)


def markdown_skewed(table: dict[str, Any]) -> str:
    """The page's table of the t claim's false-positive rate where the shape check fires."""
    seeds = list(table["rates"])
    lines = ["| | " + " | ".join(f"n={n}" for n in seeds) + " |", "|" + "---|" * (len(seeds) + 1)]
    lines.append("| shape check fires | " + " | ".join(f"{table['fires'][n]:.3f}" for n in seeds) + " |")
    lines.append("| t claim false where it fires | " + " | ".join(f"{table['rates'][n]:.3f}" for n in seeds) + " |")
    return "\n".join(lines)


__all__ = [
    "FAMILY_SEEDS",
    "FLAT_SLOPES",
    "KIND_SEEDS",
    "PROCEDURES",
    "ROWS_PER_FAMILY",
    "SCENARIOS",
    "KindRates",
    "Scenario",
    "card_signed",
    "family_wise_curves",
    "family_wise_table",
    "flat_table",
    "kinds_table",
    "markdown_family_wise",
    "markdown_flat",
    "markdown_kinds",
    "markdown_procedures",
    "markdown_skewed",
    "robust_bounds",
    "seed_slopes",
    "skew_procedures_table",
    "skew_robust_table",
    "skewed_false_positives",
    "shape_level_table",
    "markdown_shape_levels",
    "skewed_values",
]


# ----------------------------------------------------------------------------- the choice
#: The candidates for a signed verdict on few seeds, as :func:`skew_procedures_table` names them.
PROCEDURES: tuple[str, ...] = (
    "t-interval, shape check quiet (the rule before)",
    "and the sign-flip test agrees",
    "BCa bootstrap interval (from 10 seeds), shape check quiet",
    "skew-robust critical value at the floor's shape (chosen)",
)
#: Effects in seed sds at which the power of each candidate is measured (normal seeds).
POWER_AT: tuple[float, ...] = (2.0, 3.0, 5.0)


def _signed_by(values: np.ndarray, data: dict[str, Any] | None, gen: np.random.Generator) -> dict[str, np.ndarray]:
    """Whether each candidate of :data:`PROCEDURES` signs each study (a row of ``values``)."""
    from harness.analysis.paired_tests import bootstrap_interval, sign_flip_pvalue

    n = values.shape[-1]
    _, p = t_interval(values, confidence=CONFIDENCE, axis=-1)
    quiet = ~shape_check_fires(values)
    t_signed = quiet & (p < ALPHA)
    flips = np.concatenate(
        [sign_flip_pvalue(values[i : i + _CHUNK], rng=gen, axis=-1) for i in range(0, len(values), _CHUNK)]
    )
    out = {PROCEDURES[0]: t_signed, PROCEDURES[1]: t_signed & (flips < ALPHA)}
    if n >= 10:
        ci = bootstrap_interval(values, confidence=CONFIDENCE, n_resamples=999, rng=gen, axis=-1)
        out[PROCEDURES[2]] = quiet & ((ci.low > 0) | (ci.high < 0))
    out[PROCEDURES[3]] = skew_robust_pvalue(p, n, data) < ALPHA  # at the floor's shape; the check withholds nothing
    return out


def skew_procedures_table(
    seeds: Sequence[int] = KIND_SEEDS, *, reps: int = 2000, rng: Any = 0, data: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """For each candidate of :data:`PROCEDURES` and number of seeds: the share of studies it
    signs on lognormal seeds of the floor's shape (:func:`~harness.scorecard.calibration.skew_floor`)
    of mean 0 and on normal ones (its false signs), and on normal seeds with an effect of 2, 3 and
    5 seed sds (its power)."""
    from harness.scorecard.calibration import skew_sigma_used

    gen = np.random.default_rng(rng)
    sigma = skew_sigma_used(None, data) or 1.0
    rows = []
    for n in seeds:
        draws = {
            "lognormal, mean 0": skewed_values(gen, (reps, n), sigma=sigma),
            "normal, mean 0": gen.normal(0.0, 1.0, (reps, n)),
        }
        draws |= {f"normal, {d:g} sd": gen.normal(d, 1.0, (reps, n)) for d in POWER_AT}
        signed = {name: _signed_by(values, data, gen) for name, values in draws.items()}
        for procedure in PROCEDURES:
            if procedure in signed["normal, mean 0"]:
                rates = {name: float(by[procedure].mean()) for name, by in signed.items()}
                rows.append({"procedure": procedure, "seeds": n, "reps": reps, "rates": rates})
    return rows


def markdown_shape_levels(rows: Sequence[dict[str, Any]]) -> str:
    """The calibration page's table of :func:`shape_level_table`."""
    lines = [
        "| seeds | check's level | critical \\|t\\| | power | check fires on normal seeds |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        level = "0 (withholds nothing)" if r["level"] == 0 else f"{r['level']:g}"
        lines.append(
            f"| {r['seeds']} | {level} | {r['critical']:.2f} | {r['power']:.3f} | {r['fires_on_normal']:.3f} |"
        )
    return "\n".join(lines)


def markdown_procedures(rows: Sequence[dict[str, Any]]) -> str:
    """The calibration page's table of the candidates for a signed verdict on few seeds."""
    names = list(rows[0]["rates"])
    head = ["procedure", "seeds", *(f"signs: {k}" for k in names)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        lines.append(
            "| " + " | ".join([r["procedure"], str(r["seeds"]), *(f"{r['rates'][k]:.3f}" for k in names)]) + " |"
        )
    return "\n".join(lines)


# ----------------------------------------------------------------------------- flat
#: True slopes per doubling (and a curved truth with no slope at the smallest size) against
#: which ``flat`` is measured.
FLAT_SLOPES: tuple[float, ...] = (0.0, 0.005, 0.01, 0.02)
FLAT_CURVATURE = 0.0025


def seed_slopes(lx: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Each seed's least-squares slope of ``y`` on ``lx`` (log2 size) along the last axis, as
    ``harness.analysis.trends`` fits it within a seed (one cell per size, no other column):
    ``sum((x - mean x) y) / sum((x - mean x)^2)``; ``y`` (..., sizes) -> (...)."""
    xc = np.asarray(lx, dtype=float) - np.mean(lx)
    return (np.asarray(y, dtype=float) @ xc) / float(xc @ xc)


def flat_table(
    seeds: Sequence[int] = KIND_SEEDS,
    *,
    reps: int = 2000,
    rng: Any = 0,
    margin: float = 0.02,
    sd: float = 0.01,
    slope_sd: float = 0.002,
    sizes: tuple[tuple[float, ...], float] | None = None,
    data: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """How often a trend across the ladder's three sizes reads each trend kind: each seed's
    effect at log2 size L is ``b_s (L - L0) + c (L - L0)^2 + e`` (``b_s ~ N(slope, slope_sd)``,
    ``e ~ N(0, sd)`` per cell), its per-seed least-squares slopes read with the scorecard's rule
    (:func:`~harness.scorecard.verdicts.trend_kinds`, the claim's ``margin`` over the doublings
    from the largest size to the papers')."""
    if sizes is None:
        from harness.bench.simulate.scorecard_prediction import ladder_parameters

        by_size, papers = ladder_parameters()
        sizes = (tuple(by_size.values()), papers)
    measured, at = sizes
    lx = np.log2(np.asarray(measured, dtype=float))
    d = lx - lx[0]
    span = max(1.0, math.log2(at / max(measured)))
    gen = np.random.default_rng(rng)
    truths = [(f"slope {b:g} per doubling", b, 0.0) for b in FLAT_SLOPES]
    truths.append((f"curved, {FLAT_CURVATURE:g} per doubling², no slope at the smallest", 0.0, FLAT_CURVATURE))
    rows = []
    for label, slope, curvature in truths:
        for n in seeds:
            b = gen.normal(slope, slope_sd, (reps, n, 1))
            y = b * d + curvature * d**2 + gen.normal(0.0, sd, (reps, n, len(d)))  # (studies, seeds, sizes)
            slopes = seed_slopes(lx, y)  # (studies, seeds): each seed's slope per doubling
            ci, _ = t_interval(slopes, confidence=CONFIDENCE, axis=-1)
            rlo, rhi = robust_bounds(ci, n, data)  # flat is read on it too: it is carried to the papers' level
            kinds = trend_kinds(
                ci.low, ci.high, rlo, rhi, sign="+", margin=margin / span, levels=len(d),
                robust_low=rlo, robust_high=rhi,
            )  # fmt: skip
            kinds = np.where(shape_check_fires(slopes), "inconclusive", kinds)
            rates = {
                k: float(np.mean(kinds == k)) for k in ("grows", "shrinks", "flat", "not resolvable", "inconclusive")
            }
            rows.append({"truth": label, "seeds": n, "reps": reps, "rates": rates})
    return {"margin": margin, "span": span, "sd": sd, "slope_sd": slope_sd, "rows": rows}


def markdown_flat(table: dict[str, Any]) -> str:
    """The calibration page's table of trend kinds under known slopes."""
    kinds = list(table["rows"][0]["rates"])
    head = ["truth", "seeds", *kinds]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in table["rows"]:
        lines.append("| " + " | ".join([r["truth"], str(r["seeds"]), *(f"{r['rates'][k]:.3f}" for k in kinds)]) + " |")
    return "\n".join(lines)
