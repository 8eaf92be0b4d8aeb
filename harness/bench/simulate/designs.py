"""The designs real studies have, simulated with known truth: several gated runs per seed
(tau stability per cell), divergence clustered by seed, repeated measures with
seed-specific slopes, and skewed per-seed values. Every procedure is the analysis's own
function called on a batch of studies; where the report goes through a results table,
the first studies of a batch are also run through it and must agree.

Each function returns the rate it measures (a coverage, a false-positive or a false-claim
rate) over ``reps`` simulated studies with ``n`` seeds.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import polars as pl

from harness.analysis.divergence import divergence_table, seed_level_interval
from harness.analysis.paired_tests import Shapiro, SignFlip, TTest
from harness.analysis.sequential import confidence_sequence_path
from harness.analysis.tau import prediction_interval

CONFIDENCE = 0.95
ALPHA = 0.05
TAU_CELLS = (0.32, 0.38)  # two cells per seed, tau means (band 0.35 +- 0.05)
TAU_RUN_SD = 0.02
DIVERGENCE_CELLS = 6
DIVERGENCE_RATE = 0.2
INTRA_SEED_CORRELATION = 0.5


# ----------------------------------------------------------------------------- tau per cell
def _two_cell_tau(size: int, n: int, g: np.random.Generator, seed_sd: float) -> np.ndarray:
    """(size, n + 1, cells) tau of each seed's run in each cell; the last seed is the new one."""
    seed_effect = g.normal(0.0, seed_sd, (size, n + 1, 1))
    return np.asarray(TAU_CELLS) + seed_effect + g.normal(0.0, TAU_RUN_SD, (size, n + 1, len(TAU_CELLS)))


def cell_prediction_coverage(n: int, reps: int, rng: np.random.Generator, seed_sd: float = 0.02) -> float:
    """How often a cell's 95 % prediction interval (over its n seeds) holds a new seed's run
    in that cell, with two cells per seed sharing a seed effect (the claim the per-cell
    stability verdict makes)."""
    tau = _two_cell_tau(reps, n, rng, seed_sd)
    pi = prediction_interval(tau[:, :n, 0], confidence=CONFIDENCE)
    new = tau[:, n, 0]
    return float(np.mean((pi.low <= new) & (new <= pi.high)))


def two_cell_stable_claims(n: int, reps: int, rng: np.random.Generator) -> float:
    """Share of studies called "stable" when the cells sit at 0.32 and 0.38 (run sd 0.02,
    16.6 % of runs outside 0.35 +- 0.05): every cell's prediction interval inside the band."""
    tau = _two_cell_tau(reps, n, rng, 0.0)[:, :n]
    inside = np.ones(reps, dtype=bool)
    for j in range(len(TAU_CELLS)):
        pi = prediction_interval(tau[:, :, j], confidence=CONFIDENCE)
        inside &= (pi.low >= 0.30) & (pi.high <= 0.40)
    return float(np.mean(inside))


# ----------------------------------------------------------------------------- divergence
def _clustered_divergence(size: int, n: int, g: np.random.Generator, variants: int) -> np.ndarray:
    """(size, n, variants, cells) 0/1 divergence: each seed and variant draws its propensity
    from one beta distribution (no true difference between variants) with mean
    DIVERGENCE_RATE and intra-seed correlation ``rho = 1 / (a + b + 1)`` across its cells:
    the seeds that diverge in one cell diverge in the others."""
    total = 1.0 / INTRA_SEED_CORRELATION - 1.0
    a, b = DIVERGENCE_RATE * total, (1.0 - DIVERGENCE_RATE) * total
    propensity = g.beta(a, b, (size, n, variants, 1))
    return (g.random((size, n, variants, DIVERGENCE_CELLS)) < propensity).astype(float)


def _check_against_table(runs: np.ndarray, ci_low: np.ndarray, p: np.ndarray | None, count: int = 2) -> None:
    """The first studies through :func:`divergence_table` give the same interval and p."""
    for i in range(min(count, len(runs))):
        n, variants, cells = runs[i].shape
        rows = [
            {"variant": f"v{v}", "seed": s, "status": "diverged" if runs[i, s, v, c] else "finished"}
            for s in range(n)
            for v in range(variants)
            for c in range(cells)
        ]
        table = divergence_table(pl.DataFrame(rows), control="v0").to_dicts()
        if not math.isclose(table[0]["ci_low"], float(ci_low[i]), abs_tol=1e-12):
            raise AssertionError(
                f"seed-level interval {ci_low[i]} differs from divergence_table's {table[0]['ci_low']}"
            )
        if p is not None and not math.isclose(table[1]["pvalue"], float(p[i]), abs_tol=1e-12):
            raise AssertionError(f"sign-flip p {p[i]} differs from divergence_table's {table[1]['pvalue']}")


def seed_divergence_coverage(n: int, reps: int, rng: np.random.Generator, *, by_seed: bool = True) -> float:
    """Coverage of the true divergence rate by the seed-level Clopper-Pearson interval
    (``by_seed``; the run-level one counts n x cells runs as independent)."""
    runs = _clustered_divergence(reps, n, rng, 1)
    rates = runs.mean(axis=(2, 3))  # (reps, n): each seed's rate
    if by_seed:
        low, high = seed_level_interval(rates.sum(axis=1), n, CONFIDENCE)
        _check_against_table(np.repeat(runs, 2, axis=2), low, None)
    else:
        k = runs.sum(axis=(1, 2, 3))
        low, high = seed_level_interval(k, n * DIVERGENCE_CELLS, CONFIDENCE)
    return float(np.mean((low <= DIVERGENCE_RATE) & (DIVERGENCE_RATE <= high)))


def seed_divergence_false_positive(n: int, reps: int, rng: np.random.Generator, chunk: int = 250) -> float:
    """Rejection rate at alpha 0.05 of the sign-flip test of per-seed rate differences when
    the variant and the control draw their per-seed propensities from one distribution
    (studies in chunks of ``chunk``: the random-flip test holds 9999 resamples of each)."""
    rejected, done = 0, 0
    while done < reps:
        size = min(chunk, reps - done)
        runs = _clustered_divergence(size, n, rng, 2)
        diff = runs[:, :, 1].mean(axis=-1) - runs[:, :, 0].mean(axis=-1)  # (size, n)
        p = np.ones(size)
        moving = np.any(diff != 0.0, axis=1)
        if moving.any():
            p[moving] = SignFlip().run(diff[moving], rng=np.random.default_rng(0)).p_value
        if done == 0:
            exact = 2**n <= 9999  # exact enumeration: the batch and the table give the same p
            low = seed_level_interval(runs[:, :, 0].mean(axis=-1).sum(axis=1), n, CONFIDENCE)[0]
            _check_against_table(runs, low, p if exact else None)
        rejected += int(np.sum(p < ALPHA))
        done += size
    return rejected / reps


def fisher_clustered_false_positive(n: int, reps: int, rng: np.random.Generator) -> float:
    """Fisher's exact test on the runs of the same clustered studies (not shown: for comparison)."""
    from scipy import stats

    runs = _clustered_divergence(reps, n, rng, 2)
    m = n * DIVERGENCE_CELLS
    k = runs.sum(axis=(1, 3))  # (reps, variants)
    p = [stats.fisher_exact([[k1, m - k1], [k0, m - k0]]).pvalue for k0, k1 in k.astype(int)]
    return float(np.mean(np.array(p) < ALPHA))


# ----------------------------------------------------------------------------- skewed values
def skewed_values(kind: str, size: tuple[int, ...], g: np.random.Generator) -> np.ndarray:
    """Per-seed values of mean 0: ``exponential`` (skewness 2) or ``lognormal`` (sigma 1,
    skewness 6.2), centred."""
    if kind == "exponential":
        return g.exponential(1.0, size) - 1.0
    if kind == "lognormal":
        return np.exp(g.normal(0.0, 1.0, size)) - math.exp(0.5)
    if kind == "normal":
        return g.normal(0.0, 1.0, size)
    raise ValueError(f"unknown shape {kind!r}")


def skewed_t_coverage(n: int, reps: int, rng: np.random.Generator, kind: str) -> float:
    ci = TTest(CONFIDENCE).run(skewed_values(kind, (reps, n), rng)).interval
    return float(np.mean((ci.low <= 0.0) & (0.0 <= ci.high)))


def skewed_sign_flip_false_positive(n: int, reps: int, rng: np.random.Generator, kind: str) -> float:
    flips = SignFlip(n_resamples=1024).run(skewed_values(kind, (reps, n), rng), rng=rng)
    return float(np.mean(flips.rejects(ALPHA)))


def skewed_guarded_claims(n: int, reps: int, rng: np.random.Generator, kind: str) -> float:
    """Rate of a settled claim under the null as the report makes it: the t-interval
    excludes 0 and the shape check (:class:`~harness.analysis.paired_tests.Shapiro`) is
    quiet (where it fires the claim is withheld)."""
    values = skewed_values(kind, (reps, n), rng)
    ci = TTest(CONFIDENCE).run(values).interval
    return float(np.mean(((ci.low > 0.0) | (ci.high < 0.0)) & ~Shapiro().fires(values)))


def skewed_confidence_sequence(n: int, reps: int, rng: np.random.Generator, kind: str) -> float:
    """Share of null studies, peeked at after every seed from 2 to n, in which the
    confidence sequence excludes the true mean 0 at some look."""
    if n < 2:
        return math.nan
    ci = confidence_sequence_path(
        skewed_values(kind, (reps, n), rng), confidence=CONFIDENCE, tightest_at=math.sqrt(2.0 * n)
    )
    return float(np.mean(np.any((ci.low[:, 1:] > 0.0) | (ci.high[:, 1:] < 0.0), axis=1)))


def shape_check_rate(n: int, reps: int, rng: np.random.Generator, kind: str) -> float:
    """How often the shape check fires (normal: its false-alarm rate)."""
    return float(np.mean(Shapiro().fires(skewed_values(kind, (reps, n), rng))))


def by_shape(measure: Callable[..., float], kind: str) -> Callable[[int, int, np.random.Generator], float]:
    return lambda n, reps, g: measure(n, reps, g, kind)


__all__ = [
    "by_shape",
    "cell_prediction_coverage",
    "fisher_clustered_false_positive",
    "seed_divergence_coverage",
    "seed_divergence_false_positive",
    "shape_check_rate",
    "skewed_confidence_sequence",
    "skewed_guarded_claims",
    "skewed_sign_flip_false_positive",
    "skewed_t_coverage",
    "skewed_values",
    "two_cell_stable_claims",
]
