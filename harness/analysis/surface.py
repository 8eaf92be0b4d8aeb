"""An effect over size x training length: each seed's surface, read at a setting not measured.

A *point* is one evaluation of one run: the run's size, parameter count (the reference
variant's) and length (its ``max_steps``), and the evaluation's step. Its coordinates are
``u = log2(parameters)`` and ``v = log2(step)``: **the steps axis is the evaluation step**, and
every evaluation of every run feeds the fit. Each seed s has one paired effect ``y_s`` per point
(:mod:`harness.analysis.extrapolation` builds them from ``curves.parquet``).

**The schedule's phase.** The learning rate is warmup + cosine over each run's own length, so
the effect at step 2,000 of a 5,000-step run (mid-schedule) is not the effect at the end of a
2,000-step run. The model carries the phase as a covariate: ``end`` is 1 at a run's last
evaluation and 0 elsewhere, and the target (the papers' 5,000 steps) is the end of a run.
Without that term an offset of 0.01 nats at the end of the schedule makes the interval miss
the truth more often; with it the intervals are no wider (docs/calibration.md, "Choosing the
surface"). The model (:data:`MODEL`, chosen there by calibration) is fitted by least squares
per seed:

    y_s(u, v) = a_s + b_s u + c_s v + d_s u v + g_s end + e,        p_s = x*' beta_s,

read at the target x* = (1, u*, v*, u* v*, 1) (centred on the design's means, which changes no
prediction). Each seed's prediction is a fixed linear combination of its own points,
``p_s = h' y_s`` with ``h = X (X'X)^-1 x*``, and the interval is the t-interval over seeds of
the p_s: the seed is the unit, its surface carries its own slopes, and the evaluations within a
run (correlated) are never counted as n. A term the points cannot carry is left out (one size:
no size terms; one step, a study without curves: a line against size; ``end`` only where some
points end a run and others do not).

Every check is such a per-seed linear functional with a t-interval over seeds, so that one
simulated study or ten thousand go through the same arithmetic (:meth:`SurfacePlan.read`, whose
leading axes are a batch). A prediction is refused when any of :data:`CHECKS` excludes 0:

- **size backtest**: the model fitted without the largest size (every step) predicts that size's
  points; the per-seed mean error (measured - predicted) must have an interval covering 0;
- **steps backtest**: the model fitted on the evaluations at steps <= half the last step
  predicts the later ones (every size); the same rule;
- **curvature**: the model plus ``u^2`` (three or more sizes) and ``v^2`` (three or more steps),
  fitted on every point; each square's coefficient must have an interval covering 0.

Reported beside them (:data:`REPORTED`, never a reason to refuse): the ``end`` coefficient (the
end-of-schedule offset the model carries to the target) and the **phase** difference where the
design measures it directly: a run that ends at a step a longer run of the same size also
evaluated (two studies of one recipe, e.g. 2,000 and 5,000 steps), the end of the short run
minus the same step of the long one.

**Reach** (decided from the design alone, :func:`plan_surface`): fewer than :data:`MIN_SIZES`
sizes when the target's size lies outside those measured, fewer than :data:`MIN_STEPS`
evaluation steps when its steps lie beyond them, more than :data:`MAX_EXTRAPOLATION` x beyond
the largest size, more than :data:`MAX_STEPS_EXTRAPOLATION` x beyond the last evaluation, an
axis that is extrapolated but cannot be backtested, or nothing to extrapolate (both inside
what was measured: the cells say it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness.analysis.paired_tests import t_interval

#: Fewest sizes a prediction beyond them is made from (two give a line with no check on its shape).
MIN_SIZES = 3
#: Fewest evaluation steps a prediction beyond them is made from.
MIN_STEPS = 3
#: Farthest a prediction reaches in size: the target's parameter count over the largest measured.
MAX_EXTRAPOLATION = 16.0
#: Farthest a prediction reaches in steps: the target's steps over the last evaluation measured.
MAX_STEPS_EXTRAPOLATION = 4.0
#: The surface's terms (docs/calibration.md, "Choosing the surface", compares the candidates).
MODELS: dict[str, tuple[str, ...]] = {
    "linear": ("1", "u", "v"),
    "linear + interaction": ("1", "u", "v", "uv"),
    "linear + interaction + end of run": ("1", "u", "v", "uv", "end"),
    "quadratic": ("1", "u", "v", "uv", "u2", "v2"),
}
MODEL = "linear + interaction + end of run"
#: The checks that refuse a prediction when their interval excludes 0, in the order a refusal names them.
CHECKS: tuple[str, ...] = ("size backtest", "steps backtest", "size curvature", "steps curvature")
#: What is read and reported beside them, never a reason to refuse: the model's end-of-run offset
#: and, where two run lengths share a size, the end of the short run minus the long run's same step.
REPORTED: tuple[str, ...] = ("end of run", "phase")


# ----------------------------------------------------------------------------- the design
@dataclass(frozen=True)
class SurfaceDesign:
    """The points one prediction reads, in a fixed order (the last axis of every effect array).

    ``u``, ``v``: (points,) log2 parameters and log2 evaluation step; ``size``: (points,) the
    index of the point's size in ``size_names`` / ``size_params`` (ascending parameters);
    ``run``: (points,) the index of its run (one size, one run length, one study) and
    ``run_steps``: (points,) that run's length."""

    u: np.ndarray
    v: np.ndarray
    size: np.ndarray
    run: np.ndarray
    run_steps: np.ndarray
    size_names: tuple[str, ...]
    size_params: np.ndarray

    @property
    def n_points(self) -> int:
        return len(self.u)

    @property
    def steps(self) -> np.ndarray:
        """The distinct evaluation steps, ascending."""
        return np.unique(np.round(np.exp2(self.v)).astype(int))

    @property
    def run_lengths(self) -> np.ndarray:
        return np.unique(self.run_steps)

    @property
    def end(self) -> np.ndarray:
        """(points,) 1.0 where the evaluation is its run's last (the end of its schedule)."""
        return (np.round(np.exp2(self.v)) == self.run_steps).astype(float)


def grid_design(runs: Sequence[tuple[str, float, int]], every: int) -> SurfaceDesign:
    """The design of runs (size name, parameters, run length) evaluated every ``every`` steps
    up to their ends: what a study's spec promises (the calibration simulates it)."""
    sizes = sorted({(p, n) for n, p, _ in runs})
    index = {n: i for i, (_, n) in enumerate(sizes)}
    u, v, size, run, length = [], [], [], [], []
    for r, (name, params, steps) in enumerate(runs):
        for step in range(every, steps + 1, every):
            u.append(math.log2(params))
            v.append(math.log2(step))
            size.append(index[name])
            run.append(r)
            length.append(steps)
    return SurfaceDesign(
        np.array(u),
        np.array(v),
        np.array(size),
        np.array(run),
        np.array(length),
        tuple(n for _, n in sizes),
        np.array([p for p, _ in sizes], dtype=float),
    )


def design_columns(terms: tuple[str, ...], u: np.ndarray, v: np.ndarray, end: np.ndarray | None = None) -> np.ndarray:
    """The design matrix of ``terms`` at (centred) coordinates: (points, terms). ``end``: 1 at
    a run's last evaluation (the ``end`` term: the schedule's phase as an offset; the target is
    the end of a run)."""
    end = np.ones_like(u) if end is None else np.asarray(end, dtype=float)
    values = {"1": np.ones_like(u), "u": u, "v": v, "uv": u * v, "u2": u**2, "v2": v**2, "end": end}
    return np.stack([values[t] for t in terms], axis=-1)


def _fit_weights(x: np.ndarray, mask: np.ndarray, rows: np.ndarray) -> np.ndarray | None:
    """Weights W (len(rows), points) with ``W @ y`` = the least-squares fit on the masked points
    read at ``rows`` (design rows), zero outside the mask; None when the masked fit is not
    identifiable (fewer points or levels than terms)."""
    sub = x[mask]
    if sub.shape[0] < sub.shape[1] or np.linalg.matrix_rank(sub) < sub.shape[1]:
        return None
    weights = np.zeros((rows.shape[0], x.shape[0]))
    weights[:, mask] = rows @ np.linalg.pinv(sub)  # (rows, terms) @ (terms, masked points)
    return weights


def _terms(design: SurfaceDesign, model: str, mask: np.ndarray | None = None) -> tuple[str, ...]:
    """The model's terms the (masked) points can carry: size terms with two or more sizes,
    steps terms with two or more steps (a study without curves: one step, a line against
    size), squares with three or more, the end-of-run offset where some points end a run and
    others do not."""
    mask = np.ones(design.n_points, dtype=bool) if mask is None else mask
    sizes, steps = len(np.unique(design.size[mask])), len(np.unique(np.round(design.v[mask], 9)))
    ends = np.unique(design.end[mask])
    keep = {"1", *(("u",) if sizes >= 2 else ()), *(("v",) if steps >= 2 else ())}
    keep |= {"uv"} if sizes >= 2 and steps >= 2 else set()
    keep |= {"u2"} if sizes >= 3 else set()
    keep |= {"v2"} if steps >= 3 else set()
    keep |= {"end"} if len(ends) == 2 else set()
    return tuple(t for t in MODELS[model] if t in keep)


# ----------------------------------------------------------------------------- the plan
@dataclass(frozen=True)
class SurfacePlan:
    """What a design allows before any effect is seen: the per-seed functionals (weights over
    the points: ``predict``, ``slope_size`` and ``slope_steps`` at the target, and one per
    check that the design can run), the distances, and ``refused`` (the reach rules' reason,
    or None). :meth:`read` applies it to effects."""

    design: SurfaceDesign
    target: tuple[float, float]
    model: str
    terms: tuple[str, ...]
    size_extrapolation: float
    steps_extrapolation: float
    predict: np.ndarray | None
    slope_size: np.ndarray | None
    slope_steps: np.ndarray | None
    checks: Mapping[str, np.ndarray] = field(default_factory=dict)
    refused: str | None = None

    def read(self, y: np.ndarray, confidence: float = 0.95) -> SurfaceRead:
        """The plan applied to effects ``y`` (..., seeds, points): per-seed predictions, their
        t-interval over seeds and each check's interval (leading axes: a batch of studies)."""
        y = np.asarray(y, dtype=float)
        per_seed = y @ self.predict if self.predict is not None else np.full(y.shape[:-1], np.nan)
        ci, pvalue = t_interval(per_seed, confidence=confidence, axis=-1)
        intervals, failed = {}, {}
        for name, weights in self.checks.items():
            check, _ = t_interval(y @ weights, confidence=confidence, axis=-1)  # (...,)
            intervals[name] = (np.asarray(check.low), np.asarray(check.high))
            failed[name] = (np.asarray(check.low) > 0) | (np.asarray(check.high) < 0)
        refused = np.zeros(per_seed.shape[:-1], dtype=bool) | (self.refused is not None)
        for name in CHECKS:
            refused = refused | failed.get(name, False)
        return SurfaceRead(
            per_seed, np.asarray(ci.low), np.asarray(ci.high), np.asarray(pvalue), intervals, failed, refused
        )


@dataclass(frozen=True)
class SurfaceRead:
    """A plan applied to effects, each field with the batch's leading axes: ``per_seed``
    (..., seeds) predictions, ``low``/``high``/``pvalue`` their t-interval and test against 0,
    ``checks`` name -> (low, high) of each check's interval, ``failed`` name -> whether it
    excludes 0, ``refused`` whether the prediction is refused (reach, or any check failed)."""

    per_seed: np.ndarray
    low: np.ndarray
    high: np.ndarray
    pvalue: np.ndarray
    checks: Mapping[str, tuple[np.ndarray, np.ndarray]]
    failed: Mapping[str, np.ndarray]
    refused: np.ndarray


def _distance(target: float, low: float, high: float) -> float:
    """How far ``target`` lies outside [low, high] as a ratio (1.0: inside)."""
    return target / high if target > high else low / target if target < low else 1.0


def _reach(design: SurfaceDesign, size_x: float, steps_x: float) -> str | None:
    """The reach rules of the module docstring, in words (None: within reach)."""
    sizes, steps = len(design.size_names), len(design.steps)
    if size_x == 1.0 and steps_x == 1.0:
        return "nothing to extrapolate: the setting lies within the sizes and steps measured (read its cells)"
    if size_x > 1.0 and sizes < MIN_SIZES:
        return f"{sizes} size{'s' if sizes != 1 else ''} measured; a prediction across sizes needs {MIN_SIZES} or more"
    if steps_x > 1.0 and steps < MIN_STEPS:
        return (
            f"{steps} evaluation step{'s' if steps != 1 else ''} measured; a prediction across training steps "
            f"needs {MIN_STEPS} or more (the study's curves)"
        )
    if size_x > MAX_EXTRAPOLATION:
        return (
            f"the size is {size_x:.1f}x beyond the sizes measured, farther than the {MAX_EXTRAPOLATION:g}x a "
            "prediction may reach"
        )
    if steps_x > MAX_STEPS_EXTRAPOLATION:
        return (
            f"the steps are {steps_x:.1f}x beyond the last evaluation, farther than the "
            f"{MAX_STEPS_EXTRAPOLATION:g}x a prediction may reach"
        )
    return None


@dataclass(frozen=True)
class _Frame:
    """The design's points at centred coordinates, and the model: what every fit reads."""

    design: SurfaceDesign
    model: str
    u: np.ndarray
    v: np.ndarray

    def x(self, terms: tuple[str, ...]) -> np.ndarray:
        return design_columns(terms, self.u, self.v, self.design.end)

    def fit(self, mask: np.ndarray, rows: Any) -> np.ndarray | None:
        """:func:`_fit_weights` of the model's terms that the masked points carry, read at
        ``rows(terms)`` (design rows)."""
        terms = _terms(self.design, self.model, mask)
        return _fit_weights(self.x(terms), mask, rows(terms))


def _backtest_weights(frame: _Frame, held: np.ndarray) -> np.ndarray | None:
    """Per-seed mean error over the ``held`` points of the fit on the others (the model's terms
    they carry): ``mean(y_held) - mean(fit read at the held points)``."""
    if not held.any() or held.all():
        return None
    fit = frame.fit(~held, lambda terms: frame.x(terms)[held])
    if fit is None:
        return None
    weights = -fit.mean(axis=0)
    weights[held] += 1.0 / held.sum()
    return weights


def _phase_weights(design: SurfaceDesign) -> np.ndarray | None:
    """Per seed, the mean over (size, shorter run) pairs of the effect at the end of a run
    minus the effect at that same step of a longer run of the same size (None: no such pair)."""
    steps = np.round(np.exp2(design.v)).astype(int)
    pairs = []
    for i in range(design.n_points):
        if steps[i] != design.run_steps[i]:
            continue  # not the end of its run
        longer = (design.size == design.size[i]) & (design.run_steps > design.run_steps[i]) & (steps == steps[i])
        pairs += [(i, int(j)) for j in np.flatnonzero(longer)]
    if not pairs:
        return None
    weights = np.zeros(design.n_points)
    for end, middle in pairs:
        weights[end] += 1.0 / len(pairs)
        weights[middle] -= 1.0 / len(pairs)
    return weights


def _coefficient(frame: _Frame, term: str, *, quadratic: bool = True) -> np.ndarray | None:
    """Per-seed weights of ``term``'s coefficient in the model (plus the squares, when
    ``quadratic``) fitted on every point (None: the points cannot carry it)."""
    everything = np.ones(frame.design.n_points, dtype=bool)
    extra = _terms(frame.design, "quadratic") if quadratic else ()
    terms = tuple(dict.fromkeys((*_terms(frame.design, frame.model), *extra)))
    if term not in terms:
        return None
    row = np.zeros((1, len(terms)))
    row[0, terms.index(term)] = 1.0
    w = _fit_weights(frame.x(terms), everything, row)
    return None if w is None else w[0]


def _check_weights(frame: _Frame) -> dict[str, np.ndarray]:
    """Each check the design can run (:data:`CHECKS`), as per-seed weights over the points."""
    design = frame.design
    largest = design.size == len(design.size_names) - 1
    late = np.exp2(design.v) > design.steps[-1] / 2.0
    out = {
        "size backtest": _backtest_weights(frame, largest) if len(design.size_names) >= MIN_SIZES else None,
        "steps backtest": _backtest_weights(frame, late) if len(design.steps) >= MIN_STEPS else None,
        "size curvature": _coefficient(frame, "u2"),
        "steps curvature": _coefficient(frame, "v2"),
        "end of run": _coefficient(frame, "end", quadratic=False),
        "phase": _phase_weights(design),
    }
    return {k: w for k, w in out.items() if w is not None}


def _untested(checks: Mapping[str, np.ndarray], size_x: float, steps_x: float) -> str | None:
    """An extrapolated axis whose backtest the design cannot run (None: each is tested)."""
    for axis, distance in (("size", size_x), ("steps", steps_x)):
        if distance > 1.0 and f"{axis} backtest" not in checks:
            return f"no backtest possible on the {axis} axis (too few {axis} to fit without the last ones)"
    return None


def plan_surface(design: SurfaceDesign, params: float, steps: float, model: str = MODEL) -> SurfacePlan:
    """The plan of a prediction at ``params`` parameters and ``steps`` training steps (see the
    module docstring): its functionals, distances and reach refusal."""
    if model not in MODELS:
        raise ValueError(f"model must be one of {sorted(MODELS)}, got {model!r}")
    if not (params > 0 and steps > 0 and math.isfinite(params) and math.isfinite(steps)):
        raise ValueError(f"the target must be a positive parameter count and step count, got {params!r}, {steps!r}")
    size_x = _distance(params, float(design.size_params[0]), float(design.size_params[-1]))
    steps_x = _distance(steps, float(design.steps[0]), float(design.steps[-1]))
    terms = _terms(design, model)
    u0, v0 = float(np.mean(design.u)), float(np.mean(design.v))
    frame = _Frame(design, model, design.u - u0, design.v - v0)  # centred: the same fits, better conditioned
    tu, tv = math.log2(params) - u0, math.log2(steps) - v0
    grad = {"1": (0, 0), "u": (1, 0), "v": (0, 1), "uv": (tv, tu), "u2": (2 * tu, 0), "v2": (0, 2 * tv), "end": (0, 0)}

    def rows(terms: tuple[str, ...]) -> np.ndarray:
        """The target's row (the end of a run) and the two slopes' rows: (3, terms)."""
        derivs = np.array([[grad[t][axis] for t in terms] for axis in (0, 1)], dtype=float)
        return np.vstack([design_columns(terms, np.array([tu]), np.array([tv])), derivs])

    fit = frame.fit(np.ones(design.n_points, dtype=bool), rows)
    checks = _check_weights(frame)
    refused = _reach(design, size_x, steps_x) or _untested(checks, size_x, steps_x)
    if fit is None and refused is None:
        refused = f"the surface ({', '.join(terms)}) cannot be fitted to {design.n_points} points"
    predict, slope_size, slope_steps = (None, None, None) if fit is None else (fit[0], fit[1], fit[2])
    if "u" not in terms:
        slope_size = None
    if "v" not in terms:
        slope_steps = None
    return SurfacePlan(
        design,
        (float(params), float(steps)),
        model,
        terms,
        size_x,
        steps_x,
        predict,
        slope_size,
        slope_steps,
        checks,
        refused,
    )


def refusal_words(plan: SurfacePlan, read: SurfaceRead, words: Mapping[str, str]) -> str | None:
    """Why one study's prediction is refused (None: it is made): the plan's reach reason, else
    every failed check with its words (``words``: check name -> its interval in words)."""
    if plan.refused is not None:
        return plan.refused
    failed = [name for name in CHECKS if name in read.failed and bool(read.failed[name])]
    if not failed:
        return None
    return "; ".join(f"the {name} failed: {words[name]}" for name in failed)


__all__ = [
    "CHECKS",
    "MAX_EXTRAPOLATION",
    "MAX_STEPS_EXTRAPOLATION",
    "MIN_SIZES",
    "MIN_STEPS",
    "MODEL",
    "MODELS",
    "REPORTED",
    "SurfaceDesign",
    "SurfacePlan",
    "SurfaceRead",
    "design_columns",
    "grid_design",
    "plan_surface",
    "refusal_words",
]
