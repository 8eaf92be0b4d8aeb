"""``harness scorecard``: the papers' claims against finished studies, from MLflow or files.

Imports nothing heavy at module level: polars, the statistics and MLflow load inside the command.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Annotated, Any

import typer

from harness.cli_options import TrackingUri

DEFAULT_OUT = Path("reports") / "scorecard"
FILES = ("scorecard.parquet", "scorecard.html", "scorecard.md")


# ----------------------------------------------------------------------------- inputs
def _settings(spec_text: str | None):
    """The analysis settings of a study's spec text (the study's own parse, else its raw
    ``analysis:`` block); the defaults without a spec."""
    import yaml

    from harness.analysis.results_types import AnalysisSettings
    from harness.errors import InputError
    from harness.studies.spec.study_spec import parse_spec

    if spec_text is None:
        return AnalysisSettings()
    try:
        return AnalysisSettings.from_mapping(parse_spec(spec_text).analysis_settings())
    except InputError:
        raw = yaml.safe_load(spec_text) or {}
        return AnalysisSettings.from_mapping(raw.get("analysis") if isinstance(raw, dict) else None)


def _recipe(spec_text: str | None) -> dict[str, Any] | None:
    """The study's training recipe but for its length (:func:`harness.scorecard.pooling.recipe_of`,
    defaults filled in), from its spec; None without a spec that parses."""
    from harness.errors import InputError
    from harness.scorecard.pooling import recipe_of
    from harness.studies.spec.study_spec import parse_spec
    from harness.training.config import TrainConfig

    if spec_text is None:
        return None
    try:
        spec = parse_spec(spec_text)
        return recipe_of(TrainConfig(**spec.train_overrides()).model_dump(), spec.tokens_per_batch)
    except (InputError, ValueError):
        return None


def _study_folder(path: Path) -> Path:
    """The folder holding a study's ``results.parquet`` (``path`` a file, a study directory or
    a ``<storage>/<study>`` folder whose latest run is taken)."""
    from harness.studies.replay import find_study_dir

    if path.is_file():
        return path.parent
    found = find_study_dir(path)
    return Path(found) if found is not None and not str(found).startswith(("s3://", "gs://")) else path


def _recorded_parent_run(folder: Path) -> str | None:
    """The MLflow parent run id a study directory's ``harness_study.json`` records (None
    without one): the run the scorecard links back to when it logs into the same store."""
    from harness.studies.storage import STUDY_FILE, read_json, storage_filesystem

    fs, root = storage_filesystem(str(folder))
    meta = read_json(fs, f"{root}/{STUDY_FILE}")
    return (meta or {}).get("parent_run_id") or None


def studies_from_path(path: Path) -> list[Any]:
    """The studies of ``--from PATH`` (a results.parquet holding several studies gives one each)."""
    import polars as pl

    from harness.analysis.results import require_columns, results_frame
    from harness.errors import InputError
    from harness.results_schema import CURVES_FILE
    from harness.scorecard.compute import StudyResults
    from harness.scorecard.model_shape import spec_shapes

    if not path.exists():
        raise InputError(f"--from {path}: no such file or directory")
    folder = _study_folder(path)
    frame = results_frame(path if path.is_file() else folder)
    require_columns(frame, ("variant", "seed"), f"results table {path}")
    spec_file = folder / "spec.yaml"
    spec_text = spec_file.read_text() if spec_file.is_file() else None
    settings = _settings(spec_text)
    curves = pl.read_parquet(folder / CURVES_FILE) if (folder / CURVES_FILE).is_file() else _rebuilt_curves(folder)
    names = sorted(set(frame.get_column("study").drop_nulls().to_list())) if "study" in frame.columns else []
    if len(names) <= 1:
        parent = _recorded_parent_run(folder)
        name = names[0] if names else folder.name
        return [
            StudyResults(
                name,
                frame,
                settings,
                source=str(path),
                parent_run_id=parent,
                curves=curves,
                recipe=_recipe(spec_text),
                shapes=spec_shapes(spec_text),
            )
        ]
    return [
        StudyResults(
            n,
            frame.filter(pl.col("study") == n),
            settings,
            source=str(path),
            curves=None if curves is None else curves.filter(pl.col("study") == n),
        )
        for n in names
    ]


def _rebuilt_curves(folder: Path) -> Any:
    """The curves of a study directory written before ``curves.parquet`` existed, rebuilt in
    memory from its trials' reports (the folder is left as it is; ``harness report --from``
    writes the table there); None for a folder that is not a study directory."""
    from harness.errors import InputError
    from harness.studies.replay import read_study_dir
    from harness.studies.tune.curves_table import study_curves

    try:
        stored = read_study_dir(folder)
    except InputError:
        return None
    return study_curves(stored.fs, stored.root, stored.table, stored.trials)


def studies_from_mlflow(uri: str, names: list[str]) -> list[Any]:
    """The named studies (every study when ``names`` is empty) from MLflow, with their parent
    run ids, their specs' analysis settings, their learned MOPE widths and their curves (every
    evaluation of every trial, rebuilt from the runs' metric histories)."""
    from harness.analysis.results import curves_frame, find_study_run, mlflow_results_frame, mope_sigma_frame
    from harness.mlflow_client import TrackingClient
    from harness.scorecard.compute import StudyResults
    from harness.scorecard.model_shape import spec_shapes

    client = TrackingClient(uri)
    names = names or all_study_names(client)
    out = []
    for name in names:
        parent = find_study_run(uri, name)  # InputError naming the known studies
        spec_text = _spec_text(client, parent.info.run_id)
        out.append(
            StudyResults(
                name,
                mlflow_results_frame(uri, name),
                _settings(spec_text),
                source=f"{uri} (run {parent.info.run_id})",
                parent_run_id=parent.info.run_id,
                sigmas=mope_sigma_frame(uri, name),
                curves=curves_frame(uri, name),
                recipe=_recipe(spec_text),
                shapes=spec_shapes(spec_text),
            )
        )
    return out


def all_study_names(client: Any) -> list[str]:
    """Every study recorded in the store (tag ``harness.study`` of its parent runs)."""
    experiments, token = [], None
    while True:
        page = client.search_experiments(page_token=token)
        experiments += [e.experiment_id for e in page]
        token = page.token
        if not token:
            break
    names: set[str] = set()
    token = None
    while experiments:
        page = client.search_runs(experiments, filter_string="tags.`harness.role` = 'study'", page_token=token)
        names |= {r.data.tags.get("harness.study") for r in page if r.data.tags.get("harness.study")}
        token = page.token
        if not token:
            break
    return sorted(names)


def _spec_text(client: Any, run_id: str) -> str | None:
    try:
        with tempfile.TemporaryDirectory() as tmp:
            return Path(client.download_artifacts(run_id, "spec.yaml", tmp)).read_text()
    except Exception:  # noqa: BLE001 - no spec.yaml artifact: the default settings apply
        return None


# ----------------------------------------------------------------------------- outputs
def write_outputs(out: Path, table: Any, document: Any) -> list[Path]:
    """``scorecard.parquet``, ``scorecard.html``, ``scorecard.md`` and every figure of the
    document (``<name>.png``, which the markdown shows) in ``out``, written into a temporary
    folder beside it and moved in place at the end (no half-written folder). Returns the three
    files, then the figures."""
    from harness.report import Figure, render_html, render_markdown

    out = out.expanduser()
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    figures = [b for section in document.sections for b in section.blocks if isinstance(b, Figure)]
    try:
        table.write_parquet(staging / "scorecard.parquet")
        (staging / "scorecard.html").write_text(render_html(document, generated_by="harness scorecard"))
        (staging / "scorecard.md").write_text(render_markdown(document))
        for figure in figures:
            (staging / f"{figure.name}.png").write_bytes(figure.png)
        if out.exists():
            old = out.with_name(f".{out.name}-old")
            shutil.rmtree(old, ignore_errors=True)
            out.rename(old)
            staging.rename(out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            staging.rename(out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return [out / name for name in FILES] + [out / f"{f.name}.png" for f in figures]


def _store_exists(uri: str) -> bool:
    from harness.mlflow_client import sqlite_path

    db = sqlite_path(uri) if uri.startswith("sqlite:") else None
    return db is None or db.exists()


# ----------------------------------------------------------------------------- command
def scorecard(
    from_paths: Annotated[
        list[Path] | None,
        typer.Option("--from", help="A finished study's directory or a results.parquet (repeat for several)."),
    ] = None,
    study: Annotated[
        list[str] | None,
        typer.Option("--study", help="A study recorded in MLflow (repeat for several; default: every study)."),
    ] = None,
    tracking_uri: TrackingUri = None,
    out: Annotated[Path, typer.Option("--out", help="Directory for scorecard.parquet/.html/.md.")] = DEFAULT_OUT,
    experiment: Annotated[str, typer.Option("--experiment", help="MLflow experiment of the scorecard run.")] = (
        "scorecard"
    ),
    log: Annotated[bool, typer.Option("--log/--no-log", help="Log the scorecard to MLflow.")] = True,
    claims_file: Annotated[
        Path | None, typer.Option("--claims", help="A claims file instead of the one shipped with the harness.")
    ] = None,
) -> None:
    """Read finished studies, set each of the papers' claims against every cell that can
    measure it, write the scorecard (parquet, HTML, markdown) and print it; log it to MLflow
    as its own run, linked from each study it read."""
    from harness.errors import InputError
    from harness.mlflow_client import resolve_tracking_uri
    from harness.report import render_markdown, render_terminal
    from harness.scorecard.claims import check_claims_against, load_claims
    from harness.scorecard.compute import scorecard_table
    from harness.scorecard.document import description_document, scorecard_document
    from harness.scorecard.pooling import dropout_words
    from harness.scorecard.skew import card_skew
    from harness.scorecard.terminal import terminal_document

    uri = resolve_tracking_uri(tracking_uri)
    claims = load_claims(claims_file)
    inputs = [s for p in from_paths or [] for s in studies_from_path(p)]
    if study or not from_paths:
        if not _store_exists(uri):
            raise InputError(
                f"no MLflow database at {uri}: pass --tracking-uri, or --from a study directory / results.parquet"
            )
        inputs += studies_from_mlflow(uri, list(study or []))
    if not inputs:
        raise InputError(
            f"no finished study in MLflow at {uri}: run one (harness run studies/smoke.yaml) or pass --from"
        )
    if claims_file is not None:  # a user's file: its study and variant names against what is read
        check_claims_against(claims, _read_variants(inputs), spec_variants([claims_file.parent, Path("studies")]))
    skew = card_skew([s.frame for s in inputs])
    table = scorecard_table(inputs, claims, skew)
    names = [s.name for s in inputs]
    dropout = dropout_words({s.name: s.recipe for s in inputs})
    document = scorecard_document(table, claims, names, skew.words, dropout)
    files = write_outputs(out, table, document)
    typer.echo(render_terminal(terminal_document(table, names, skew.words)))
    pngs = f", {len(files) - len(FILES)} figures" if len(files) > len(FILES) else ""
    typer.echo(f"Scorecard: {files[1]} ({len(table)} rows; {files[0].name}, {files[2].name}{pngs} beside it)")
    if not log:
        return
    if not _store_exists(uri):
        typer.echo(f"(no MLflow store at {uri}: the scorecard was not logged; pass --tracking-uri to log it)")
        return
    description = render_markdown(description_document(table, names, skew.words), max_chars=7000)
    _log(uri, experiment, description, files, inputs)


def _read_variants(inputs: list[Any]) -> dict[str, list[str]]:
    """Each study read -> its variants (those of its results table)."""
    out: dict[str, list[str]] = {}
    for study in inputs:
        found = (
            study.frame.get_column("variant").unique(maintain_order=True).to_list() if "variant" in study.frame else []
        )
        out.setdefault(study.name, [])
        out[study.name] += [v for v in found if v not in out[study.name]]
    return out


def spec_variants(folders: list[Path]) -> dict[str, list[str]]:
    """The study specs (``*.yaml``) in ``folders``: each spec's ``name`` -> its variants' names,
    read as plain YAML (the study layer sits above this one); a file that is no spec is passed over."""
    import yaml

    out: dict[str, list[str]] = {}
    for path in sorted(p for folder in folders if folder.is_dir() for p in folder.glob("*.yaml")):
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue
        if isinstance(data, dict) and isinstance(data.get("name"), str) and isinstance(data.get("variants"), list):
            names = [v if isinstance(v, str) else v.get("name") for v in data["variants"] if isinstance(v, (str, dict))]
            out.setdefault(data["name"], [str(n) for n in names if n])
    return out


def _log(uri: str, experiment: str, description: str, files: list[Path], inputs: list[Any]) -> None:
    from harness.mlflow_client import is_server_uri, redact_uri
    from harness.scorecard.tracking import link_studies, log_scorecard, run_url

    read = {s.name: s.parent_run_id for s in inputs}
    experiment_id, run_id = log_scorecard(
        tracking_uri=uri, experiment=experiment, description=description, files=files, studies=read
    )
    parents = [p for p in read.values() if p]
    linked = link_studies(uri, parents, experiment_id, run_id)
    typer.echo(f"MLflow: scorecard run {run_id} (experiment {experiment!r}); linked from {linked} study run(s)")
    url = run_url(uri, experiment_id, run_id)  # with its host: a terminal makes it a link
    served = is_server_uri(uri)
    typer.echo(f"View it: {url}" if served else f"View it: harness ui --tracking-uri {redact_uri(uri)}  ->  {url}")


def register(app: typer.Typer) -> None:
    """Add ``harness scorecard``."""
    app.command("scorecard")(scorecard)


__all__ = ["register", "scorecard", "studies_from_mlflow", "studies_from_path", "write_outputs"]
