"""The study's plan is made once: what the phases derive from the spec (the sequential design,
the trials' configs as the trainable receives them, how many trials share each compiled graph)
is built by ``resolve_study`` and handed on, equal to what each phase used to derive itself."""

from __future__ import annotations

from pathlib import Path

from harness.studies.runner import resolve_study
from harness.studies.spec.sequential_design import SequentialDesign
from harness.training.compile import graph_key
from harness.training.config import TrainConfig


def _plan(write_spec, tmp_path: Path, **overrides):
    return resolve_study(write_spec(**overrides), tracking_uri=None, storage_path=str(tmp_path / "s"), address=None)


def test_the_plan_holds_the_sequential_design_of_its_spec(write_spec, tmp_path: Path) -> None:
    sequential = _plan(
        write_spec,
        tmp_path,
        seeds={"min": 2, "max": 4, "batch": 1},
        stop_when={"precision": 0.01},
        analysis={"primary": {"treatment": "ega", "control": "baseline"}},
    )
    assert sequential.sequential == SequentialDesign.from_spec(sequential.spec)
    assert sequential.sequential is not None and sequential.sequential.max_seeds == 4
    assert _plan(write_spec, tmp_path).sequential is None  # a fixed list of seeds


def test_the_trials_configs_and_their_compile_groups_are_made_once(write_spec, tmp_path: Path) -> None:
    plan = _plan(write_spec, tmp_path, seeds=2)
    assert plan.trial_configs == {t.trial_id: t.config.model_dump() for t in plan.trials}
    assert plan.trial_configs is plan.trial_configs  # cached: built once per plan
    # The oracle: what every trial computed before, its graph against all N trials' configs.
    keys = {tid: graph_key(TrainConfig(**c), device="any") for tid, c in plan.trial_configs.items()}
    assert plan.compile_sharing == {tid: list(keys.values()).count(key) for tid, key in keys.items()}
    assert sorted(plan.compile_sharing.values()) == [2, 2, 2, 2]  # 2 variants x 2 seeds: seeds share a graph
