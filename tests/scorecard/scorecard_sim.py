"""Simulated studies with known truths for the scorecard tests (imported by them, not a conftest)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import polars as pl

from harness.analysis import AnalysisSettings
from harness.scorecard import StudyResults

FACTORIAL = ("baseline", "ega", "mope", "ega-mope")


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
