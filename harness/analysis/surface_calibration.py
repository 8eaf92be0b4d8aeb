"""How a prediction over size x steps behaves at a study's own noise: simulated studies of the
study's own design, drawn from the noise measured in it, run through the same plan.

**The noise** (:func:`measure_noise`, from the per-seed effects ``y`` (seeds, points) the plan
reads), in the terms a simulated study is drawn in: each seed's deviation from the mean over
seeds is fitted by its own slopes on ``U - Ubar`` and ``V - Vbar``; what they leave gives the
per-seed sd of the effect at one evaluation, per size (the root mean over that size's points of
the variance over seeds) and the correlation ``rho`` between consecutive evaluations of one run
(pooled over runs and seeds); the slopes give their sd over seeds net of what the noise alone
gives them (``var(b_s) - w' Sigma w``, floored at 0, with ``w`` the slope's weights and
``Sigma`` the noise covariance below).

**A simulated study** (:func:`simulate_effects`): seed s's effect at point (U, V) (log2
parameters, log2 step) is ``f(U, V) + beta_s (U - Ubar) + gamma_s (V - Vbar) + e``, with
``beta_s ~ N(0, slope_sd)``, ``gamma_s ~ N(0, steps_slope_sd)`` and ``e`` normal with the size's
sd, AR(1) with ``rho`` along the evaluations of each run and independent between runs.

**The truths** f (:data:`TRUTHS`), each anchored on ``m``, the mean over seeds of the study's
own fitted surface, with ``s`` the sign of m at the target (so a departure bends towards 0,
the direction that can reverse a sign):

- ``log-linear``: ``m`` itself (the model is right: coverage should be 95 %);
- ``curved``: ``m - s kappa (U - Ubar)^2``, ``kappa`` = :data:`CURVATURE` per doubling²
  (issue 38's scenario);
- ``saturating``: the effect rises over steps and levels off: ``m(U, V_last) + s G (2^-(V_last -
  V_0) - 2^-(V - V_0))``, ``G`` = :data:`SATURATION` nats (the rise of EGA's gain over 5,000
  steps at ``nano`` in long-cpu, from step 250 to its plateau), halving with each doubling of
  steps from the first evaluation ``V_0``;
- ``emergent``: absent below the middle size and growing beyond it: ``m + s E max(0, U - U_mid)``,
  ``E`` = :data:`EMERGENCE` per doubling.

:func:`rates` gives, per truth, the share of simulated studies refused, and among all: shown and
covering the truth at the target, shown and missing it, shown with the interval on the wrong
side of 0 (``wrong sign``); ``coverage`` is among those shown.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.analysis.surface import SurfaceDesign, SurfacePlan, design_columns

#: Curvature of the ``curved`` truth, nats per doubling of parameters squared.
CURVATURE = 0.005
#: Rise of the ``saturating`` truth over steps, nats (halving with each doubling of steps).
SATURATION = 0.03
#: Growth of the ``emergent`` truth per doubling of parameters beyond the middle size, nats.
EMERGENCE = 0.02
#: Offset of the ``phase`` truth at a run's end, nats (the model choice's table only).
PHASE = 0.01
#: The truths' names, in the order the tables show them.
TRUTHS: tuple[str, ...] = ("log-linear", "curved", "saturating", "emergent")
RATE_NAMES: tuple[str, ...] = ("refused", "covered", "missed", "wrong sign", "coverage")


@dataclass(frozen=True)
class SurfaceNoise:
    """The noise a study shows (see the module docstring): ``sd`` (sizes,) per-seed sd per size,
    ``rho`` step-to-step correlation, ``slope_sd`` and ``steps_slope_sd`` per doubling."""

    sd: np.ndarray
    rho: float
    slope_sd: float
    steps_slope_sd: float

    def to_json(self) -> dict[str, Any]:
        return {
            "sd": [float(x) for x in self.sd],
            "rho": self.rho,
            "slope_sd": self.slope_sd,
            "steps_slope_sd": self.steps_slope_sd,
        }


def _run_order(design: SurfaceDesign) -> list[np.ndarray]:
    """Each run's point indices in step order."""
    return [np.flatnonzero(design.run == r)[np.argsort(design.v[design.run == r])] for r in np.unique(design.run)]


def noise_covariance(design: SurfaceDesign, sd: np.ndarray, rho: float) -> np.ndarray:
    """The noise covariance (points, points): AR(1) with ``rho`` along each run's evaluations
    (lag = evaluations apart), the size's sd, independent between runs."""
    cov = np.zeros((design.n_points, design.n_points))
    for idx in _run_order(design):
        lag = np.abs(np.arange(len(idx))[:, None] - np.arange(len(idx))[None, :])
        scale = sd[design.size[idx]]
        cov[np.ix_(idx, idx)] = rho**lag * np.outer(scale, scale)
    return cov


def _net_sd(values: np.ndarray, weights: np.ndarray, cov: np.ndarray) -> float:
    """The sd over seeds of a per-seed functional, net of what the noise gives it."""
    if len(values) < 2:
        return 0.0
    return float(np.sqrt(max(0.0, float(np.var(values, ddof=1)) - float(weights @ cov @ weights))))


def measure_noise(plan: SurfacePlan, y: np.ndarray) -> SurfaceNoise:
    """The noise of the per-seed effects ``y`` (seeds, points) of ``plan``'s design, in the terms
    :func:`simulate_effects` draws from: each seed's deviation from the mean over seeds is its own
    slopes on ``U - Ubar`` and ``V - Vbar`` (least squares) plus the noise; the noise's sd per
    size and lag-1 correlation are read from what the slopes leave, the slopes' sd over seeds net
    of the noise's share."""
    design = plan.design
    y = np.asarray(y, dtype=float)
    dev = y - y.mean(axis=0)  # (seeds, points): each seed's deviation from the mean
    z = np.column_stack([design.u - design.u.mean(), design.v - design.v.mean()])  # (points, 2)
    keep = [k for k in range(2) if np.ptp(z[:, k]) > 0]  # an axis with one level has no slope
    weights = np.linalg.pinv(z[:, keep]) if keep else np.zeros((0, design.n_points))  # (axes, points)
    slopes = dev @ weights.T  # (seeds, axes)
    noise = dev - slopes @ z[:, keep].T if keep else dev
    scale = design.n_points / max(design.n_points - len(keep), 1)  # the slopes' fit took that many per seed
    var = scale * (noise**2).sum(axis=0) / max(len(y) - 1, 1)  # (points,)
    sd = np.array([np.sqrt(var[design.size == i].mean()) for i in range(len(design.size_names))])
    num = den_a = den_b = 0.0
    for idx in _run_order(design):
        a, b = noise[:, idx[:-1]], noise[:, idx[1:]]
        num, den_a, den_b = num + float((a * b).sum()), den_a + float((a**2).sum()), den_b + float((b**2).sum())
    rho = float(np.clip(num / np.sqrt(den_a * den_b), 0.0, 0.95)) if den_a > 0 and den_b > 0 else 0.0
    cov = noise_covariance(design, sd, rho)
    net = {axis: _net_sd(slopes[:, k], weights[k], cov) for k, axis in enumerate(keep)}
    return SurfaceNoise(sd, rho, net.get(0, 0.0), net.get(1, 0.0))


# ----------------------------------------------------------------------------- truths
def _mean_surface(plan: SurfacePlan, y: np.ndarray) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """m(U, V): the mean over seeds of the study's fitted surface, as a function (away from a
    run's end: a fitted end-of-run offset, where the model has one, is not part of m)."""
    design = plan.design
    u0, v0 = float(np.mean(design.u)), float(np.mean(design.v))
    x = design_columns(plan.terms, design.u - u0, design.v - v0, design.end)
    coef = np.linalg.pinv(x) @ np.asarray(y, dtype=float).mean(axis=0)  # (terms,)

    def m(uu: np.ndarray, vv: np.ndarray) -> np.ndarray:
        uu, vv = np.asarray(uu, dtype=float), np.asarray(vv, dtype=float)
        return design_columns(plan.terms, uu - u0, vv - v0, np.zeros_like(uu)) @ coef

    return m


def truth_values(name: str, plan: SurfacePlan, y: np.ndarray) -> tuple[np.ndarray, float]:
    """The truth ``name`` (:data:`TRUTHS`, or ``phase``: ``m`` plus ``s`` :data:`PHASE` at every
    run's end and at the target, which ends a run) for ``plan``'s design, anchored on the
    study's effects ``y``: (its mean effect at each point, at the target)."""
    design = plan.design
    m = _mean_surface(plan, y)
    tu, tv = np.array([np.log2(plan.target[0])]), np.array([np.log2(plan.target[1])])
    s = 1.0 if float(m(tu, tv)[0]) >= 0 else -1.0
    ubar = float(np.mean(np.log2(design.size_params)))
    v_first, v_last = float(design.v.min()), float(design.v.max())
    u_mid = float(np.log2(design.size_params[(len(design.size_params) - 1) // 2]))

    def shape(uu: np.ndarray, vv: np.ndarray) -> np.ndarray:
        if name in ("log-linear", "phase"):
            return m(uu, vv)
        if name == "curved":
            return m(uu, vv) - s * CURVATURE * (uu - ubar) ** 2
        if name == "saturating":
            rise = np.exp2(-(v_last - v_first)) - np.exp2(-(vv - v_first))
            return m(uu, np.full_like(vv, v_last)) + s * SATURATION * rise
        if name == "emergent":
            return m(uu, vv) + s * EMERGENCE * np.maximum(0.0, uu - u_mid)
        raise ValueError(f"truth must be one of {(*TRUTHS, 'phase')}, got {name!r}")

    points, target = shape(design.u, design.v), float(shape(tu, tv)[0])
    if name == "phase":
        points, target = points + s * PHASE * design.end, target + s * PHASE
    return points, target


# ----------------------------------------------------------------------------- simulation
def simulate_effects(
    design: SurfaceDesign,
    truth: np.ndarray,
    noise: SurfaceNoise,
    *,
    seeds: int,
    reps: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """Simulated per-seed effects (reps, seeds, points) around ``truth`` (points,) at ``noise``
    (see the module docstring)."""
    cov = noise_covariance(design, np.asarray(noise.sd, dtype=float), noise.rho)
    chol = np.linalg.cholesky(cov + 1e-18 * np.eye(design.n_points))
    e = rng.standard_normal((reps, seeds, design.n_points)) @ chol.T  # (reps, seeds, points)
    beta = rng.normal(0.0, noise.slope_sd, (reps, seeds, 1))
    gamma = rng.normal(0.0, noise.steps_slope_sd, (reps, seeds, 1))
    return truth + beta * (design.u - design.u.mean()) + gamma * (design.v - design.v.mean()) + e


def simulated_rates(plan: SurfacePlan, y: np.ndarray, truth: float, confidence: float) -> dict[str, float]:
    """The rates of :data:`RATE_NAMES` over a batch of simulated studies ``y``."""
    read = plan.read(y, confidence)
    shown = ~read.refused
    covers = (read.low <= truth) & (truth <= read.high)
    wrong = (read.high < 0) if truth > 0 else (read.low > 0) if truth < 0 else np.zeros_like(shown)
    return {
        "refused": float(np.mean(~shown)),
        "covered": float(np.mean(shown & covers)),
        "missed": float(np.mean(shown & ~covers)),
        "wrong sign": float(np.mean(shown & wrong)),
        "coverage": float(np.mean(covers[shown])) if shown.any() else float("nan"),
    }


@dataclass(frozen=True)
class SurfaceCalibration:
    """The rates (:data:`RATE_NAMES`) of ``plan``'s rules per truth, from ``reps`` simulated
    studies of ``seeds`` seeds each at ``noise``; ``truth_at_target`` per truth."""

    rates: Mapping[str, Mapping[str, float]]
    truth_at_target: Mapping[str, float]
    noise: SurfaceNoise
    seeds: int
    reps: int

    def to_json(self) -> dict[str, Any]:
        return {
            "rates": {k: dict(v) for k, v in self.rates.items()},
            "truth_at_target": dict(self.truth_at_target),
            "noise": self.noise.to_json(),
            "seeds": self.seeds,
            "reps": self.reps,
        }


def calibrate(
    plan: SurfacePlan,
    y: np.ndarray,
    *,
    noise: SurfaceNoise | None = None,
    truths: tuple[str, ...] = TRUTHS,
    reps: int = 2000,
    confidence: float = 0.95,
    rng: Any = 0,
) -> SurfaceCalibration:
    """``plan``'s rates under each truth (anchored on the study's effects ``y`` (seeds,
    points)) at ``noise`` (default: measured in ``y``), ``reps`` studies of as many seeds as
    ``y`` has. Vectorised: one batch per truth."""
    gen = np.random.default_rng(rng)
    y = np.asarray(y, dtype=float)
    noise = noise or measure_noise(plan, y)
    design = plan.design
    rates, at = {}, {}
    for name in truths:
        points, at[name] = truth_values(name, plan, y)
        sims = simulate_effects(design, points, noise, seeds=len(y), reps=reps, rng=gen)
        rates[name] = simulated_rates(plan, sims, at[name], confidence)
    return SurfaceCalibration(rates, at, noise, len(y), reps)


def calibration_words(cal: SurfaceCalibration) -> str:
    """The rates in one sentence, as a card prints them beside a predicted row."""
    lin = cal.rates["log-linear"]
    parts = [
        f"log-linear truth: covered {lin['coverage']:.0%} of those shown, refused {lin['refused']:.0%}",
        *(
            f"{name}: refused {r['refused']:.0%}, missed {r['missed']:.0%}, wrong sign {r['wrong sign']:.0%}"
            for name, r in cal.rates.items()
            if name != "log-linear"
        ),
    ]
    sd = "/".join(f"{x:.3f}" for x in cal.noise.sd)
    return (
        f"simulated at this study's noise (per-seed sd {sd} by size, step-to-step correlation "
        f"{cal.noise.rho:.2f}, slope sd {cal.noise.slope_sd:.4f} per doubling of size; {cal.reps:,} studies of "
        f"{cal.seeds} seeds): " + "; ".join(parts)
    )


__all__ = [
    "CURVATURE",
    "EMERGENCE",
    "PHASE",
    "RATE_NAMES",
    "SATURATION",
    "TRUTHS",
    "SurfaceCalibration",
    "SurfaceNoise",
    "calibrate",
    "calibration_words",
    "measure_noise",
    "noise_covariance",
    "simulate_effects",
    "simulated_rates",
    "truth_values",
]
