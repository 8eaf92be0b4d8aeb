"""Simulated studies of known truth, for the benchmarks and the tests only (they ship in the
package's bench layer, never in a study's path):

- :mod:`.calibration` and :mod:`.designs`: the calibration of every interval and test the report
  uses, running the analysis's own paired tests (run by ``benchmarks/calibration.py``);
- :mod:`.sequential`: what peeking costs a sequential study (``benchmarks/sequential.py``);
- :mod:`.scorecard`, :mod:`.scorecard_cards`, :mod:`.scorecard_prediction`: the scorecard's rules
  one row at a time, whole simulated cards, and predictions across sizes, read against known truths
  (the scorecard part of ``benchmarks/calibration.py``, whose numbers the scorecard ships in
  ``harness/scorecard/calibration.json``).

No module of ``harness`` outside :mod:`harness.bench` imports them, at the top or inside a function
(tests/test_layers.py checks it): a report or a scorecard never pays for, nor depends on, the
simulations.
"""
