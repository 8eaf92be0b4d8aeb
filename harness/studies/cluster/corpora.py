"""A study's corpora where its trials run: the folder the user meant, and a copy on every node.

Two things break a corpus that the driver finds:

- **a relative folder.** Ray Tune runs each trial in a working directory of its own
  (``<ray temp>/session_*/artifacts/.../working_dirs/<trial>``), so
  ``HARNESS_DATA_DIR=../shared/data`` means one folder to the driver and another to every
  trial. :func:`trial_data_dir` resolves the folder on the driver, against the user's working
  directory, and the trials receive it absolute in their
  :attr:`~harness.training.config.TrainConfig.data_dir` (a cluster's workers do not inherit
  the driver's environment, so the environment cannot carry it);
- **a node without it.** :func:`check_corpora_on_nodes` runs one small Ray task on every alive
  node (pinned there: ``NodeAffinitySchedulingStrategy``, not retried: a missing file stays
  missing) before the first trial starts; each makes sure of the corpora as a trial would
  (:func:`ensure_corpus`: found, or fetched into the node's cache, checksum-verified). A node
  that can do neither fails the study in seconds with one :class:`CorpusUnavailable` naming
  the node and the folders searched, instead of every trial failing after its retries.

Ray is imported inside the functions that use it (see the note on imports in
:mod:`harness.studies.runner`).
"""

from __future__ import annotations

import os
import socket
from collections.abc import MutableMapping, Sequence
from pathlib import Path

from harness.datasets.corpus import load
from harness.datasets.data_dir import resolve_data_dir_env
from harness.errors import InputError


class CorpusUnavailable(InputError):
    """A corpus is neither on a node nor can be fetched there."""


def trial_data_dir(
    spec_data_dir: str | None, *, environ: MutableMapping[str, str] | None = None, cwd: Path | None = None
) -> str | None:
    """The data folder every trial searches first, absolute: the spec's ``train.data_dir``, else
    ``$HARNESS_DATA_DIR``, resolved against ``cwd`` (the user's working directory, where the
    driver runs); None when neither is set (the trials search their node's cache)."""
    if spec_data_dir:
        return str(((cwd or Path.cwd()) / Path(spec_data_dir).expanduser()).resolve())
    folder = resolve_data_dir_env(os.environ if environ is None else environ, cwd=cwd)
    return None if folder is None else str(folder.resolve())


def this_node() -> str:
    """``host (ip, Ray node <id>)`` of the calling process: which machine of a cluster it is."""
    import ray

    where = [socket.gethostname()]
    try:
        where.append(ray.util.get_node_ip_address())
        where.append(f"Ray node {ray.get_runtime_context().get_node_id()}")
    except Exception:  # noqa: BLE001 - outside Ray: the host name says enough
        pass
    return f"{where[0]} ({', '.join(where[1:])})" if len(where) > 1 else where[0]


def ensure_corpus(dataset: str, data_dir: str | None) -> None:
    """Corpus ``dataset`` on this node: found (``data_dir``, ``$HARNESS_DATA_DIR``, this node's
    cache) or fetched into this node's cache (the mirrors of ``$HARNESS_DATA_MIRROR``, then the
    card's addresses), checksum-verified and renamed into place only when complete, so that no
    trial trains on a partial file. Otherwise :class:`CorpusUnavailable` naming the corpus, the
    node and (in the loader's message) the folders searched."""
    try:
        load(dataset, data_dir=data_dir, progress=False)
    except InputError as exc:
        raise CorpusUnavailable(f"corpus {dataset!r} is not available on node {this_node()}: {exc}") from None


def corpora_here(datasets: Sequence[str], data_dir: str | None) -> list[str]:
    """What the node running this lacks: one :func:`ensure_corpus` message per corpus it can
    neither find nor fetch (empty: it has them all). The body of the per-node task."""
    problems = []
    for dataset in datasets:
        try:
            ensure_corpus(dataset, data_dir)
        except CorpusUnavailable as exc:
            problems.append(str(exc))
    return problems


def check_corpora_on_nodes(datasets: Sequence[str], data_dir: str | None) -> None:
    """Every corpus of ``datasets`` on every alive node of the connected Ray (the one node of an
    embedded local Ray): one task per node, pinned to it, run at once and not retried.

    Raises
    ------
    CorpusUnavailable
        A node can neither find nor fetch a corpus; the message names each such node, the
        corpus and the folders searched there.
    """
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    check = ray.remote(num_cpus=0, max_retries=0)(corpora_here)
    nodes = [node["NodeID"] for node in ray.nodes() if node.get("Alive")]
    pending = {
        node: check.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node, soft=False)).remote(
            list(datasets), data_dir
        )
        for node in nodes
    }
    problems: list[str] = []
    for node, ref in pending.items():
        try:
            problems += ray.get(ref)
        except Exception as exc:  # noqa: BLE001 - the node left, or its worker could not start
            problems.append(f"the corpus check could not run on Ray node {node}: {type(exc).__name__}: {exc}")
    if problems:
        raise CorpusUnavailable(
            "the study's corpora are not on every node, so no trial was started:\n  "
            + "\n  ".join(problems)
            + "\nPut the files there (or set HARNESS_DATA_MIRROR on the nodes), then run the study again."
        )
