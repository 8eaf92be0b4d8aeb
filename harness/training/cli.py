"""``harness train``: one run.

Imports stay light (typer only): torch, Lightning and MLflow load inside the commands.
"""

from __future__ import annotations

import functools
import inspect
import types
import typing
from pathlib import Path
from typing import Any

import typer

from harness.errors import InputError

#: TrainConfig fields that are no option: where a user's component is found (the folder the command
#: starts in, when a slot names one).
_NOT_OPTIONS = ("component_dir",)
_RESUME_HELP = "Checkpoint (.ckpt or a run's checkpoint folder) to continue; other options default to its config."


def _option_type(annotation: Any) -> tuple[type, tuple[str, ...]]:
    """The type an option parses (int, float, str) of a config field's annotation, and the choices of
    a ``Literal`` (validated by the config, listed in the help): ``PositiveInt | None`` -> int."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _option_type(typing.get_args(annotation)[0])
    if origin is typing.Literal:
        return str, tuple(str(a) for a in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        (inner,) = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _option_type(inner)
    return annotation, ()


def _field_option(name: str, info: Any) -> inspect.Parameter:
    """``--field-name`` from a TrainConfig field: its type, its docstring and default as help.
    ``compile`` (auto or a bool) is the switch ``--compile/--no-compile``, auto when not given."""
    flag = "--" + name.replace("_", "-")
    default = "" if info.default is None else f" (default: {info.default})"
    if name == "compile":
        option = typer.Option(None, "--compile/--no-compile", help=f"{info.description}{default}")
        return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=bool | None)
    kind, choices = _option_type(info.annotation)
    help_text = info.description + (f" One of: {', '.join(choices)}." if choices else "") + default
    option = typer.Option(None, flag, help=help_text)
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=kind | None)


def _options() -> list[inspect.Parameter]:
    """Every TrainConfig field as an option, in the config's order, then ``--resume``."""
    from harness.training.config import TrainConfig

    params = [_field_option(n, f) for n, f in TrainConfig.model_fields.items() if n not in _NOT_OPTIONS]
    resume = typer.Option(None, "--resume", help=_RESUME_HELP)
    return [
        *params,
        inspect.Parameter("resume", inspect.Parameter.KEYWORD_ONLY, default=resume, annotation=Path | None),
    ]


def train_command(**options: Any) -> None:
    """Train one model, evaluate it on fixed windows, record everything in MLflow."""
    resume: Path | None = options.pop("resume")
    shape = {k: options.pop(k) for k in ("n_layer", "n_head", "d_model")}
    fields: dict[str, Any] = dict(options)
    if fields.get("data_dir"):
        # Relative to where the command started, recorded as the folder it names (the config
        # and MLflow keep a path that means the same thing from anywhere).
        fields["data_dir"] = str(Path(fields["data_dir"]).expanduser().resolve())
    if _names_user_component(options["position"], options["gate"], options["scoring"]):
        # A user's component (package.module:Class) is found on the Python path, else here.
        fields["component_dir"] = str(Path.cwd())
    # Every check (config, checkpoint, variant, device, corpus) runs before Lightning loads:
    # bad input exits 2 in about 4 s (torch's import), not the 7-10 s of Lightning's as well.
    from harness.training.plan import (
        as_train_config,
        config_from_checkpoint,
        config_from_meta,
        load_checkpoint_meta,
        prepare_run,
    )

    size = options["size"]
    if resume is not None:
        # Shape flags without --size apply to the checkpoint's own shape, so it is opened here,
        # once; otherwise it is opened when the config is made (after the flags are checked).
        opened = load_checkpoint_meta(resume)[:2] if not size and any(shape.values()) else None
        base = size or (as_train_config(opened[1]["config"]) if opened else None)
        fields.update(_shape_fields(base, **shape))
        config = config_from_meta(*opened, **fields) if opened else config_from_checkpoint(resume, **fields)
    else:
        if options["variant"] is None:
            raise InputError("--variant is required (or --resume CHECKPOINT); see `harness zoo` for the variants")
        fields.update(_shape_fields(size, **shape))
        config = as_train_config({k: v for k, v in fields.items() if v is not None})
    plan = prepare_run(config, resume, progress=True)
    from harness.training.run import train

    # MLflow's own "View run ... at: <tracking URI>" (password included) is off for every client
    # of the harness (harness.mlflow_transport.PolicyTrackingService); the summary below names the run.
    result = train(config, resume_from=resume, progress_bar=True, plan=plan)
    _print_summary(result)


class _GeneratedOptions:
    """``train_command`` with its signature made when typer first reads it (building the
    command), not when the CLI is imported: the options come from ``TrainConfig`` (pydantic),
    which ``harness --version`` and every other command need not load."""

    def __init__(self, command: Any) -> None:
        self.command = command
        self.__name__ = command.__name__
        self.__doc__ = command.__doc__
        self.__module__ = command.__module__

    def __call__(self, **options: Any) -> None:
        self.command(**options)

    @functools.cached_property
    def __signature__(self) -> inspect.Signature:
        # one option per config field (a new field is a new option)
        return inspect.Signature(_options())

    @functools.cached_property
    def __annotations__(self) -> dict[str, Any]:  # type: ignore[override]
        return {p.name: p.annotation for p in self.__signature__.parameters.values()}


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
    app.command("train")(_GeneratedOptions(train_command))
