"""The driver's MLflow record continues runs it finds: a run created just before the store
went away (so without its params) gets them when the study or ``harness report`` continues it."""

from __future__ import annotations

from mlflow import MlflowClient

from harness.studies.record.recorder import StudyRecorder


def test_a_continued_run_gets_the_params_it_lacks(sqlite_tracking_uri: str) -> None:
    params = {"grid_size": 4, "max_steps": 10}
    first = StudyRecorder(sqlite_tracking_uri, "outage")
    first.store.connect()
    parent = first.start_parent(
        study="outage", study_run="outage/1", spec_text="name: outage\n", spec_sha256="0" * 64, params=params, tags={}
    )
    child = first.child("t0", study="outage", tags={"harness.trial_id": "t0"}, params=params)
    assert parent and child
    # What an outage between create_run and log_params leaves: runs without their params.
    client = MlflowClient(sqlite_tracking_uri)
    parent_tags = {"harness.role": "study", "harness.study_run": "outage/2"}
    bare_parent = client.create_run(first.store.experiment_id, tags=parent_tags)
    bare_child = client.create_run(
        first.store.experiment_id,
        tags={"mlflow.parentRunId": bare_parent.info.run_id, "harness.role": "trial", "harness.trial_id": "t0"},
    )
    assert client.get_run(bare_child.info.run_id).data.params == {}

    again = StudyRecorder(sqlite_tracking_uri, "outage")
    again.store.connect()
    assert (
        again.start_parent(
            study="outage",
            study_run="outage/2",
            spec_text="name: outage\n",
            spec_sha256="0" * 64,
            params=params,
            tags={},
        )
        == bare_parent.info.run_id
    )  # continued, not duplicated
    assert again.child("t0", study="outage", tags={}, params=params) == bare_child.info.run_id
    expected = {"grid_size": "4", "max_steps": "10"}
    assert client.get_run(bare_parent.info.run_id).data.params == expected
    assert client.get_run(bare_child.info.run_id).data.params == expected
    # A run that has its params is left as it is (logging the same key twice is an error in
    # MLflow when the value differs: nothing is logged again).
    assert again.child("t0", study="outage", tags={}, params=params) == bare_child.info.run_id
    assert again.store.broken is None
