"""``harness train``: one run.

Imports stay light (typer only): torch, Lightning and MLflow load inside the commands.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from harness.errors import InputError

#: Help of --precision (a constant, so that train_command stays within a screen).
PRECISION_HELP = (
    "auto, 32-true, bf16-mixed or 16-mixed; bf16-mixed on CPU runs the GPU's training plan (fused AdamW, "
    "clipping by the module, padded output layer). (default: auto: fp32 on CPU, bf16 on GPU)"
)


_ATTENTION_DROPOUT_HELP = (
    "Dropout on attention weights (default: --dropout). On CPU any value > 0 leaves SDPA's fused kernel "
    "(~30x slower eager at nano); --compile auto then compiles runs long enough to repay it."
)
_COMPILE_HELP = (
    "torch.compile the training step. (default: auto, when the run's steps repay the compile; on CPU its "
    "cost model counts dropout on attention weights, which slows the eager step off the fused kernel)"
)


def train_command(
    variant: str | None = typer.Option(
        None,
        "--variant",
        help="Zoo variant (see `harness zoo`), or the label of an inline one with --position/--gate/--scoring.",
    ),
    dataset: str | None = typer.Option(
        None, "--dataset", help="Corpus name (see `harness data list`). (default: tinyshakespeare)"
    ),
    size: str | None = typer.Option(None, "--size", help="Model size preset: nano, paper, ... (default: nano)"),
    n_layer: int | None = typer.Option(
        None, "--n-layer", help="Custom shape: layers (overrides the --size preset's; names the shape L<n>H<h>d<w>)."
    ),
    n_head: int | None = typer.Option(None, "--n-head", help="Custom shape: attention heads (must divide the width)."),
    d_model: int | None = typer.Option(None, "--d-model", help="Custom shape: width (even for sinusoidal and MOPE)."),
    context_length: int | None = typer.Option(None, "--context-length", help="Context length T. (default: 256)"),
    seed: int | None = typer.Option(
        None, "--seed", help="Seed: fixes initialisation, data order, dropout. (default: 0)"
    ),
    max_steps: int | None = typer.Option(None, "--max-steps", help="Optimizer steps. (default: 5000)"),
    batch_size: int | None = typer.Option(None, "--batch-size", help="Training batch size. (default: 64)"),
    lr: float | None = typer.Option(None, "--lr", help="Peak learning rate (cosine to min_lr). (default: 1e-3)"),
    dropout: float | None = typer.Option(
        None, "--dropout", help="Dropout on embeddings, residuals and MLP. (default: 0.2)"
    ),
    attention_dropout: float | None = typer.Option(None, "--attention-dropout", help=_ATTENTION_DROPOUT_HELP),
    eval_every: int | None = typer.Option(
        None, "--eval-every", help="Evaluate (and checkpoint) every K steps. (default: 250)"
    ),
    eval_windows: int | None = typer.Option(
        None, "--eval-windows", help="Fixed evaluation windows per split. (default: 256)"
    ),
    tracking_uri: str | None = typer.Option(
        None, "--tracking-uri", help="MLflow tracking URI. (default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db)"
    ),
    experiment: str | None = typer.Option(None, "--experiment", help="MLflow experiment name. (default: harness)"),
    accelerator: str | None = typer.Option(None, "--accelerator", help="auto, cpu or gpu. (default: auto)"),
    precision: str | None = typer.Option(None, "--precision", help=PRECISION_HELP),
    compile_model: bool | None = typer.Option(
        None,
        "--compile/--no-compile",
        help=_COMPILE_HELP,
    ),
    resume: Path | None = typer.Option(
        None,
        "--resume",
        help="Checkpoint (.ckpt or a run's checkpoint folder) to continue; other options default to its config.",
    ),
    position: str | None = typer.Option(
        None, "--position", help="Inline variant: positional encoding (a zoo name or package.module:Class)."
    ),
    gate: str | None = typer.Option(
        None, "--gate", help="Inline variant: key gate ('none' for no gate; a zoo name or package.module:Class)."
    ),
    scoring: str | None = typer.Option(
        None, "--scoring", help="Inline variant: scoring (dot, lagged, or package.module:Class)."
    ),
    tau_init: float | None = typer.Option(None, "--tau-init", help="Initial gate threshold tau (gated variants)."),
    checkpoint_dir: Path | None = typer.Option(
        None, "--checkpoint-dir", help="Checkpoint folder. (default: ./checkpoints/<run>)"
    ),
    num_threads: int | None = typer.Option(
        None, "--num-threads", help="Torch threads on CPU. (default: the CPUs given)"
    ),
) -> None:
    """Train one model, evaluate it on fixed windows, record everything in MLflow."""
    fields: dict[str, Any] = {
        "variant": variant,
        "dataset": dataset,
        "size": size,
        "context_length": context_length,
        "seed": seed,
        "max_steps": max_steps,
        "batch_size": batch_size,
        "lr": lr,
        "dropout": dropout,
        "attention_dropout": attention_dropout,
        "eval_every": eval_every,
        "eval_windows": eval_windows,
        "tracking_uri": tracking_uri,
        "experiment": experiment,
        "accelerator": accelerator,
        "precision": precision,
        "compile": compile_model,
        "position": position,
        "gate": gate,
        "scoring": scoring,
        "tau_init": tau_init,
        "checkpoint_dir": str(checkpoint_dir) if checkpoint_dir else None,
        "num_threads": num_threads,
        # A user's component (package.module:Class) is found on the Python path, else here.
        "component_dir": str(Path.cwd()) if _names_user_component(position, gate, scoring) else None,
    }
    from harness.training.run import (
        as_train_config,
        config_from_checkpoint,
        config_from_meta,
        load_checkpoint_meta,
        train,
    )

    if resume is not None:
        # Shape flags without --size apply to the checkpoint's own shape, so it is opened here,
        # once; otherwise it is opened when the config is made (after the flags are checked).
        opened = load_checkpoint_meta(resume)[:2] if not size and (n_layer or n_head or d_model) else None
        base = size or (as_train_config(opened[1]["config"]) if opened else None)
        fields.update(_shape_fields(base, n_layer=n_layer, n_head=n_head, d_model=d_model))
        config = config_from_meta(*opened, **fields) if opened else config_from_checkpoint(resume, **fields)
    else:
        if variant is None:
            raise InputError("--variant is required (or --resume CHECKPOINT); see `harness zoo` for the variants")
        fields.update(_shape_fields(size, n_layer=n_layer, n_head=n_head, d_model=d_model))
        config = as_train_config({k: v for k, v in fields.items() if v is not None})
    # MLflow's own "View run ... at: <tracking URI>" (password included) is off for every call of
    # the harness (harness.mlflow_client.QUIET_CALLS); the summary below names the run.
    result = train(config, resume_from=resume, progress_bar=True)
    _print_summary(result)


def _names_user_component(position: str | None, gate: str | None, scoring: str | None) -> bool:
    """Whether a slot names a component the zoo does not have (harness.models.components)."""
    from harness.models.component_names import is_user_component
    from harness.models.variants import GATES, POSITIONS, SCORINGS

    given = ((position, POSITIONS), (gate, GATES), (scoring, SCORINGS))
    return any(name is not None and name not in zoo and is_user_component(name) for name, zoo in given)


def _shape_fields(base: Any, *, n_layer: int | None, n_head: int | None, d_model: int | None) -> dict[str, Any]:
    """The config fields of ``--n-layer/--n-head/--d-model`` over ``base`` (a preset name, a
    config whose shape they change, or None for ``nano``): the fields not given keep the
    base's; the shape is named ``L<n>H<h>d<w>`` (or stays the preset when it is the preset's)."""
    if n_layer is None and n_head is None and d_model is None:
        return {}
    from harness.models.sizes import resolve_size

    preset = base.model_size() if hasattr(base, "model_size") else (base or "nano")
    for flag, value in (("--n-layer", n_layer), ("--n-head", n_head), ("--d-model", d_model)):
        if value is not None and value < 1:
            raise InputError(f"{flag} must be a positive integer, got {value}")
    size = resolve_size(preset, n_layer=n_layer, n_head=n_head, d_model=d_model)
    if size.is_preset:
        return {"size": size.name}
    return size.config_fields()


def _fmt(value: float | None, spec: str = ".4f") -> str:
    return "-" if value is None or value != value else format(value, spec)


def _print_summary(result: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    from harness.mlflow_client import redact_uri, resolve_tracking_uri

    c = result.config
    table = Table(
        title=f"{c.variant} on {c.dataset}, size {c.model_size().tag}, T={c.context_length}, seed {c.seed}",
        show_header=False,
    )
    table.add_column("", style="bold")
    table.add_column("", overflow="fold")
    rows = [
        ("status", result.status),
        ("steps", str(result.steps)),
        ("final val loss", f"{_fmt(result.final_val_loss)} nats ({_fmt(result.val_bpc)} bpc)"),
        ("final test loss", _fmt(result.final_test_loss)),
        ("best val loss", _fmt(result.best_val_loss)),
        ("final train loss", _fmt(result.final_train_loss)),
        ("generalisation gap", _fmt(result.gen_gap)),
        ("tau (mean over heads)", _fmt(result.tau_mean, ".4g")),
        ("open gates (val)", _fmt(result.open_fraction, ".3f")),
        ("throughput", f"{_fmt(result.tokens_per_s, ',.0f')} tokens/s"),
        ("parameters", f"{result.num_parameters:,}"),
        ("wall time", f"{result.wall_time_s:.1f} s"),
        ("device plan", result.device_plan or "-"),
        ("compile", result.compile_reason or "-"),
        ("checkpoint", result.checkpoint_path or "-"),
    ]
    if result.mlflow_run_id:
        rows.append(
            (
                "MLflow run",
                f"{result.mlflow_run_id} ({c.experiment} @ {redact_uri(resolve_tracking_uri(c.tracking_uri))})",
            )
        )
    for key, value in rows:
        table.add_row(key, value)
    Console().print(table)


def register(app: typer.Typer) -> None:
    """Add ``harness train``."""
    app.command("train")(train_command)
