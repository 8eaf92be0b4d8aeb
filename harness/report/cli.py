"""``harness report``: recompute a study's analysis from MLflow, a results table or a study's
directory, write the report and log it to the study's parent run.

Module import stays light: MLflow, the statistics and matplotlib load inside the command.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from harness.cli_options import TrackingUri


def _settings_from_spec(text: str, spec: Any):
    """The analysis settings of a study's spec (``spec``: its text parsed, None when this
    version cannot fully parse it): through the spec model (the factorial and the primary
    hypothesis resolved as the study resolved them), else from the raw ``analysis:`` block."""
    import yaml

    from harness.analysis.results_types import AnalysisSettings
    from harness.errors import InputError

    if spec is not None:
        try:
            return AnalysisSettings.from_mapping(spec.analysis_settings())
        except InputError:
            pass
    return AnalysisSettings.from_mapping((yaml.safe_load(text) or {}).get("analysis"))


def _parsed_spec(text: str | None):
    """``text`` parsed as a study spec; None without a text or for one this version cannot parse."""
    from harness.errors import InputError
    from harness.studies.spec.study_spec import parse_spec

    if text is None:
        return None
    try:
        return parse_spec(text)
    except InputError:
        return None


def report(
    study: Annotated[
        str, typer.Argument(help="Study name (the spec's name: tag harness.study of its MLflow parent run).")
    ],
    tracking_uri: TrackingUri = None,
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
    report (HTML with embedded plots, PNGs, markdown, parquet tables, the curves table) and
    log it to the study's parent run; rewrite each trial run's description from the
    recomputed table. Prints the verdicts."""
    from harness.analysis.corpus import corpus_info_for
    from harness.mlflow_client import resolve_tracking_uri
    from harness.report.study import build_report, log_report

    uri = resolve_tracking_uri(tracking_uri)
    df, parent, from_path = _results_and_parent(study, uri, from_path, log)
    spec_text = _parent_spec_text(uri, parent)  # downloaded and parsed once, for both
    spec = _parsed_spec(spec_text)
    settings = _parent_settings(spec_text, spec)
    sequential = _sequential_summary(uri, parent, from_path, spec)
    window_df, sigma_df = _windows_and_sigmas(study, uri, parent, from_path, windows)
    curves = _curves(study, uri, parent, from_path)
    datasets = df.get_column("dataset").drop_nulls().unique().to_list() if "dataset" in df.columns else []
    out_dir = out or Path("reports") / study
    rep = build_report(
        df,
        settings=settings,
        out_dir=out_dir,
        window_losses=window_df,
        mope_sigmas=sigma_df,
        corpus_info=corpus_info_for(datasets),
        title=study,
        sequential=sequential,
        curves=curves,
        interaction_asked=spec is None or spec.factorial() is not None,
        eval_windows=None if spec is None else spec.periodic_windows(),
    )
    typer.echo(rep.verdict_table)
    for note in rep.notes:
        typer.echo(f"note: {note}")
    typer.echo(f"Report: {rep.html_path}")
    if curves is not None:
        from harness.results_schema import CURVES_FILE

        curves.write_parquet(out_dir / CURVES_FILE)
        typer.echo(
            f"Curves: {out_dir / CURVES_FILE} ({curves.height} evaluations of {curves['trial_id'].n_unique()} trials)"
        )
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
    from harness.mlflow_client import TrackingClient
    from harness.training.description import refresh_trial_descriptions

    written = refresh_trial_descriptions(TrackingClient(uri), parent.info.run_id, df.iter_rows(named=True))
    typer.echo(f"MLflow: refreshed the descriptions of {written} trial runs")


def _results_and_parent(study: str, uri: str, from_path: Path | None, log: bool):
    """The results table and the study's MLflow parent run (None when there is none), from
    MLflow or ``--from``; a study directory is first recorded in MLflow (with ``log``)."""
    from harness.analysis.results import find_study_run, mlflow_results_frame, results_frame
    from harness.errors import InputError
    from harness.mlflow_client import sqlite_path

    db = sqlite_path(uri) if uri.startswith("sqlite:") else None
    store_exists = db is None or db.exists()  # never create an empty mlflow.db by looking
    if from_path is None:
        if not store_exists:
            raise InputError(
                f"no MLflow database at {db} (tracking URI {uri}): pass --tracking-uri, "
                "or --from a results.parquet / study directory"
            )
        return mlflow_results_frame(uri, study), find_study_run(uri, study), None
    study_dir = None
    if log:
        from harness.studies.replay import find_study_dir

        study_dir = find_study_dir(from_path)
    if study_dir is not None:
        # A study's storage directory: record in MLflow whatever the study could not
        # (a tracking outage) before the report goes to its parent run.
        from harness.mlflow_client import TrackingClient
        from harness.studies.replay import record_study

        from_path = Path(study_dir)
        df = results_frame(from_path, study=study)
        recorded = record_study(study_dir, tracking_uri=uri, study=study, say=typer.echo)
        if recorded is not None:
            return df, TrackingClient(uri).get_run(recorded.parent_run_id), from_path
    else:
        df = results_frame(from_path, study=study)
    parent = None
    if store_exists:
        try:
            parent = find_study_run(uri, study)
        except InputError:
            parent = None
    return df, parent, from_path


def _parent_spec_text(uri: str, parent) -> str | None:
    """The ``spec.yaml`` logged on the parent run; None without a parent run or that artifact."""
    import tempfile

    if parent is None:
        return None
    from harness.mlflow_client import TrackingClient

    try:
        with tempfile.TemporaryDirectory() as tmp:
            return Path(TrackingClient(uri).download_artifacts(parent.info.run_id, "spec.yaml", tmp)).read_text()
    except Exception:  # noqa: BLE001 - no spec.yaml artifact: the defaults apply
        return None


def _parent_settings(spec_text: str | None, spec):
    """The analysis settings of the spec logged on the parent run (``spec_text``, parsed:
    ``spec``); the defaults without one."""
    from harness.analysis.results_types import AnalysisSettings
    from harness.errors import InputError

    if spec_text is None:
        return AnalysisSettings()
    try:
        return _settings_from_spec(spec_text, spec)
    except InputError as exc:
        typer.secho(
            f"warning: the spec's analysis settings were not usable ({exc}); using defaults",
            fg=typer.colors.YELLOW,
            err=True,
        )
    except Exception:  # noqa: BLE001 - a spec that is not a mapping of settings: the defaults apply
        pass
    return AnalysisSettings()


def _sequential_summary(uri: str, parent, from_path: Path | None, parent_spec):
    """A sequential study's rule and decisions for the report: its ``spec.yaml`` and
    ``sequential_decisions.jsonl``, from the study directory (``--from``), else the parent run's
    (``parent_spec``: its ``spec.yaml``, parsed); None for a study with a fixed number of seeds
    (or without those files)."""
    import tempfile

    from harness.studies.tune.sequential import DECISIONS_FILE, DecisionLog, SequentialDesign, summary_from_log

    folder = None if from_path is None else (from_path if from_path.is_dir() else from_path.parent)
    if folder is not None and (folder / "spec.yaml").is_file():
        spec = _parsed_spec((folder / "spec.yaml").read_text())
    else:
        spec = parent_spec
    log_text = None
    if folder is not None and (folder / DECISIONS_FILE).is_file():
        log_text = (folder / DECISIONS_FILE).read_text()
    elif parent is not None:
        from harness.mlflow_client import TrackingClient

        try:
            with tempfile.TemporaryDirectory() as tmp:
                log_text = Path(
                    TrackingClient(uri).download_artifacts(parent.info.run_id, DECISIONS_FILE, tmp)
                ).read_text()
        except Exception:  # noqa: BLE001 - no such artifact: not a sequential study
            pass
    design = None if spec is None else SequentialDesign.from_spec(spec)
    if log_text is None or design is None:
        return None
    return summary_from_log(design, DecisionLog.parse_decisions(log_text))


def _curves(study: str, uri: str, parent, from_path: Path | None):
    """The curves table (one row per trial and evaluation): from MLflow; rebuilt from a study
    directory's reports and refreshed there (``curves.parquet``); or the ``curves.parquet``
    beside a results table given with --from (None without one)."""
    from harness.results_schema import CURVES_FILE

    if from_path is None:
        from harness.analysis.results import curves_frame

        return curves_frame(uri, study) if parent is not None else None
    from harness.studies.replay import find_study_dir, refresh_curves

    study_dir = find_study_dir(from_path)
    if study_dir is not None:
        return refresh_curves(study_dir, study=study)
    beside = (from_path if from_path.is_dir() else from_path.parent) / CURVES_FILE
    if not beside.is_file():
        return None
    import polars as pl

    return pl.read_parquet(beside)


def _windows_and_sigmas(study: str, uri: str, parent, from_path: Path | None, windows: bool):
    """Per-window losses (multi-bootstrap) and learned MOPE widths: from MLflow, or the
    window losses a study directory keeps beside its results."""
    from harness.analysis.results import mope_sigma_frame, window_losses_frame

    window_df = sigma_df = None
    if parent is not None and from_path is None:
        if windows:
            window_df = window_losses_frame(uri, study)
        sigma_df = mope_sigma_frame(uri, study)
    if from_path is not None and windows:
        folder = from_path if from_path.is_dir() else from_path.parent
        if (folder / "window_losses.parquet").is_file():
            import polars as pl

            window_df = pl.read_parquet(folder / "window_losses.parquet")
            if "split" in window_df.columns:
                window_df = window_df.filter(pl.col("split") == "val")
    return window_df, sigma_df


def register(app: typer.Typer) -> None:
    """Add ``harness report``."""
    app.command("report")(report)


__all__ = ["register", "report"]
