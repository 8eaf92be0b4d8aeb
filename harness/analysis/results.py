"""The results table: one row per trial, from a parquet file, a study's Tune storage
directory, or the study's MLflow record; plus the shared input checks of the analysis.

Its columns and types are :data:`harness.results_schema.RESULT_SCHEMA` (re-exported here as
``RESULT_SCHEMA`` and ``RESULT_COLUMNS``). Every analysis function needs only the columns it
uses: a table with ``variant``, ``seed`` and ``val_loss`` is enough for a contrast.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from harness.errors import InputError
from harness.mlflow_client import TrackingClient, mlflow_metric_key
from harness.models.variants import DEFAULT_TAU_INIT
from harness.results_schema import (
    CURVE_COLUMNS,
    CURVE_METRICS,
    CURVE_SCHEMA,
    RESULT_COLUMNS,
    RESULT_SCHEMA,
    RUN_TAG_OF_TRIAL_STATUS,
    head_taus,
)

#: The cell of a study: trials that differ only in variant and seed.
CELL_COLUMNS: tuple[str, ...] = ("dataset", "size", "context_length")


# final metric of a child run (as its reports name it) -> results-table column
_REPORTED_COLUMNS = {
    "final/val_loss": "val_loss",
    "final/test_loss": "test_loss",
    "final/train_loss": "train_loss",
    "best/val_loss": "best_val_loss",
    "final/gen_gap": "gen_gap",
    "final/tau_mean": "tau_mean",
    "final/open_fraction": "open_fraction",
    "final/pc1_cosine": "pc1_cosine",
    "final/tokens_per_s": "tokens_per_s",
    "final/val_windows": "val_windows",
    "final/val_loss_first64": "val_loss_first64",
    "final/val_loss_after64": "val_loss_after64",
    "num_parameters": "params",
    "vocab_size": "vocab_size",  # logged at the end of a run beside num_parameters
}
# ... as MLflow stores it (``final_val_loss``: mlflow_metric_key), then as stores written before
# that name did (``final/val_loss``): a run holds one or the other
METRIC_COLUMNS = {
    **{mlflow_metric_key(k): c for k, c in _REPORTED_COLUMNS.items()},
    **{k: c for k, c in _REPORTED_COLUMNS.items() if mlflow_metric_key(k) != k},
}
_TAG_COLUMNS = ("variant", "position", "gate", "scoring", "dataset", "size", "context_length", "seed", "status")
FINISHED = "finished"
#: A child run's status tag -> the trial's status in the results table.
_TRIAL_STATUS_OF_RUN_TAG = {tag: status for status, tag in RUN_TAG_OF_TRIAL_STATUS.items()}
DIVERGED = "diverged"


# ----------------------------------------------------------------------------- checks
def require_table(df: Any, what: str = "results table") -> pl.DataFrame:
    """``df`` as a non-empty polars DataFrame, else :class:`InputError`."""
    if isinstance(df, pl.LazyFrame):
        df = df.collect()
    if not isinstance(df, pl.DataFrame):
        try:  # a pandas frame or a dict of columns
            df = pl.DataFrame(df)
        except Exception as exc:  # anything unconvertible is bad input
            raise InputError(f"{what}: expected a polars DataFrame, got {type(df).__name__}") from exc
    if df.height == 0:
        raise InputError(f"{what} is empty: no trials to analyse (did the study run? is the filter right?)")
    return df


def require_columns(df: pl.DataFrame, columns: Iterable[str], what: str = "results table") -> None:
    """:class:`InputError` naming each missing column and listing those present."""
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise InputError(
            f"{what} has no column {', '.join(map(repr, missing))}; columns present: {', '.join(df.columns)}"
        )


def require_variants(df: pl.DataFrame, variants: Iterable[str], what: str = "results table") -> None:
    """:class:`InputError` naming each variant absent from the ``variant`` column."""
    present = set(df.get_column("variant").drop_nulls().to_list())
    missing = [v for v in variants if v not in present]
    if missing:
        raise InputError(
            f"variant {', '.join(map(repr, missing))} not in the {what}; variants present: "
            f"{', '.join(sorted(map(str, present))) or '(none)'}"
        )


def cell_columns(df: pl.DataFrame, by: Sequence[str] | None = None) -> tuple[str, ...]:
    """The columns that define a cell: ``by`` if given (checked), else those of
    :data:`CELL_COLUMNS` present in ``df``."""
    if by is None:
        return tuple(c for c in CELL_COLUMNS if c in df.columns)
    by = (by,) if isinstance(by, str) else tuple(by)
    require_columns(df, by)
    return by


def at_reference_tau_init(df: pl.DataFrame) -> tuple[pl.DataFrame, float | None]:
    """The rows a study's contrasts read when it sweeps tau's initial value (``tau_inits``):
    every run of a variant the sweep left alone (``tau_init`` null) and the swept variants' runs
    at the reference level, tau's default initial value 0 (else the level nearest 0). The
    other levels serve tau's own analysis. Returns the rows and the reference level (None,
    and ``df`` unchanged, when no run names an initial value)."""
    if "tau_init" not in df.columns:
        return df, None
    levels = sorted({float(v) for v in df.get_column("tau_init").drop_nulls().to_list()})
    if not levels:
        return df, None
    reference = DEFAULT_TAU_INIT if DEFAULT_TAU_INIT in levels else min(levels, key=lambda v: (abs(v), v))
    keep = pl.col("tau_init").is_null() | (pl.col("tau_init").cast(pl.Float64) == reference)
    return df.filter(keep), reference


def cell_label(cells: Sequence[str], values: Sequence[Any]) -> str:
    """``tinyshakespeare/nano/T=256`` for the cell columns ``cells`` at ``values``."""
    parts = [f"T={v}" if c == "context_length" else str(v) for c, v in zip(cells, values, strict=True)]
    return "/".join(parts) or "all"


def diverged_mask(df: pl.DataFrame) -> pl.Series:
    """True for rows whose ``status`` is ``diverged`` (a finding about the variant, unlike
    ``failed``, which is about the infrastructure)."""
    if "status" not in df.columns:
        return pl.Series([False] * df.height)
    return (df.get_column("status").cast(pl.String).str.to_lowercase() == DIVERGED).fill_null(False)


def unfinished_mask(df: pl.DataFrame) -> pl.Series:
    """True for rows whose ``status`` says the trial did not finish (diverged, failed,
    running...). A table without ``status`` (or a null status) counts as finished."""
    if "status" not in df.columns:
        return pl.Series([False] * df.height)
    status = df.get_column("status").cast(pl.String)
    return status.is_not_null() & (status.str.to_lowercase() != FINISHED)


def finished(df: pl.DataFrame) -> pl.DataFrame:
    """Only the rows of trials that finished."""
    return df.filter(~unfinished_mask(df))


def numeric_column(df: pl.DataFrame, column: str) -> None:
    """:class:`InputError` when ``column`` is not numeric."""
    dtype = df.schema[column]
    if not dtype.is_numeric():
        raise InputError(f"column {column!r} must be numeric, got {dtype}")


# ----------------------------------------------------------------------------- frames
def normalise(df: pl.DataFrame) -> pl.DataFrame:
    """Cast the known columns to the results schema (unknown columns are kept as they are)."""
    casts = []
    for name, dtype in RESULT_SCHEMA.items():
        if name in df.columns and df.schema[name] != dtype:
            casts.append(pl.col(name).cast(dtype, strict=False))
    return df.with_columns(casts) if casts else df


def results_frame(source: Any, study: str | None = None, *, tracking_uri: str | None = None) -> pl.DataFrame:
    """The results table of a study, one row per trial.

    Parameters
    ----------
    source
        A ``.parquet`` file; a directory holding ``results.parquet`` (a study's Tune
        storage directory); an MLflow tracking URI with ``study`` given; or a tuple
        ``(tracking_uri, study)``. A polars DataFrame is validated and returned.
    study
        The study name: selects the study's parent run in MLflow (tags
        ``harness.role=study``, ``harness.study``), and filters a file holding several
        studies (``study`` column).

    Examples
    --------
    >>> df = results_frame("runs/smoke/results.parquet")          # doctest: +SKIP
    >>> df = results_frame("sqlite:///mlflow.db", study="smoke")  # doctest: +SKIP
    """
    if isinstance(source, tuple):
        if len(source) != 2:
            raise InputError("results_frame: a tuple source must be (tracking_uri, study)")
        tracking_uri, study = source
        return mlflow_results_frame(tracking_uri, study)
    if isinstance(source, (pl.DataFrame, pl.LazyFrame)):
        return normalise(require_table(source))
    if source is None and tracking_uri is not None:
        source = tracking_uri
    text = str(source)
    if study is not None and _looks_like_uri(text):
        return mlflow_results_frame(text, study)
    path = Path(text).expanduser()
    if path.is_dir():
        candidates = [path / "results.parquet", *sorted(path.glob("*/results.parquet"))]
        found = next((p for p in candidates if p.is_file()), None)
        if found is None:
            raise InputError(
                f"{path} is a directory without results.parquet (expected a study's Tune storage directory)"
            )
        path = found
    if not path.is_file():
        hint = " (for MLflow pass study=NAME)" if _looks_like_uri(text) else ""
        raise InputError(f"results source {text!r} is neither a parquet file nor a study directory{hint}")
    try:
        df = pl.read_parquet(path)
    except Exception as exc:  # corrupt or non-parquet file is bad input
        raise InputError(f"cannot read {path} as parquet: {exc}") from exc
    df = normalise(df)
    if study is not None and "study" in df.columns:
        studies = sorted(set(df.get_column("study").drop_nulls().to_list()))
        if study not in studies:
            raise InputError(f"study {study!r} not in {path}; studies there: {', '.join(studies) or '(none)'}")
        df = df.filter(pl.col("study") == study)
    return require_table(df, f"results table {path}")


def _looks_like_uri(text: str) -> bool:
    return "://" in text or text.startswith(("sqlite:", "databricks"))


# ----------------------------------------------------------------------------- MLflow
def _client(tracking_uri: str) -> TrackingClient:
    return TrackingClient(tracking_uri)  # MLflow loads with the first client: only when MLflow is asked for


def _search_all(
    client: TrackingClient, experiment_ids: list[str], filter_string: str, order_by: list[str] | None = None
) -> list:
    runs, token = [], None
    while True:
        page = client.search_runs(
            experiment_ids, filter_string=filter_string, max_results=1000, order_by=order_by, page_token=token
        )
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def _experiment_ids(client: TrackingClient) -> list[str]:
    ids, token = [], None
    while True:
        page = client.search_experiments(max_results=1000, page_token=token)
        ids.extend(e.experiment_id for e in page)
        token = page.token
        if not token:
            return ids


def find_study_run(tracking_uri: str, study: str):
    """The study's parent run (tags ``harness.role=study``, ``harness.study=study``); the
    most recent when there are several. :class:`InputError` listing the known studies
    when none matches."""
    client = _client(tracking_uri)
    ids = _experiment_ids(client)
    runs = (
        _search_all(
            client,
            ids,
            f"tags.`harness.role` = 'study' AND tags.`harness.study` = '{_quote(study)}'",
            order_by=["attributes.start_time DESC"],
        )
        if ids
        else []
    )
    if not runs:
        known = sorted(
            {
                r.data.tags.get("harness.study", "?")
                for r in (_search_all(client, ids, "tags.`harness.role` = 'study'") if ids else [])
            }
        )
        raise InputError(
            f"no study named {study!r} in MLflow at {tracking_uri}; studies there: {', '.join(known) or '(none)'} "
            "(pass --tracking-uri, or --from a results.parquet / study directory)"
        )
    return runs[0]


def _quote(text: str) -> str:
    return text.replace("'", "\\'")


def _trial_runs(client: TrackingClient, parent: Any) -> list:
    return _search_all(
        client,
        [parent.info.experiment_id],
        f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'",
        order_by=["attributes.start_time ASC"],
    )


def _to_number(text: Any) -> float | None:
    if text is None:
        return None
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value


def _trial_row(run, study: str) -> dict[str, Any]:
    tags, params, metrics = run.data.tags, run.data.params, run.data.metrics
    row: dict[str, Any] = {name: None for name in RESULT_COLUMNS}
    row["study"] = tags.get("harness.study", study)
    row["trial_id"] = tags.get("harness.trial_id", run.info.run_id)
    for name in _TAG_COLUMNS:
        row[name] = tags.get(name, params.get(name))
    if row["status"] is None:  # no status tag: MLflow's run status says whether it finished
        row["status"] = {"FINISHED": FINISHED, "FAILED": "failed", "KILLED": "failed"}.get(run.info.status, "running")
    row["status"] = _TRIAL_STATUS_OF_RUN_TAG.get(row["status"], row["status"])  # interrupted -> incomplete
    row["tau_init"] = _to_number(tags.get("tau_init", params.get("tau_init")))
    for name in ("n_layer", "n_head", "d_model"):  # where the run logged its shape; else resolved at load
        row[name] = _to_number(params.get(name))
    for key, column in METRIC_COLUMNS.items():
        if key in metrics and row.get(column) is None:
            row[column] = metrics[key]
    steps = metrics.get("steps", metrics.get("trainer/global_step"))
    row["steps"] = None if steps is None else int(steps)
    if row["steps"] is None and _to_number(params.get("max_steps")) is not None and row["status"] == FINISHED:
        row["steps"] = int(float(params["max_steps"]))
    # every head's tau (layer by layer), its spread; the mean over heads is tau_mean
    heads = head_taus(metrics)
    if heads:
        row["tau_heads"] = heads
        mean = sum(heads) / len(heads)
        row["tau_head_sd"] = math.sqrt(sum((t - mean) ** 2 for t in heads) / max(len(heads) - 1, 1))
        row["tau_head_min"], row["tau_head_max"] = min(heads), max(heads)
        if row["tau_mean"] is None:
            row["tau_mean"] = mean
    row["mlflow_run_id"] = run.info.run_id
    return row


def mlflow_results_frame(tracking_uri: str, study: str) -> pl.DataFrame:
    """The results table from MLflow: one row per child (trial) run of the study's parent
    run, from the child's tags (variant, cell, seed, status), params (``tau_init``) and
    final metrics (``final/val_loss`` ...), ``tau_heads`` (every head's tau) from the
    ``gate/tau/l*h*`` metrics, with ``tau_head_sd/min/max`` (their spread), and
    ``mlflow_run_id``. Falls back to the parent's ``results.parquet`` artifact when the
    parent has no child runs."""
    client = _client(tracking_uri)
    parent = find_study_run(tracking_uri, study)
    children = [r for r in _trial_runs(client, parent) if r.data.tags.get("harness.role", "trial") == "trial"]
    if not children:
        try:
            with tempfile.TemporaryDirectory() as tmp:
                path = client.download_artifacts(parent.info.run_id, "results.parquet", tmp)
                return results_frame(path, study=None)
        except InputError:
            raise
        except Exception as exc:  # no artifact: say what is missing
            raise InputError(
                f"study {study!r} (run {parent.info.run_id}) has no trial runs and no results.parquet artifact"
            ) from exc
    rows = [_trial_row(run, study) for run in children]
    extra = sorted({k for r in rows for k in r} - set(RESULT_COLUMNS))
    # build with strings for the tag-derived columns (MLflow tags are text), then cast
    text_columns = {"study", "trial_id", *_TAG_COLUMNS, "mlflow_run_id"}
    build_schema = {
        k: (pl.String if k in text_columns else RESULT_SCHEMA["tau_heads"] if k == "tau_heads" else pl.Float64)
        for k in (*RESULT_COLUMNS, *extra)
    }

    def cell(key: str, value: Any) -> Any:
        if value is None or key == "tau_heads":
            return value
        return str(value) if key in text_columns else float(value)

    table = pl.DataFrame([{k: cell(k, r.get(k)) for k in build_schema} for r in rows], schema=build_schema)
    return _cast_to_schema(table)


def _cast_to_schema(df: pl.DataFrame) -> pl.DataFrame:
    cols = []
    for name in df.columns:
        dtype = RESULT_SCHEMA.get(name)
        if dtype == pl.Int64:  # "128" or "128.0" -> 128
            cols.append(pl.col(name).cast(pl.String).cast(pl.Float64, strict=False).cast(pl.Int64, strict=False))
        elif dtype is not None:
            cols.append(pl.col(name).cast(dtype, strict=False))
        else:
            cols.append(pl.col(name))
    return df.select(cols)


def curves_frame(tracking_uri: str, study: str) -> pl.DataFrame:
    """The curves table from MLflow (:data:`~harness.results_schema.CURVE_SCHEMA`): one row per
    trial and evaluation, by trial id and step, as the study wrote it (``curves.parquet``).

    Each child (trial) run of the study's parent run gives its factor columns and status as
    :func:`mlflow_results_frame` reads them and a row per step of its
    ``val/loss`` history (one point per evaluation); the other curve columns are the metric
    histories of :data:`~harness.results_schema.CURVE_METRICS` at that step (null where a run
    has none, e.g. the gate readings of an ungated variant), ``tokens`` = step x the run's
    ``batch_size`` param x ``context_length``. A study without trial runs has an empty table.

    Examples
    --------
    >>> curves = curves_frame("sqlite:///mlflow.db", "smoke")  # doctest: +SKIP
    """
    client = _client(tracking_uri)
    parent = find_study_run(tracking_uri, study)
    rows = []
    for run in _trial_runs(client, parent):
        if run.data.tags.get("harness.role", "trial") == "trial":
            rows += _curve_rows(client, run, study)
    return pl.DataFrame(rows, schema=CURVE_SCHEMA).sort("trial_id", "step")


def _curve_rows(client: TrackingClient, run: Any, study: str) -> list[dict[str, Any]]:
    """One child run's rows of the curves table (see :func:`curves_frame`)."""
    trial = _trial_row(run, study)
    factors = {c: _curve_cell(c, trial[c]) for c in CURVE_COLUMNS if c in trial and c not in CURVE_METRICS}
    histories = {}
    for column, key in CURVE_METRICS.items():
        points: dict[int, float] = {}
        for metric in client.get_metric_history(run.info.run_id, key):
            points.setdefault(int(metric.step), float(metric.value))  # the recorder logs a step once
        histories[column] = points
    batch = _to_number(run.data.params.get("batch_size"))
    context = _to_number(trial["context_length"])
    rows = []
    for step in sorted(histories["val_loss"]):
        tokens = None if batch is None or context is None else step * int(batch) * int(context)
        values = {column: points.get(step) for column, points in histories.items()}
        rows.append({**factors, "step": step, "tokens": tokens, **values})
    return rows


def _curve_cell(column: str, value: Any) -> Any:
    """A factor of the curves table as its column's type holds it (tags are text: ``"128"``)."""
    dtype = CURVE_SCHEMA[column]
    if value is None or dtype == pl.String:
        return None if value is None else str(value)
    number = _to_number(value)
    return int(number) if number is not None and dtype == pl.Int64 else number


def window_losses_frame(tracking_uri: str, study: str, *, split: str | None = "val") -> pl.DataFrame | None:
    """Per-window losses of every finished trial, for the multi-bootstrap: columns
    ``variant, seed`` (+ cell columns), ``split, window, loss``, read from each child
    run's ``window_losses.parquet`` artifact. ``None`` when no trial has one."""
    client = _client(tracking_uri)
    parent = find_study_run(tracking_uri, study)
    frames = []
    with tempfile.TemporaryDirectory() as tmp:
        for run in _trial_runs(client, parent):
            tags = run.data.tags
            if tags.get("status", FINISHED) != FINISHED:
                continue
            names = {f.path for f in client.list_artifacts(run.info.run_id)}
            if "window_losses.parquet" not in names:
                continue
            dst = Path(tmp) / run.info.run_id
            dst.mkdir()
            local = client.download_artifacts(run.info.run_id, "window_losses.parquet", str(dst))
            frame = pl.read_parquet(local)
            if split is not None and "split" in frame.columns:
                frame = frame.filter(pl.col("split") == split)
            keys = {c: tags.get(c) for c in ("variant", "seed", *CELL_COLUMNS) if tags.get(c) is not None}
            frame = frame.with_columns(
                *(pl.lit(v).alias(k) for k, v in keys.items()),
                pl.lit(_to_number(tags.get("tau_init")), dtype=pl.Float64).alias("tau_init"),
            )
            frames.append(frame)
    if not frames:
        return None
    out = pl.concat(frames, how="diagonal_relaxed")
    return normalise(out.with_columns(pl.col("loss").cast(pl.Float64), pl.col("window").cast(pl.Int64)))


def mope_sigma_frame(tracking_uri: str, study: str) -> pl.DataFrame | None:
    """Learned MOPE widths of every finished trial: columns ``variant, seed`` (+ cells),
    ``key, sigma``, from the final values of each child run's metrics whose name starts
    with ``mope/sigma`` (``mope/log_sigma...`` are exponentiated). ``None`` when absent."""
    client = _client(tracking_uri)
    parent = find_study_run(tracking_uri, study)
    rows = []
    for run in _trial_runs(client, parent):
        tags = run.data.tags
        if tags.get("status", FINISHED) != FINISHED:
            continue
        for key, value in run.data.metrics.items():
            if key.startswith("mope/sigma") or key.startswith("mope/log_sigma"):
                sigma = math.exp(value) if "log_sigma" in key else value
                rows.append(
                    {
                        "variant": tags.get("variant"),
                        "seed": tags.get("seed"),
                        **{c: tags.get(c) for c in CELL_COLUMNS},
                        "key": key,
                        "sigma": sigma,
                    }
                )
    return normalise(pl.DataFrame(rows)) if rows else None
