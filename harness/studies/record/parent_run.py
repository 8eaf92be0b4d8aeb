"""The lifecycle of a study's parent run: created before the first trial (or found again when
the study resumes), tagged on the way, ended with the results table and the counts.

A resumed study finds its parent by the run id kept in its storage directory, else by the tag
``harness.study_run``; a run of another experiment, or a deleted one, is not continued.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.mlflow_client import RunStatus
from harness.studies.record.store import RecordStore


class ParentRun:
    """The study's parent run in ``store`` (:attr:`run_id` None until it is started)."""

    def __init__(self, store: RecordStore) -> None:
        self.store = store
        self.run_id: str | None = None
        self.created = False  # the run was created (not continued) here

    def start(
        self,
        *,
        study: str,
        study_run: str,
        spec_text: str,
        spec_sha256: str,
        params: Mapping[str, Any],
        tags: Mapping[str, str],
        previous_run_id: str | None = None,
        datasets: Sequence[str] = (),
        data_dir: str | None = None,
        on_continue: Callable[[str], None] = lambda run_id: None,
    ) -> str | None:
        """Create the parent run, or continue ``previous_run_id`` / the run tagged
        ``harness.study_run=study_run`` (then ``on_continue(run_id)``: its children are read),
        and declare the study's corpora (``datasets``) as its dataset inputs. Returns the run id."""
        run_id = self.store.safely(
            "creating the study's parent run",
            lambda: self._start(study, study_run, spec_text, spec_sha256, params, tags, previous_run_id, on_continue),
        )
        if run_id is not None:
            self.store.declare_corpora(run_id, datasets, data_dir, "declaring the study's corpora")
        return run_id

    def _start(self, study, study_run, spec_text, spec_sha256, params, tags, previous_run_id, on_continue) -> str:
        store, client = self.store, self.store.client
        run = self._found(study_run, previous_run_id)
        if run is not None:
            self.run_id = run.info.run_id
            client.reopen_run(self.run_id)
            store.complete_params(self.run_id, set(run.data.params), params)
            on_continue(self.run_id)
            return self.run_id
        all_tags = {
            "harness.role": "study",
            "harness.study": study,
            "harness.study_run": study_run,
            "harness.spec_sha256": spec_sha256,
            "status": "running",
            **tags,
        }
        run = client.create_run(store.experiment_id, run_name=study_run.replace("/", "-"), tags=all_tags)
        self.run_id = run.info.run_id
        self.created = True
        client.log_params(self.run_id, params)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "spec.yaml"
            path.write_text(spec_text)
            client.log_artifact(self.run_id, path)
        return self.run_id

    def _found(self, study_run: str, previous_run_id: str | None) -> Any:
        """The parent run of a resumed study: ``previous_run_id`` when it is an active run of this
        experiment, else the run tagged ``harness.study_run=study_run``; None for a new study."""
        client, experiment_id = self.store.client, self.store.experiment_id
        run = client.find_run(previous_run_id) if previous_run_id else None
        if run is not None and (run.info.experiment_id != experiment_id or run.info.lifecycle_stage != "active"):
            run = None
        if run is None:
            found = client.search_runs(
                [experiment_id],
                filter_string=f"tags.`harness.study_run` = '{study_run}' and tags.`harness.role` = 'study'",
                max_results=1,
            )
            run = found[0] if found else None
        return run

    def end(
        self,
        status: RunStatus,
        *,
        results: Any = None,
        files: Sequence[Path] = (),
        metrics: Mapping[str, float] | None = None,
    ) -> None:
        """Log the results table and ``files``, tag ``status`` and end the run."""
        if self.run_id is None:
            return
        run_id = self.run_id

        def _end() -> None:
            client = self.store.client
            with tempfile.TemporaryDirectory() as tmp:
                if results is not None:
                    path = Path(tmp) / "results.parquet"
                    results.write_parquet(path)
                    client.log_artifact(run_id, path)
                for f in files:
                    client.log_artifact(run_id, f)
            if metrics:
                client.log_metrics(run_id, metrics, step=0)
            client.set_tag(run_id, "status", status)
            client.set_terminated(run_id, status)

        self.store.safely("finishing the study's parent run", _end)

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        if self.run_id is not None and tags:
            run_id = self.run_id
            self.store.safely("tagging the parent run", lambda: self.store.client.log_tags(run_id, tags))
