"""Studies: a YAML spec -> a grid of trials -> Ray Tune -> MLflow -> results and report.

- :mod:`~harness.studies.spec`       ``StudySpec`` (pydantic) and ``load_spec`` (errors name the file and field)
- :mod:`~harness.studies.spec_parts` the models of the spec's nested blocks and the ``train:`` overrides
- :mod:`~harness.studies.grid`       ``expand_grid``: one ``Trial`` (a ``TrainConfig``) per combination
- :mod:`~harness.studies.trainable`  the Ray Tune function trainable around ``harness.training.train``
- :mod:`~harness.studies.tracking`   the MLflow record, written from the Tune driver only
- :mod:`~harness.studies.progress`   the live table of trials
- :mod:`~harness.studies.runner`     ``run_study`` (``harness run``), its phases in order
- :mod:`~harness.studies.plan`       what the phases hand each other (the plan, the run's layout, the outcomes)
- :mod:`~harness.studies.cluster`    storage path and Ray address, the Ray session, resources against the cluster
- :mod:`~harness.studies.dry_run`    the grid, the resources and the cost estimate in words (``--dry-run``)
- :mod:`~harness.studies.tune_launch` the trainable, the driver's callbacks and Tune's experiment, new or restored
- :mod:`~harness.studies.results_table` one row per trial, from its final report
- :mod:`~harness.studies.submit`     ``submit_study`` (``harness submit``: a study as a Ray job)
- :mod:`~harness.studies.destinations` no study record inside a Ray job's temporary directories
- :mod:`~harness.studies.cost`       the dry run's cost estimate

Importing this package imports neither Ray, MLflow nor torch; the names below load
their module on first use (:mod:`harness.lazy_exports`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.lazy_exports import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "spec": ["StudySpec", "load_spec", "parse_spec"],
        "grid": ["Trial", "expand_grid", "trial_id"],
        "runner": ["run_study", "StudyOutcome"],
    },
)

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs
    from harness.studies.grid import Trial, expand_grid, trial_id
    from harness.studies.runner import StudyOutcome, run_study
    from harness.studies.spec import StudySpec, load_spec, parse_spec
