"""Record a study in MLflow from its Tune storage directory (after a tracking outage).

A study keeps everything it learns in its storage directory, whatever happens to the
tracking server: ``harness_study.json`` (name, parent run id, trial ids), ``spec.yaml``,
``results.parquet`` (one row per trial), and per trial Tune's ``result.json`` (every
report, one JSON object a line: the metric curves and the final summary) and its final
checkpoint (``window_losses.parquet``, gate and MOPE tables). :func:`record_study` writes
that into MLflow exactly as a study with a healthy server would have:

* the parent run: continued when it exists (its id is in ``harness_study.json``, else the
  tag ``harness.study_run``), else created with the spec's params, tags and ``spec.yaml``;
  ``results.parquet`` and the trial counts are logged and the run is ended;
* one child run per trial: continued when it exists (tag ``harness.trial_id`` under the
  parent), else created; its corpus as dataset inputs, every report whose step MLflow
  lacks (gaps too), the final metrics, the final checkpoint's tables, the ``status`` tag,
  the run description (from its row of ``results.parquet``) and the end state
  (:func:`harness.studies.record.trial_records.complete_child_run`).

Child runs already complete in MLflow (ended, with the status of the results table, no
step missing) are left alone, so recording is idempotent: running it twice changes nothing, and after a
partial outage only what is missing is added. ``harness report STUDY --from STUDY_DIR``
calls it before logging the report, and :func:`refresh_curves` (the curves table, rebuilt
from the same reports).
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl
import pyarrow.fs

from harness.errors import InputError
from harness.mlflow_client import check_tracking_uri, harness_git_commit, redact_uri
from harness.results_schema import CURVES_FILE
from harness.studies.cluster.destinations import is_uri
from harness.studies.record.study_start import parent_params
from harness.studies.record.trial_records import complete_child_run
from harness.studies.spec.grid import Trial, expand_grid
from harness.studies.spec.study_spec import StudySpec, parse_spec
from harness.studies.storage import (
    STUDY_FILE,
    parquet_bytes,
    read_bytes,
    read_json,
    read_text,
    storage_filesystem,
    trial_dir,
    write_bytes,
)
from harness.studies.tune.curves_table import study_curves

if TYPE_CHECKING:  # the recorder is imported by record_study (see there)
    from harness.studies.record.recorder import StudyRecorder


@dataclass(frozen=True)
class RecordOutcome:
    """What :func:`record_study` did: the parent run, and how many child runs it created,
    completed (existed, but lacked metrics or their end) or left as they were."""

    study: str
    study_dir: str
    tracking_uri: str
    experiment_id: str
    parent_run_id: str
    parent_created: bool
    created: int
    completed: int
    unchanged: int


def find_study_dir(path: str | Path) -> str | None:
    """``path`` itself when it holds ``harness_study.json``; the most recent study run
    under it when it is a ``<storage>/<study>`` folder; None otherwise (e.g. a parquet file)."""
    text = str(path).rstrip("/")
    if not is_uri(text):  # pyarrow's local filesystem takes absolute paths only
        text = str(Path(text.removeprefix("file://")).expanduser().resolve())
    try:
        fs, root = storage_filesystem(text)
    except InputError:
        return None
    if read_json(fs, f"{root}/{STUDY_FILE}") is not None:
        return text
    try:
        infos = fs.get_file_info(pyarrow.fs.FileSelector(root, allow_not_found=True))
    except Exception:  # noqa: BLE001 - a file, not a folder
        return None
    runs = sorted(
        (i for i in infos if i.type == pyarrow.fs.FileType.Directory), key=lambda i: i.base_name, reverse=True
    )
    for info in runs:
        if read_json(fs, f"{info.path}/{STUDY_FILE}") is not None:
            return f"{text}/{info.base_name}"
    return None


@dataclass(frozen=True)
class StoredStudy:
    """What a study directory holds: its ``harness_study.json``, spec, grid and results table."""

    study_dir: str
    fs: pyarrow.fs.FileSystem  # the filesystem of the directory
    root: str  # the directory as a path of ``fs``
    meta: dict[str, Any]
    name: str
    spec_text: str
    spec: StudySpec
    trials: list[Trial]  # in grid order
    table: pl.DataFrame  # results.parquet

    @property
    def rows(self) -> dict[str, dict[str, Any]]:
        """The results table by trial id."""
        return {row["trial_id"]: row for row in self.table.iter_rows(named=True)}


def read_study_dir(study_dir: str | Path, *, study: str | None = None) -> StoredStudy:
    """Read and check a study directory (see :func:`record_study` for the errors)."""
    study_dir = find_study_dir(study_dir) or str(study_dir)
    fs, root = storage_filesystem(study_dir)
    meta = read_json(fs, f"{root}/{STUDY_FILE}")
    if meta is None:
        raise InputError(f"{study_dir} is not a study directory (no {STUDY_FILE}); pass <storage>/<study>/<date-time>")
    name = str(meta.get("study"))
    if study is not None and study != name:
        raise InputError(f"{study_dir} holds study {name!r}, not {study!r}")
    spec_text = read_text(fs, f"{root}/spec.yaml")
    if spec_text is None:
        raise InputError(f"{study_dir} has no spec.yaml: it is not a complete study directory")
    spec = parse_spec(spec_text, source=f"{study_dir}/spec.yaml")
    trials = expand_grid(spec)
    if meta.get("trial_ids") and list(meta["trial_ids"]) != [t.trial_id for t in trials]:
        raise InputError(
            f"{study_dir}: spec.yaml and {STUDY_FILE} disagree on the trials; the directory was changed by hand?"
        )
    results = read_bytes(fs, f"{root}/results.parquet")
    if results is None:
        raise InputError(
            f"{study_dir} has no results.parquet: the study did not end (its driver was stopped). Finish it first with "
            f"`harness run SPEC --resume --storage-path {study_dir.rsplit('/', 2)[0]}` (it records in MLflow itself)"
        )
    return StoredStudy(
        study_dir=study_dir,
        fs=fs,
        root=root,
        meta=meta,
        name=name,
        spec_text=spec_text,
        spec=spec,
        trials=trials,
        table=pl.read_parquet(io.BytesIO(results)),
    )


def refresh_curves(study_dir: str | Path, *, study: str | None = None) -> pl.DataFrame:
    """The curves table of the study kept in ``study_dir``, rebuilt from each trial's reports
    (:func:`~harness.studies.tune.curves_table.study_curves`) and written as its
    ``curves.parquet``: a study run before the table existed gets one, and a rebuilt table is
    the one the study wrote. :class:`InputError` as :func:`read_study_dir`."""
    stored = read_study_dir(study_dir, study=study)
    curves = study_curves(stored.fs, stored.root, stored.table, stored.trials)
    write_bytes(stored.fs, f"{stored.root}/{CURVES_FILE}", parquet_bytes(curves))
    return curves


def record_study(
    study_dir: str | Path,
    *,
    tracking_uri: str | None = None,
    study: str | None = None,
    say: Callable[[str], None] = print,
) -> RecordOutcome:
    """Write the study kept in ``study_dir`` into MLflow at ``tracking_uri`` (default:
    ``$MLFLOW_TRACKING_URI``, else ``sqlite:///mlflow.db``); see the module docstring.

    Raises
    ------
    InputError
        ``study_dir`` is not a study directory (or not of ``study``), the study has no
        results table yet (its driver died: resume it first), or the tracking store
        cannot be reached or written.
    """
    # Imported here, where the record is written: a bad study folder is refused without it.
    from harness.studies.record.recorder import StudyRecorder, default_tracking_uri

    stored = read_study_dir(study_dir, study=study)
    name = stored.name
    uri = default_tracking_uri(tracking_uri, None)
    check_tracking_uri(uri)
    problems: list[str] = []
    recorder = StudyRecorder(uri, stored.spec.experiment_name(), warn=problems.append)

    def check() -> None:
        if recorder.store.broken is not None:
            raise InputError(
                f"cannot record study {name} in MLflow at {redact_uri(uri)} ({recorder.store.broken}); is the "
                "tracking server up? "
                "Nothing is lost: run the same command again once it is (it adds only what is missing)"
            )

    recorder.store.connect()
    check()
    _continue_parent(recorder, stored)
    check()
    done = {"created": 0, "completed": 0, "unchanged": 0}
    rows = stored.rows
    for trial in stored.trials:
        action = complete_child_run(
            recorder,
            study=name,
            trial=trial,
            row=rows.get(trial.trial_id),
            fs=stored.fs,
            trial_dir=trial_dir(stored.root, trial.trial_id),
            check=check,
        )
        if action is not None:
            done[action] += 1
        check()
    table = stored.table
    counts = {s: int((table.get_column("status") == s).sum()) for s in ("finished", "diverged", "failed", "incomplete")}
    recorder.parent.end(
        "interrupted" if counts["incomplete"] else "finished",
        results=table,
        metrics={f"trials/{s}": n for s, n in counts.items()},
    )
    check()
    say(
        f"MLflow: recorded study {name} from {stored.study_dir} in parent run {recorder.parent.run_id} "
        f"({'created' if recorder.parent.created else 'continued'}; child runs: {done['created']} created, "
        f"{done['completed']} completed, "
        f"{done['unchanged']} already complete) at {redact_uri(uri)}"
    )
    return RecordOutcome(
        study=name,
        study_dir=stored.study_dir,
        tracking_uri=uri,
        experiment_id=str(recorder.store.experiment_id),
        parent_run_id=str(recorder.parent.run_id),
        parent_created=recorder.parent.created,
        created=done["created"],
        completed=done["completed"],
        unchanged=done["unchanged"],
    )


def _continue_parent(recorder: StudyRecorder, stored: StoredStudy) -> None:
    """The study's parent run: continued when MLflow has it, else created as the study would."""
    meta = stored.meta
    recorder.start_parent(
        study=stored.name,
        study_run=str(meta.get("study_run") or f"{stored.name}/{stored.study_dir.rsplit('/', 1)[1]}"),
        spec_text=stored.spec_text,
        spec_sha256=stored.spec.sha256(),
        params=parent_params(stored.spec, stored.trials),
        tags={
            "harness.git_commit": str(meta.get("git_commit") or harness_git_commit()),
            "harness.study_dir": stored.study_dir,
            "harness.recorded_from_storage": "true",
        },
        previous_run_id=meta.get("parent_run_id"),
        datasets=stored.spec.datasets,
        data_dir=stored.spec.train_overrides().get("data_dir"),
    )
