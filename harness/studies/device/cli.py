"""``harness device kit | run | record``: a study on a GPU lease (:mod:`harness.studies.device`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

device_app = typer.Typer(
    help="A study on a GPU lease without Ray or MLflow: the kit to carry, the run there, its record here.",
    no_args_is_help=True,
)


@device_app.command("kit")
def kit(
    folder: Annotated[Path, typer.Option("--folder", help="The kit's folder (ignored by git).")] = Path(".device-kit"),
    dataset: Annotated[
        list[str] | None, typer.Option("--dataset", help="A corpus to carry (repeat; default tinyshakespeare).")
    ] = None,
) -> None:
    """Prepare the wheels (CPython 3.12, manylinux x86-64) and the corpora a lease needs, under
    40 MiB, and print the `carry` list and the one command to run there."""
    import json

    from harness.studies.device.kit import DEVICE_COMMAND, prepare_kit

    prepared = prepare_kit(folder, datasets=dataset or ["tinyshakespeare"])
    for path in (*prepared.wheels, *prepared.corpora):
        typer.echo(f"  {path}  {path.stat().st_size / 2**20:.2f} MiB")
    typer.echo(f"kit: {prepared.folder} ({prepared.size_bytes / 2**20:.1f} MiB; a lease carries 64 MiB in all)")
    typer.echo(f"carry: {json.dumps(prepared.carry_list(Path.cwd()))}")
    typer.echo(f"command: {DEVICE_COMMAND}")


@device_app.command("run")
def run(
    spec: Annotated[Path, typer.Argument(help="The study spec (YAML), a fixed grid of seeds.")],
    out: Annotated[Path, typer.Option("--out", help="The folder the study's tables go to (new or empty).")],
    deadline_s: Annotated[
        float | None, typer.Option("--deadline-s", help="Stop after this many seconds (unfinished trials: incomplete).")
    ] = None,
    accelerator: Annotated[str, typer.Option("--accelerator", help="auto (a GPU when there is one), gpu or cpu.")] = (
        "auto"
    ),
) -> None:
    """Run a study's trials in this process (seeds of a variant seed-batched where the trainer
    allows), writing results.parquet, curves.parquet, window_losses.parquet, spec.yaml and
    device_study.json under --out. No Ray, no MLflow: record it afterwards with `harness device record`."""
    from harness.errors import InputError
    from harness.studies.device.runner import run_device_study

    if accelerator not in ("auto", "gpu", "cpu"):
        raise InputError(f"--accelerator must be auto, gpu or cpu, not {accelerator!r}")
    study = run_device_study(spec, out, deadline_s=deadline_s, accelerator=accelerator, say=typer.echo)
    counts = ", ".join(f"{study.count(s)} {s}" for s in ("finished", "diverged", "failed", "incomplete"))
    typer.echo(f"study {study.study}: {counts} in {study.wall_s:.0f} s; tables in {study.out}")


@device_app.command("record")
def record(
    folder: Annotated[Path, typer.Argument(help="The folder `harness device run` wrote.")],
    storage_path: Annotated[Path, typer.Option("--storage-path", help="Where the study directory is laid out.")] = Path(
        "results"
    ),
    tracking_uri: Annotated[
        str | None, typer.Option("--tracking-uri", help="MLflow (default $MLFLOW_TRACKING_URI, else sqlite).")
    ] = None,
) -> None:
    """Lay a device study out as a study directory and record it in MLflow (parent and child
    runs) as a Ray study is; then `harness report STUDY --from <study directory>` reports it."""
    from harness.studies.device.record import record_device_study

    directory, _ = record_device_study(folder, storage=storage_path, tracking_uri=tracking_uri, say=typer.echo)
    typer.echo(f"next: harness report <study> --from {directory}")


def register(app: typer.Typer) -> None:
    """Add ``harness device ...``."""
    app.add_typer(device_app, name="device")
