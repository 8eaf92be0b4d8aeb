"""The resume contract is marked on TrainConfig itself, and `harness train --resume` and a
resumed study both check it: a field of the contract changed is refused by both, naming the
field; a field marked MAY_CHANGE_ON_RESUME (threads, device, checkpoints, tracking ...) may
change. A study started by an older harness (its stored design holds fields beyond today's
contract) still resumes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from harness.errors import InputError
from harness.studies.record.study_start import design_changes, study_design
from harness.studies.runner import find_resumable, resolve_study
from harness.studies.spec.grid import expand_grid
from harness.studies.spec.study_spec import parse_spec
from harness.training.config import MAY_CHANGE_ON_RESUME, TrainConfig
from harness.training.run import train

#: One contract field and one free field, each with another value.
CHANGED_IN_CONTRACT = {"lr": 2e-3}
CHANGED_FREE = {"eval_batch_size": 4}


def test_the_contract_is_every_field_not_marked_free() -> None:
    fields = TrainConfig.model_fields
    free = {name for name, info in fields.items() if MAY_CHANGE_ON_RESUME in info.metadata}
    assert set(TrainConfig.resume_contract_fields()) == set(fields) - free
    assert {"seed", "lr", "max_steps", "variant", "eval_windows"} <= set(TrainConfig.resume_contract_fields())
    assert {"num_threads", "tracking_uri", "checkpoint_dir", "eval_batch_size"} <= free
    assert set(CHANGED_IN_CONTRACT) <= set(TrainConfig.resume_contract_fields()) and set(CHANGED_FREE) <= free


def _checkpoint(path: Path, config: TrainConfig) -> Path:
    torch.save({"state_dict": {}, "global_step": 2, "harness": {"config": config.model_dump()}}, path)
    return path


def test_harness_train_resume_checks_the_contract(tmp_path: Path) -> None:
    saved = TrainConfig(variant="baseline", context_length=32, max_steps=4)
    ckpt = _checkpoint(tmp_path / "last.ckpt", saved)
    changed = saved.model_copy(update=CHANGED_IN_CONTRACT)
    with pytest.raises(InputError, match=r"belongs to another run \(lr: checkpoint 0.001 vs config 0.002\)"):
        train(changed, resume_from=ckpt, mlflow_logging=False, progress_bar=False)
    assert saved.model_copy(update=CHANGED_FREE).resume_mismatches(saved) == []


def _started_study(storage: Path, spec: dict[str, Any], design: dict[str, Any] | None = None) -> None:
    """A study directory as `harness run` leaves it (only what a resume reads)."""
    folder = storage / spec["name"] / "20240101-000000"
    folder.mkdir(parents=True)
    if design is None:
        design = study_design(expand_grid(parse_spec(yaml.safe_dump(spec))))
    (folder / "harness_study.json").write_text(json.dumps({"study": spec["name"], "design": design}))


def _resume(storage: Path, spec: dict[str, Any], tmp_path: Path) -> tuple[str, dict[str, Any]]:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return find_resumable(resolve_study(path, tracking_uri=None, storage_path=str(storage), address=None))


def test_a_resumed_study_checks_the_same_contract(tiny: dict, tmp_path: Path) -> None:
    storage = tmp_path / "results"
    _started_study(storage, tiny)
    changed = {**tiny, "train": {**tiny["train"], **CHANGED_IN_CONTRACT}}
    with pytest.raises(InputError, match=r"changed since it started \(.*: lr 0.001 -> 0.002"):
        _resume(storage, changed, tmp_path)
    free = {**tiny, "train": {**tiny["train"], **CHANGED_FREE}}
    assert _resume(storage, free, tmp_path)[0].endswith("20240101-000000")


def test_a_study_started_by_an_older_harness_resumes(tiny: dict, tmp_path: Path) -> None:
    """Its design holds every config field but the ones it skipped (eval_batch_size and
    checkpoint_every included): only today's contract is compared."""
    trials = expand_grid(parse_spec(yaml.safe_dump(tiny)))
    skip = {"num_threads", "accelerator", "checkpoint_dir", "tracking_uri", "experiment", "data_dir", "compile"}
    old = {t.trial_id: {k: v for k, v in t.config.model_dump().items() if k not in skip} for t in trials}
    storage = tmp_path / "results"
    _started_study(storage, tiny, json.loads(json.dumps(old)))
    assert _resume(storage, tiny, tmp_path)[1]["design"] == json.loads(json.dumps(old))
    more = study_design(expand_grid(parse_spec(yaml.safe_dump({**tiny, "seeds": 2}))))
    assert [c for c in design_changes(old, more) if "added" in c] and len(design_changes(old, more)) == 2
