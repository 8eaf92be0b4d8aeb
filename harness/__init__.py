"""Research harness for attention mechanisms.

Importing ``harness`` has no side effects: it starts no Ray, opens no database and
imports no heavy library. The parts live in sub-packages found by folder name:

- :mod:`harness.models`    the model zoo (positional encodings, key gates, scoring, variants, sizes)
- :mod:`harness.datasets`  corpora, caching, sampling, the synthetic salience corpus, corpus statistics
- :mod:`harness.training`  the Lightning module, data module, callbacks and ``train(config)``
- :mod:`harness.analysis`  results tables, contrasts with confidence intervals, tau analysis
- :mod:`harness.report`    the document model, its renderers and the study report
- :mod:`harness.scorecard` the papers' claims as data and the scorecard
- :mod:`harness.studies`   study specs, the run on Ray Tune, the MLflow record, clusters
- :mod:`harness.bench`     benchmarks and the fault campaign (``harness bench``, ``benchmarks/``)

Layers, low to high. A module imports from its own layer or from a lower one, never from a
higher one (not even inside a function or under ``TYPE_CHECKING``); packages that share a
layer do not import each other; and no modules import each other in a circle.
tests/test_layers.py reads this list and checks all three.

1. base: the top-level modules (``harness.errors``, ``harness.lazy_exports``,
   ``harness.results_schema``, ``harness.mlflow_client``, ...)
2. ``harness.models``, ``harness.datasets``
3. ``harness.training``
4. ``harness.analysis``
5. ``harness.report``
6. ``harness.scorecard``
7. ``harness.studies``
8. ``harness.bench``
9. the command line: every module named ``cli`` (``harness.cli``, ``harness.<area>.cli``), which
   may import anything
"""

__version__ = "0.1.0"
