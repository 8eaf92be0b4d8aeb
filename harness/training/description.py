"""The description of a training run: what MLflow shows first on the run's page.

MLflow keeps a run's description in the tag ``mlflow.note.content`` (markdown) and shows it
at the top of the run's Overview tab. A trial's description answers "what is this run and
how did it end" without a click: its variant's slots (position, gate, scoring), its seed,
its shape (size: layers, heads, width, parameters; context length), its corpus and its
final numbers, as its row of the results table holds them (:func:`trial_description`).

The study's driver writes it when a trial ends, ``harness report`` rewrites it from the
recomputed table (:func:`refresh_trial_descriptions`) and ``harness train`` writes it for
a single run. Nothing here imports MLflow: the caller passes its client.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from harness.datasets.cards import get_card
from harness.errors import InputError
from harness.mlflow_client import TrackingClient
from harness.models.sizes import get_size
from harness.results_schema import SHAPE_COLUMNS

#: The MLflow tag that holds a run's description (markdown).
NOTE_TAG = "mlflow.note.content"

#: Statuses whose runs have ended for good and get a description (an interrupted trial
#: continues on resume and gets its description when it ends).
DESCRIBED_STATUSES = ("finished", "diverged", "failed")

#: Final numbers of the results table: column -> (label, format).
FINAL_NUMBERS: dict[str, tuple[str, str]] = {
    "val_loss": ("val loss (nats)", ".4f"),
    "test_loss": ("test loss (nats)", ".4f"),
    "best_val_loss": ("best val loss (nats)", ".4f"),
    "train_loss": ("train loss (nats)", ".4f"),
    "gen_gap": ("generalisation gap (val - train)", ".4f"),
    "tau_mean": ("tau, mean over layers and heads", ".4g"),
    "open_fraction": ("fraction of open gates (val)", ".3f"),
    "tokens_per_s": ("throughput (tokens/s)", ",.0f"),
}

#: Columns shown elsewhere in the description (or bookkeeping): not repeated as extra numbers.
_SHOWN = {
    "study",
    "trial_id",
    "dataset",
    "size",
    "params",
    "context_length",
    "variant",
    "position",
    "gate",
    "scoring",
    "seed",
    "tau_init",
    "steps",
    "status",
    "mlflow_run_id",
    *SHAPE_COLUMNS,  # the shape is the size's, in the "shape" line
    *FINAL_NUMBERS,
}


def _number(value: Any, spec: str = ".4g") -> str:
    """A number as the description shows it; ``-`` for a missing or NaN value."""
    if value is None or isinstance(value, bool):
        return "-"
    if isinstance(value, (list, tuple)):
        shown = ", ".join(_number(v, ".3g") for v in value[:32])
        return f"[{shown}{', ...' if len(value) > 32 else ''}]"
    if isinstance(value, (int, float)):
        return "-" if isinstance(value, float) and math.isnan(value) else format(value, spec)
    return str(value)


def _shape(row: Mapping[str, Any]) -> str:
    """``nano: 2 layers x 2 heads, width 64 (104,513 parameters)``."""
    size = row.get("size")
    try:
        shape = get_size(str(size))
    except InputError:  # a size this harness does not know (another version): its name only
        text = f"`{size}`"
    else:
        text = f"`{shape.name}`: {shape.n_layer} layers x {shape.n_head} heads, width {shape.d_model}"
    if row.get("params") is not None:
        text += f" ({int(row['params']):,} parameters)"
    return text


def _bits_per_unit(row: Mapping[str, Any]) -> tuple[str, str] | None:
    """The validation loss in bits per character (per byte for byte-level corpora)."""
    loss = row.get("val_loss")
    if loss is None or (isinstance(loss, float) and math.isnan(loss)):
        return None
    try:
        unit = get_card(str(row.get("dataset"))).unit
    except InputError:
        unit = "character"
    return f"val bits per {unit}", format(float(loss) / math.log(2), ".4f")


def trial_description(row: Mapping[str, Any]) -> str:
    """The markdown description of a trial (or a single training run) from its row of the
    results table (the columns of ``harness.results_schema.RESULT_COLUMNS``; any
    further numeric column is listed too, so a new metric shows without a change here).

    Examples
    --------
    >>> text = trial_description({"variant": "ega", "position": "sinusoidal", "gate": "ega",
    ...     "scoring": "dot", "seed": 0, "size": "nano", "context_length": 32,
    ...     "dataset": "tinyshakespeare", "status": "finished", "val_loss": 2.5})
    >>> text.splitlines()[0]
    '### ega - seed 0 - finished'
    """
    status = str(row.get("status") or "unknown")
    lines = [f"### {row.get('variant')} - seed {row.get('seed')} - {status}", ""]
    if row.get("study"):
        lines.append(f"Trial `{row.get('trial_id')}` of study **{row['study']}**.")
    elif row.get("trial_id"):
        lines.append(f"Training run `{row['trial_id']}`.")
    if status == "diverged":
        lines.append("The training loss became non-finite: the run stopped there and has no final numbers.")
    elif status == "failed":
        lines.append("The trial failed (Ray Tune gave up after its retries): see the tag `harness.error`.")
    lines += ["", "| setting | value |", "| --- | --- |"]
    for label, value in (
        ("position", row.get("position")),
        ("gate", row.get("gate")),
        ("scoring", row.get("scoring")),
        ("seed", row.get("seed")),
        ("shape", _shape(row)),
        ("context length", row.get("context_length")),
        ("dataset", f"`{row.get('dataset')}`"),
        ("tau init", row.get("tau_init")),
        ("steps", row.get("steps")),
    ):
        if value is not None or label in ("position", "gate", "scoring", "seed"):
            lines.append(f"| {label} | {_number(value)} |")
    lines += ["", "| final number | value |", "| --- | --- |"]
    for column, (label, spec) in FINAL_NUMBERS.items():
        if column in row:
            lines.append(f"| {label} | {_number(row[column], spec)} |")
            if column == "val_loss" and (bits := _bits_per_unit(row)) is not None:
                lines.append(f"| {bits[0]} | {bits[1]} |")
    for column in sorted(set(row) - _SHOWN):
        value = row[column]
        if value is not None and not isinstance(value, (str, bool)):
            lines.append(f"| {column} | {_number(value)} |")
    lines += [
        "",
        "Losses are mean next-token cross-entropies at the last step, over the fixed evaluation windows "
        "(the same for every variant and seed).",
    ]
    return "\n".join(lines) + "\n"


def refresh_trial_descriptions(client: TrackingClient, parent_run_id: str, rows: Iterable[Mapping[str, Any]]) -> int:
    """Rewrite the description of every ended trial of a study from its row (e.g. after
    ``harness report`` recomputed the table). ``client`` is the harness's MLflow client;
    trials are found by the tag ``harness.trial_id`` under the parent run. Returns how many
    descriptions were written."""
    parent = client.get_run(parent_run_id)
    children = client.search_runs(
        [parent.info.experiment_id],
        filter_string=f"tags.`mlflow.parentRunId` = '{parent_run_id}'",
        max_results=50000,
    )
    run_of_trial = {run.data.tags.get("harness.trial_id"): run.info.run_id for run in children}
    written = 0
    for row in rows:
        run_id = run_of_trial.get(row.get("trial_id"))
        if run_id is not None and row.get("status") in DESCRIBED_STATUSES:
            client.set_tag(run_id, NOTE_TAG, trial_description(row))
            written += 1
    return written
