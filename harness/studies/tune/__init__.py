"""The run on Ray Tune: what runs inside Tune and beside it in the driver.

- :mod:`~harness.studies.tune.trainable` the function trainable around ``harness.training.train``
- :mod:`~harness.studies.tune.results_table` one row per trial, from its final report and Tune's error
- :mod:`~harness.studies.tune.progress` the live table of trials
- :mod:`~harness.studies.tune.sequential` and :mod:`~harness.studies.tune.seed_search` sequential studies
- :mod:`~harness.studies.tune.state` and :mod:`~harness.studies.tune.snapshot_keeper` repairs of Tune's snapshot
"""
