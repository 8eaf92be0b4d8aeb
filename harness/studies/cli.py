"""``harness run`` (a study on Ray Tune), ``harness submit`` (a study as a Ray job),
``harness ui`` (MLflow UI), ``harness bench study``.

Module import stays light: Ray, MLflow and torch load inside the commands.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import typer


def run(
    spec: Annotated[Path, typer.Argument(help="Study spec (YAML), e.g. studies/smoke.yaml.")],
    address: Annotated[
        str | None,
        typer.Option(
            "--address",
            help="Ray cluster address (head:6379 or 'auto'). Default: $RAY_ADDRESS, else an embedded local Ray.",
        ),
    ] = None,
    tracking_uri: Annotated[
        str | None,
        typer.Option(
            "--tracking-uri",
            help="MLflow tracking URI. Default: the spec's tracking.uri, $MLFLOW_TRACKING_URI, sqlite:///mlflow.db.",
        ),
    ] = None,
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
        bool, typer.Option("--dry-run", help="Print the grid, resources and a cost estimate; start nothing.")
    ] = False,
) -> None:
    """Run a study: every trial of the spec's grid on Ray Tune, recorded in MLflow (a parent
    run, one child run per trial), then the results table and the report."""
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
        typer.Option(
            "--tracking-uri",
            help="MLflow tracking URI for the job's driver. Default: the spec's tracking.uri, "
            "$MLFLOW_TRACKING_URI here, sqlite:///mlflow.db here (a local cluster only).",
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
    tracking_uri: Annotated[
        str | None,
        typer.Option("--tracking-uri", help="Default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db here."),
    ] = None,
    port: Annotated[int, typer.Option("--port", help="Port of the UI.")] = 5000,
    host: Annotated[
        str, typer.Option("--host", help="Interface to bind (127.0.0.1: this machine only).")
    ] = "127.0.0.1",
) -> None:
    """Start the MLflow UI on the study's tracking store (bound to 127.0.0.1 unless told otherwise)."""
    from harness.errors import InputError
    from harness.mlflow_client import check_tracking_uri, resolve_tracking_uri

    uri = resolve_tracking_uri(tracking_uri)
    if uri.startswith(("http://", "https://")):
        raise InputError(f"{uri} is a tracking server already: open it in a browser instead of starting a UI")
    check_tracking_uri(uri)
    if uri.startswith("sqlite:") and not Path(uri.split("///", 1)[-1]).exists():
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
    typer.echo(
        f"MLflow UI for {uri}: http://{host}:{port}/#/experiments?workflowType=machine_learning  (Ctrl-C stops it)"
    )
    try:
        raise typer.Exit(subprocess.call(cmd, env=env))
    except KeyboardInterrupt:
        raise typer.Exit(0) from None


def bench_study(
    trials: Annotated[int, typer.Option("--trials", help="Number of short trials.")] = 8,
    steps: Annotated[int, typer.Option("--steps", help="Training steps per trial.")] = 60,
    out: Annotated[Path, typer.Option("--out", help="JSON results file.")] = Path(
        "benchmarks/results/study_overhead.json"
    ),
) -> None:
    """Overhead of a study: N short trials through `harness run` against the same trainings in a plain loop."""
    from harness.studies.bench import main

    main(trials=trials, steps=steps, out=out)


def bench_chaos(
    schedules: Annotated[int, typer.Option("--schedules", help="Number of fault schedules.")] = 10,
    seed: Annotated[int, typer.Option("--seed", help="Seed the schedules are drawn from.")] = 1,
    replay: Annotated[
        list[int] | None, typer.Option("--replay", help="Run exactly this schedule seed (repeatable).")
    ] = None,
    out: Annotated[Path, typer.Option("--out", help="JSON results file.")] = Path("benchmarks/results/chaos.json"),
) -> None:
    """Fault campaign: the study under seeded kills and outages, compared bit for bit with an unfaulted twin."""
    from harness.studies.chaos import main

    result = main(schedules=schedules, seed=seed, replay=replay, out=out)
    raise typer.Exit(1 if result["failing_seeds"] else 0)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    """Add ``harness run``, ``harness submit``, ``harness ui``, ``harness bench study`` and ``harness bench chaos``."""
    app.command("run")(run)
    app.command("submit")(submit)
    app.command("ui")(ui)
    bench_app.command("study")(bench_study)
    bench_app.command("chaos")(bench_chaos)


__all__ = ["register", "run", "submit", "ui", "bench_study", "bench_chaos"]
