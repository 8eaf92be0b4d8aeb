"""Simulated studies with known truths for the scorecard tests (imported by them, not a conftest)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import polars as pl

from harness.analysis import AnalysisSettings
from harness.models.sizes import SIZES
from harness.results_schema import SHAPE_COLUMNS
from harness.scorecard import StudyResults

FACTORIAL = ("baseline", "ega", "mope", "ega-mope")
#: TinyShakespeare's vocabulary: what the simulated runs' models are built with.
VOCAB = 65


def shape_of(size: str, shapes: Mapping[str, tuple[int, int, int]] | None = None) -> dict[str, int]:
    """The shape columns a run of ``size`` records (its layers, heads and width: ``shapes``, the
    ladder's custom shapes or a preset's) with the vocabulary 65; none for a size of no known shape."""
    known = {**{n: (s.n_layer, s.n_head, s.d_model) for n, s in SIZES.items()}, **LADDER, **(shapes or {})}
    return dict(zip(SHAPE_COLUMNS, (*known[size], VOCAB), strict=True)) if size in known else {}


def simulated_study(
    gains: Mapping[str, float],
    *,
    seeds: int = 10,
    sd: float = 0.005,
    sizes: Mapping[str, int] = {"paper": 4_755_712},  # noqa: B006 - read only
    contexts: tuple[int, ...] = (256,),
    slope: Mapping[str, float] | None = None,
    rng: int = 0,
    smallest_effect: float = 0.02,
    extra: Mapping[str, object] | None = None,
    params: Mapping[str, int] | None = None,
) -> StudyResults:
    """A finished study whose variant v lowers the loss by ``gains[v]`` (the baseline's
    gain is 0), with per-seed noise ``sd`` on each contrast; ``slope[v]`` adds that much
    gain per doubling of the parameter count (from the first size); ``params[v]`` adds that
    many parameters to variant v's count."""
    gen = np.random.default_rng(rng)
    rows = []
    first = min(sizes.values())
    for size, n_params in sizes.items():
        for context in contexts:
            for seed in range(seeds):
                shared = gen.normal(0.0, 0.05)  # the seed's own level: paired away
                for variant, gain in {"baseline": 0.0, **gains}.items():
                    g = gain + (slope or {}).get(variant, 0.0) * np.log2(n_params / first)
                    noise = 0.0 if variant == "baseline" else gen.normal(0.0, sd)
                    rows.append(
                        {
                            "study": "sim",
                            "dataset": "tinyshakespeare",
                            "size": size,
                            "params": n_params + (params or {}).get(variant, 0),
                            **shape_of(size),
                            "context_length": context,
                            "variant": variant,
                            "seed": seed,
                            "val_loss": 1.5 + shared - g + noise,
                            "steps": 5000,
                            "status": "finished",
                            **(extra or {}),
                        }
                    )
    frame = pl.DataFrame(rows)
    return StudyResults("sim", frame, AnalysisSettings(smallest_effect=smallest_effect), source="simulated")


def row_of(table: pl.DataFrame, claim: str, kind: str = "cell", reading: str | None = None) -> dict:
    rows = table.filter((pl.col("claim") == claim) & (pl.col("kind") == kind))
    if reading is not None:
        rows = rows.filter(pl.col("reading") == reading)
    assert rows.height >= 1, f"no {kind} row for {claim}"
    return rows.row(0, named=True)


def with_columns(study: StudyResults, **columns: object) -> StudyResults:
    """The study with its table's columns replaced or added (polars expressions or values)."""
    frame = study.frame.with_columns(**{k: v if isinstance(v, pl.Expr) else pl.lit(v) for k, v in columns.items()})
    return StudyResults(study.name, frame, study.settings, source=study.source)


#: The sizes of studies/ladder-cpu.yaml (8x in parameters), by name: (layers, heads, width).
LADDER: dict[str, tuple[int, int, int]] = {"nano": (2, 2, 64), "L3H4d96": (3, 4, 96), "L4H4d128": (4, 4, 128)}


def zoo_params(
    variants: tuple[str, ...], sizes: Mapping[str, tuple[int, int, int]], *, context: int = 128, vocab: int = VOCAB
) -> dict:
    """(variant, size) -> the zoo's parameter count at the vocabulary ``vocab`` (default
    TinyShakespeare's 65), built on the meta device as `harness zoo` builds it."""
    import torch

    from harness.models.sizes import SIZES, custom_size
    from harness.models.transformer import build_model

    out = {}
    with torch.device("meta"):
        for name, (layers, heads, width) in sizes.items():
            shape = SIZES[name] if name in SIZES else custom_size(layers, heads, width)
            for variant in variants:
                out[variant, name] = build_model(
                    variant, size=shape, vocab_size=vocab, block_size=context
                ).num_parameters()
    return out


def ladder_study(
    gain_at: Mapping[str, tuple[float, float]],
    *,
    seeds: int = 8,
    sd: float = 0.004,
    slope_sd: float = 0.002,
    curvature: float = 0.0,
    steps: tuple[int, ...] = (250, 500, 750, 1000),
    sizes: Mapping[str, tuple[int, int, int]] = LADDER,
    rng: int = 0,
) -> tuple[StudyResults, dict[str, float]]:
    """A finished 2x2 study at ``sizes`` with its curves: variant v's gain over the baseline at
    the last step is ``a + b log2(p / p0) + curvature log2(p / p0)^2`` for ``gain_at[v] = (a, b)``
    (p the baseline's parameter count, p0 the smallest's), each seed with its own slope
    (sd ``slope_sd``) and noise ``sd`` per cell; along training the gain grows as step / last
    step. The EGA runs' tau and open fraction move from 0 and 1/2 with the step. Returns the
    study and the truth's slope and intercept per doubling for each variant."""
    gen = np.random.default_rng(rng)
    params = zoo_params(FACTORIAL, sizes)
    p0 = min(params["baseline", s] for s in sizes)
    seed_slopes = {v: gen.normal(b, slope_sd, seeds) for v, (_, b) in gain_at.items()}
    rows, curves = [], []
    for size in sizes:
        doublings = np.log2(params["baseline", size] / p0)
        for seed in range(seeds):
            shared = gen.normal(0.0, 0.05)
            for variant in FACTORIAL:
                a = gain_at.get(variant, (0.0, 0.0))[0]
                slope = seed_slopes[variant][seed] if variant in seed_slopes else 0.0
                gain = a + slope * doublings + (curvature * doublings**2 if variant in gain_at else 0.0)
                noise = 0.0 if variant == "baseline" else gen.normal(0.0, sd)
                final = 1.5 + shared - gain + noise
                trial = f"{variant}_s{seed}_{size}"
                gated = "ega" in variant
                common = {
                    "study": "ladder",
                    "trial_id": trial,
                    "dataset": "tinyshakespeare",
                    "size": size,
                    "params": params[variant, size],
                    "context_length": 128,
                    "variant": variant,
                    "seed": seed,
                    "status": "finished",
                }
                for step in steps:
                    share = step / steps[-1]
                    curves.append(
                        {
                            **common,
                            "step": step,
                            "val_loss": 1.5 + shared + (1.0 - share) - gain * share + noise,
                            "gen_gap": 0.1,
                            "tau_mean": 0.1 * share + gen.normal(0, 0.005) if gated else None,
                            "open_fraction": 0.5 - 0.04 * share + gen.normal(0, 0.005) if gated else None,
                        }
                    )
                last = curves[-1]
                rows.append(
                    {
                        **common,
                        **shape_of(size, sizes),  # the results table's: the curves read it by trial id
                        "val_loss": final,
                        "steps": steps[-1],
                        **{k: last[k] for k in ("gen_gap", "tau_mean", "open_fraction")},
                    }
                )
    frame = pl.DataFrame(rows, infer_schema_length=None)
    study = StudyResults(
        "ladder", frame, AnalysisSettings(), source="simulated", curves=pl.DataFrame(curves, infer_schema_length=None)
    )
    return study, {v: b for v, (_, b) in gain_at.items()}
