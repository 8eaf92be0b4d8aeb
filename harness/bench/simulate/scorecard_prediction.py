"""Does a predicted row mean what it says? Simulated ladders of known truth through the
prediction's own rules, for ``benchmarks/calibration.py`` and the tests only (the scorecard's
per-card calibration is :mod:`harness.analysis.surface_calibration`; this module adds the
published scenario, the choice of the surface and the simulated tables).

- **The published scenario**: the design of ``studies/ladder-cpu.yaml`` (three sizes, 2,000 steps,
  an evaluation every 250 steps; :func:`ladder_design`) and the same with the runs of
  ``long-cpu`` and ``ladder-long-cpu`` (``nano`` and L4 H4 d128 for 5,000 steps: ``pooled``), at
  the noise measured in the published ladder (:func:`published_noise`: the mean over the 2x2's
  four effects of what :func:`~harness.analysis.surface_calibration.measure_noise` reads), 4
  seeds, predicted at the papers' 4.76 M parameters and 5,000 steps. The truths are anchored on
  a log-linear surface (:data:`ANCHOR`): +0.012 at ``nano`` and step 2,000 (EGA's gain at the end
  of the published ladder), +0.005 per doubling of parameters, +0.016 per doubling of steps (EGA's
  gain at ``nano`` grew from +0.0116 to +0.0328 from 2,000 to 5,000 steps).
- :func:`model_table`: per design, candidate surface (:data:`~harness.analysis.surface.MODELS`)
  and truth, the rates of :func:`~harness.analysis.surface_calibration.calibrate` and the
  median half-width of the intervals shown: what the surface was chosen by.
- :func:`simulated_study`: a simulated study's results and curves tables (baseline and ``ega``,
  their paired gain the truth plus the noise), so that a card's own path (the tables, the
  surface, the row) can be run on it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from harness.analysis.extrapolation import effect_surface
from harness.analysis.surface import MODELS, SurfaceDesign, grid_design, plan_surface
from harness.analysis.surface_calibration import (
    TRUTHS,
    SurfaceNoise,
    measure_noise,
    simulate_effects,
    simulated_rates,
    truth_values,
)
from harness.results_schema import SHAPE_COLUMNS

CONFIDENCE = 0.95
#: The anchor of the published scenario: (effect at nano and step 2,000, per doubling of
#: parameters, per doubling of steps).
ANCHOR: tuple[float, float, float] = (0.012, 0.005, 0.016)
#: The 2x2's four effects whose noise the published scenario averages.
EFFECTS: tuple[dict[str, str], ...] = (
    {"treatment": "ega"},
    {"treatment": "mope"},
    {"treatment": "ega-mope"},
    {},
)
MODEL_TRUTHS: tuple[str, ...] = (*TRUTHS, "phase")


#: The vocabulary of the ladder's corpus (TinyShakespeare's 65 characters).
LADDER_VOCAB = 65


def ladder_shapes() -> dict[str, Any]:
    """The sizes of ``studies/ladder-cpu.yaml``, by name: ``nano`` and two custom shapes."""
    from harness.models.sizes import SIZES, custom_size

    return {"nano": SIZES["nano"], "L3H4d96": custom_size(3, 4, 96), "L4H4d128": custom_size(4, 4, 128)}


def ladder_parameters(shapes: Mapping[str, Any] | None = None) -> tuple[dict[str, float], float]:
    """The baseline's parameter counts at ``shapes`` (by name; default :func:`ladder_shapes`, the
    sizes of ``studies/ladder-cpu.yaml``) at T = 128 and at the papers' size (T = 256),
    TinyShakespeare's vocabulary (65), as ``harness zoo`` counts them."""
    import torch

    from harness.models.transformer import build_model

    with torch.device("meta"):
        sizes = {
            n: float(build_model("baseline", size=s, vocab_size=LADDER_VOCAB, block_size=128).num_parameters())
            for n, s in (shapes or ladder_shapes()).items()
        }
        paper = float(build_model("baseline", size="paper", vocab_size=LADDER_VOCAB, block_size=256).num_parameters())
    return sizes, paper


def ladder_design(*, pooled: bool = False, every: int = 250) -> SurfaceDesign:
    """The published ladder's design (``pooled``: with 5,000-step runs at nano and L4H4d128)."""
    sizes, _ = ladder_parameters()
    runs = [(n, p, 2000) for n, p in sizes.items()]
    if pooled:
        runs += [("nano", sizes["nano"], 5000), ("L4H4d128", sizes["L4H4d128"], 5000)]
    return grid_design(runs, every)


def anchor_effects(design: SurfaceDesign) -> np.ndarray:
    """:data:`ANCHOR`'s surface at the design's points, as a (1, points) array of effects."""
    a, b, c = ANCHOR
    return (a + b * (design.u - design.u.min()) + c * (design.v - np.log2(2000)))[None, :]


def published_noise(curves: Path, *, papers_params: float | None = None) -> tuple[SurfaceNoise, dict[str, Any]]:
    """The noise of the published ladder (``curves``: its ``curves.parquet``): the mean over the
    2x2's four effects of each measured quantity, and each effect's own (a table's rows)."""
    table = pl.read_parquet(curves)
    at = papers_params or ladder_parameters()[1]
    each = {}
    for keys in EFFECTS:
        res = effect_surface([(Path(curves).parent.name, table)], params=at, steps=5000.0, **keys)
        each[res.effect] = measure_noise(res.plan, res.effects.y)
    noise = SurfaceNoise(
        np.mean([n.sd for n in each.values()], axis=0),
        float(np.mean([n.rho for n in each.values()])),
        float(np.mean([n.slope_sd for n in each.values()])),
        float(np.mean([n.steps_slope_sd for n in each.values()])),
    )
    return noise, {k: v.to_json() for k, v in each.items()}


def model_table(
    designs: dict[str, SurfaceDesign],
    noise: SurfaceNoise,
    *,
    models: Sequence[str] = tuple(MODELS),
    truths: Sequence[str] = MODEL_TRUTHS,
    seeds: int = 4,
    reps: int = 4000,
    rng: Any = 0,
) -> list[dict[str, Any]]:
    """Per design, model and truth: the rates and the median half-width of the intervals shown,
    at ``noise`` (the same simulated studies for every model of one design and truth)."""
    gen = np.random.default_rng(rng)
    _, at = ladder_parameters()
    out = []
    for name, design in designs.items():
        anchor = anchor_effects(design)
        for truth in truths:
            reference = plan_surface(design, at, 5000.0, "linear + interaction")
            points, target = truth_values(truth, reference, anchor)
            y = simulate_effects(design, points, noise, seeds=seeds, reps=reps, rng=gen)
            for model in models:
                plan = plan_surface(design, at, 5000.0, model)
                read = plan.read(y, CONFIDENCE)
                shown = ~read.refused
                width = float(np.median((read.high - read.low)[shown]) / 2) if shown.any() else float("nan")
                rates = simulated_rates(plan, y, target, CONFIDENCE)
                out.append(
                    {"design": name, "model": model, "truth": truth, "at_target": target, **rates, "half_width": width}
                )
    return out


def simulated_study(
    design: SurfaceDesign,
    effects: np.ndarray,
    *,
    name: str = "sim",
    recipe: dict | None = None,
    rng: Any = 0,
    shapes: Mapping[str, Any] | None = None,
):
    """A study whose ``ega`` lowers the baseline's loss by ``effects`` (seeds, points) at the
    design's points: its results (each run's last evaluation, with its shape: ``shapes`` by size
    name, default :func:`ladder_shapes`, and the vocabulary 65) and curves tables, as the
    scorecard reads them (:class:`~harness.scorecard.cells.StudyResults`)."""
    from harness.analysis.results_types import AnalysisSettings
    from harness.results_schema import shape_columns
    from harness.scorecard.cells import StudyResults

    shapes = shapes or ladder_shapes()
    gen = np.random.default_rng(rng)
    steps = np.round(np.exp2(design.v)).astype(int)
    rows = []
    for seed, gains in enumerate(np.asarray(effects, dtype=float)):
        shared = gen.normal(0.0, 0.05, design.n_points)  # the seed's own loss level: paired away
        for i in range(design.n_points):
            size = design.size_names[design.size[i]]
            base = 2.5 - 0.1 * np.log2(steps[i]) + shared[i]
            for variant, loss in (("baseline", base), ("ega", base - gains[i])):
                rows.append(
                    {
                        "study": name,
                        "trial_id": f"{variant}_s{seed}_{size}_{design.run_steps[i]}",
                        "dataset": "tinyshakespeare",
                        "size": size,
                        "params": int(design.size_params[design.size[i]]),
                        **shape_columns(shapes[size], LADDER_VOCAB),
                        "context_length": 128,
                        "variant": variant,
                        "seed": seed,
                        "step": int(steps[i]),
                        "val_loss": float(loss),
                        "status": "finished",
                        "run_steps": int(design.run_steps[i]),
                    }
                )
    table = pl.DataFrame(rows)
    ends = table.filter(pl.col("step") == pl.col("run_steps")).rename({"step": "steps"})
    curves = table.drop("run_steps", *SHAPE_COLUMNS)  # as curves.parquet: the shape is the results table's
    return StudyResults(
        name, ends.drop("run_steps"), AnalysisSettings(), source="simulated", curves=curves, recipe=recipe
    )


def _table_path(design: SurfaceDesign, y: np.ndarray, target: float, at: float) -> dict[str, float]:
    """The same simulated studies through a card's own path: each written as tables
    (:func:`simulated_study`) and read by :func:`~harness.analysis.extrapolation.effect_surface`."""
    refused = covered = 0
    for k, effects in enumerate(y):
        study = simulated_study(design, effects, rng=k)
        res = effect_surface([(study.name, study.curves)], params=at, steps=5000.0, treatment="ega")
        ci = res.confidence_interval
        refused += res.refused is not None
        covered += ci is not None and ci.low <= target <= ci.high
    return {"refused": refused / len(y), "covered": covered / len(y), "missed": 1.0 - (refused + covered) / len(y)}


def done_when(noise: SurfaceNoise, *, cards: int = 200, seeds: int = 4, rng: Any = 0, tables: bool = True) -> dict:
    """Issue 38's test: the published ladder (:func:`ladder_design`) at ``noise``, predicted at
    the papers' size and steps, under a log-linear truth (its interval should cover: coverage
    near 95 %) and a saturating one (refused or covered in at least 90 % of ``cards`` cards);
    the rates by the vectorised rules and, with ``tables``, by the card's own path."""
    gen = np.random.default_rng(rng)
    design = ladder_design()
    _, at = ladder_parameters()
    plan = plan_surface(design, at, 5000.0)
    out: dict[str, Any] = {"cards": cards, "seeds": seeds, "noise": noise.to_json()}
    for truth in ("log-linear", "saturating"):
        points, target = truth_values(truth, plan, anchor_effects(design))
        y = simulate_effects(design, points, noise, seeds=seeds, reps=cards, rng=gen)
        row = {"at_target": target, **simulated_rates(plan, y, target, CONFIDENCE)}
        row["refused or covered"] = row["refused"] + row["covered"]
        if tables:
            row["tables"] = _table_path(design, y, target, at)
        out[truth] = row
    return out


def markdown_models(rows: Sequence[dict[str, Any]]) -> str:
    """The calibration page's table of the candidate surfaces."""
    head = [
        "design",
        "surface",
        "truth",
        "refused",
        "shown, covering",
        "shown, missing",
        "wrong sign",
        "coverage",
        "half-width",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cov = "–" if r["coverage"] != r["coverage"] else f"{r['coverage']:.3f}"
        width = "–" if r["half_width"] != r["half_width"] else f"±{r['half_width']:.3f}"
        cells = [
            r["design"],
            r["model"],
            r["truth"],
            f"{r['refused']:.3f}",
            f"{r['covered']:.3f}",
            f"{r['missed']:.3f}",
        ]
        lines.append("| " + " | ".join([*cells, f"{r['wrong sign']:.3f}", cov, width]) + " |")
    return "\n".join(lines)


__all__ = [
    "ANCHOR",
    "EFFECTS",
    "LADDER_VOCAB",
    "MODEL_TRUTHS",
    "anchor_effects",
    "done_when",
    "ladder_design",
    "ladder_parameters",
    "ladder_shapes",
    "markdown_models",
    "model_table",
    "published_noise",
    "simulated_study",
]
