"""The private Ray APIs the harness cannot avoid, each behind one wrapper written against Ray
2.60: these tests fail when a Ray upgrade moves one, instead of the harness silently losing
what it does (today's callbacks on a resumed study, the GPU check before Ray starts, token
authentication for the clients it creates)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import torch
from ray import cloudpickle, tune

from harness.studies.cluster.connect import local_gpus
from harness.studies.tune.state import replace_restored_callbacks

# Ray's workers cannot import this test module: ship the trainable by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


class _Seen(tune.Callback):
    """Records the results Tune's driver hands to it."""

    def __init__(self) -> None:
        self.results: list[int] = []

    def on_trial_result(self, iteration, trials, trial, result, **info) -> None:
        self.results.append(int(result["x"]))


def _fails_once(config: dict) -> None:
    marker = Path(config["marker"])
    if not marker.exists():
        marker.touch()
        raise RuntimeError("the first run fails on purpose")
    tune.report({"x": 7})


def test_a_restored_tuner_runs_with_todays_callbacks(tmp_path: Path, local_ray: None) -> None:
    first = _Seen()
    run_config = tune.RunConfig(name="exp", storage_path=str(tmp_path), callbacks=[first], verbose=0)
    tune.Tuner(_fails_once, param_space={"marker": str(tmp_path / "ran")}, run_config=run_config).fit()
    assert first.results == []  # the trial errored
    today = _Seen()
    tuner = tune.Tuner.restore(str(tmp_path / "exp"), trainable=_fails_once, restart_errored=True)
    replace_restored_callbacks(tuner, [today])
    tuner.fit()
    assert today.results == [7] and first.results == []


def test_gpus_are_counted_before_ray_starts() -> None:
    count = local_gpus()
    assert count is not None  # None: Ray's private accelerator API moved
    if not torch.cuda.is_available():
        assert count == 0


def test_rays_token_rule_is_where_the_harness_looks() -> None:
    module = importlib.import_module("ray._private.authentication.authentication_token_setup")
    assert callable(module.maybe_enable_token_auth_if_token_available)
