"""Where a study runs: its storage path and Ray address (flag > spec > environment >
default), the connection to Ray (an embedded local Ray, or a cluster), and the resources
the spec asks for against what the cluster or this machine has.

Ray is imported inside :func:`ray_session`, not here: a bad spec, a bad destination and
``--dry-run`` answer without paying for it (see the note in :mod:`harness.studies.runner`).
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from harness.errors import InputError
from harness.studies.cluster.destinations import is_uri
from harness.studies.cluster.ray_auth import enable_token_auth_if_available
from harness.studies.signals import restore_sigterm, stop_on_sigterm
from harness.studies.spec.study_spec import StudySpec

DEFAULT_STORAGE = "results"


def resolve_storage(flag: str | None, spec: StudySpec) -> str:
    """``--storage-path`` > spec ``storage_path`` > ``$HARNESS_STORAGE_PATH`` > ``./results``;
    local paths made absolute (Tune requires it)."""
    raw = flag or spec.storage_path or os.environ.get("HARNESS_STORAGE_PATH") or DEFAULT_STORAGE
    if is_uri(raw):
        return raw.rstrip("/")
    if raw.startswith("file://"):
        raw = raw[len("file://") :]
    return str(Path(raw).expanduser().resolve())


def resolve_address(flag: str | None) -> str | None:
    """``--address`` > ``$RAY_ADDRESS`` > None (an embedded local Ray)."""
    return flag or os.environ.get("RAY_ADDRESS") or None


def shared_storage_declared(spec: StudySpec) -> bool:
    return spec.storage_shared or os.environ.get("HARNESS_SHARED_STORAGE", "").lower() in ("1", "true", "yes")


@dataclass
class RayConnection:
    address: str | None  # None: embedded local Ray
    started_here: bool
    description: str
    cpus: float
    gpus: float
    nodes: int
    max_node_cpus: float
    max_node_gpus: float


def _tcp_reachable(address: str, timeout: float = 3.0) -> str | None:
    """None when ``host:port`` accepts a TCP connection, else why not."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        return None  # not host:port (e.g. "auto"): let Ray decide
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return None
    except OSError as exc:
        return exc.strerror or str(exc)


def check_address(address: str) -> None:
    """The checks a cluster address gets before Ray is imported (``harness run`` makes them first,
    so a wrong address answers in a second): a dashboard URL or a Ray Client address is refused
    with what to do instead, a ``host:port`` that accepts no connection with how to check it."""
    scheme = urlparse(address).scheme
    if scheme in ("http", "https"):
        raise InputError(
            f"Ray address {address!r} is a dashboard (job submission) address. `harness run` needs the "
            "cluster's GCS address (head:6379) or 'auto' on a cluster node; to run from your machine, submit the "
            "study as a job instead: ray job submit --address "
            f"{address} --working-dir . -- harness run SPEC"
        )
    if scheme == "ray":
        raise InputError(
            f"Ray Client addresses ({address}) are not supported: Tune's driver and MLflow logging must run on "
            "the cluster. Submit the study as a job: ray job submit --address http://HEAD:8265 --working-dir . "
            "-- harness run SPEC"
        )
    problem = _tcp_reachable(address)
    if problem is not None:
        raise InputError(
            f"cannot reach the Ray cluster at {address} ({problem}). Is it running (`ray status --address "
            f"{address}`)? Without --address and RAY_ADDRESS the study runs on an embedded local Ray."
        )


def quiet_tune() -> None:
    """Tune's own console output is replaced by the study's progress table (the user's
    settings win)."""
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # the legacy engine honours verbose=0
    # num_to_keep=1 forces an experiment snapshot at each checkpoint; that is intended.
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")


@contextmanager
def ray_session(address: str | None, runtime_env: dict | None = None) -> Iterator[RayConnection]:
    """Connect to ``address`` or start an embedded local Ray; disconnect at the end if we
    connected here (an already initialised Ray, e.g. in tests or notebooks, is reused).
    ``runtime_env`` is the job-level runtime environment of a cluster connection (the user's
    modules shipped to every node: :mod:`harness.studies.cluster.modules`); an embedded Ray's
    workers share this machine's files and need none."""
    import ray  # see the note on imports at the top of this module

    started_here = False
    if ray.is_initialized():
        description = "the running Ray session"
    elif address:
        enable_token_auth_if_available()
        check_address(address)
        try:
            ray.init(address=address, runtime_env=runtime_env, log_to_driver=False, logging_level=logging.WARNING)
        except Exception as exc:  # noqa: BLE001 - ConnectionError, AuthenticationError, ...
            hint = ""
            if os.environ.get("RAY_AUTH_MODE", "").lower() != "token":
                hint = (
                    " If the cluster uses token authentication, set RAY_AUTH_MODE=token and provide the token "
                    "(RAY_AUTH_TOKEN, or the file ~/.ray/auth_token / $RAY_AUTH_TOKEN_PATH)."
                )
            raise InputError(
                f"cannot connect to the Ray cluster at {address}: {type(exc).__name__}: {exc}.{hint}"
            ) from None
        started_here = True
        description = f"Ray cluster at {address}"
    else:
        # Ray 2.60 turns token authentication on for a new local cluster (and says so at
        # WARNING level); that is the safe default, so keep it and keep the terminal quiet.
        logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(logging.ERROR)
        ray.init(address="local", include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
        started_here = True
        description = "local Ray"
    previous_sigterm = stop_on_sigterm() if started_here else None  # after ray.init: see harness.studies.signals
    try:
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        total = ray.cluster_resources()
        yield RayConnection(
            address=address,
            started_here=started_here,
            description=description,
            cpus=float(total.get("CPU", 0)),
            gpus=float(total.get("GPU", 0)),
            nodes=len(nodes),
            max_node_cpus=max((float(n["Resources"].get("CPU", 0)) for n in nodes), default=0.0),
            max_node_gpus=max((float(n["Resources"].get("GPU", 0)) for n in nodes), default=0.0),
        )
    finally:
        if started_here:
            ray.shutdown()
            restore_sigterm(previous_sigterm)


def check_cluster(spec: StudySpec, ray_conn: RayConnection, storage: str) -> None:
    """The spec's request against what the cluster has (before anything starts)."""
    res = spec.resources
    if res.gpus > 0 and ray_conn.gpus == 0:
        raise InputError(
            f"resources.gpus is {res.gpus:g} per trial, but {ray_conn.description} has no GPUs "
            f"({ray_conn.cpus:g} CPUs); set resources.gpus: 0 to train on CPUs, or use a cluster with GPUs"
        )
    if res.gpus > ray_conn.max_node_gpus > 0:
        raise InputError(
            f"resources.gpus is {res.gpus:g} per trial, but the largest node of {ray_conn.description} has "
            f"{ray_conn.max_node_gpus:g}; no trial could ever be scheduled"
        )
    if res.cpus > ray_conn.max_node_cpus:
        raise InputError(
            f"resources.cpus is {res.cpus} per trial, but the largest node of {ray_conn.description} has "
            f"{ray_conn.max_node_cpus:g} CPUs; no trial could ever be scheduled"
        )
    if ray_conn.nodes > 1 and not is_uri(storage) and not shared_storage_declared(spec):
        raise InputError(
            f"{ray_conn.description} has {ray_conn.nodes} nodes, but the storage path {storage} is local to this "
            "machine: trials on other nodes could not save or restore checkpoints there. Use shared storage "
            "(--storage-path s3://bucket/studies or gs://...), or a network filesystem mounted at the same path on "
            "every node and declared with `storage_shared: true` in the spec (or HARNESS_SHARED_STORAGE=1)."
        )


def local_gpus() -> int | None:
    """GPUs an embedded local Ray would see (Ray's own detection, CUDA_VISIBLE_DEVICES
    included), without starting Ray; None when it cannot tell.

    Ray's only way to count them before ``ray.init`` is private: ``ray._private.accelerators``
    (written against Ray 2.60). A change makes this None (the check after Ray starts still
    refuses a GPU request); tests/studies/test_studies_ray_internals.py fails on it."""
    try:
        from ray._private.accelerators import get_accelerator_manager_for_resource

        manager = get_accelerator_manager_for_resource("GPU")
        visible = manager.get_current_process_visible_accelerator_ids()
        found = int(manager.get_current_node_num_accelerators())
        return min(found, len(visible)) if visible is not None else found
    except Exception:  # noqa: BLE001 - a private Ray API: the check after Ray starts still applies
        return None


def check_local_gpus(spec: StudySpec) -> None:
    """GPUs asked for on a machine without any are refused before the corpora are cached
    and before Ray starts (the same message as :func:`check_cluster`)."""
    if spec.resources.gpus > 0 and local_gpus() == 0:
        raise InputError(
            f"resources.gpus is {spec.resources.gpus:g} per trial, but local Ray has no GPUs "
            f"({os.cpu_count()} CPUs); set resources.gpus: 0 to train on CPUs, or use a cluster with GPUs (--address)"
        )
