"""The record in MLflow, written from the Tune driver only.

- :mod:`~harness.studies.record.recorder` ``StudyRecorder``: the parent run and a child run per trial
- :mod:`~harness.studies.record.store` the tracking store, made safe (one warning, then no-ops)
- :mod:`~harness.studies.record.parent_run` the parent run's lifecycle: created or continued, tagged, ended
- :mod:`~harness.studies.record.child_runs` the child runs' lifecycle, one ``TrialRecord`` per trial
- :mod:`~harness.studies.record.tune_callback` ``MlflowStudyCallback``: Tune's trial events -> the recorder
- :mod:`~harness.studies.record.trial_records` a trial's child run completed from the study's storage
- :mod:`~harness.studies.record.study_start` the start of a study's record: its parent run, ``harness_study.json``
- :mod:`~harness.studies.record.study_end` the end of a study's record: the children completed, the parent ended
"""
