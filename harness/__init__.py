"""Research harness for attention mechanisms.

Importing ``harness`` has no side effects: it starts no Ray, opens no database and
imports no heavy library. The parts live in sub-packages found by folder name:

- :mod:`harness.models`    the model zoo (positional encodings, key gates, scoring, variants, sizes)
- :mod:`harness.datasets`  corpora, caching, sampling, the synthetic salience corpus, corpus statistics
- :mod:`harness.training`  the Lightning module, data module, callbacks and ``train(config)``
- :mod:`harness.studies`   study specs, grid expansion, the Ray Tune runner, MLflow logging
- :mod:`harness.analysis`  results tables, contrasts with confidence intervals, tau analysis, reports
"""

__version__ = "0.1.0"
