"""Each core effect over training as metrics of the study's parent run, so that MLflow's own
charts draw the effect and its band against the step.

From the report's ``effects_over_training`` table (the effects of the 2x2 at every evaluation
step, paired over seeds, with their 95 % t-intervals: :func:`~harness.analysis.over_training.effects_over_training`
on the curves the study collects): per effect and step, ``effect/<claim>`` (the estimate),
``effect/<claim>/lo`` and ``effect/<claim>/hi`` (the interval; none where there is none), logged
at that step. ``<claim>`` is the scorecard's core id of the effect (``ega-gain``,
``mope-gain``, ``ega-mope-gain``, ``superadditivity`` for the interaction), followed, in a study
of several cells, by the cell (``effect/ega-gain/L4H4d128-T128``).
"""

from __future__ import annotations

import math
import re

import polars as pl

#: The prefix of the parent run's effect metrics.
PREFIX = "effect"
_CELL = ("dataset", "size", "context_length")


def effect_claim(effect: str) -> str:
    """The claim-like name of an effect of the report: ``ega vs baseline`` -> ``ega-gain``,
    ``interaction ega x mope`` -> ``superadditivity``.

    >>> effect_claim("ega-mope vs baseline"), effect_claim("interaction ega x mope")
    ('ega-mope-gain', 'superadditivity')
    """
    if effect.startswith("interaction"):
        return "superadditivity"
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", effect.split(" vs ")[0]).strip("-") + "-gain"


def _cell_names(effects: pl.DataFrame) -> dict[tuple, str]:
    """Each cell's suffix: the values of the cell columns that vary (``L4H4d128-T128``); empty
    for a study of one cell."""
    columns = [c for c in _CELL if c in effects.columns and effects.get_column(c).n_unique() > 1]
    keys = [c for c in _CELL if c in effects.columns]
    names = {}
    for row in effects.select(keys).unique(maintain_order=True).iter_rows(named=True):
        parts = [f"T{row[c]}" if c == "context_length" else str(row[c]) for c in columns]
        names[tuple(row[c] for c in keys)] = "-".join(parts)
    return names


def effect_metrics(effects: pl.DataFrame) -> dict[int, dict[str, float]]:
    """Step -> the parent run's metrics at that step (see the module docstring); finite values only."""
    keys = [c for c in _CELL if c in effects.columns]
    cells = _cell_names(effects)
    out: dict[int, dict[str, float]] = {}
    for row in effects.iter_rows(named=True):
        cell = cells[tuple(row[c] for c in keys)]
        name = f"{PREFIX}/{effect_claim(row['effect'])}" + (f"/{cell}" if cell else "")
        values = {name: row["estimate"], f"{name}/lo": row["ci_low"], f"{name}/hi": row["ci_high"]}
        step = out.setdefault(int(row["step"]), {})
        step.update({k: float(v) for k, v in values.items() if v is not None and math.isfinite(v)})
    return out


__all__ = ["PREFIX", "effect_claim", "effect_metrics"]
