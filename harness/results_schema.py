"""The results table: one row per trial, the one definition of its columns and their types.

The study runner writes it (``results.parquet``, :func:`harness.studies.tune.results_table.results_table`),
``harness train`` renders its run as a row of it (:func:`harness.training.run.result_row`), the
analysis reads it (:mod:`harness.analysis.results`) and the tests check against it; all of them
import :data:`RESULT_SCHEMA` from here.

Columns (docs/contracts.md), in order: ``study, trial_id, dataset, size, params, n_layer, n_head,
d_model, vocab_size, context_length, variant, position, gate, scoring, seed, tau_init, val_loss,
test_loss, train_loss, best_val_loss, gen_gap, tau_mean, tau_heads, open_fraction, pc1_cosine,
tokens_per_s, steps, val_windows, val_loss_first64, val_loss_after64, status``. ``n_layer``, ``n_head``, ``d_model`` and
``vocab_size`` (:data:`SHAPE_COLUMNS`) are the shape the run's model was built with: its layers,
heads and width (a preset's or a custom shape's, whatever the size is named) and its corpus's
vocabulary; null in tables written before they were kept, which a reader resolves once at load
(:func:`harness.scorecard.model_shape.with_model_shape`). ``val_windows`` is how many validation
windows the final losses rest on (the final evaluation's set: the whole validation split by
default; null in tables written before it was kept). ``val_loss_first64`` and
``val_loss_after64`` are the final validation loss over positions 0..63 and over positions
64..T-1 of the same windows (null when T <= 64, and in tables written before they were kept):
runs of different context lengths compare on the first bucket's positions.
``tau_heads`` is a list column: the run's learned tau of every head, layer by layer
(``gate/tau/l0h0, l0h1, ...``; null for variants without a gate). ``pc1_cosine`` is the final
|cos| between the gate's energy projection and the first principal component of its input
(``final/pc1_cosine``; null for gates the probe does not read). ``status`` is a
:data:`TrialStatus`.

The types are written once, as names (:data:`RESULT_TYPES`, :data:`CURVE_TYPES`: ``string``,
``int64``, ``float64``, ``list[float64]``), and read as polars types (:data:`RESULT_SCHEMA`,
:data:`CURVE_SCHEMA`, built on first use) or as a pyarrow schema (:func:`arrow_schema`): a
study run on a GPU lease writes its tables with pyarrow alone (the lease's image has no
polars: :mod:`harness.studies.device`), and importing this module imports neither.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, get_args

if TYPE_CHECKING:  # pragma: no cover - the types, for annotations
    import polars as pl
    import pyarrow as pa

#: How a trial ended: from its final report (``finished``, ``diverged``: the loss became
#: non-finite), Tune gave up on it (``failed``), or the study stopped before it ended
#: (``incomplete``: ``--resume`` continues it).
TrialStatus = Literal["finished", "diverged", "failed", "incomplete"]
TRIAL_STATUSES: tuple[str, ...] = get_args(TrialStatus)
#: The ``status`` tag of a trial's MLflow child run for each :data:`TrialStatus`: the same
#: word, but for a trial the study stopped before it ended, whose run is ``interrupted``
#: (:data:`harness.mlflow_client.RunStatus`). A table rebuilt from MLflow reads it back.
RUN_TAG_OF_TRIAL_STATUS: dict[str, str] = {s: "interrupted" if s == "incomplete" else s for s in TRIAL_STATUSES}

#: The columns of the results table and their types (names: :func:`polars_type`, :func:`arrow_type`), in order.
RESULT_TYPES: dict[str, str] = {
    "study": "string",
    "trial_id": "string",
    "dataset": "string",
    "size": "string",
    "params": "int64",
    "n_layer": "int64",
    "n_head": "int64",
    "d_model": "int64",
    "vocab_size": "int64",
    "context_length": "int64",
    "variant": "string",
    "position": "string",
    "gate": "string",
    "scoring": "string",
    "seed": "int64",
    "tau_init": "float64",
    "val_loss": "float64",
    "test_loss": "float64",
    "train_loss": "float64",
    "best_val_loss": "float64",
    "gen_gap": "float64",
    "tau_mean": "float64",
    "tau_heads": "list[float64]",
    "open_fraction": "float64",
    "pc1_cosine": "float64",
    "tokens_per_s": "float64",
    "steps": "int64",
    "val_windows": "int64",
    "val_loss_first64": "float64",
    "val_loss_after64": "float64",
    "status": "string",
}
#: The results table's columns, in order (the keys of :data:`RESULT_TYPES`).
RESULT_COLUMNS: tuple[str, ...] = tuple(RESULT_TYPES)
#: The columns that say the shape of a run's model (layers, heads, width) and its vocabulary.
SHAPE_COLUMNS: tuple[str, ...] = ("n_layer", "n_head", "d_model", "vocab_size")


def shape_columns(shape: Any, vocab_size: int | None) -> dict[str, int | None]:
    """A run's :data:`SHAPE_COLUMNS`: ``shape``'s layers, heads and width (a
    :class:`~harness.models.sizes.ModelSize`, or anything with ``n_layer``, ``n_head`` and
    ``d_model``) and the vocabulary its model was built with (None: not known)."""
    return {
        "n_layer": int(shape.n_layer),
        "n_head": int(shape.n_head),
        "d_model": int(shape.d_model),
        "vocab_size": None if vocab_size is None else int(vocab_size),
    }


#: The curves table (``curves.parquet`` beside ``results.parquet``): one row per trial and
#: evaluation. The factor columns repeat the results table's (so that an analysis needs no
#: join) but for the model's shape (:data:`SHAPE_COLUMNS`: constant over a run, read from the
#: results table by its ``trial_id``); ``step`` is the optimizer step of the evaluation,
#: ``tokens`` the training tokens seen by then (step x batch x T); the losses are the
#: evaluation's (``val/loss``, ``train/loss``, ``gen_gap``), the gate readings its
#: ``gate/tau_mean``, ``gate/open_fraction`` and ``gate/pc1_cosine`` (null
#: without a gate); ``status`` is the trial's, as in the results table.
CURVE_TYPES: dict[str, str] = {
    **{
        name: RESULT_TYPES[name]
        for name in RESULT_COLUMNS[: RESULT_COLUMNS.index("tau_init") + 1]
        if name not in SHAPE_COLUMNS
    },
    "step": "int64",
    "tokens": "int64",
    "val_loss": "float64",
    "train_loss": "float64",
    "gen_gap": "float64",
    "tau_mean": "float64",
    "open_fraction": "float64",
    "pc1_cosine": "float64",
    "status": "string",
}
CURVE_COLUMNS: tuple[str, ...] = tuple(CURVE_TYPES)
#: The curves table's file in a study's folder (and in a report's).
CURVES_FILE = "curves.parquet"
#: Curve column -> the evaluation metric it is read from (MLflow, Tune reports).
CURVE_METRICS: dict[str, str] = {
    "val_loss": "val/loss",
    "train_loss": "train/loss",
    "gen_gap": "gen_gap",
    "tau_mean": "gate/tau_mean",
    "open_fraction": "gate/open_fraction",
    "pc1_cosine": "gate/pc1_cosine",
}

#: Per-head gate metrics: ``gate/tau/l0h3`` is layer 0, head 3.
HEAD_TAU = re.compile(r"^gate/tau/l(\d+)h(\d+)$")


def head_taus(metrics: Mapping[str, Any]) -> list[float] | None:
    """The per-head taus of one run, layer by layer then head by head, from its metrics
    (``gate/tau/l<i>h<j>``); None when the run has no gate. The source of the results
    table's ``tau_heads`` for the study runner, ``harness train`` and a table rebuilt from MLflow."""
    found = []
    for key, value in metrics.items():
        match = HEAD_TAU.match(str(key))
        if match is not None and isinstance(value, (int, float)) and not isinstance(value, bool):
            found.append(((int(match.group(1)), int(match.group(2))), float(value)))
    return [value for _, value in sorted(found)] or None


def polars_type(name: str) -> pl.DataType:
    """The polars type of a type name of :data:`RESULT_TYPES` / :data:`CURVE_TYPES`."""
    import polars as pl

    if name.startswith("list[") and name.endswith("]"):
        return pl.List(polars_type(name[5:-1]))
    return {"string": pl.String(), "int64": pl.Int64(), "float64": pl.Float64()}[name]


def arrow_type(name: str) -> pa.DataType:
    """The pyarrow type of a type name of :data:`RESULT_TYPES` / :data:`CURVE_TYPES` (the same
    parquet types polars writes: large strings and large lists)."""
    import pyarrow as pa

    if name.startswith("list[") and name.endswith("]"):
        return pa.large_list(arrow_type(name[5:-1]))
    return {"string": pa.large_string(), "int64": pa.int64(), "float64": pa.float64()}[name]


def arrow_schema(types: Mapping[str, str]) -> pa.Schema:
    """The pyarrow schema of a table's type names (e.g. :data:`RESULT_TYPES`), in order."""
    import pyarrow as pa

    return pa.schema([(column, arrow_type(name)) for column, name in types.items()])


_POLARS_SCHEMAS = {"RESULT_SCHEMA": RESULT_TYPES, "CURVE_SCHEMA": CURVE_TYPES}
_BUILT: dict[str, dict[str, Any]] = {}


def __getattr__(name: str) -> Any:
    """:data:`RESULT_SCHEMA` and :data:`CURVE_SCHEMA`: the tables' columns and their polars
    types, in order, built (and polars imported) on first use."""
    if name not in _POLARS_SCHEMAS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name not in _BUILT:
        _BUILT[name] = {column: polars_type(kind) for column, kind in _POLARS_SCHEMAS[name].items()}
    return _BUILT[name]
