"""``harness run`` (a study on Ray Tune), ``harness submit`` (a study as a Ray job),
``harness ui`` (MLflow UI). ``harness report`` is the report package's (:mod:`harness.report.cli`).

Module import stays light: Ray, MLflow, torch, the statistics and matplotlib load inside
the commands.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from harness.cli_options import StudyTrackingUri, TrackingUri, tracking_uri_option


def run(
    spec: Annotated[Path, typer.Argument(help="Study spec (YAML), e.g. studies/smoke.yaml.")],
    address: Annotated[
        str | None,
        typer.Option(
            "--address",
            help="Ray cluster address (head:6379 or 'auto'). Default: $RAY_ADDRESS, else an embedded local Ray.",
        ),
    ] = None,
    tracking_uri: StudyTrackingUri = None,
    storage_path: Annotated[
        str | None,
        typer.Option(
            "--storage-path",
            help="Where Tune keeps trials and checkpoints (s3://, gs://, or a path). Default: the spec's storage_path, "
            "$HARNESS_STORAGE_PATH, ./results.",
        ),
    ] = None,
    resume: Annotated[
        bool, typer.Option("--resume", help="Continue the latest run of this study: finished trials are kept.")
    ] = False,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Print the grid, resources and a cost estimate; start no Ray, no trial, write nothing. A user "
            "component the spec names is imported and checked first: its module's code runs (docs/security.md).",
        ),
    ] = False,
) -> None:
    """Run a study: every trial of the spec's grid on Ray Tune, recorded in MLflow (a parent
    run, one child run per trial), then the results table and the report."""
    if not dry_run:  # a wrong cluster address answers before torch, Ray and MLflow load (5 s)
        from harness.studies.cluster.connect import check_address, resolve_address

        if resolved := resolve_address(address):
            check_address(resolved)
    from harness.studies.runner import run_study

    try:
        outcome = run_study(
            spec, address=address, tracking_uri=tracking_uri, storage_path=storage_path, resume=resume, dry_run=dry_run
        )
    except KeyboardInterrupt:  # a second Ctrl-C: Tune's graceful stop was cut short
        typer.secho(
            f"interrupted: continue the study with `harness run {spec} --resume`", fg=typer.colors.YELLOW, err=True
        )
        raise typer.Exit(130) from None
    if outcome.status == "interrupted":
        raise typer.Exit(130)
    if outcome.counts and outcome.counts.get("failed"):
        typer.secho(
            f"{outcome.counts['failed']} trial(s) failed after their retries (see the error logs above)",
            fg=typer.colors.RED,
            err=True,
        )
        raise typer.Exit(1)


def submit(
    spec: Annotated[
        Path, typer.Argument(help="Study spec (YAML) inside the working directory, e.g. studies/smoke.yaml.")
    ],
    address: Annotated[
        str | None,
        typer.Option(
            "--address", help="The cluster's dashboard (job submission) URL, http://HEAD:8265. Default: $RAY_ADDRESS."
        ),
    ] = None,
    tracking_uri: Annotated[
        str | None,
        tracking_uri_option(
            "the job driver's: the spec's tracking.uri, $MLFLOW_TRACKING_URI here, "
            "sqlite:///mlflow.db here (a local cluster only)"
        ),
    ] = None,
    storage_path: Annotated[
        str | None,
        typer.Option(
            "--storage-path",
            help="Tune storage for the job (s3://, gs://, a shared path). Default: the spec's storage_path, "
            "$HARNESS_STORAGE_PATH here, ./results here (a local cluster only).",
        ),
    ] = None,
    working_dir: Annotated[
        Path | None,
        typer.Option("--working-dir", help="Folder that travels with the job (code and specs). Default: this one."),
    ] = None,
    no_wait: Annotated[
        bool, typer.Option("--no-wait", help="Submit, print the job id and how to follow it, and return.")
    ] = False,
    resume: Annotated[
        bool, typer.Option("--resume", help="Continue the latest run of this study: finished trials are kept.")
    ] = False,
) -> None:
    """Submit a study to a Ray cluster as a job (Ray Jobs SDK), its MLflow URI and storage path
    passed explicitly; stream its progress and exit with the job's status. Ctrl-C asks whether
    to stop the job or detach."""
    from harness.studies.submit import submit_study

    code = submit_study(
        spec,
        address=address,
        tracking_uri=tracking_uri,
        storage_path=storage_path,
        working_dir=working_dir,
        wait=not no_wait,
        resume=resume,
    )
    if code:
        raise typer.Exit(code)


def ui(
    tracking_uri: TrackingUri = None,
    port: Annotated[int, typer.Option("--port", help="Port of the UI.")] = 5000,
    host: Annotated[
        str, typer.Option("--host", help="Interface to bind (127.0.0.1: this machine only).")
    ] = "127.0.0.1",
) -> None:
    """Start the MLflow UI on the study's tracking store (bound to 127.0.0.1 unless told otherwise)."""
    from harness.errors import InputError
    from harness.mlflow_client import check_tracking_uri, resolve_tracking_uri, sqlite_path, ui_link

    uri = resolve_tracking_uri(tracking_uri)
    if uri.startswith(("http://", "https://")):
        raise InputError(f"{uri} is a tracking server already: open it in a browser instead of starting a UI")
    check_tracking_uri(uri)
    db = sqlite_path(uri) if uri.startswith("sqlite:") else None
    if db is not None and not db.exists():
        raise InputError(
            f"no MLflow database at {uri}: run a study first (harness run studies/smoke.yaml) or pass --tracking-uri"
        )
    env = {
        **os.environ,
        "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": os.environ.get("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false"),
    }
    cmd = [
        sys.executable,
        "-m",
        "mlflow",
        "server",
        "--backend-store-uri",
        uri,
        "--host",
        host,
        "--port",
        str(port),
        "--workers",
        "1",
    ]
    # The experiments in MLflow 3's "Model training" view (its default view is GenAI's).
    typer.echo(f"MLflow UI for {uri}: http://{host}:{port}/{ui_link('experiments')}  (Ctrl-C stops it)")
    raise typer.Exit(serve_until_stopped(cmd, env=env))


#: Seconds the UI's server gets to stop after SIGTERM before its process group is killed.
UI_STOP_GRACE_S = 10.0


def serve_until_stopped(cmd: list[str], *, env: dict[str, str]) -> int:
    """Run the server ``cmd`` in a process group of its own until it exits, or until this process
    gets Ctrl-C, SIGTERM or SIGHUP; then stop the whole group (the MLflow server's gunicorn or
    uvicorn workers with it): SIGTERM, and SIGKILL after :data:`UI_STOP_GRACE_S`. Returns the
    server's exit code (0 when stopped by a signal)."""
    import signal

    server = subprocess.Popen(cmd, env=env, start_new_session=True)

    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        return server.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        _stop_group(server, grace_s=UI_STOP_GRACE_S)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _stop_group(process: subprocess.Popen, *, grace_s: float) -> None:
    """SIGTERM to ``process``'s group, SIGKILL to what is left after ``grace_s`` seconds."""
    import signal

    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return  # the group is gone
        try:
            process.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            continue
        try:  # the leader stopped; its workers may linger in the group
            os.killpg(process.pid, 0)
        except ProcessLookupError:
            return


# --- harness report ------------------------------------------------------------------


def register(app: typer.Typer) -> None:
    """Add ``harness run``, ``harness submit``, ``harness ui`` and ``harness report``."""
    app.command("run")(run)
    app.command("submit")(submit)
    app.command("ui")(ui)


__all__ = ["register", "run", "submit", "ui"]
