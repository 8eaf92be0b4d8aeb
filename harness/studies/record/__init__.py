"""The record in MLflow, written from the Tune driver only.

- :mod:`~harness.studies.record.recorder` ``StudyRecorder``: the parent run and a child run per trial
- :mod:`~harness.studies.record.trial_records` a trial's child run completed from the study's storage
"""
