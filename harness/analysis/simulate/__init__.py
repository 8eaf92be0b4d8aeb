"""Simulated studies of known truth, for the benchmarks and the tests only: the
calibration of every interval and test the report uses (:mod:`.calibration`, run by
``benchmarks/calibration.py``) and what peeking costs a sequential study
(:mod:`.sequential`, run by ``benchmarks/sequential.py``).

Nothing in ``harness`` imports this package at run time (a test checks it): a report never
pays for, nor depends on, the simulations.
"""
