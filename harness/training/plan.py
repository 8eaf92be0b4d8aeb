"""Everything a training run checks before Lightning loads: the config, the checkpoint to resume,
the variant, the device, the corpus and the compile decision (:func:`prepare_run`).

Bad input fails here, in seconds: ``harness train`` prepares its run with this module alone
and imports Lightning (:mod:`harness.training.run`, four seconds of imports) only for a run that
can start. Nothing here writes anything or opens an MLflow run.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from pydantic import ValidationError

from harness import datasets
from harness.errors import InputError
from harness.mlflow_client import redact_uri
from harness.models.variants import DIAGNOSTIC_LABEL, Variant
from harness.training.compile import CompileDecision, compile_decision, graph_key
from harness.training.config import TrainConfig
from harness.training.device_plan import DevicePlan, choose_device_plan

#: The single rolling checkpoint file in a run's checkpoint folder (replaced atomically).
LAST_CHECKPOINT = "last.ckpt"


@dataclass(frozen=True)
class RunPlan:
    """Everything a run needs before its first step, checked: the config, its variant (resolved
    here, once: the model, the compile key, the MLflow params and tags and the results row all
    take this object), the corpus (loaded), the device plan, the compile decision and, when
    resuming, the checkpoint opened."""

    config: TrainConfig
    variant: Variant
    corpus: Any
    device: DevicePlan
    compile: CompileDecision
    compile_key: str | None
    resume_path: Path | None
    resume_meta: dict[str, Any] | None
    start_step: int


class DiagnosticVariantWarning(UserWarning):
    """A run trains a diagnostic variant (one that leaks future tokens), not a model."""


def as_train_config(config: TrainConfig | Mapping[str, Any]) -> TrainConfig:
    """A :class:`TrainConfig` from a config or a mapping (pydantic errors -> :class:`InputError`)."""
    if isinstance(config, TrainConfig):
        return config
    try:
        return TrainConfig.model_validate(dict(config))
    except ValidationError as exc:
        raise InputError(f"invalid training config: {exc}") from None


def load_checkpoint_meta(path: str | os.PathLike[str]) -> tuple[Path, dict[str, Any], int]:
    """Open a harness checkpoint safely (``weights_only=True``): its path (a directory
    means its ``last.ckpt``), its ``harness`` entry and its global step.

    Raises :class:`InputError` for a missing, corrupt or foreign file.
    """
    ckpt_path = Path(path)
    if ckpt_path.is_dir():
        ckpt_path = ckpt_path / LAST_CHECKPOINT
    if not ckpt_path.is_file():
        raise InputError(
            f"checkpoint {str(ckpt_path)!r} does not exist; pass a .ckpt file or a run's checkpoint folder"
        )
    try:
        checkpoint = torch.load(ckpt_path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - unpickling errors have many types
        raise InputError(f"checkpoint {str(ckpt_path)!r} cannot be read (corrupt or not a checkpoint): {exc}") from None
    meta = checkpoint.get("harness") if isinstance(checkpoint, dict) else None
    if not isinstance(meta, dict) or not isinstance(meta.get("config"), dict) or "state_dict" not in checkpoint:
        raise InputError(f"checkpoint {str(ckpt_path)!r} was not written by harness.training (no 'harness' entry)")
    return ckpt_path, meta, int(checkpoint.get("global_step", 0))


def config_from_checkpoint(path: str | os.PathLike[str], **overrides: Any) -> TrainConfig:
    """The config stored in a checkpoint, with ``overrides`` (``None`` values ignored)."""
    ckpt_path, meta, _ = load_checkpoint_meta(path)
    return config_from_meta(ckpt_path, meta, **overrides)


def config_from_meta(ckpt_path: Path, meta: dict[str, Any], **overrides: Any) -> TrainConfig:
    """:func:`config_from_checkpoint` for a checkpoint already opened by :func:`load_checkpoint_meta`
    (its path and ``harness`` entry)."""
    merged = {**meta["config"], **{k: v for k, v in overrides.items() if v is not None}}
    saved_uri = merged.get("tracking_uri")
    if saved_uri and ":***@" in saved_uri:
        # Checkpoints store the tracking URI without its password: take it back from the
        # environment when that names the same server, else ask for it.
        env_uri = os.environ.get("MLFLOW_TRACKING_URI", "")
        if env_uri and redact_uri(env_uri) == saved_uri:
            merged["tracking_uri"] = env_uri
        else:
            raise InputError(
                f"checkpoint {str(ckpt_path)!r} was logged to {saved_uri}, whose password checkpoints do not keep; "
                "pass --tracking-uri with the password (or set MLFLOW_TRACKING_URI)"
            )
    return as_train_config(merged)


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask: what Ray or a container gave it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on macOS
        return os.cpu_count() or 1


def prepare_run(
    config: TrainConfig, resume_from: str | os.PathLike[str] | None, *, progress: bool = True, compile_sharing: int = 1
) -> RunPlan:
    """Every check a run makes before its first step, and what they find (the variant, the device
    plan, the corpus loaded, the checkpoint opened, the compile decision), made once and shared by
    :func:`~harness.training.run.train` and the seed-batched path; the model and the trainer are
    built from it there."""
    size = config.model_size()
    if config.context_length > size.max_context_length:
        raise InputError(
            f"context length {config.context_length} exceeds size {size.tag!r}'s maximum of "
            f"{size.max_context_length}; use a shorter --context-length or a larger --size"
        )
    variant = config.variant_spec()  # the run's one resolution: all that follows takes this object
    if variant.diagnostic:
        # Allowed (it measures what a leak would fake), but never silently: a loss it reaches
        # is not a model's loss. A study runs it only with allow_diagnostics: true.
        warnings.warn(
            f"variant {variant.name!r} is a diagnostic, not a model ({DIAGNOSTIC_LABEL}): its "
            "losses show what the leak fakes and must not be compared as a model's",
            DiagnosticVariantWarning,
            stacklevel=3,
        )
    if config.tau_init is not None and not variant.has_key_gate:
        raise InputError(f"tau_init is set but variant {variant.name!r} has no key gate; drop --tau-init")

    datasets.get_card(config.dataset)  # InputError listing the known datasets

    cuda = torch.cuda.is_available()
    device = choose_device_plan(
        config, cuda_available=cuda, bf16_supported=cuda and torch.cuda.is_bf16_supported(), cpus=available_cpus()
    )
    use_gpu = device.accelerator == "gpu"

    resume_path, resume_meta, start_step = None, None, 0
    if resume_from is not None:
        resume_path, resume_meta, start_step = load_checkpoint_meta(resume_from)
        mismatched = config.resume_mismatches(as_train_config(resume_meta["config"]))
        if mismatched:
            detail = ", ".join(mismatched)
            raise InputError(
                f"checkpoint {str(resume_path)!r} belongs to another run ({detail}); resume with its settings"
            )

    corpus = datasets.load(config.dataset, data_dir=config.data_dir, progress=progress)
    datasets.check_train_fraction(
        len(corpus.train), config.train_fraction, block_size=config.context_length, batch_size=config.batch_size
    )
    corpus = datasets.with_train_prefix(corpus, config.train_fraction)
    key = None
    if config.compile is not False:
        key = graph_key(config, device="cuda" if use_gpu else "cpu", variant=variant)
    decision = compile_decision(config, use_gpu=use_gpu, threads=device.threads, sharing=compile_sharing)
    return RunPlan(
        config=config,
        variant=variant,
        corpus=corpus,
        device=device,
        compile=decision,
        compile_key=key,
        resume_path=resume_path,
        resume_meta=resume_meta,
        start_step=start_step,
    )
