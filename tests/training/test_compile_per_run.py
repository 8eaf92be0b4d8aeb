"""A compile per run that stays compiled: ten variants and two shapes in one process (as a
reused Ray worker runs one trial after another), each one static graph, none falling back to
eager.

The backend: :class:`~harness.bench.gpu_phases.GraphRecorder` (shared with ``gpu_check.py``'s
"compile per run" phase, which runs the same check on a GPU) runs each captured FX graph as it is, generating no code.
That is the cheapest way through ``torch.compile`` and proves the point, because what failed
is Dynamo's, not Inductor's: Dynamo keeps at most ``recompile_limit`` (8) compiled versions of
a code object (the model's ``forward``, shared by every model) and runs it eager beyond them,
with a warning; Dynamo makes a graph dynamic when it meets a second shape. Both happen before
any backend sees a graph, so a backend that records the graphs it is given, and counts the
calls of what it returns, sees exactly what Inductor would: a fallback shows as a graph never
given (and a call that never reaches it), a graph break as two graphs, a dynamic shape as a
symbolic size among the inputs.
"""

from __future__ import annotations

import torch

from harness.bench.gpu_phases import TEN_VARIANTS, GraphRecorder
from harness.models import build_model
from harness.training.compile import CompiledForward, begin_compiled_run

#: Two shapes (batch, context), as two studies' trials would have.
SHAPES = ((3, 80), (2, 48))
TINY = {"n_layer": 1, "n_head": 2, "d_model": 32}


def _two_steps(variant: str, batch: int, T: int, *, reset: bool) -> GraphRecorder:
    """A run's compiled training forward: two steps (forward and backward) of a new model."""
    if reset:
        begin_compiled_run(threads=1)
    torch.manual_seed(0)
    model = build_model(variant, size="nano", vocab_size=23, block_size=T, dropout=0.1, **TINY).train()
    recorder = GraphRecorder()
    forward = CompiledForward(model, backend=recorder)
    for step in range(2):
        x = torch.randint(23, (batch, T), generator=torch.Generator().manual_seed(step))
        forward(x).square().mean().backward()
    return recorder


def test_ten_variants_and_two_shapes_in_one_process_stay_compiled() -> None:
    for batch, T in SHAPES:
        for variant in TEN_VARIANTS:
            recorder = _two_steps(variant, batch, T, reset=True)
            where = f"{variant} at batch {batch}, T = {T}"
            assert len(recorder.graphs) == 1, f"{where}: {len(recorder.graphs)} graphs (a graph break or a fallback)"
            assert recorder.calls == 2, f"{where}: the compiled graph ran {recorder.calls} of 2 steps"
            assert recorder.static, f"{where}: dynamic shapes {recorder.graphs}"


def test_without_the_reset_the_ninth_model_runs_eager() -> None:
    """The failure the reset prevents, seen by the same recorder: a ninth model compiled in one
    process without :func:`begin_compiled_run` gets no graph, and its steps run eager."""
    begin_compiled_run(threads=1)
    recorders = [_two_steps("baseline", 2, 16, reset=False) for _ in range(9)]
    assert all(len(r.graphs) == 1 and r.calls == 2 for r in recorders[:8])
    assert recorders[8].graphs == [] and recorders[8].calls == 0
    assert _two_steps("baseline", 2, 16, reset=True).calls == 2  # and the reset cures it


def test_the_compile_pool_gets_the_runs_cpus(monkeypatch) -> None:
    """Inductor's pool is sized to the run's CPUs, not the node's; $TORCHINDUCTOR_COMPILE_THREADS wins."""
    import torch._inductor.config as inductor_config

    monkeypatch.delenv("TORCHINDUCTOR_COMPILE_THREADS", raising=False)
    monkeypatch.setattr(inductor_config, "compile_threads", inductor_config.compile_threads)  # restored after
    begin_compiled_run(threads=3)
    assert inductor_config.compile_threads == 3
    monkeypatch.setenv("TORCHINDUCTOR_COMPILE_THREADS", "2")
    begin_compiled_run(threads=3)
    assert inductor_config.compile_threads == 2
