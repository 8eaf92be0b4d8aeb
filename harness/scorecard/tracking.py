"""The scorecard in MLflow: its own run, and a link to it on each study it read.

The run (experiment ``scorecard`` by default; tag ``harness.role=scorecard``; named by when it
was made and the studies it read: ``scorecard 2026-12-02 14:05 (long-cpu, ladder-cpu)``) holds a short
markdown summary as its description (``mlflow.note.content``:
:func:`~harness.scorecard.document.description_document`), the files of the output directory as artifacts
(``scorecard.html``, ``scorecard.parquet``, ``scorecard.md``) and, as tags, the studies it read
and their parent run ids (``harness.read.<study>``). Each study's parent run gets the tag
``harness.scorecard_run`` and a link to that run in its description, beside the full report's
in its verdict table's header (:func:`with_scorecard_link`; a link an earlier scorecard wrote
there is replaced).
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from harness.mlflow_client import TrackingClient, ensure_experiment, harness_git_commit, run_page_link, run_ui_url

NOTE_TAG = "mlflow.note.content"
LINK_PREFIX = "**Scorecard:**"
#: MLflow keeps at most this many characters of a tag's value.
DESCRIPTION_MAX_CHARS = 8000


#: The longest run name the scorecard writes (the studies' names are cut to fit).
RUN_NAME_MAX_CHARS = 120


def run_link(experiment_id: str, run_id: str) -> str:
    """The MLflow UI's link to a run, relative to the UI's root, in the model-training view."""
    return run_page_link(experiment_id, run_id)


def run_name(studies: Sequence[str], when: float | None = None) -> str:
    """``scorecard 2026-12-02 14:05 (long-cpu, ladder-cpu)``: when (local time) and what it read,
    cut to :data:`RUN_NAME_MAX_CHARS` characters.

    >>> run_name(["smoke"], when=0.0).startswith("scorecard 19")
    True
    """
    stamp = time.strftime("%Y-%m-%d %H:%M", time.localtime(time.time() if when is None else when))
    name = f"scorecard {stamp} ({', '.join(studies) or 'no study'})"
    return name if len(name) <= RUN_NAME_MAX_CHARS else name[: RUN_NAME_MAX_CHARS - 2] + "…)"


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
    run = client.create_run(experiment_id, run_name=run_name(list(studies)), tags=tags)
    run_id = run.info.run_id
    try:
        for path in files:
            client.log_artifact(run_id, str(path))
        client.set_terminated(run_id, "finished")
    except BaseException:
        client.set_terminated(run_id, "failed")
        raise
    return experiment_id, run_id


#: A study's description whose first line is its verdict table's header (``| effect ([full
#: report](...)) | ...``: :func:`~harness.report.study.parent_description`) takes the scorecard's
#: link beside the report's, so that the table stays the whole description (MLflow folds a
#: taller one); any other description gets it as its last line.
_HEADER_LINK = re.compile(r"^(\| effect \(\[full report\]\([^)]*\))(?:, \[scorecard\]\([^)]*\))?\)")


def with_scorecard_link(text: str, link: str) -> str:
    """``text`` (a study's description) linking the scorecard at ``link`` (one link: a link an
    earlier scorecard wrote there is replaced).

    >>> with_scorecard_link("| effect ([full report](r)) | estimate |", "s")
    '| effect ([full report](r), [scorecard](s)) | estimate |'
    """
    if _HEADER_LINK.match(text):
        return _HEADER_LINK.sub(lambda m: f"{m.group(1)}, [scorecard]({link}))", text, count=1)
    line = f"{LINK_PREFIX} [the scorecard that read this study last]({link})"
    kept = [x for x in text.rstrip().splitlines() if not x.startswith(LINK_PREFIX)]
    while kept and not kept[-1].strip():
        kept.pop()
    body = "\n".join(kept)
    room = DESCRIPTION_MAX_CHARS - len(line) - 2
    return (body[:room] + "\n\n" if body else "") + line


def link_studies(tracking_uri: str, parents: Sequence[str], experiment_id: str, run_id: str) -> int:
    """Point each study's parent run at the scorecard run: the tag ``harness.scorecard_run``
    and a link in its description (:func:`with_scorecard_link`). A parent run this store does
    not hold (a study read from files that was recorded in another store) is left alone.
    Returns how many runs were updated."""
    client = TrackingClient(tracking_uri)
    linked = 0
    for parent in parents:
        run = client.find_run(parent)
        if run is None:
            continue
        text = run.data.tags.get(NOTE_TAG, "")
        client.set_tag(parent, NOTE_TAG, with_scorecard_link(text, run_link(experiment_id, run_id)))
        client.set_tag(parent, "harness.scorecard_run", run_id)
        linked += 1
    return linked


def run_url(tracking_uri: str, experiment_id: str, run_id: str) -> str:
    """The run's page with its host, to click in a terminal: on the tracking server itself for
    an http(s) URI, else where ``harness ui`` serves the store (``http://127.0.0.1:5000``)."""
    return run_ui_url(tracking_uri, experiment_id, run_id)


__all__ = [
    "LINK_PREFIX",
    "RUN_NAME_MAX_CHARS",
    "link_studies",
    "log_scorecard",
    "run_link",
    "run_name",
    "run_url",
    "with_scorecard_link",
]
