"""Where a study's record may go: never into a place that disappears with a Ray job.

A Ray job does not inherit the environment of the shell that submitted it, and the job's
driver runs in Ray's temporary copy of the working directory
(``<ray temp>/session_*/runtime_resources/working_dir_files/_ray_pkg_*``), which Ray deletes
with its session. A study submitted with ``MLFLOW_TRACKING_URI`` exported only in the
client's shell therefore falls back to ``sqlite:///mlflow.db`` and ``./results`` *inside
that copy*: it succeeds, and its record is lost. Two checks, one on each side of a job:

- :func:`refuse_ephemeral_destinations` (the driver: ``harness run`` as a job's entrypoint)
  applies one rule before anything starts: inside a job, the tracking URI and the storage
  path must each be remote, or an absolute path that was asked for (not the working
  directory's default) and lies outside Ray's session directory, which holds the job's
  temporary copy of the working directory;
- :func:`refuse_local_destinations` (the client: ``harness submit``) refuses a local SQLite
  URI or a local storage path when the cluster is not on this machine (one probe:
  :func:`locate_cluster`), since the driver would write them on the cluster's head, not here.
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from harness.errors import InputError
from harness.mlflow_client import redact_uri, sqlite_path

#: Set by Ray's job supervisor for a job's entrypoint (Ray 2.60): the job's runtime_env and
#: metadata, whose ``job_submission_id`` is the job id.
RAY_JOB_CONFIG_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR"
#: The tag of a study's MLflow parent run that names the Ray job whose driver started or last
#: continued it (``harness submit`` finds the run by it).
RAY_JOB_TAG = "harness.ray_job"
#: The folder of a Ray session that holds working-directory copies and other runtime envs.
RAY_RUNTIME_RESOURCES = "runtime_resources"

#: What to use instead (both sides say the same).
TRACKING_SERVER = "a tracking server: --tracking-uri http://MLFLOW:5000 (docker/compose.yaml starts one)"
TRACKING_ADVICE = f"{TRACKING_SERVER}, or sqlite:////ABSOLUTE/PATH/mlflow.db on a disk that outlives the job"
STORAGE_ADVICE = (
    "shared storage: --storage-path s3://BUCKET/studies (or gs://...), or a network filesystem mounted at the same "
    "path on every node, declared with `storage_shared: true` in the spec (or HARNESS_SHARED_STORAGE=1)"
)


def is_uri(path: str) -> bool:
    """A remote storage URI (``s3://``, ``gs://`` ...); ``file://`` and plain paths are local."""
    return "://" in path and not path.startswith("file://")


def tracking_local_path(uri: str, cwd: Path | None = None) -> Path | None:
    """The file or folder a tracking URI writes to on the machine that uses it (a SQLite
    database, or a file store's folder), resolved against ``cwd``; None for a server or an
    in-memory database."""
    scheme = urlparse(uri).scheme.lower()
    if scheme == "sqlite":
        path = sqlite_path(uri)
    elif scheme == "file":
        path = Path(urlparse(uri).path)
    elif scheme == "":
        path = Path(uri)
    else:
        return None
    if path is None:
        return None
    return ((cwd or Path.cwd()) / path.expanduser()).resolve()


def absolute_tracking_uri(uri: str, cwd: Path | None = None) -> str:
    """A SQLite URI with a relative path (``sqlite:///mlflow.db``) made absolute against ``cwd``
    (default: the working directory), so that it names the same database wherever it is used
    later (a Ray job's driver, ``harness report --from`` in another folder); any other URI
    as it is (a file store is refused elsewhere, not rewritten)."""
    local = tracking_local_path(uri, cwd)
    if local is None or urlparse(uri).scheme.lower() != "sqlite":
        return uri
    query = uri.split("?", 1)[1] if "?" in uri else ""
    return f"sqlite:///{local}" + (f"?{query}" if query else "")


def storage_local_path(storage: str, cwd: Path | None = None) -> Path | None:
    """The local folder of a storage path (``file://`` or a plain path), resolved against
    ``cwd``; None for remote storage (``s3://``, ``gs://`` ...)."""
    if is_uri(storage):
        return None
    raw = storage[len("file://") :] if storage.startswith("file://") else storage
    return ((cwd or Path.cwd()) / Path(raw).expanduser()).resolve()


# -- the driver side ------------------------------------------------------------------------


@dataclass(frozen=True)
class JobDriver:
    """This process as the driver (entrypoint) of a Ray job.

    ``working_dir`` is where relative paths resolve; ``ray_copy`` says whether it is Ray's
    temporary copy of the submitted working directory (under ``session_dir``)."""

    job_id: str | None  # None when Ray's job config is absent or unreadable
    working_dir: Path
    ray_copy: bool
    session_dir: Path | None

    def describe(self) -> str:
        who = f"the driver of Ray job {self.job_id}" if self.job_id else "a Ray job's driver"
        if self.ray_copy:
            return (
                f"this `harness run` is {who} and runs in Ray's temporary copy of the job's working directory "
                f"({self.working_dir}), which Ray deletes with its session"
            )
        return (
            f"this `harness run` is {who} and runs in the working directory of the cluster's job driver "
            f"({self.working_dir}), not in the directory of the shell that submitted it"
        )


def job_driver(environ: Mapping[str, str] | None = None, cwd: Path | None = None) -> JobDriver | None:
    """The Ray job this process drives, from the job config Ray hands its entrypoint or a
    working directory inside Ray's ``runtime_resources``; None outside a job."""
    environ = os.environ if environ is None else environ
    cwd = (cwd or Path.cwd()).resolve()
    job_id = None
    raw = environ.get(RAY_JOB_CONFIG_ENV)
    if raw:
        try:
            job_id = json.loads(raw).get("metadata", {}).get("job_submission_id")
        except (ValueError, AttributeError):
            job_id = None
    parts = cwd.parts
    ray_copy = RAY_RUNTIME_RESOURCES in parts
    if not ray_copy and not raw:
        return None
    session_dir = Path(*parts[: parts.index(RAY_RUNTIME_RESOURCES)]) if ray_copy else None
    return JobDriver(job_id=job_id, working_dir=cwd, ray_copy=ray_copy, session_dir=session_dir)


DEFAULT_TRACKING_NOTE = (
    " (the default: no --tracking-uri, no tracking.uri in the spec, no MLFLOW_TRACKING_URI in the job)"
)
DEFAULT_STORAGE_NOTE = (
    " (the default ./results: no --storage-path, no storage_path in the spec, no HARNESS_STORAGE_PATH in the job)"
)


def _inside(path: Path, folder: Path | None) -> bool:
    return folder is not None and (path == folder or folder in path.parents)


def _is_relative(destination: str) -> bool:
    """A destination written relative to the working directory (``sqlite:///mlflow.db``,
    ``results``, ``file:./mlruns``)."""
    scheme = urlparse(destination).scheme.lower()
    if scheme == "sqlite":
        path = sqlite_path(destination)
        return path is not None and not path.is_absolute()
    if scheme == "file":
        return not urlparse(destination).path.startswith("/")
    return "://" not in destination and not Path(destination).expanduser().is_absolute()


def _lost(path: Path, default: Path, destination: str, driver: JobDriver) -> bool:
    """The rule for a destination inside a Ray job: it must be remote, or written as an
    absolute path that is not the working directory's default and lies outside Ray's session
    directory (where Ray keeps the job's temporary copy of the working directory, deleted
    with the session). Whether ``destination`` (resolved: ``path``) breaks it."""
    return _is_relative(destination) or path == default or _inside(path, driver.session_dir)


def refuse_ephemeral_destinations(*, tracking_uri: str, storage: str, driver: JobDriver | None = None) -> None:
    """As a Ray job's driver, refuse a tracking URI or storage path that breaks the rule of
    :func:`_lost` (a relative path such as ``sqlite:///mlflow.db``, ``./results`` or
    ``./mlruns``; the working directory's default, a folder of the head that the submitter
    never chose; anything in Ray's session directory, deleted with it): :class:`InputError`
    naming ``--tracking-uri`` / ``--storage-path``. Outside a job, nothing is checked.

    ``driver`` defaults to :func:`job_driver` of this process."""
    driver = driver if driver is not None else job_driver()
    if driver is None:
        return
    here = driver.working_dir
    problems = []
    db = tracking_local_path(tracking_uri, here)
    if db is not None and _lost(db, here / "mlflow.db", tracking_uri, driver):
        note = DEFAULT_TRACKING_NOTE if db == here / "mlflow.db" else ""
        problems.append(f"  --tracking-uri {redact_uri(tracking_uri)}{note} would put the study's MLflow record there")
    folder = storage_local_path(storage, here)
    if folder is not None and _lost(folder, here / "results", storage, driver):
        note = DEFAULT_STORAGE_NOTE if folder == here / "results" else ""
        problems.append(f"  --storage-path {storage}{note} would put the trials, checkpoints and results.parquet there")
    if not problems:
        return
    raise InputError(
        f"{driver.describe()}; the study's record must not go there:\n"
        + "\n".join(problems)
        + "\nPass both destinations explicitly:\n"
        f"  MLflow: {TRACKING_ADVICE}\n"
        f"  Tune's storage: {STORAGE_ADVICE}; on a single machine, an absolute path\n"
        "A Ray job does not inherit the environment of the shell that submitted it: MLFLOW_TRACKING_URI and "
        "HARNESS_STORAGE_PATH exported there stay behind. `harness submit` passes them along."
    )


# -- the client side ------------------------------------------------------------------------


def dashboard_host(address: str) -> str:
    """The host of a dashboard address (``http://head:8265``, or ``head:8265``)."""
    parsed = urlparse(address if "://" in address else f"http://{address}")
    return parsed.hostname or ""


def is_local_ip(ip: str) -> bool:
    """Whether ``ip`` is an address of this machine: a loopback address, or one a socket can
    bind to (the kernel refuses any other)."""
    try:
        address = ipaddress.ip_address(ip.split("%", 1)[0])
    except ValueError:
        return False
    if address.is_loopback:
        return True
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.bind((str(address), 0))
    except OSError:
        return False
    return True


def is_local_address(address: str) -> bool:
    """Whether a dashboard address names this machine (loopback, or an address of one of its
    interfaces). A name that does not resolve is not local."""
    host = dashboard_host(address)
    if not host:
        return False
    try:
        resolved = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except OSError:
        return False
    return any(is_local_ip(ip) for ip in resolved)


@dataclass(frozen=True)
class ClusterPlace:
    """Whether the Ray cluster behind a dashboard runs on this machine, and how that was told."""

    here: bool
    why: str  # for a cluster elsewhere: what says so, in words


def locate_cluster(dashboard: str, head_ip: Callable[[], str | None]) -> ClusterPlace:
    """The one probe of where a cluster runs, as ``harness submit`` sees it. A dashboard address
    that names another machine puts the cluster there, without any contact; one that names this
    machine may still lead elsewhere (a tunnel, a port-forward), so the IP of the cluster's head
    node, asked of the dashboard (``head_ip()``, called only then; None: it cannot tell),
    decides: one of this machine's addresses, or not."""
    if not is_local_address(dashboard):
        return ClusterPlace(False, f"the Ray dashboard {dashboard} is not on this machine")
    ip = head_ip()
    if ip is None or is_local_ip(ip):
        return ClusterPlace(True, f"the Ray dashboard {dashboard} is on this machine")
    return ClusterPlace(False, f"the Ray cluster behind {dashboard} is not on this machine (its head node is {ip})")


def refuse_local_destinations(*, place: ClusterPlace, tracking_uri: str, storage: str, storage_shared: bool) -> None:
    """For a cluster that is not on this machine (``place``, from :func:`locate_cluster`), a
    local SQLite URI (or file store) and a local storage path not declared shared would be
    written by the driver on the cluster's head, not here: :class:`InputError` saying what to use
    instead. Nothing is refused for a cluster on this machine."""
    if place.here:
        return
    problems = []
    if tracking_local_path(tracking_uri) is not None:
        problems.append(
            f"  --tracking-uri {redact_uri(tracking_uri)} is a database on this machine: the driver would create a "
            f"database of its own on the cluster's head instead. Use {TRACKING_SERVER}."
        )
    if storage_local_path(storage) is not None and not storage_shared:
        problems.append(
            f"  --storage-path {storage} is a folder on this machine: the trials would write their checkpoints "
            f"on the cluster's nodes instead. Use {STORAGE_ADVICE}."
        )
    if problems:
        raise InputError(f"{place.why}, so the study's driver runs there:\n" + "\n".join(problems))
