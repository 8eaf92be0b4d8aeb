"""What one GPU check does (:data:`FULL` on a GPU, :data:`SMOKE` on CPU) and what a phase records.

See :mod:`harness.bench.gpu_check` for the phases and what each one judges.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: Variants whose steady training step must not wait for the device even once.
SYNC_FREE = ("baseline", "ega", "mope", "ega-mope", "alibi", "mope-rel", "ega-qnorm", "mope-bias")
#: Attention families whose folded call is eligible for the flash kernel (equal q/k/v width, causal,
#: no mask): the check fails if one runs another kernel than flash (or cuDNN's, which torch may
#: prefer on Hopper GPUs). Relative MOPE's chunks carry a boolean mask
#: and the pairwise readings a float one: those run the memory-efficient or math kernel, recorded.
FLASH_FAMILIES = ("baseline", "ega", "rope", "alibi")
KERNEL_FAMILIES = (*FLASH_FAMILIES, "mope-rel", "ega-qnorm", "mope-bias")

#: The seconds each phase may take on the GPU (one H200), in the order the phases run: what
#: each decides comes first (does the harness import, does it train, does a step wait for the
#: device, which kernels run, is bf16 right compiled), then the papers' 2x2, which takes the
#: rest of the lease's 9-minute command; ``--cpu-smoke`` runs every phase within the same budgets.
#: The extra phases (speed, compile, attention, packed) run only when named (``--phase``).
PHASE_BUDGETS_S: dict[str, float] = {
    "import": 60.0,
    "train": 90.0,
    "syncs": 30.0,
    "kernels": 30.0,
    "bf16": 60.0,
    "study": 270.0,
    "speed": 120.0,
    "compile": 240.0,
    "attention": 60.0,
    "packed": 300.0,
}
#: The spec of the papers' 2x2 phase (a path from the repository's root).
PAPERS_SPEC = "studies/papers-2x2-device.yaml"


@dataclass(frozen=True)
class Settings:
    """What one check run does. Sizes are preset names; steps count optimizer steps."""

    device: str
    size: str
    context_length: int
    batch_size: int
    steps: int  # timed training steps per variant in the speed phase
    warmup: int  # untimed steps first (compilation, autotuning, allocator)
    compile: bool  # the speed phase and the real run compile (train's compile: true) or not
    # -- the real run (train()) -------------------------------------------------------------
    train_variant: str = "ega-mope"
    train_steps: int = 200
    train_eval_every: int = 100
    train_warm_steps: int = 50  # the second run, on the warm compile cache
    train_eval_windows: int = 64  # windows of each periodic evaluation
    #: Windows of the final evaluation (None: the whole validation split, as a study reads it).
    train_final_eval_windows: int | None = None
    sync_steps: tuple[int, int] = (121, 130)  # steady steps of the real run whose syncs are counted
    # -- the speed phase -------------------------------------------------------------------------
    variants: tuple[str, ...] = ("baseline", "ega", "ega-mope")
    max_baseline_step_ms: float | None = 10.0  # the review's estimate: 4-7 ms compiled bf16 at paper size
    max_step_ratio: float | None = 1.6  # a gated variant's step against baseline's
    # -- host syncs, kernels, bf16 --------------------------------------------------------------
    sync_variants: tuple[str, ...] = SYNC_FREE
    sync_context_length: int = 256
    kernel_context_length: int = 256
    # -- compile per run: ten variants and two shapes in one process ------------------------------
    compile_shapes: tuple[tuple[int, int], ...] = ((64, 256), (32, 128))
    graph_variants: tuple[str, ...] = ("baseline", "rope", "alibi", "ega", "ega-mope", "ega-mope-rel", "phase-mope")
    # -- folded attention at long context --------------------------------------------------------
    attention_lengths: tuple[int, ...] = (4096, 8192)
    attention_batch: int = 4
    attention_heads: int = 8
    attention_head_dim: int = 32
    attention_repeats: int = 5
    # -- packed trials -----------------------------------------------------------------------------
    study_trials: int = 4
    study_gpus: float = 0.25
    study_cpus: int = 2
    study_steps: int = 3000  # long enough for the trials' training to overlap, not only their start-up
    # -- the papers' 2x2 through the device runner ----------------------------------------------
    papers_spec: str = PAPERS_SPEC
    study_out: str | None = None  # where the 2x2's tables go (None: a temporary folder)
    #: Changes to the spec's fields (``train`` merged): none on a GPU, a small study in the smoke.
    papers_overrides: Mapping[str, Any] = field(default_factory=dict)
    # -- bf16 compiled: the backend that compiles the fold (Inductor on a GPU) -------------------
    fold_backend: str = "inductor"
    #: Seconds of each phase (:data:`PHASE_BUDGETS_S`) and of the default phases together.
    phase_budgets_s: Mapping[str, float] = field(default_factory=lambda: dict(PHASE_BUDGETS_S))
    budget_s: float | None = 540.0
    #: A phase over its budget fails (the check's verdict); False: it is reported only (the tests,
    #: on a shared machine: a speed target is a benchmark's, never a test's timed assertion).
    enforce_budgets: bool = True

    def phase_budget_s(self, name: str) -> float | None:
        """Seconds phase ``name`` may take (None: no budget)."""
        return self.phase_budgets_s.get(name)

    @property
    def bf16(self) -> bool:
        """Every phase runs the mixed-precision plan: bf16 autocast, on CPU too."""
        return True


FULL = Settings(
    device="cuda",
    size="paper",
    context_length=256,
    batch_size=64,
    steps=300,
    warmup=10,
    compile=True,
    train_warm_steps=0,  # the 2x2's compiles measure the warm cache; the lease's minutes go to it
)
SMOKE = Settings(
    device="cpu",
    size="nano",
    context_length=64,
    batch_size=4,
    steps=3,
    warmup=1,
    compile=False,
    train_steps=12,
    train_eval_every=6,
    train_warm_steps=0,
    train_eval_windows=8,
    train_final_eval_windows=8,  # the whole split is ~1,700 windows of 64: minutes under bf16 on CPU
    sync_steps=(7, 10),
    # One variant per mechanism (the fold, ALiBi's slopes, relative MOPE's chunks, a pairwise reading):
    # bf16 on CPU is emulated, and the eight take minutes on two cores.
    sync_variants=("ega-mope", "alibi", "mope-rel", "mope-bias"),
    max_baseline_step_ms=None,
    max_step_ratio=None,
    sync_context_length=130,
    kernel_context_length=130,
    compile_shapes=((3, 80), (2, 48)),
    graph_variants=("baseline", "ega-mope-rel"),
    attention_lengths=(128, 256),
    attention_batch=2,
    attention_heads=2,
    attention_repeats=1,
    study_gpus=0.0,
    study_cpus=1,
    study_steps=4,
    papers_overrides={
        "sizes": ["nano"],
        "context_lengths": [64],
        "train": {
            "max_steps": 6,
            "batch_size": 4,
            "eval_every": 3,
            "eval_windows": 8,
            "final_eval_windows": 8,
            "eval_batch_size": 8,
            "warmup_steps": 2,
        },
    },
    # The compiled attention with AOTAutograd alone: Inductor on two CPU cores takes tens of seconds a
    # graph. The fold's pieces are judged under Inductor on CPU too (one small graph: the collapse it caused).
    fold_backend="aot_eager",
)


@dataclass
class Phase:
    """One part of the check: its measurements and the problems it found."""

    name: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0
    budget_s: float | None = None
    #: Measured constants for the cost model (:func:`harness.bench.gpu_check.measured_constants`).
    constants: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def over_budget(self) -> bool:
        return self.budget_s is not None and self.seconds > self.budget_s
