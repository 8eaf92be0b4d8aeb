"""The scorecard in MLflow: its own run, and a link to it on each study it read.

The run (experiment ``scorecard`` by default; tag ``harness.role=scorecard``) holds a short
markdown summary as its description (``mlflow.note.content``:
:func:`~harness.scorecard.document.description_document`), the files of the output directory as artifacts
(``scorecard.html``, ``scorecard.parquet``, ``scorecard.md``) and, as tags, the studies it read
and their parent run ids (``harness.read.<study>``). Each study's parent run gets the tag
``harness.scorecard_run`` and a last line in its description linking to that run (a line
an earlier scorecard wrote there is replaced).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from harness.mlflow_client import TrackingClient, ensure_experiment, harness_git_commit, run_page_link

NOTE_TAG = "mlflow.note.content"
LINK_PREFIX = "**Scorecard:**"
#: MLflow keeps at most this many characters of a tag's value.
DESCRIPTION_MAX_CHARS = 8000


def run_link(experiment_id: str, run_id: str) -> str:
    """The MLflow UI's link to a run, relative to the UI's root, in the model-training view."""
    return run_page_link(experiment_id, run_id)


def log_scorecard(
    *,
    tracking_uri: str,
    experiment: str,
    description: str,
    files: Sequence[Path],
    studies: Mapping[str, str | None],
) -> tuple[str, str]:
    """Log the scorecard as a new run; returns (experiment id, run id). ``studies`` maps each
    study read to its parent run id (None: read from files, no run to link). A failure after
    the run exists ends it ``FAILED`` (no run is left RUNNING)."""
    client = TrackingClient(tracking_uri)
    experiment_id = ensure_experiment(
        client, tracking_uri, experiment, deleted_hint="restore it in the MLflow UI or pass --experiment NAME"
    )
    tags = {
        "harness.role": "scorecard",
        "harness.studies": ", ".join(studies),
        "harness.git_commit": harness_git_commit(),
        NOTE_TAG: description[:DESCRIPTION_MAX_CHARS],
        **{f"harness.read.{name}": run_id for name, run_id in studies.items() if run_id},
    }
    run = client.create_run(experiment_id, run_name="scorecard", tags=tags)
    run_id = run.info.run_id
    try:
        for path in files:
            client.log_artifact(run_id, str(path))
        client.set_terminated(run_id, "finished")
    except BaseException:
        client.set_terminated(run_id, "failed")
        raise
    return experiment_id, run_id


def link_studies(tracking_uri: str, parents: Sequence[str], experiment_id: str, run_id: str) -> int:
    """Point each study's parent run at the scorecard run: the tag ``harness.scorecard_run``
    and the last line of its description. A parent run this store does not hold (a study
    read from files that was recorded in another store) is left alone. Returns how many runs
    were updated."""
    client = TrackingClient(tracking_uri)
    line = f"{LINK_PREFIX} [the scorecard that read this study last]({run_link(experiment_id, run_id)})"
    linked = 0
    for parent in parents:
        run = client.find_run(parent)
        if run is None:
            continue
        text = run.data.tags.get(NOTE_TAG, "")
        kept = [x for x in text.rstrip().splitlines() if not x.startswith(LINK_PREFIX)]
        while kept and not kept[-1].strip():
            kept.pop()
        body = "\n".join(kept)
        room = DESCRIPTION_MAX_CHARS - len(line) - 2
        client.set_tag(parent, NOTE_TAG, (body[:room] + "\n\n" if body else "") + line)
        client.set_tag(parent, "harness.scorecard_run", run_id)
        linked += 1
    return linked


__all__ = ["LINK_PREFIX", "link_studies", "log_scorecard", "run_link"]
