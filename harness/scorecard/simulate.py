"""Does a scorecard verdict mean what it says? Simulated studies of known truth run through the
scorecard's own rules, for ``benchmarks/calibration.py`` and the tests only (nothing in the
package imports this module at run time; a test checks it).

Three measurements, each vectorised over thousands of simulated studies at once, with the
analysis layer's own interval functions and the scorecard's own rules
(:func:`~harness.scorecard.verdicts.effect_kinds`, :func:`~harness.scorecard.verdicts.level_kinds`,
the shape check, :func:`~harness.scorecard.family.holm_adjusted`):

- :func:`kinds_table`: the rate of each verdict kind when the truth is the paper's value, 0, a
  tenth of it or its opposite, at 4, 6 and 10 seeds, for claims of the size the papers make
  (:data:`SCENARIOS`);
- :func:`family_wise_table`: under a global null (every effect 0, normal seeds), the share of
  cards with at least one signed verdict, by claim families, rows per family and seeds;
- :func:`skewed_false_positives`: on strongly skewed per-seed values of mean 0 (lognormal,
  sigma = 1), among the studies where the shape check fires, how often the t-interval
  excludes 0: the false-positive rate a shape-flagged t claim would carry.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.analysis.contrasts import t_interval
from harness.analysis.shape import shape_check_fires
from harness.analysis.tau import prediction_interval
from harness.scorecard.family import holm_adjusted
from harness.scorecard.verdicts import CLAIM_KINDS, effect_kinds, level_kinds

CONFIDENCE = 0.95
ALPHA = 1.0 - CONFIDENCE
KIND_SEEDS: tuple[int, ...] = (4, 6, 10)
FAMILY_SEEDS: tuple[int, ...] = (3, 4, 6, 10, 20)
ROWS_PER_FAMILY: tuple[int, ...] = (1, 2, 4, 8)
MAX_FAMILIES = 40
SKEW_SEEDS: tuple[int, ...] = tuple(range(3, 20))
_CHUNK = 250  # simulated cards per vectorised call


@dataclass(frozen=True)
class Scenario:
    """A claim as the calibration simulates it: a signed effect (``level`` False) with the
    paper's ``value`` and the claim's ``margin``, or a level starting at ``start`` against the
    band ``value +- band`` (``runs``: a claim about runs); per-seed values are normal with sd
    ``sd`` around the truth."""

    name: str
    value: float
    margin: float
    sd: float
    level: bool = False
    start: float = 0.0
    band: float = 0.0
    runs: bool = False

    def truths(self) -> dict[str, float]:
        """The truths the table sets against the claim: its value, none, a tenth, the opposite
        (a level: of the distance from its start)."""
        move = self.value - self.start
        return {
            "paper value": self.value,
            "0 (no effect)": self.start,
            "a tenth": self.start + move / 10.0,
            "opposite sign": self.start - move,
        }


#: The claims of the calibration table: the papers' large effects (EGA's +0.092, delta 0.02) and
#: small ones (the ablations' +0.007, delta 0.0035), seed sd 0.005 as measured on CPU, and tau
#: against 0.35 +- 0.05 from 0 (run sd 0.02, a claim about runs).
SCENARIOS: tuple[Scenario, ...] = (
    Scenario("effect +0.092, margin 0.02, seed sd 0.005", 0.092, 0.02, 0.005),
    Scenario("effect +0.007, margin 0.0035, seed sd 0.005", 0.007, 0.0035, 0.005),
    Scenario("tau 0.35 ± 0.05 from 0, margin 0.05, run sd 0.02", 0.35, 0.05, 0.02, True, 0.0, 0.05, True),
)


def _kinds(scenario: Scenario, values: np.ndarray) -> np.ndarray:
    """The scorecard's kind for each simulated study (a row of ``values``)."""
    ci, _ = t_interval(values, confidence=CONFIDENCE, axis=-1)
    eq, _ = t_interval(values, confidence=1.0 - 2.0 * ALPHA, axis=-1)
    if scenario.level:
        low, high = scenario.value - scenario.band, scenario.value + scenario.band
        runs_ok = True
        if scenario.runs:
            pi = prediction_interval(values, confidence=CONFIDENCE, axis=-1)
            runs_ok = (pi.low >= low) & (pi.high <= high)
        kinds = level_kinds(
            ci.low,
            ci.high,
            eq.low,
            eq.high,
            start=scenario.start,
            band=(low, high),
            margin=scenario.margin,
            runs_ok=runs_ok,
        )
    else:
        kinds = effect_kinds(
            ci.low, ci.high, eq.low, eq.high, sign="+", paper_value=scenario.value, margin=scenario.margin
        )
    return np.where(shape_check_fires(values), "inconclusive", kinds)


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
) -> list[KindRates]:
    """The rate of each kind under each truth of each scenario, at each number of seeds."""
    gen = np.random.default_rng(rng)
    out = []
    for scenario in scenarios:
        for label, truth in scenario.truths().items():
            for n in seeds:
                kinds = _kinds(scenario, gen.normal(truth, scenario.sd, (reps, n)))
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


def family_wise_curves(
    n: int, rows_per_family: Sequence[int], *, families: int, reps: int, rng: np.random.Generator
) -> dict[int, list[float]]:
    """Under a global null at ``n`` seeds: for each number of rows per family k, the share of
    cards of 1 .. ``families`` claim families (k rows each, Holm within a family, the shape
    check withholding flagged rows) with at least one signed verdict."""
    k_max = max(rows_per_family)

    def draw(size: int, g: np.random.Generator) -> np.ndarray:
        values = g.normal(0.0, 1.0, (size, families, k_max, n))  # (cards, families, rows, seeds)
        _, p = t_interval(values, confidence=CONFIDENCE, axis=-1)
        quiet = ~shape_check_fires(values)
        hits = []
        for k in rows_per_family:
            signed = (p[..., :k] < ALPHA) & quiet[..., :k] & (holm_adjusted(p[..., :k]) < ALPHA)
            hits.append(np.logical_or.accumulate(signed.any(axis=-1), axis=-1))  # (cards, families): first F
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
) -> dict[str, Any]:
    """The family-wise rates as ``calibration.json`` stores them:
    ``rates[k][n][F - 1]`` for k rows per family, n seeds, F families."""
    gen = np.random.default_rng(rng)
    rates: dict[str, dict[str, list[float]]] = {str(k): {} for k in rows_per_family}
    for n in seeds:
        for k, curve in family_wise_curves(n, rows_per_family, families=families, reps=reps, rng=gen).items():
            rates[str(k)][str(n)] = curve
    return {"reps": reps, "alpha": ALPHA, "max_families": families, "rates": rates}


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
    "KIND_SEEDS",
    "ROWS_PER_FAMILY",
    "SCENARIOS",
    "KindRates",
    "Scenario",
    "family_wise_curves",
    "family_wise_table",
    "kinds_table",
    "markdown_family_wise",
    "markdown_kinds",
    "markdown_skewed",
    "skewed_false_positives",
]
