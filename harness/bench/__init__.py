"""Benchmarks and the fault campaign: what measures the harness, never part of a study.

The ``harness bench`` commands (:mod:`harness.bench.cli`) and the scripts in ``benchmarks/`` call
these modules; each prints a table and writes its JSON with one record of the machine beside the
numbers, the same keys everywhere (:func:`harness.bench.machine.write_result`).

- :mod:`~harness.bench.machine` the machine record and the one writer of a benchmark's JSON
- :mod:`~harness.bench.attention` attention cost per family against T (time and memory)
- :mod:`~harness.bench.train_step` one training step per variant
- :mod:`~harness.bench.compile_cost` what compiling the training step costs and saves
- :mod:`~harness.bench.study_overhead` a study's overhead against bare trainings
- :mod:`~harness.bench.chaos` the fault campaign (a package: schedules, faults, one faulted study, the
  comparison with its twin); :mod:`~harness.bench.local_services` the real local services it
  runs on (which the tests use too)
- :mod:`~harness.bench.simulate` simulated studies of known truth: the calibration of the report's
  intervals and tests and of the scorecard's rules (test-only code: nothing outside the bench imports it)
"""
