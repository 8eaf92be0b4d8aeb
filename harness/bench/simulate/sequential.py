"""What a sequential study buys and what peeking costs, by simulation (normal per-seed
values with known truth; every interval is :mod:`harness.analysis.sequential`'s own).

- :func:`peeking_error_rates`: null studies looked at after every seed (or after every
  batch): how often does *some* look exclude the true mean? The fixed-n t-interval
  against the confidence sequence.
- :func:`settled_rule_performance`: the ``stop_when: settled`` rule of a study with
  ``seeds: {min, max, batch}`` at several true effects: how often it concludes the right
  sign, how often "negligible", how many seeds it uses on average, and the seeds a fixed
  design needs for the same power (two-sided t-test at the same alpha).

``benchmarks/sequential.py`` prints both tables, writes them as JSON and regenerates the
README's "Sequential studies" table.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
from statsmodels.stats.power import TTestPower

from harness.analysis.sequential import confidence_sequence_path, t_interval_path

#: Powers above this are compared at it: matching a simulated 0.9995 exactly would ask the
#: fixed design for seeds that buy nothing visible.
POWER_CAP = 0.99


def study_looks(min_seeds: int, max_seeds: int, batch: int) -> list[int]:
    """The numbers of seeds at which a sequential study evaluates its rule."""
    return sorted({*range(min_seeds, max_seeds, batch), max_seeds})


def peeking_error_rates(
    looks: Sequence[int], *, reps: int, rng: np.random.Generator, confidence: float = 0.95, tightest_at: float
) -> dict[str, float]:
    """Share of null studies in which the interval at some look in ``looks`` (numbers of
    seeds) excludes the true mean: ``{"t": ..., "confidence_sequence": ...}``."""
    n_max = max(looks)
    idx = [n - 1 for n in looks]
    values = rng.normal(0.0, 1.0, size=(reps, n_max))
    out = {}
    for name, ci in (
        ("t", t_interval_path(values, confidence=confidence)),
        ("confidence_sequence", confidence_sequence_path(values, confidence=confidence, tightest_at=tightest_at)),
    ):
        out[name] = float(np.mean(np.any((ci.low[:, idx] > 0.0) | (ci.high[:, idx] < 0.0), axis=1)))
    return out


@dataclass(frozen=True)
class SettledRuleRow:
    """The settled rule at one true effect (in units of the per-seed sd)."""

    effect: float
    right_sign: float  # stopped with the interval excluding 0 on the true effect's side
    wrong_sign: float  # ... on the other side (effect 0: on either side, the false-positive rate)
    negligible: float  # stopped with the interval inside +-margin
    max_reached: float  # ran to max without settling
    mean_seeds: float
    fixed_n_same_power: int | None  # seeds a fixed design needs for right_sign's power, capped at 0.99 (None: > 200)
    fixed_power_at_max: float  # power of a fixed design at max seeds

    def to_json(self) -> dict[str, float | int | None]:
        return asdict(self)


def settled_rule_performance(
    effects: Sequence[float],
    *,
    min_seeds: int,
    max_seeds: int,
    batch: int,
    margin: float,
    reps: int,
    rng: np.random.Generator,
    confidence: float = 0.95,
) -> list[SettledRuleRow]:
    """Simulate ``stop_when: settled`` (interval excludes 0, or lies within +-``margin``)
    with seeds ``{min, max, batch}`` at each true effect (per-seed sd 1)."""
    looks = study_looks(min_seeds, max_seeds, batch)
    idx = np.array([n - 1 for n in looks])
    power = TTestPower()
    rows = []
    for effect in effects:
        values = rng.normal(effect, 1.0, size=(reps, max_seeds))
        ci = confidence_sequence_path(values, confidence=confidence, tightest_at=math.sqrt(min_seeds * max_seeds))
        low, high = ci.low[:, idx], ci.high[:, idx]  # (reps, looks)
        above, below = low > 0.0, high < 0.0
        inside = (low >= -margin) & (high <= margin)
        settled = above | below | inside
        stop = np.where(settled.any(axis=1), settled.argmax(axis=1), len(looks) - 1)  # first look that settles
        at = np.arange(reps)
        sign = np.sign(effect) if effect else 1.0
        right = (above if sign > 0 else below)[at, stop]
        wrong = (below if sign > 0 else above)[at, stop]
        negligible = inside[at, stop] & ~right & ~wrong
        seeds = np.array(looks)[stop]
        right_rate = float(np.mean(right)) if effect else 0.0
        rows.append(
            SettledRuleRow(
                effect=float(effect),
                right_sign=right_rate,
                wrong_sign=float(np.mean(wrong)) if effect else float(np.mean(right | wrong)),
                negligible=float(np.mean(negligible)),
                max_reached=float(np.mean(~settled[at, stop])),
                mean_seeds=float(np.mean(seeds)),
                fixed_n_same_power=_fixed_n(power, effect, min(right_rate, POWER_CAP), 1.0 - confidence)
                if effect
                else None,
                fixed_power_at_max=float(power.power(effect_size=effect, nobs=max_seeds, alpha=1.0 - confidence))
                if effect
                else 1.0 - confidence,
            )
        )
    return rows


def _fixed_n(power: TTestPower, effect: float, target: float, alpha: float, limit: int = 200) -> int | None:
    """The fewest seeds at which a two-sided one-sample t-test has at least ``target`` power."""
    for n in range(2, limit + 1):
        if power.power(effect_size=abs(effect), nobs=n, alpha=alpha) >= target:
            return n
    return None


__all__ = ["POWER_CAP", "SettledRuleRow", "peeking_error_rates", "settled_rule_performance", "study_looks"]
