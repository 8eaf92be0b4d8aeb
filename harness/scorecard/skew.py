"""The skew a card guards against: the most its own seeds allow, never less than the published floor.

A card's signed verdicts rest on skew-robust intervals (:mod:`harness.scorecard.calibration`),
which hold their level for per-seed values as skewed as a lognormal of shape sigma. The card
reads sigma off its own seeds: every paired contrast it can form (each variant against the
``baseline`` of its cell, per seed, at tau's reference initial value; a contrast two studies hold
bit for bit counted once), pooled with the published studies' contrasts that the floor was
measured on (shipped in ``calibration.json``: a card of a few contrasts cannot bound the skew on
its own, and these are seeds of the same harness), into one upper bound
(:func:`harness.analysis.skew.skew_sigma_bound`); it guards at that bound or at the floor
(:func:`~harness.scorecard.calibration.skew_floor`), whichever is larger. A card whose own seeds
are skewed raises the bound, and its own maximum-likelihood shape is a floor of its own (pooled,
a few skewed contrasts would be diluted by the published normal ones); it never falls below the
published floor.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from harness.analysis.results import CELL_COLUMNS, at_reference_tau_init
from harness.analysis.skew import SkewBound, configurations, skew_sigma_bound
from harness.scorecard.calibration import shipped_configurations, skew_floor, skew_sigma_used

#: The variant every contrast of the pooled seeds is taken against.
CONTROL = "baseline"


@dataclass(frozen=True)
class CardSkew:
    """The skew a card guards against: ``sigma`` = max(``bound``'s upper bound, ``floor``), read
    at the simulated shape ``used`` (the smallest stored at or above ``sigma``)."""

    sigma: float
    floor: float
    bound: SkewBound | None
    used: float | None

    @property
    def words(self) -> str:
        own = (
            f"this card's seeds, pooled with the published ones, allow {self.bound.words}"
            if self.bound
            else "no seeds to estimate it from"
        )
        read = f", read at the simulated {self.used:g}" if self.used is not None and self.used != self.sigma else ""
        return (
            f"skew-robust intervals hold for per-seed values as skewed as a lognormal of shape {self.sigma:.2f}{read}: "
            f"{own}; the floor measured from the published studies is {self.floor:.2f}"
        )


def seed_contrasts(frames: Sequence[pl.DataFrame], metric: str = "val_loss") -> list[np.ndarray]:
    """Each variant's per-seed paired difference from :data:`CONTROL` in every cell of ``frames``
    (finished runs, tau's reference initial value), a difference two frames hold bit for bit once."""
    out: dict[bytes, np.ndarray] = {}
    for frame in frames:
        df, _ = at_reference_tau_init(frame)
        if "status" in df.columns:
            df = df.filter(pl.col("status") == "finished")
        if not {"variant", "seed", metric} <= set(df.columns):
            continue
        cells = [c for c in (*CELL_COLUMNS, "steps") if c in df.columns]
        for _, part in df.partition_by(cells, as_dict=True, maintain_order=True).items() if cells else [((), df)]:
            wide = part.pivot(on="variant", index="seed", values=metric, aggregate_function="mean")
            if CONTROL not in wide.columns:
                continue
            for variant in (c for c in wide.columns if c not in ("seed", CONTROL)):
                diff = (wide.get_column(CONTROL) - wide.get_column(variant)).drop_nulls().drop_nans().to_numpy()
                out.setdefault(diff.astype(float).tobytes(), diff.astype(float))
    return list(out.values())


def _pooled(own: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The card's contrasts standardised, with the shipped published ones it does not hold already."""
    pooled = {np.round(u, 9).tobytes(): u for u in configurations(own)}
    for u in shipped_configurations():
        pooled.setdefault(np.round(u, 9).tobytes(), u)
    return list(pooled.values())


def card_skew(frames: Sequence[pl.DataFrame]) -> CardSkew:
    """The skew a card of ``frames`` guards against (see the module docstring)."""
    own = seed_contrasts(frames)
    bound = skew_sigma_bound(_pooled(own))
    alone = skew_sigma_bound(own)  # the card's own best fit: published seeds never dilute a skewed card's
    floor = skew_floor()
    sigma = max([floor] + [b for b in (bound and bound.sigma_upper, alone and alone.sigma_estimate) if b])
    return CardSkew(sigma, floor, bound, skew_sigma_used(sigma))


__all__ = ["CONTROL", "CardSkew", "card_skew", "seed_contrasts"]
