"""``torch.compile`` of the training step: what is compiled, when it pays (``compile: auto``)
and the Inductor caches the runs of a node share.

**What is compiled.** The model's forward pass of the training step (and, through
AOTAutograd, its backward): one graph per run. Evaluation stays eager: it is a few per cent
of a run's compute (the recipe evaluates 2 x 256 windows every 250 steps of 64), and
compiling it would add an inference graph per evaluation batch shape for little gain. The
graph draws its dropout masks with eager's random ops (Inductor's ``fallback_random``), so a
compiled run sees exactly the masks of an eager run of the same seed: the two differ by
float rounding only, and variants compared by seed stay paired.

**When it pays.** A compile is a fixed cost per run (cold: Dynamo, AOTAutograd and Inductor
generate and build the C++ kernels; warm: Dynamo traces again and Inductor loads the built
graph from its cache) and saves a fraction of every step. ``auto`` compiles when

    steps x saving x eager step  >  (cold + (n - 1) x warm) / n     (n runs share the graph)

with the eager step predicted from the model's FLOPs (:func:`predicted_step_s`) and the
constants below, measured by ``benchmarks/compile_cost.py``. The choice depends on the config,
its threads and how many trials of its study share the graph, never on the state of this
node's cache nor on the step a resumed run starts from: compiled and eager steps differ by
float rounding, so a choice that read either would give one seed different numbers from run to
run. Every trial of a study that shares a graph makes the same choice, and so does the study
run again. On CPU the measured saving is small while attention stays on SDPA's fused kernel
(none with dropout on the residuals only, 6 % without any at ``nano``): ``auto`` keeps such
runs eager and compiles the others only when long (``nano``, T = 128, batch 16, no dropout:
from about 46,000 steps for a run alone, 11,000 when 8 runs share the graph). Dropout on the
attention weights (``attention_dropout``, by default the recipe's 0.2) sends eager SDPA to its
math kernel, ~30 times slower at ``nano``, and the compiled step is ~11 times faster than that
eager one: ``auto`` then compiles runs of more than a few hundred steps
(:data:`CPU_ATTENTION_DROPOUT_SLOWDOWN`). On GPU ``auto`` compiles: the CPU constants do not
apply there and GPU ones are not measured yet.

**One compile per run, and it stays compiled.** A Ray worker runs one trial after another in
one process, each compiling a new model. Dynamo's caches would carry the earlier trials'
graphs: the same forward code object compiled for a ninth model or shape reaches torch's
limit of 8 versions and runs eager from then on, with only a warning, and a second shape
turns the graph dynamic. :func:`begin_compiled_run` therefore resets the compiler's state at
the start of every compiled run (``torch._dynamo.reset``) and sizes Inductor's compile pool
to the run's CPUs (not the node's: four cold trials on a 16-CPU node would start 64
compiler processes); :class:`CompiledForward` compiles with static shapes (``dynamic=False``:
a run's training batches all have one shape). ``tests/training/test_compile.py`` compiles ten
variants and two shapes in one process and checks that each stays one compiled graph.

**Caches.** Every run of a node uses one Inductor cache directory, :func:`cache_dir`:
``$HARNESS_COMPILE_CACHE``, else ``<harness cache>/inductor`` (``$HARNESS_CACHE_DIR``, else
``~/.cache/harness``), with the FX graph and AOTAutograd caches on, set for the process before
its first compile (:func:`use_shared_cache`: torch reads the directory from its environment
only). The trials of a study on
a node therefore share their compiled graphs, and only the first run of a variant and shape
pays the cold compile. A marker per graph (:func:`graph_key`) records that it was built.
"""

from __future__ import annotations

import collections
import hashlib
import json
import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.models.variants import Variant
from harness.training.config import TrainConfig

# ---- measured constants: benchmarks/compile_cost.py, CPU seconds (= idle wall clock at one thread) on
# the 2-CPU dev machine, torch 2.13, nano (L2 H2 d64) and L1 H2 d64 at T = 128, batch 16 ----
#: Seconds of the first compiled step beyond a compiled one, cold cache:
#: COLD_BASE_S + COLD_PER_LAYER_S x n_layer, an upper envelope of the measurements (one layer:
#: 18.8 s baseline, 49.3 s ega-mope; two layers: 45.6 s baseline, 53.9 s ega-mope, and without
#: dropout 43.1 s and 73.4 s).
COLD_BASE_S = 27.0
COLD_PER_LAYER_S = 27.0
#: The same with the graph in the node's cache (Dynamo traces again, Inductor loads the build):
#: one layer 1.6 s and 8.6 s, two layers 3.7 s and 4.6 s (without dropout 4.0 s and 9.6 s).
WARM_BASE_S = 6.3
WARM_PER_LAYER_S = 2.3
#: Fraction of the eager step a compiled step saves on CPU, the smallest measured. With dropout
#: (the recipe's 0.2 on residuals): 0 % at one layer, 3 % baseline and 8 % ega-mope at two, and
#: 0 % in an interleaved A/B (30 against 30 ms): none. The masks are drawn by eager's random ops
#: (so that they equal eager's), which cuts the fused kernels apart; Inductor's own generator
#: is slower still (41 ms). Without any dropout: 6 % baseline, 20 % ega-mope (nano). On a quiet
#: machine (2026-12-02, nano): 5 % and 7 % with dropout, 10 % and 13 % without, warm compiles of
#: 3.0-6.3 s, cold of 31-52 s: inside the envelopes above (docs/training.md has the table and where
#: a step's time goes).
CPU_STEP_SAVING_DROPOUT = 0.0
CPU_STEP_SAVING_NO_DROPOUT = 0.06
#: Dropout on the attention weights (``attention_dropout``, by default the recipe's 0.2) is another
#: matter: on CPU it sends SDPA from its fused kernel to the math kernel, and the eager step is
#: CPU_ATTENTION_DROPOUT_SLOWDOWN times the one the FLOPs predict (fitted without it), while the
#: compiled step fuses the math kernel's work again and saves CPU_STEP_SAVING_ATTENTION_DROPOUT of
#: the eager one. Measured at ``ega-mope``, ``nano``, T = 128, batch 16, eager against compiled
#: (the performance review of issue 40, 400 steps: 62,474 tokens/s eager without attention
#: dropout, 2,047 eager with 0.2, 22,537 compiled with 0.2).
CPU_ATTENTION_DROPOUT_SLOWDOWN = 62_474 / 2_047  # x30.5
CPU_STEP_SAVING_ATTENTION_DROPOUT = 1 - 2_047 / 22_537  # 0.91: compiled x11 faster
#: Effective fp32 FLOP/s of one thread in an eager nano training step (30 ms a step measured).
CPU_THREAD_FLOPS = 4.8e10
#: Inductor options of every compile: eager's random ops, so that dropout masks equal eager's.
INDUCTOR_OPTIONS = {"fallback_random": True}

_MARKERS = "harness-graphs"


@dataclass(frozen=True)
class CompileDecision:
    """Whether a run compiles its training step, and why (one line for logs and tags)."""

    compile: bool
    reason: str


def cache_dir() -> Path:
    """The node's Inductor cache: ``$HARNESS_COMPILE_CACHE``, else ``<harness cache>/inductor``."""
    env = os.environ.get("HARNESS_COMPILE_CACHE")
    if env:
        return Path(env)
    from harness.datasets import cache_root

    return cache_root() / "inductor"


def use_shared_cache(directory: Path | None = None) -> Path:
    """Make ``directory`` (default :func:`cache_dir`) Inductor's cache for the rest of this
    process, with the FX graph and AOTAutograd caches on, and return it.

    The directory is a setting of the process, not of a call: torch 2.13 reads it only from
    ``$TORCHINDUCTOR_CACHE_DIR`` (``torch/_inductor/runtime/cache_dir_utils.py``, ``cache_dir()``,
    at each use; it writes the resolved path back there for its compile subprocesses), and no
    config option or ``torch.compile`` argument sets it. So it is set before the process's first
    compile and left in place: every run of a process (a Ray worker's trials) uses the node's one
    cache. Inductor's in-process path caches are cleared when it changes. The two switches are
    torch's config objects (``torch._inductor.config.fx_graph_cache``,
    ``torch._functorch.config.enable_autograd_cache``; on by default in torch 2.13, set here so
    that the shared cache does not rest on a default); torch reads ``$TORCHINDUCTOR_FX_GRAPH_CACHE``
    and ``$TORCHINDUCTOR_AUTOGRAD_CACHE`` over them, so a user's own setting wins."""
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config
    from torch._inductor.utils import clear_caches

    directory = Path(directory or cache_dir()).resolve()
    directory.mkdir(parents=True, exist_ok=True)
    if os.environ.get("TORCHINDUCTOR_CACHE_DIR") != str(directory):
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(directory)
        clear_caches()
    inductor_config.fx_graph_cache = True
    functorch_config.enable_autograd_cache = True
    return directory


def _source_digest() -> str:
    """Digest of the code that makes the graph (the models package and this module)."""
    import harness.models

    h = hashlib.sha256()
    paths = sorted(Path(harness.models.__file__).parent.glob("*.py")) + [Path(__file__)]
    for path in paths:
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


_DIGEST: dict[str, str] = {}


def graph_key(config: TrainConfig, *, device: str, variant: Variant | None = None) -> str:
    """What decides the compiled graph of a run: torch, the model code, the variant's
    components, the shape, the batch, dropout and the device. Seeds, learning rates and the
    schedule do not change it: the runs of a study that differ only there share a graph.
    ``variant`` is the config's resolved variant when the caller holds it (a run's plan)."""
    import torch

    if "models" not in _DIGEST:
        _DIGEST["models"] = _source_digest()
    variant = config.variant_spec() if variant is None else variant
    size = config.model_size()
    parts = {
        "torch": torch.__version__,
        "code": _DIGEST["models"],
        "variant": [variant.position, variant.gate, variant.scoring, sorted(dict(variant.options).items())],
        "tau_init": config.tau_init is not None,
        "shape": [size.n_layer, size.n_head, size.d_model],
        "dataset": config.dataset,  # the vocabulary size
        "batch": [config.batch_size, config.context_length],
        "dropout": [config.dropout, config.attention_dropout],
        "device": device,
        "precision": config.precision,  # with the device, the device plan: autocast, the padded output layer
        "options": sorted(INDUCTOR_OPTIONS.items()),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:20]


def graph_sharing(configs: Mapping[str, TrainConfig]) -> dict[str, int]:
    """Each of ``configs`` (a study's trials by id) -> how many of them compile its graph
    (the same :func:`graph_key` on any device): the study's plan makes it once for all its
    trials (:attr:`harness.studies.plan.StudyPlan.compile_sharing`)."""
    keys = {tid: graph_key(config, device="any") for tid, config in configs.items()}
    counts = collections.Counter(keys.values())
    return {tid: counts[key] for tid, key in keys.items()}


def is_warm(key: str, directory: Path | None = None) -> bool:
    """Whether this node's cache holds the graph ``key`` (a run compiled it before)."""
    return (Path(directory or cache_dir()) / _MARKERS / f"{key}.json").is_file()


def mark_warm(key: str, seconds: float, directory: Path | None = None) -> None:
    """Record that graph ``key`` is in the cache, with its measured compile time."""
    folder = Path(directory or cache_dir()) / _MARKERS
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f"{key}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps({"compile_s": round(seconds, 2), "torch": _torch_version()}))
    tmp.replace(folder / f"{key}.json")


def _torch_version() -> str:
    import torch

    return torch.__version__


def attention_dropout(config: TrainConfig) -> float:
    """The dropout on the attention weights a run uses (``attention_dropout``, else ``dropout``)."""
    return config.dropout if config.attention_dropout is None else config.attention_dropout


def predicted_step_s(config: TrainConfig, threads: int) -> float:
    """Eager seconds per training step on CPU: FLOPs / (CPU_THREAD_FLOPS x threads), times
    CPU_ATTENTION_DROPOUT_SLOWDOWN with dropout on the attention weights (off the fused kernel), with

    FLOPs per step = B T (6 N + 6 L T d)      (N = 12 L d^2 parameters; fwd + bwd, causal)
    """
    size = config.model_size()
    n = 12 * size.n_layer * size.d_model**2
    per_token = 6 * n + 6 * size.n_layer * config.context_length * size.d_model
    step = config.batch_size * config.context_length * per_token / (CPU_THREAD_FLOPS * max(1, threads))
    return step * (CPU_ATTENTION_DROPOUT_SLOWDOWN if attention_dropout(config) > 0 else 1.0)


def compile_cost_s(config: TrainConfig, *, warm: bool) -> float:
    """Predicted seconds a compile adds to a run (cold or warm cache)."""
    layers = config.model_size().n_layer
    return WARM_BASE_S + WARM_PER_LAYER_S * layers if warm else COLD_BASE_S + COLD_PER_LAYER_S * layers


def step_saving(config: TrainConfig) -> float:
    """Fraction of an eager CPU step the compiled one saves: by whether the run has dropout on the
    attention weights (the eager step off SDPA's fused kernel), else on the residuals, else none."""
    if attention_dropout(config) > 0:
        return CPU_STEP_SAVING_ATTENTION_DROPOUT
    return CPU_STEP_SAVING_DROPOUT if config.dropout > 0 else CPU_STEP_SAVING_NO_DROPOUT


def compile_decision(config: TrainConfig, *, use_gpu: bool, threads: int, sharing: int = 1) -> CompileDecision:
    """Compile or not, by ``config.compile``; for ``auto`` by the break-even rule of the module
    docstring over the run's ``max_steps``, with ``sharing`` runs (this one included) compiling
    the same graph. Only the config, the threads and the study's plan decide: not the node's
    cache nor the step a run resumes from, which would make two runs of one seed compute
    differently (compiled and eager steps differ by float rounding)."""
    if config.compile is not True and config.compile is not False and config.compile != "auto":
        raise ValueError(f"compile must be 'auto', true or false, got {config.compile!r}")
    if isinstance(config.compile, bool):
        return CompileDecision(config.compile, "compile: true" if config.compile else "compile: false")
    if use_gpu:
        return CompileDecision(True, "auto on GPU: compiled (bf16 kernels; the CPU cost model does not apply)")
    sharing = max(1, sharing)
    saving = config.max_steps * step_saving(config) * predicted_step_s(config, threads)
    per_run = compile_cost_per_run(config, sharing)
    verdict = saving > per_run
    return CompileDecision(
        verdict,
        f"auto: {'compiled' if verdict else 'eager'} (saves ~{saving:.0f} s over {config.max_steps} steps against "
        f"~{per_run:.0f} s of compile per run: one cold compile and {sharing - 1} warm for the {sharing} run(s) "
        "sharing the graph)",
    )


def compile_cost_per_run(config: TrainConfig, sharing: int = 1) -> float:
    """Predicted compile seconds per run when ``sharing`` runs compile one graph: one cold
    compile and ``sharing - 1`` warm ones, shared out."""
    sharing = max(1, sharing)
    cold, warm = compile_cost_s(config, warm=False), compile_cost_s(config, warm=True)
    return (cold + (sharing - 1) * warm) / sharing


def break_even_steps(config: TrainConfig, *, threads: int, sharing: int = 1) -> float:
    """Steps from which ``auto`` compiles on CPU (the inverse of :func:`compile_decision`;
    infinite when compiling saves nothing)."""
    per_step = step_saving(config) * predicted_step_s(config, threads)
    return math.floor(compile_cost_per_run(config, sharing) / per_step) + 1 if per_step > 0 else math.inf


def begin_compiled_run(threads: int) -> None:
    """Fresh compiler state for a run that compiles, in a process that may have compiled other
    runs before (a reused Ray worker): Dynamo's caches and recompile counts reset, Inductor's
    compile pool sized to ``threads`` (the run's CPUs; ``$TORCHINDUCTOR_COMPILE_THREADS``, when
    set, wins). A pool an earlier run started with another size is shut down first."""
    import torch._dynamo
    import torch._inductor.async_compile as async_compile
    import torch._inductor.config as inductor_config

    torch._dynamo.reset()
    wanted = int(os.environ.get("TORCHINDUCTOR_COMPILE_THREADS") or max(1, threads))
    if inductor_config.compile_threads != wanted:
        async_compile.shutdown_compile_workers()
        inductor_config.compile_threads = wanted


class CompiledForward:
    """``torch.compile(model)`` for the training step (the module itself stays eager for
    evaluation; parameters are shared), with static shapes (``dynamic=False``). The first step
    compiles (the backward graph at its first backward pass); when the second step starts, the
    first one's duration is recorded in the node's marker for ``key``: the graph is in the
    cache. ``backend``: Inductor (with :data:`INDUCTOR_OPTIONS`) unless a test asks for a
    cheaper one; ``kwargs`` of a call (e.g. ``vocab_multiple``) are constants of the graph."""

    def __init__(
        self, model: Any, key: str | None = None, directory: Path | None = None, *, backend: Any = "inductor"
    ) -> None:
        import torch

        options = dict(INDUCTOR_OPTIONS) if backend == "inductor" else None
        self.compiled: Callable[..., Any] = torch.compile(model, backend=backend, options=options, dynamic=False)
        self.key = key
        self.directory = directory
        self.calls = 0
        self.first_step_s: float | None = None
        self._started = 0.0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        if self.calls == 1:
            self._started = time.perf_counter()
        elif self.calls == 2:
            self.first_step_s = time.perf_counter() - self._started
            if self.key is not None:
                mark_warm(self.key, self.first_step_s, self.directory)
        return self.compiled(*args, **kwargs)
