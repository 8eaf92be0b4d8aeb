"""The synthetic studies' fixtures (:mod:`simulated_studies`), for the report tests."""

from simulated_studies import make_study, mlflow_study, shared_mlflow_study  # noqa: F401 (fixtures)
