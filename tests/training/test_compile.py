"""``compile: auto | true | false``: the setting, the auto rule, the graphs of the zoo
(graph breaks, recompiles), the shared Inductor cache, and compiled training agreeing with
eager training.

Fast: the setting and the rule; Dynamo + AOTAutograd (backend ``aot_eager``, where graph
breaks and recompiles arise: Inductor's lowering adds neither) on one variant per position
and gate family, combined inline so that each compile covers two families; one real
Inductor run of ``train`` in the session's shared cache. Slow: every registry variant
through Inductor in the shared cache, and the 200-step loss curve compiled against eager.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from harness.bench.compile_cost import check_graph, step_breakdown
from harness.errors import InputError
from harness.models.variants import VARIANTS
from harness.training import compile as tc
from harness.training.config import TrainConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from golden_curve import CurveRecorder  # noqa: E402 - the tests folder is not a package

SMOKE = dict(variant="ega-mope", size="nano", context_length=128, batch_size=16, max_steps=500)
#: One compile per pair: every position family and every gate / scoring / output family of the zoo.
FAMILIES = {
    "sinusoidal+ega": dict(variant="ega"),
    "learned+phase": dict(variant="learned-phase", position="learned", gate="phase"),
    "rope+ega-2": dict(variant="rope-ega-2", position="rope", gate="ega-2"),
    "alibi+db2-dir": dict(variant="alibi-db2-dir", position="alibi", gate="db2-dir"),
    "none+morlet-param": dict(variant="nope-morlet", position="none", gate="morlet-param"),
    "mope+flux": dict(variant="flux-mope"),
    "mope-rel+ega-4-pc": dict(variant="mope-rel-pc", position="mope-rel", gate="ega-4-pc"),
    "mope+lagged": dict(variant="ega-mope-lagged"),
    "output gate": dict(variant="gated-output"),
    "mope-bias+ega-qnorm": dict(variant="qnorm-mope-bias", position="mope-bias", gate="ega-qnorm"),
    "rope+ega-2-prod": dict(variant="rope-ega-2-prod", position="rope", gate="ega-2-prod"),
}
TINY = dict(n_layer=1, n_head=2, d_model=32, context_length=32, batch_size=4, eval_batch_size=8)


# -- the setting ----------------------------------------------------------------------------------


def test_compile_setting_is_auto_true_or_false() -> None:
    assert TrainConfig().compile == "auto"
    assert TrainConfig(compile=None).compile == "auto"  # configs and checkpoints of the earlier default
    assert TrainConfig(compile=True).compile is True and TrainConfig(compile=False).compile is False
    with pytest.raises(ValueError, match="compile"):
        TrainConfig(compile="sometimes")
    assert "compile" not in TrainConfig.resume_contract_fields()


def test_study_spec_takes_train_compile() -> None:
    from harness.studies.spec.study_spec import parse_spec

    base = "name: c\ndatasets: [tinyshakespeare]\nvariants: [baseline]\nseeds: 1\nsizes: [nano]\n"
    base += "context_lengths: [64]\n"
    assert parse_spec(base + "train: {compile: auto}").train_overrides() == {"compile": "auto"}
    assert parse_spec(base + "train: {compile: false}").train_overrides() == {"compile": False}
    with pytest.raises(InputError, match="compile"):
        parse_spec(base + "train: {compile: often}")


# -- the auto rule ----------------------------------------------------------------------------------


def test_auto_compiles_from_the_break_even_step() -> None:
    plain = {**SMOKE, "dropout": 0.0}  # without dropout a compiled CPU step is faster
    config = TrainConfig(**plain)
    for sharing in (1, 2, 8):
        steps = tc.break_even_steps(config, threads=1, sharing=sharing)
        below = TrainConfig(**{**plain, "max_steps": steps - 1})
        at = TrainConfig(**{**plain, "max_steps": steps})
        decide = dict(use_gpu=False, threads=1, sharing=sharing)
        assert not tc.compile_decision(below, **decide).compile
        assert tc.compile_decision(at, **decide).compile
    # More runs sharing the graph share its cold compile: compiling pays sooner.
    alone, eight = tc.break_even_steps(config, threads=1), tc.break_even_steps(config, threads=1, sharing=8)
    assert tc.break_even_steps(config, threads=1, sharing=100) < eight < alone
    # One cold compile and n - 1 warm ones, shared out.
    n = 8
    expected = (tc.compile_cost_s(config, warm=False) + (n - 1) * tc.compile_cost_s(config, warm=True)) / n
    assert tc.compile_cost_per_run(config, n) == pytest.approx(expected)


def test_auto_does_not_read_the_node_cache(tmp_path: Path, shared_data_dir: Path, monkeypatch) -> None:
    """The choice is made from the config, its threads and the study's sharing: a graph this node
    had built already (by another study, a benchmark, a `harness train`) would otherwise compile a
    second run of a seed where the first ran eager, and compiled and eager steps differ by float
    rounding. 60 steps with attention dropout repay a warm compile at nano, not a cold one."""
    from harness.training.plan import prepare_run

    monkeypatch.setenv("HARNESS_COMPILE_CACHE", str(tmp_path))
    config = TrainConfig(**{**SMOKE, "max_steps": 60, "num_threads": 1, "attention_dropout": 0.2})
    assert 60 * tc.step_saving(config) * tc.predicted_step_s(config, 1) > tc.compile_cost_s(config, warm=True)
    cold = prepare_run(config, None, progress=False).compile
    tc.mark_warm(tc.graph_key(config, device="cpu"), 3.0)
    assert tc.is_warm(tc.graph_key(config, device="cpu"))
    assert prepare_run(config, None, progress=False).compile == cold and not cold.compile


def test_auto_never_compiles_cpu_runs_with_dropout_on_the_residuals_only() -> None:
    """With dropout on the residuals (attention on SDPA's fused kernel) a compiled CPU step saves
    nothing measurable (benchmarks/compile_cost.py)."""
    config = TrainConfig(**{**SMOKE, "max_steps": 10**6, "attention_dropout": 0.0})
    assert tc.break_even_steps(config, threads=1, sharing=100) == math.inf
    assert not tc.compile_decision(config, use_gpu=False, threads=1, sharing=100).compile


def test_auto_weighs_dropout_on_the_attention_weights() -> None:
    """Dropout on the attention weights sends eager SDPA to its math kernel (issue 40: 2,047 tokens/s
    against 62,474 without, ega-mope nano T = 128 batch 16, and 22,537 compiled): the predicted eager
    step carries the slowdown and ``auto`` compiles from its break-even step, as ``harness train``'s
    defaults (the recipe's 0.2 everywhere) do."""
    without = TrainConfig(**{**SMOKE, "attention_dropout": 0.0})
    for dropout in ({}, {"dropout": 0.0, "attention_dropout": 0.1}):
        config = TrainConfig(**{**SMOKE, **dropout})
        assert tc.predicted_step_s(config, 1) == pytest.approx(tc.predicted_step_s(without, 1) * 62_474 / 2_047)
        assert tc.step_saving(config) == pytest.approx(1 - 2_047 / 22_537)
        steps = tc.break_even_steps(config, threads=1)
        assert 50 < steps < 1000  # at most a few hundred steps repay a cold compile at nano
        decide = dict(use_gpu=False, threads=1)
        assert not tc.compile_decision(TrainConfig(**{**SMOKE, **dropout, "max_steps": steps - 1}), **decide).compile
        assert tc.compile_decision(TrainConfig(**{**SMOKE, **dropout, "max_steps": steps}), **decide).compile
    assert tc.compile_decision(TrainConfig(), use_gpu=False, threads=2).compile  # harness train's defaults


def test_auto_keeps_the_smoke_study_eager() -> None:
    """studies/smoke.yaml: 500 steps, 2 seeds a variant, one CPU a trial, no attention dropout."""
    smoke = TrainConfig(**{**SMOKE, "attention_dropout": 0.0})
    decision = tc.compile_decision(smoke, use_gpu=False, threads=1, sharing=2)
    assert not decision.compile and "one cold compile and 1 warm for the 2 run(s)" in decision.reason


def test_explicit_settings_win_and_gpu_compiles() -> None:
    short = TrainConfig(**{**SMOKE, "max_steps": 5, "compile": True})
    assert tc.compile_decision(short, use_gpu=False, threads=1).compile
    long = TrainConfig(**{**SMOKE, "max_steps": 10**6, "compile": False})
    assert not tc.compile_decision(long, use_gpu=False, threads=1).compile
    assert tc.compile_decision(TrainConfig(**SMOKE), use_gpu=True, threads=1).compile


def test_graph_key_ignores_seed_and_schedule_not_shape() -> None:
    key = tc.graph_key(TrainConfig(**SMOKE), device="cpu")
    assert tc.graph_key(TrainConfig(**SMOKE, seed=4, lr=3e-4), device="cpu") == key
    assert tc.graph_key(TrainConfig(**{**SMOKE, "batch_size": 8}), device="cpu") != key
    assert tc.graph_key(TrainConfig(**{**SMOKE, "variant": "baseline"}), device="cpu") != key
    configs = [TrainConfig(**SMOKE, seed=s) for s in range(3)] + [TrainConfig(**{**SMOKE, "variant": "mope"})]
    assert tc.graph_sharing(dict(zip("abcd", configs, strict=True))) == {"a": 3, "b": 3, "c": 3, "d": 1}


def test_step_breakdown_puts_each_op_in_its_category() -> None:
    """compile_cost.py's breakdown: a matmul, a dropout mask and an element-wise op land in
    matmul, dropout masks and other."""
    import torch

    a, x = torch.randn(256, 256), torch.randn(4096)

    def step() -> None:
        a @ a
        torch.empty_like(x).bernoulli_(0.8)
        torch.exp(x)

    parts = step_breakdown(step, 3)
    assert parts["matmul"] > 0 and parts["dropout masks"] > 0 and parts["other"] > 0
    assert parts["attention"] == 0 and parts["Inductor kernels"] == 0


# -- graphs of the zoo -------------------------------------------------------------------------------


def test_the_shared_cache_is_a_setting_of_the_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Torch reads its cache directory from the environment only: ``use_shared_cache`` sets it
    for the process and leaves it (no restore around a run); the cache switches are torch's
    config objects, not variables."""
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "before"))  # restored after the test
    monkeypatch.setattr(inductor_config, "fx_graph_cache", False)
    monkeypatch.setattr(functorch_config, "enable_autograd_cache", False)
    before = dict(os.environ)
    directory = tc.use_shared_cache(tmp_path / "node")
    changed = {k for k in {*before, *os.environ} if before.get(k) != os.environ.get(k)}
    assert changed == {"TORCHINDUCTOR_CACHE_DIR"}
    assert directory == (tmp_path / "node").resolve() and directory.is_dir()
    assert cache_dir() == str(directory)  # what Inductor compiles into, from now on
    assert inductor_config.fx_graph_cache and functorch_config.enable_autograd_cache


@pytest.mark.parametrize("family", list(FAMILIES))
def test_one_graph_per_family_no_recompile(family: str) -> None:
    config = TrainConfig(**FAMILIES[family], **TINY)
    check = check_graph(config, backend="aot_eager")
    assert check.breaks == {}, check.breaks  # the chunked attentions (lag fold, pairwise) trace too
    assert check.recompiles == 0
    assert check.graphs == 1


@pytest.mark.slow  # Inductor compiles through the shared cache (26-32 s beside the other worker)
def test_train_compiles_in_the_shared_cache(
    tiny_config: Callable[..., TrainConfig], compile_cache: Path, tmp_path: Path
) -> None:
    import torch
    from torch._dynamo.utils import counters

    from harness.training.run import train

    config = tiny_config(variant="baseline", compile=True, max_steps=6, eval_every=3, size="L1H2d32", **TINY)
    torch._dynamo.reset()
    counters.clear()
    result = train(config, mlflow_logging=False, progress_bar=False)
    assert result.status == "finished" and result.compiled and result.compile_reason == "compile: true"
    assert counters["stats"]["unique_graphs"] == 1 and not counters["graph_break"]  # two evaluations: no recompile
    assert tc.is_warm(tc.graph_key(config, device="cpu"), compile_cache)
    assert any(compile_cache.iterdir())
    state = torch.load(result.checkpoint_path, map_location="cpu", weights_only=True)["state_dict"]
    assert not any("_orig_mod" in key for key in state)  # the checkpoint is the plain model's


# -- slow: every variant through Inductor, and compiled training against eager ---------------------


@pytest.mark.campaign  # ~20-50 s of cold Inductor compile per variant: too long for .ci/run's slow suite
def test_every_variant_compiles_with_inductor(compile_cache: Path) -> None:
    failures = []
    tc.use_shared_cache(compile_cache)
    for name in VARIANTS:
        check = check_graph(TrainConfig(variant=name, **TINY), backend="inductor")
        if not check.ok:
            failures.append(f"{name}: {check}")
    assert not failures, "\n".join(failures)


@pytest.mark.slow
def test_compiled_training_follows_the_eager_curve(
    tiny_config: Callable[..., TrainConfig], compile_cache: Path
) -> None:
    """200 steps of ``ega-mope`` compiled against eager, same seed: the same dropout masks and
    batches, so the curves differ by float rounding only. That difference grows over training
    (rounding changes the trajectory), as a change of thread count does; the tolerance is
    the thread-count difference of the eager run (which the harness already accepts) with a
    floor, and a dropout mask differing would show as ~0.1 nats at the first step."""
    from harness.training.run import train

    def curve(**overrides: object) -> np.ndarray:
        recorder = CurveRecorder()
        config = tiny_config(max_steps=200, eval_every=100, **overrides)
        train(config, callbacks=[recorder], mlflow_logging=False, progress_bar=False)
        return np.array(recorder.train_batch_loss)

    eager = curve(compile=False)
    compiled = curve(compile=True)
    threads = curve(compile=False, num_threads=2)
    assert len(compiled) == len(eager) == 200
    assert abs(compiled[0] - eager[0]) < 1e-4  # same initialisation, batch and dropout masks
    tolerance = max(5e-3, 3 * float(np.abs(threads - eager).max()))
    gap = np.abs(compiled - eager)
    assert gap.max() < tolerance, f"max |compiled - eager| {gap.max():.2e} >= {tolerance:.2e}"
    assert math.isfinite(gap.mean())
