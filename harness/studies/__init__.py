"""Studies: a YAML spec -> a grid of trials -> Ray Tune -> MLflow -> results and report.

- :mod:`~harness.studies.spec`       ``StudySpec`` (pydantic) and ``load_spec`` (errors name the file and field)
- :mod:`~harness.studies.grid`       ``expand_grid``: one ``Trial`` (a ``TrainConfig``) per combination
- :mod:`~harness.studies.trainable`  the Ray Tune function trainable around ``harness.training.train``
- :mod:`~harness.studies.tracking`   the MLflow record, written from the Tune driver only
- :mod:`~harness.studies.progress`   the live table of trials
- :mod:`~harness.studies.runner`     ``run_study`` (``harness run``)
- :mod:`~harness.studies.submit`     ``submit_study`` (``harness submit``: a study as a Ray job)
- :mod:`~harness.studies.destinations` no study record inside a Ray job's temporary directories
- :mod:`~harness.studies.cost`       the dry run's cost estimate

Importing this package imports neither Ray, MLflow nor torch; the names below load
their module on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "StudySpec": "harness.studies.spec",
    "load_spec": "harness.studies.spec",
    "parse_spec": "harness.studies.spec",
    "Trial": "harness.studies.grid",
    "expand_grid": "harness.studies.grid",
    "trial_id": "harness.studies.grid",
    "run_study": "harness.studies.runner",
    "StudyOutcome": "harness.studies.runner",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'harness.studies' has no attribute {name!r}")
