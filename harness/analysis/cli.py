"""``harness report STUDY``: recompute a study's analysis and log a fresh report.

Imports nothing heavy at module level: the statistics, matplotlib and MLflow load
inside the command.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer


def _sqlite_file(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI (None for other stores)."""
    if not uri.startswith("sqlite:///"):
        return None
    return Path(uri[len("sqlite:///") :])


def report(
    study: Annotated[
        str, typer.Argument(help="Study name (the spec's name: tag harness.study of its MLflow parent run).")
    ],
    tracking_uri: Annotated[
        str | None,
        typer.Option(
            "--tracking-uri", help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db)."
        ),
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="Directory for the report files (default: reports/STUDY).")
    ] = None,
    from_path: Annotated[
        Path | None,
        typer.Option(
            "--from",
            help="Read the results from a results.parquet or a study's Tune storage directory instead of MLflow; "
            "a study directory is also recorded in MLflow (what a tracking outage kept out of it) unless --no-log.",
        ),
    ] = None,
    log: Annotated[
        bool, typer.Option("--log/--no-log", help="Log the report to the study's MLflow parent run.")
    ] = True,
    windows: Annotated[
        bool,
        typer.Option(
            "--windows/--no-windows",
            help="Multi-bootstrap over evaluation windows (downloads each trial's window losses).",
        ),
    ] = True,
) -> None:
    """Recompute a study's statistics (from MLflow, or --from a results table), write the
    report (HTML with embedded plots, PNGs, markdown, parquet tables) and log it to the
    study's parent run; rewrite each trial run's description from the recomputed table.
    Prints the verdicts."""
    from harness.analysis.corpus import corpus_info_for
    from harness.analysis.report import build_report, log_report
    from harness.analysis.results import tracking_uri_or_default

    uri = tracking_uri_or_default(tracking_uri)
    df, parent, from_path = _results_and_parent(study, uri, from_path, log=log)
    settings = _analysis_settings(uri, parent)
    window_df, sigma_df = _window_and_sigma_frames(study, uri, parent, from_path, windows=windows)
    datasets = df.get_column("dataset").drop_nulls().unique().to_list() if "dataset" in df.columns else []
    corpus_info = corpus_info_for(datasets)
    out_dir = out or Path("reports") / study
    rep = build_report(
        df,
        settings=settings,
        out_dir=out_dir,
        window_losses=window_df,
        mope_sigmas=sigma_df,
        corpus_info=corpus_info,
        title=study,
    )
    typer.echo(rep.verdict_table)
    for note in rep.notes:
        typer.echo(f"note: {note}")
    typer.echo(f"Report: {rep.html_path}")
    if parent is None:
        typer.echo(f"(no MLflow parent run of study {study!r} at {uri}: the report was not logged)")
    elif log:
        log_report(rep, run_id=parent.info.run_id, tracking_uri=uri)
        typer.echo(
            f"MLflow: logged report/ and {len(rep.headline_metrics)} metrics to parent run "
            f"{parent.info.run_id} (experiment {parent.info.experiment_id}, {uri})"
        )
        _refresh_trial_descriptions(uri, parent, df)


def _refresh_trial_descriptions(uri: str, parent: Any, df: Any) -> None:
    """Each ended trial run's description (``mlflow.note.content``), from its row of the
    recomputed results table."""
    from mlflow import MlflowClient

    from harness.training.description import refresh_trial_descriptions

    written = refresh_trial_descriptions(MlflowClient(tracking_uri=uri), parent.info.run_id, df.iter_rows(named=True))
    typer.echo(f"MLflow: refreshed the descriptions of {written} trial runs")


def _results_and_parent(study: str, uri: str, from_path: Path | None, *, log: bool) -> tuple[Any, Any, Path | None]:
    """The results table, the study's parent run (None when MLflow has none) and the
    ``--from`` path (a study directory found under it). A study directory given with
    ``--from`` is first recorded in MLflow (what a tracking outage kept out of it)."""
    from harness.analysis.results import find_study_run, mlflow_results_frame, results_frame
    from harness.errors import InputError

    db = _sqlite_file(uri)
    store_exists = db is None or db.exists()  # never create an empty mlflow.db by looking
    parent = None
    recorded = None
    if from_path is not None:
        study_dir = None
        if log:
            from harness.studies.replay import find_study_dir

            study_dir = find_study_dir(from_path)
        if study_dir is not None:
            # A study's storage directory: record in MLflow whatever the study could not
            # (a tracking outage) before the report goes to its parent run.
            from harness.studies.replay import record_study

            from_path = Path(study_dir)
            df = results_frame(from_path, study=study)
            recorded = record_study(study_dir, tracking_uri=uri, study=study, say=typer.echo)
        else:
            df = results_frame(from_path, study=study)
        if recorded is not None:
            from mlflow import MlflowClient

            parent = MlflowClient(tracking_uri=uri).get_run(recorded.parent_run_id)
        elif store_exists:
            try:
                parent = find_study_run(uri, study)
            except InputError:
                parent = None
    else:
        if not store_exists:
            raise InputError(
                f"no MLflow database at {db} (tracking URI {uri}): pass --tracking-uri, "
                "or --from a results.parquet / study directory"
            )
        df = mlflow_results_frame(uri, study)
        parent = find_study_run(uri, study)
    return df, parent, from_path


def _analysis_settings(uri: str, parent: Any) -> Any:
    """The ``analysis`` block of the spec the study ran (its parent's ``spec.yaml``
    artifact); the defaults when there is none."""
    import yaml

    from harness.analysis.results_types import AnalysisSettings
    from harness.errors import InputError

    settings = AnalysisSettings()
    if parent is None:
        return settings
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    try:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            spec_path = client.download_artifacts(parent.info.run_id, "spec.yaml", tmp)
            spec = yaml.safe_load(Path(spec_path).read_text()) or {}
        settings = AnalysisSettings.from_mapping(spec.get("analysis"))
    except InputError as exc:
        typer.secho(
            f"warning: the spec's analysis settings were not usable ({exc}); using defaults",
            fg=typer.colors.YELLOW,
            err=True,
        )
    except Exception:  # noqa: BLE001 - no spec.yaml artifact: the defaults apply
        pass
    return settings


def _window_and_sigma_frames(
    study: str, uri: str, parent: Any, from_path: Path | None, *, windows: bool
) -> tuple[Any, Any]:
    """The per-window validation losses (for the multi-bootstrap; None with --no-windows)
    and the MOPE scales: from MLflow, or from beside a ``--from`` results table."""
    from harness.analysis.results import mope_sigma_frame, window_losses_frame

    window_df = sigma_df = None
    if parent is not None and from_path is None:
        if windows:
            window_df = window_losses_frame(uri, study)
        sigma_df = mope_sigma_frame(uri, study)
    if from_path is not None and windows:  # a study directory keeps the window losses beside the results
        folder = from_path if from_path.is_dir() else from_path.parent
        if (folder / "window_losses.parquet").is_file():
            import polars as pl

            window_df = pl.read_parquet(folder / "window_losses.parquet")
            if "split" in window_df.columns:
                window_df = window_df.filter(pl.col("split") == "val")
    return window_df, sigma_df


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    """Add ``harness report``."""
    app.command("report")(report)


__all__ = ["register", "report"]
