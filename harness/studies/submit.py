"""``harness submit``: a study as a Ray job (Ray Jobs SDK), its destinations passed explicitly.

A Ray job does not inherit the environment of the shell that submits it, so
``ray job submit -- harness run SPEC`` with ``MLFLOW_TRACKING_URI`` exported only in that
shell writes the study into Ray's temporary working directory (see
:mod:`harness.studies.cluster.destinations`). ``harness submit`` therefore

1. checks everything here first (the spec, the dashboard address, the destinations, where the
   cluster runs, that each user component's module is found) and submits nothing on bad
   input; the modules of user components beside the spec travel as the job's ``py_modules``
   (the driver on the cluster imports and checks them before any trial starts; beside a spec
   at the working directory's root they travel with it, which Ray puts on every worker's
   Python path);
2. resolves the destinations as ``harness run`` would (flag > spec > ``$MLFLOW_TRACKING_URI``
   / ``$HARNESS_STORAGE_PATH`` > default), makes local paths absolute, refuses local ones
   when the dashboard is not on this machine, and passes them to the job's driver as
   ``--tracking-uri`` / ``--storage-path`` in the entrypoint;
3. presents Ray's token (``RAY_AUTH_MODE=token`` when a token is available, as Ray does
   for ``ray.init()``);
4. streams the job's output (the study's progress lines) and exits with the job's
   status; Ctrl-C asks whether to stop the job or detach (without a terminal: detach);
5. prints the job id, the resume command and the MLflow link of the study's parent run.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shlex
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlparse

from ray.job_submission import JobStatus, JobSubmissionClient

from harness.errors import InputError
from harness.mlflow_client import TrackingClient, check_tracking_uri, redact_uri, resolve_tracking_uri, run_ui_url
from harness.studies.cluster.connect import resolve_storage, shared_storage_declared
from harness.studies.cluster.destinations import (
    RAY_JOB_TAG,
    absolute_tracking_uri,
    locate_cluster,
    refuse_local_destinations,
    storage_local_path,
    tracking_local_path,
)
from harness.studies.cluster.modules import local_packages, spec_modules, stage_py_modules
from harness.studies.cluster.ray_auth import enable_token_auth_if_available
from harness.studies.spec.study_spec import StudySpec, load_spec, spec_folder
from harness.studies.storage import check_storage

#: Settings of the client's shell that the job needs and would not inherit (sent as the
#: job's ``runtime_env`` ``env_vars``): the shared-storage declaration, the corpus mirror,
#: the tracking server's credentials. Never the data or cache folders: those are paths of
#: this machine.
FORWARDED_ENV = (
    "HARNESS_SHARED_STORAGE",
    "HARNESS_DATA_MIRROR",
    "MLFLOW_TRACKING_USERNAME",
    "MLFLOW_TRACKING_PASSWORD",
    "MLFLOW_TRACKING_TOKEN",
)
#: What the harness writes into a working directory; never uploaded with the job
#: (gitignore patterns, anchored at the working directory).
OUTPUT_EXCLUDES = (
    "/mlflow.db",
    "/mlruns/",
    "/mlartifacts/",
    "/results/",
    "/reports/",
    "/checkpoints/",
    "/lightning_logs/",
)
#: Exit code of a job stopped before it finished (as for an interrupted `harness run`).
EXIT_STOPPED = 130
TERMINAL = (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED)


@dataclass(frozen=True)
class Submission:
    """Everything ``harness submit`` sends: the driver's command line (with the resolved
    destinations), the working directory that travels with it, and the forwarded settings."""

    spec: StudySpec
    spec_path: str  # relative to working_dir, as the driver sees it
    working_dir: Path
    dashboard: str
    tracking_uri: str
    storage: str
    resume: bool = False
    env_vars: dict[str, str] = field(default_factory=dict)
    # The user's component modules found beside a spec below the working directory (files or
    # package folders), shipped as the job's py_modules (:func:`stage_py_modules`): on the
    # Python path of the driver and of every trial, on every node.
    py_modules: tuple[Path, ...] = ()

    def driver_args(self) -> list[str]:
        args = ["harness", "run", self.spec_path, "--tracking-uri", self.tracking_uri, "--storage-path", self.storage]
        return [*args, "--resume"] if self.resume else args

    @property
    def entrypoint(self) -> str:
        return shlex.join(self.driver_args())

    def runtime_env(self) -> dict[str, Any]:
        excludes = list(OUTPUT_EXCLUDES)
        for local in (tracking_local_path(self.tracking_uri), storage_local_path(self.storage)):
            if local is not None and self.working_dir in local.parents:  # a local cluster's results
                excludes.append("/" + local.relative_to(self.working_dir).as_posix())
        env = {"working_dir": str(self.working_dir), "excludes": excludes, "env_vars": dict(self.env_vars)}
        if self.py_modules:
            env["py_modules"] = [str(path) for path in self.py_modules]
        return env

    def resume_command(self) -> str:
        """``harness submit ... --resume`` with every destination spelled out (the password
        of a tracking URI as ``***``)."""
        spec = self.working_dir / self.spec_path
        args = ["harness", "submit", _shown_path(spec), "--address", self.dashboard]
        args += ["--tracking-uri", redact_uri(self.tracking_uri), "--storage-path", self.storage]
        if self.working_dir != Path.cwd().resolve():
            args += ["--working-dir", str(self.working_dir)]
        return shlex.join([*args, "--resume"])


def _shown_path(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


# -- check and plan (nothing is sent) ----------------------------------------------------------


def resolve_dashboard(address: str | None) -> str:
    """``--address`` > ``$RAY_ADDRESS``; it must be the dashboard (job submission) URL."""
    raw = address or os.environ.get("RAY_ADDRESS")
    if not raw:
        raise InputError("no Ray dashboard address: pass --address http://HEAD:8265 (or set RAY_ADDRESS to it)")
    url = raw if "://" in raw else f"http://{raw}"
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise InputError(f"Ray dashboard address {raw!r}: expected http://HEAD:8265 (the job submission address)")
    if parsed.port in (6379, 10001):
        raise InputError(
            f"{raw} looks like the cluster's {'GCS' if parsed.port == 6379 else 'Ray Client'} address; jobs are "
            "submitted to the dashboard: --address http://HEAD:8265"
        )
    return url.rstrip("/")


def plan_submission(
    spec_path: str | os.PathLike[str],
    *,
    address: str | None,
    tracking_uri: str | None,
    storage_path: str | None,
    working_dir: str | os.PathLike[str] | None,
    resume: bool,
) -> Submission:
    """Check the spec, the address and the destinations, and resolve what to send; raises
    :class:`InputError` (nothing submitted) on any problem."""
    spec = load_spec(spec_path)
    dashboard = resolve_dashboard(address)
    workdir = Path(working_dir or ".").expanduser().resolve()
    if not workdir.is_dir():
        raise InputError(f"--working-dir {working_dir}: not a directory")
    try:
        spec_rel = Path(spec_path).resolve().relative_to(workdir).as_posix()
    except ValueError:
        raise InputError(
            f"the spec {spec_path} lies outside the working directory {workdir}, which is what travels with the job; "
            "move it there or pass --working-dir"
        ) from None
    uri = absolute_tracking_uri(resolve_tracking_uri(tracking_uri or spec.tracking.uri))
    storage = resolve_storage(storage_path, spec)
    check_tracking_uri(uri)  # no network: a file store, a missing or read-only folder
    if storage_local_path(storage) is not None:
        check_storage(storage)  # remote storage is the cluster's to reach (its credentials, not ours)
    env_vars = {name: os.environ[name] for name in FORWARDED_ENV if os.environ.get(name)}
    modules = component_modules(spec, spec_folder(spec_path), workdir)
    return Submission(
        spec, spec_rel, workdir, dashboard, uri, storage, resume=resume, env_vars=env_vars, py_modules=modules
    )


def component_modules(spec: StudySpec, spec_dir: str, working_dir: Path) -> tuple[Path, ...]:
    """What the job ships as ``py_modules`` (:mod:`harness.studies.cluster.modules`): the modules
    of the user components beside the spec, when the spec lies below the working directory, and
    those on this machine's Python path but not installed (with their ``*.dist-info``). Beside a
    spec at the working directory's root they travel with it already: Ray puts the job's working
    directory on every worker's Python path. InputError for a module found nowhere. The driver on
    the cluster imports and checks them before any trial starts."""
    beside = spec_modules(spec, spec_dir)  # raises for a module found nowhere, wherever the spec lies
    return tuple(dict.fromkeys([*(() if Path(spec_dir) == working_dir else beside), *local_packages(spec)]))


# -- the job ----------------------------------------------------------------------------------


def connect(dashboard: str) -> JobSubmissionClient:
    """A Jobs SDK client that presents Ray's token when one is available."""
    # Ray's note that the log stream closed says nothing (its upload messages stay).
    logging.getLogger("ray.dashboard.modules.job.sdk").setLevel(logging.WARNING)
    enable_token_auth_if_available()
    # Ray's clients let $RAY_API_SERVER_ADDRESS / $RAY_ADDRESS override the address they are
    # given; here --address has already won over $RAY_ADDRESS.
    os.environ["RAY_API_SERVER_ADDRESS"] = dashboard
    try:
        return JobSubmissionClient(dashboard)
    except Exception as exc:  # noqa: BLE001 - ConnectionError, RuntimeError (401/403) ...
        hint = ""
        if os.environ.get("RAY_AUTH_MODE", "").lower() != "token":
            hint = (
                " If the cluster uses token authentication, provide its token (RAY_AUTH_TOKEN, or the file "
                "~/.ray/auth_token / $RAY_AUTH_TOKEN_PATH)."
            )
        raise InputError(f"cannot reach the Ray dashboard at {dashboard}: {exc}{hint}") from None


def head_node_ip(dashboard: str) -> str | None:
    """The IP address of the cluster's head node, asked of its dashboard (Ray's state API,
    with the token); None when the dashboard cannot tell."""
    from ray.util.state import list_nodes

    try:
        nodes = list_nodes(address=dashboard, filters=[("is_head_node", "=", True)], timeout=30)
    except Exception:  # noqa: BLE001 - an older dashboard, a refused request: judge by the address alone
        return None
    ips = [
        getattr(node, "node_ip", None) or (node.get("node_ip") if isinstance(node, dict) else None) for node in nodes
    ]
    return next((ip for ip in ips if ip), None)


def connect_where_it_runs(submission: Submission) -> JobSubmissionClient:
    """Connect to the dashboard, refusing destinations local to this machine for a cluster that is
    not on it (:func:`~harness.studies.cluster.destinations.locate_cluster`, the one probe: a
    dashboard address naming another machine is refused before any contact; for one naming this
    machine, the head node's IP asked of the dashboard decides, since a tunnel or a port-forward
    makes a remote cluster look local)."""
    client: JobSubmissionClient | None = None

    def head_ip() -> str | None:
        nonlocal client
        client = connect(submission.dashboard)
        return head_node_ip(submission.dashboard)

    refuse_local_destinations(
        place=locate_cluster(submission.dashboard, head_ip),
        tracking_uri=submission.tracking_uri,
        storage=submission.storage,
        storage_shared=shared_storage_declared(submission.spec),
    )
    return client if client is not None else connect(submission.dashboard)


def submit_job(client: JobSubmissionClient, submission: Submission) -> str:
    """Send the job (its files are uploaded here, before this returns)."""
    with tempfile.TemporaryDirectory(prefix="harness-py-modules-") as staging:
        runtime_env = submission.runtime_env()
        if submission.py_modules:
            runtime_env["py_modules"] = stage_py_modules(submission.py_modules, Path(staging))
        try:
            return client.submit_job(
                entrypoint=submission.entrypoint,
                runtime_env=runtime_env,
                metadata={"harness.study": submission.spec.name, "harness.spec": submission.spec_path},
            )
        except Exception as exc:  # noqa: BLE001 - a working directory too large, a refused request ...
            raise InputError(f"the Ray dashboard at {submission.dashboard} refused the job: {exc}") from None


async def _tail(client: JobSubmissionClient, job_id: str, out: TextIO) -> None:
    async for lines in client.tail_job_logs(job_id):
        out.write(lines)
        out.flush()


def wait_for_end(client: JobSubmissionClient, job_id: str, *, poll_s: float = 1.0) -> Any:
    """The job's final :class:`JobDetails` (the log stream may close before the status is written)."""
    while True:
        info = client.get_job_info(job_id)
        if info.status in TERMINAL:
            return info
        time.sleep(poll_s)


def follow(client: JobSubmissionClient, job_id: str, out: TextIO) -> Any:
    """Stream the job's output until it ends; returns its final :class:`JobDetails`."""
    try:
        asyncio.run(_tail(client, job_id, out))
    except RuntimeError as exc:  # the log stream broke: the job itself goes on
        print(f"warning: lost the job's log stream ({exc}); waiting for its end", file=sys.stderr, flush=True)
    return wait_for_end(client, job_id)


def job_exit_code(info: Any) -> int:
    """0 for a job that succeeded, the driver's exit code for one that failed (2: bad
    input), 130 for one stopped."""
    if info.status == JobStatus.SUCCEEDED:
        return 0
    if info.status == JobStatus.STOPPED:
        return EXIT_STOPPED
    code = getattr(info, "driver_exit_code", None)
    return code if isinstance(code, int) and code > 0 else 1


def follow_commands(submission: Submission, job_id: str) -> str:
    address = shlex.quote(submission.dashboard)
    return (
        f"  follow it:  ray job logs -f {job_id} --address {address}\n"
        f"  stop it:    ray job stop {job_id} --address {address}\n"
        f"  resume it:  {submission.resume_command()}"
    )


def ask_stop_or_detach(stdin: TextIO | None = None) -> str:
    """``stop`` or ``detach``: asked on a terminal; without one (or on a second Ctrl-C, or
    end of input), ``detach``: the job goes on."""
    stdin = stdin or sys.stdin
    if not (hasattr(stdin, "isatty") and stdin.isatty()):
        return "detach"
    try:
        print("\nStop the job (s) or detach and leave it running (d)? [d] ", end="", file=sys.stderr, flush=True)
        answer = stdin.readline().strip().lower()
    except (KeyboardInterrupt, EOFError):
        return "detach"
    return "stop" if answer in ("s", "stop") else "detach"


# -- where the study went -----------------------------------------------------------------------


def find_parent_run(tracking_uri: str, experiment: str, job_id: str) -> tuple[str, str] | None:
    """``(experiment id, run id)`` of the study's parent run that Ray job ``job_id`` started
    or continued (its driver tags it: :data:`~harness.studies.cluster.destinations.RAY_JOB_TAG`), or
    None when the store cannot tell (not reachable from here, or no such run)."""
    local = tracking_local_path(tracking_uri)
    if local is not None and not local.exists():
        return None  # looking must not create a store
    try:  # MLflow loads with the first client: only this last step needs it
        client = TrackingClient(tracking_uri)
        found = client.get_experiment_by_name(experiment)
        if found is None:
            return None
        runs = client.search_runs(
            [found.experiment_id],
            filter_string=f"tags.`harness.role` = 'study' and tags.`{RAY_JOB_TAG}` = '{job_id}'",
            max_results=1,
        )
    except Exception:  # noqa: BLE001 - an unreachable server costs the link, nothing else
        return None
    return (str(found.experiment_id), runs[0].info.run_id) if runs else None


def report_end(submission: Submission, job_id: str, info: Any, say: Any) -> None:
    """The job's status, the study's MLflow link and, unless it succeeded, how to resume."""
    code = getattr(info, "driver_exit_code", None)
    detail = f" (driver exit code {code})" if info.status == JobStatus.FAILED and code is not None else ""
    say(f"Job {job_id}: {info.status.value}{detail}")
    uri = submission.tracking_uri
    parent = find_parent_run(uri, submission.spec.experiment_name(), job_id)
    if parent is not None:
        experiment_id, run_id = parent
        link = run_ui_url(uri, experiment_id, run_id)
        say(f'MLflow: parent run {run_id} in experiment "{submission.spec.experiment_name()}" ({redact_uri(uri)})')
        is_server = urlparse(uri).scheme in ("http", "https")
        say(f"View it: {link}" if is_server else f"View it: harness ui --tracking-uri {redact_uri(uri)}  ->  {link}")
    if info.status != JobStatus.SUCCEEDED:
        say(f"Resume it with: {submission.resume_command()}")


def submit_study(
    spec_path: str | os.PathLike[str],
    *,
    address: str | None = None,
    tracking_uri: str | None = None,
    storage_path: str | None = None,
    working_dir: str | os.PathLike[str] | None = None,
    wait: bool = True,
    resume: bool = False,
    stream: TextIO | None = None,
) -> int:
    """``harness submit``: check, submit, follow, report (see the module docstring).
    Returns the exit code: the job's (0 succeeded, the driver's code when it failed, 130
    stopped), or 0 once submitted with ``wait=False`` or detached."""
    out = stream or sys.stdout

    def say(text: str = "") -> None:
        print(text, file=out, flush=True)

    submission = plan_submission(
        spec_path,
        address=address,
        tracking_uri=tracking_uri,
        storage_path=storage_path,
        working_dir=working_dir,
        resume=resume,
    )
    client = connect_where_it_runs(submission)
    job_id = submit_job(client, submission)
    say(f"Study {submission.spec.name}: Ray job {job_id} on {submission.dashboard}" + (" (resuming)" if resume else ""))
    say(f"  driver: {redact_uri(submission.entrypoint)}")
    say(f"  MLflow: {redact_uri(submission.tracking_uri)}   storage: {submission.storage}")
    say(follow_commands(submission, job_id))
    if not wait:
        return 0
    try:
        info = follow(client, job_id, out)
    except KeyboardInterrupt:
        if ask_stop_or_detach() == "detach":
            say(f"\nDetached: job {job_id} goes on without this terminal.\n{follow_commands(submission, job_id)}")
            return 0
        say(f"Stopping job {job_id} ...")
        client.stop_job(job_id)
        try:
            info = wait_for_end(client, job_id)
        except KeyboardInterrupt:
            say(f"\nDetached while the job stops.\n{follow_commands(submission, job_id)}")
            return 0
    report_end(submission, job_id, info, say)
    return job_exit_code(info)
