"""The study spec: what a study runs.

- :mod:`~harness.studies.spec.study_spec` ``StudySpec`` (pydantic), ``load_spec`` and the registry checks
- :mod:`~harness.studies.spec.blocks` the models of the spec's nested blocks and the ``train:`` overrides
- :mod:`~harness.studies.spec.grid` ``expand_grid``: one ``Trial`` (a ``TrainConfig``) per combination
- :mod:`~harness.studies.spec.cost` the dry run's cost estimate
- :mod:`~harness.studies.spec.sequential_design` ``SequentialDesign``: a sequential study's seeds and stopping rule
"""
