"""Each core effect over training as metrics of the study's parent run, so that MLflow's own
charts draw the effect and its band against the step, ending at the verdict.

Per effect and step: ``effect/<claim>`` (the estimate), ``effect/<claim>/lo`` and
``effect/<claim>/hi`` (its 95 % interval; none where there is none), logged at that step.
``<claim>`` is the scorecard's core id of the effect (``ega-gain``, ``mope-gain``,
``ega-mope-gain``, ``superadditivity`` for the interaction), followed, in a study of several
cells, by the cell (``effect/ega-gain/L4H4d128-T128``).

Which windows each point rests on:

- every step but the last: the report's ``effects_over_training`` table (the effects of the 2x2
  at that evaluation step, paired over seeds, with their t-intervals:
  :func:`~harness.analysis.over_training.effects_over_training`), read on the periodic
  evaluation's windows (``train.eval_windows``, e.g. 64, the same at every step);
- the last step: the report's ``final_effects`` table
  (:func:`~harness.report.sections_training.curve_ends`), the final evaluation's contrasts read
  on its windows (the whole validation split by default), the rows the verdict reads: in a study
  of one cell, the verdict table's estimate and interval; in several, the cell's row of the
  effects per cell. The final evaluation reads the model of the last step, so its point stands at
  that step, in place of the periodic one (MLflow draws one value a step; the periodic point stays
  in ``effects_over_training.parquet`` and its figure). A curve without a final row ends at its
  periodic point.
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


def effect_metrics(effects: pl.DataFrame, ends: pl.DataFrame | None = None) -> dict[int, dict[str, float]]:
    """Step -> the parent run's metrics at that step (see the module docstring): ``effects``'
    rows (the periodic curve) at their steps, then each row of ``ends`` (the final evaluation's,
    at its curve's last step) in place of the periodic point there; finite values only."""
    keys = [c for c in _CELL if c in effects.columns]
    cells = _cell_names(effects)
    out: dict[int, dict[str, float]] = {}
    for frame in (effects, ends if ends is not None else effects.head(0)):
        for row in frame.iter_rows(named=True):
            cell = cells.get(tuple(row[c] for c in keys))
            if cell is None:  # a cell without a curve: nothing to end
                continue
            name = f"{PREFIX}/{effect_claim(row['effect'])}" + (f"/{cell}" if cell else "")
            step = out.setdefault(int(row["step"]), {})
            for key, value in ((name, row["estimate"]), (f"{name}/lo", row["ci_low"]), (f"{name}/hi", row["ci_high"])):
                step.pop(key, None)  # an end replaces the periodic point, its band included
                if value is not None and math.isfinite(value):
                    step[key] = float(value)
    return out


__all__ = ["PREFIX", "effect_claim", "effect_metrics"]
