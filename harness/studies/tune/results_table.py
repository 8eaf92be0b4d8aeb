"""A study's results table: one row per trial (:data:`~harness.results_schema.RESULT_SCHEMA`),
from the trial's final report and Tune's error.

Built by the runner (``results.parquet``), the MLflow record (each trial run's description)
and the sequential searcher (the primary effect after each batch), all from here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from harness.results_schema import TrialStatus, head_taus, shape_columns
from harness.studies.spec.grid import Trial

if TYPE_CHECKING:  # polars loads in results_table: the device runner uses result_row without it
    import polars as pl


def _metric(metrics: dict[str, Any], key: str) -> float | None:
    value = metrics.get(key)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def trial_status(metrics: dict[str, Any] | None, error: Any) -> TrialStatus:
    """finished | diverged (from the trial's final report), failed (Tune gave up), or
    incomplete (the study stopped before the trial ended)."""
    metrics = metrics or {}
    if metrics.get("status") in ("finished", "diverged"):
        return metrics["status"]
    return "failed" if error is not None else "incomplete"


def result_row(study: str, trial: Trial, metrics: dict[str, Any] | None, error: Any) -> dict[str, Any]:
    """One trial's row of the results table (:data:`~harness.results_schema.RESULT_SCHEMA`),
    from its final report ``metrics`` and Tune's ``error`` (see :func:`trial_status`); the
    losses only of a trial that ended (finished or diverged). The model's shape is the trial's
    (its config's size), its vocabulary the one the trial reports (``vocab_size``: null for a
    trial that never reported it)."""
    metrics = metrics or {}
    status = trial_status(metrics, error)
    final = status in ("finished", "diverged")
    c = trial.config
    params = _metric(metrics, "num_parameters")
    steps = _metric(metrics, "steps") if final else _metric(metrics, "step")
    vocab = _metric(metrics, "vocab_size")
    return {
        "study": study,
        "trial_id": trial.trial_id,
        "dataset": c.dataset,
        "size": c.size,
        "params": int(params) if params is not None else None,
        **shape_columns(c.model_size(), int(vocab) if vocab is not None else None),
        "context_length": c.context_length,
        "variant": c.variant,
        "position": trial.position,
        "gate": trial.gate,
        "scoring": trial.scoring,
        "seed": c.seed,
        "tau_init": c.tau_init,
        "val_loss": _metric(metrics, "final/val_loss") if final else None,
        "test_loss": _metric(metrics, "final/test_loss") if final else None,
        "train_loss": _metric(metrics, "final/train_loss") if final else None,
        "best_val_loss": _metric(metrics, "best/val_loss") if final else None,
        "gen_gap": _metric(metrics, "final/gen_gap") if final else None,
        "tau_mean": _metric(metrics, "final/tau_mean") if final else None,
        "tau_heads": head_taus(metrics) if final else None,
        "open_fraction": _metric(metrics, "final/open_fraction") if final else None,
        "pc1_cosine": _metric(metrics, "final/pc1_cosine") if final else None,
        "tokens_per_s": _metric(metrics, "final/tokens_per_s") if final else None,
        "steps": int(steps) if steps is not None else None,
        "val_windows": int(windows) if final and (windows := _metric(metrics, "final/val_windows")) else None,
        "val_loss_first64": _metric(metrics, "final/val_loss_first64") if final else None,
        "val_loss_after64": _metric(metrics, "final/val_loss_after64") if final else None,
        "status": status,
    }


def results_table(
    study: str, trials: Sequence[Trial], outcomes: dict[str, tuple[dict[str, Any] | None, Any]]
) -> pl.DataFrame:
    """One row per trial (:func:`result_row`), from each trial's final report; ``tau_heads``
    lists every head's tau (``gate/tau/l<i>h<j>``, layer by layer) of a gated run."""
    import polars as pl

    from harness.results_schema import RESULT_SCHEMA

    rows = [result_row(study, trial, *outcomes.get(trial.trial_id, (None, None))) for trial in trials]
    return pl.DataFrame(rows, schema=RESULT_SCHEMA)
