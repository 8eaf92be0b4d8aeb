"""The words of a predicted row: where it predicts, how far on each axis, from what, and how
each check went (:mod:`harness.scorecard.prediction`). Every sentence that states a prediction
at the papers' setting names both axes it extrapolates (size and training steps) and says when
one is not extrapolated; the context length is never extrapolated and is named too."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from harness.analysis.extrapolation import SurfacePrediction
from harness.analysis.surface import CHECKS
from harness.scorecard.claims import Setting

#: How the surface's terms read in words.
TERMS = {
    "1": "a",
    "u": "b log2 N",
    "v": "c log2 S",
    "uv": "d log2 N log2 S",
    "end": "an offset at a run's last evaluation (where the cosine schedule ends)",
}


def axis_words(res: SurfacePrediction) -> str:
    """How far the prediction reaches on each axis, both named."""
    design = res.design
    largest = f"{design.size_params[-1] / 1e6:.2f}M"
    size = (
        f"{res.size_extrapolation:.1f}x beyond the largest size measured ({largest})"
        if res.size_extrapolation > 1.0
        else f"not extrapolated in size (within the sizes measured, up to {largest})"
    )
    last = int(design.steps[-1])
    steps = (
        f"{res.steps_extrapolation:.1f}x beyond the last evaluation measured (step {last:,})"
        if res.steps_extrapolation > 1.0
        else f"not extrapolated in training steps (evaluations measured up to step {last:,})"
    )
    return f"{size} and {steps}"


def _from_words(res: SurfacePrediction, pool: Sequence[Any]) -> str:
    """From which sizes, evaluations and runs."""
    design = res.design
    sizes = ", ".join(f"{n} ({x / 1e6:.2f}M)" for n, x in zip(design.size_names, design.size_params, strict=True))
    steps = design.steps
    lengths = " and ".join(f"{int(n):,}" for n in design.run_lengths)
    studies = " + ".join(s.name for s in pool)
    return (
        f"from {len(design.size_names)} size{'s' if len(design.size_names) != 1 else ''} [{sizes}] x "
        f"{len(steps)} evaluation step{'s' if len(steps) != 1 else ''} ({int(steps[0]):,} to {int(steps[-1]):,}) "
        f"of runs of {lengths} steps ({studies}; {len(res.effects.y)} seeds matched by number)"
    )


def _checks_words(res: SurfacePrediction) -> str:
    """Each check's interval, and the reported ones (end-of-run offset, phase)."""
    parts = [f"{name} {res.check_words(name)}" for name in CHECKS if name in res.checks]
    if "end of run" in res.checks:
        parts.append(f"end-of-run offset {res.check_words('end of run')}")
    if "phase" in res.checks:
        lengths = [int(n) for n in res.design.run_lengths]
        parts.append(
            f"phase (a {lengths[0]:,}-step run's end minus the same step of a {lengths[-1]:,}-step run, same size and "
            f"seed) {res.check_words('phase')}"
        )
    else:
        parts.append("phase not measured (no run ends at a step a longer run of its size evaluated)")
    return ", ".join(parts)


def where_words(
    res: SurfacePrediction, paper: int, setting: Setting, group: Mapping[str, Any], pool: Sequence[Any]
) -> str:
    """Where the prediction is read, how far on both axes, from what, the model and the checks."""
    context = group.get("context_length")
    contexts = (
        f"T = {context} as measured (the papers' T = {setting.context_length} is not extrapolated)"
        if context is not None and context != setting.context_length
        else f"T = {setting.context_length}"
    )
    terms = " + ".join(TERMS[t] for t in res.plan.terms if t in TERMS)
    return (
        f"at {paper / 1e6:.2f}M parameters and {setting.steps:,} training steps (the papers' size, {setting.size}, "
        f"with this study's vocabulary, and the papers' steps; {contexts}): {axis_words(res)}, "
        f"{_from_words(res, pool)}; the steps axis is the evaluation step, each seed's surface {terms} "
        f"(N parameters, S steps){_slopes(res)}; {_checks_words(res)}"
    )


def _slopes(res: SurfacePrediction) -> str:
    words = slope_words(res)
    return f", whose mean slopes there are {words}" if words else ""


def reach_text(extrapolation: float | None, steps_extrapolation: float | None) -> str:
    """Both axes' distances in a few words: "5.9x in size, 2.5x in steps" ("within" for an
    axis not extrapolated)."""

    def one(x: float | None, axis: str) -> str:
        if x is None:
            return f"{axis} not known"
        return f"{x:.1f}x in {axis}" if x > 1.0 else f"within the {axis} measured"

    return f"{one(extrapolation, 'size')}, {one(steps_extrapolation, 'steps')}"


def predicted_quantity(row: Any) -> str:
    """A predicted row's estimate named with where it is read and how far on both axes (the
    words Holm's adjustment keeps when it withdraws the row's kind)."""
    params = f"{row.params / 1e6:.2f}M parameters" if row.params else "the papers' size"
    steps = f"{row.steps:,} steps" if row.steps else "the papers' steps"
    reach = reach_text(row.extrapolation, row.steps_extrapolation)
    return f"extrapolated estimate (not measured) at {params} and {steps} ({reach})"


def refused_words(res: SurfacePrediction, where: str) -> str:
    """A refused row's verdict: the reason, then where it would have predicted."""
    return f"not predictable: {res.refused}; {where}"


def slope_words(res: SurfacePrediction) -> str:
    """The mean per-seed slopes at the target, per doubling of each axis."""
    parts = []
    if res.slope is not None and np.isfinite(res.slope):
        parts.append(f"{res.slope:+.4f} per doubling of parameters")
    if res.steps_slope is not None and np.isfinite(res.steps_slope):
        parts.append(f"{res.steps_slope:+.4f} per doubling of steps")
    return " and ".join(parts)


__all__ = ["TERMS", "axis_words", "predicted_quantity", "reach_text", "refused_words", "slope_words", "where_words"]
