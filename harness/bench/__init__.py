"""Benchmarks and the fault campaign: what measures the harness, never part of a study.

The ``harness bench`` commands (:mod:`harness.bench.cli`) and the scripts in ``benchmarks/`` call
these modules; each prints a table and writes one JSON machine record
(:func:`harness.bench.attention.write_json`).

- :mod:`~harness.bench.attention` attention cost per family against T (time and memory)
- :mod:`~harness.bench.train_step` one training step per variant
- :mod:`~harness.bench.compile_cost` what compiling the training step costs and saves
- :mod:`~harness.bench.study_overhead` a study's overhead against bare trainings
- :mod:`~harness.bench.chaos` the fault campaign (a package: schedules, faults, one faulted study, the
  comparison with its twin); :mod:`~harness.bench.local_services` real local services
"""
