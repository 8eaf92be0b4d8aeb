"""Studies: a YAML spec -> a grid of trials -> Ray Tune -> MLflow -> results and report.

The folders are the phases of a study:

- :mod:`harness.studies.spec`      what to run: ``StudySpec`` and ``load_spec``, the grid, the cost estimate
- :mod:`harness.studies.tune`      the run on Ray Tune: the trainable, the results table, the live view,
  sequential seeds, repairs of Tune's snapshot
- :mod:`harness.studies.record`    the record in MLflow, written from the Tune driver only
- :mod:`harness.studies.cluster`   where it runs: a local Ray or a cluster, and where its record may go
- :mod:`harness.studies.device`    a study on a GPU lease without Ray or MLflow, recorded afterwards

and the modules beside them put the phases together:

- :mod:`~harness.studies.runner`   ``run_study`` (``harness run``): check -> plan -> launch -> collect -> package
- :mod:`~harness.studies.plan`     what the phases hand each other (the plan, made once: the sequential design,
  the trials' configs; the run's layout, the outcomes)
- :mod:`~harness.studies.dry_run`  the grid, the resources and the cost estimate in words (``--dry-run``)
- :mod:`~harness.studies.launch`   the trainable, the driver's callbacks and Tune's experiment, new or restored
- :mod:`~harness.studies.collect`  the trials' outcomes collected: the results, curves and per-window tables
- :mod:`~harness.studies.finish`   the analysis's report and the closing lines
- :mod:`~harness.studies.submit`   ``submit_study`` (``harness submit``: a study as a Ray job)
- :mod:`~harness.studies.replay`   a study's MLflow record rebuilt from its storage (``harness report --from``)
- :mod:`~harness.studies.storage`  where a study lives and what it keeps there
- :mod:`~harness.studies.signals`  SIGTERM stops a study as Ctrl-C does

Importing this package imports neither Ray, MLflow nor torch; the names below load
their module on first use (:mod:`harness.lazy_exports`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.lazy_exports import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "spec.study_spec": ["StudySpec", "load_spec", "parse_spec"],
        "spec.grid": ["Trial", "expand_grid", "trial_id"],
        "runner": ["run_study"],
        "plan": ["StudyOutcome"],
    },
)

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs
    from harness.studies.plan import StudyOutcome
    from harness.studies.runner import run_study
    from harness.studies.spec.grid import Trial, expand_grid, trial_id
    from harness.studies.spec.study_spec import StudySpec, load_spec, parse_spec
