"""Speed and memory of each attention family against plain attention (``harness bench attention``).

For every family and sequence length T, one attention layer (B = 4, H = 8, head dim 32,
d = 256, fp32, CPU) runs forward + backward (loss = sum of the output) on a random input:

- **time**: median wall time of ``repeats`` forward + backward passes after one warm-up,
  all cases in this process, one after the other;
- **peak tensor memory** (``peak_tensor_mb``): the largest total of live tensor bytes
  allocated during one forward + backward, from the PyTorch profiler's allocation and
  free events (``profile_memory=True``) — the memory the computation needs;
- **peak RSS** (``peak_rss_mb``): the increase of the process's peak resident set size
  (VmHWM, high-water mark reset first through ``/proc/self/clear_refs``) over the resident
  size before the pass — what the operating system sees, including allocator slack. glibc's
  mmap threshold is fixed at 64 KiB (``MALLOC_MMAP_THRESHOLD_``) so that freed tensors go
  back to the system and the figure tracks live memory.

Both memory figures come from a fresh subprocess per case, measured on a pass after one
warm-up pass (so lazily loaded code is not counted); parameters and the input are
allocated before and not counted either.

Families: ``baseline`` (plain causal SDPA: the attention of ``baseline``, ``learned-pe``,
``mope``, ``nope``), each key gate (``ega``, ``ega-2``, ``ega-4``, ``ega-4-pc``, ``db2``,
``db4``, ``db4-dir``, ``morlet-fixed``, ``morlet-param``, ``flux``, ``phase``,
``ega-leaky``, ``ega-4-prod``), the output gate, ``lagged`` scoring, ``ega+lagged`` (the
attention of ``ega-mope-lagged``), ``rope``, ``rope+ega``, ``alibi`` (its slope a lag penalty:
on CPU a strided mask, one flash call per chunk of queries), relative MOPE: ``mope-rel``
(random initialisation: heads from about 1 to 340 characters wide), ``mope-rel-scales``
(heads at the linguistic scales, 2.1 to 141 characters) and ``ega+mope-rel``; and the two
pairwise terms that fold into nothing, through query chunks on SDPA's math path:
``ega-qnorm`` (per-query z-normalisation of the gate energies) and ``mope-bias`` (additive
Morlet kernel per head).

Optionally (``train_step``) the full training step (forward, backward, AdamW) of every
registry variant at the ``paper`` size, T = 256.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

from harness.errors import InputError
from harness.models.attention import CausalSelfAttention
from harness.models.gates import OutputGate, build_gate
from harness.models.numerics import flush_denormals
from harness.models.positional import PositionalEncoding, build_position
from harness.models.scoring import build_scoring
from harness.models.transformer import build_model
from harness.models.variants import VARIANTS

FAMILIES: tuple[str, ...] = (
    "baseline",
    "ega",
    "ega-2",
    "ega-4",
    "ega-4-pc",
    "db2",
    "db4",
    "db4-dir",
    "morlet-fixed",
    "morlet-param",
    "flux",
    "phase",
    "ega-leaky",
    "ega-4-prod",
    "ega-qnorm",
    "output-gate",
    "lagged",
    "ega+lagged",
    "rope",
    "rope+ega",
    "alibi",
    "mope-rel",
    "mope-rel-scales",
    "ega+mope-rel",
    "mope-bias",
)
DEFAULT_SEQ_LENS: tuple[int, ...] = (256, 1024, 4096, 8192)


@dataclass(frozen=True)
class CaseResult:
    family: str
    seq_len: int
    status: str  # "ok", "skipped: ...", "failed: ..."
    time_ms: float | None = None  # median forward + backward
    time_min_ms: float | None = None
    peak_tensor_mb: float | None = None  # peak live tensor bytes during one forward + backward (MiB)
    peak_rss_mb: float | None = None  # peak RSS increase during one forward + backward (MiB)
    time_ratio: float | None = None  # against baseline at the same T
    tensor_ratio: float | None = None
    rss_ratio: float | None = None


def build_attention(family: str, d_model: int, n_head: int) -> tuple[CausalSelfAttention, PositionalEncoding]:
    """One attention layer of ``family`` (see :data:`FAMILIES`) and the position component it
    is called with, as ``(attention, position)``; draws its parameters from torch's global RNG."""
    gate_name = {
        "baseline": "none",
        "output-gate": "none",
        "lagged": "none",
        "ega+lagged": "ega",
        "rope": "none",
        "rope+ega": "ega",
        "alibi": "none",
        "mope-rel": "none",
        "mope-rel-scales": "none",
        "ega+mope-rel": "ega",
        "mope-bias": "none",
    }.get(family, family)
    position_name = {"rope": "rope", "rope+ega": "rope", "alibi": "alibi"}.get(family, "none")
    if "mope-rel" in family or family == "mope-bias":
        position_name = "mope-bias" if family == "mope-bias" else "mope-rel"
    init = "scales" if family == "mope-rel-scales" else "random"
    position = build_position(position_name, d_model=d_model, n_head=n_head, block_size=1, mope_init=init)
    attention = CausalSelfAttention(
        d_model,
        n_head,
        gate=build_gate(gate_name, d_model=d_model, n_head=n_head),
        scoring=build_scoring("lagged" if "lagged" in family else "dot", n_head=n_head),
        output_gate=OutputGate(d_model, n_head) if family == "output-gate" else None,
    )
    return attention, position


def _status_kb(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{key} not in /proc/self/status")


def _reset_peak_rss() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _setup(family: str, seq_len: int, batch: int, n_head: int, head_dim: int, threads: int | None):
    import torch

    flush_denormals()  # as training does (harness.models.numerics)
    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(0)
    d_model = n_head * head_dim
    attention, position = build_attention(family, d_model, n_head)
    x = torch.randn(batch, seq_len, d_model, requires_grad=True)

    def step() -> None:
        bias = position.attention_bias(seq_len, x.device, x.dtype)
        out, _ = attention(x, position, bias)
        out.sum().backward()
        x.grad = None
        attention.zero_grad(set_to_none=True)

    return step


def time_cases(
    families: tuple[str, ...],
    seq_len: int,
    *,
    batch: int,
    n_head: int,
    head_dim: int,
    repeats: int,
    threads: int | None = None,
) -> dict[str, dict[str, float]]:
    """Median and minimum forward + backward time (ms) of each family at one T, in this process.

    The families take turns (one pass each per round, after one warm-up pass each), so
    that a change in machine load during the run affects all of them alike.
    """
    steps = {family: _setup(family, seq_len, batch, n_head, head_dim, threads) for family in families}
    for step in steps.values():
        step()  # warm-up
    times: dict[str, list[float]] = {family: [] for family in families}
    for _ in range(repeats):
        for family, step in steps.items():
            start = time.perf_counter()
            step()
            times[family].append(1e3 * (time.perf_counter() - start))
    return {f: {"time_ms": statistics.median(t), "time_min_ms": min(t)} for f, t in times.items()}


def memory_case(
    family: str, seq_len: int, *, batch: int, n_head: int, head_dim: int, threads: int | None = None
) -> dict[str, float | None]:
    """Peak RSS increase and peak live tensor bytes (profiled pass) of one pass after a warm-up, MiB."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    step = _setup(family, seq_len, batch, n_head, head_dim, threads)
    step()  # warm-up: one-time costs (lazily loaded code, thread pools) are not the case's memory
    peak_rss = None
    rss_before = _status_kb("VmRSS")
    if _reset_peak_rss():
        step()
        peak_rss = (_status_kb("VmHWM") - rss_before) / 1024
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    events = sorted(
        (e.start_ns(), e.nbytes())
        for e in prof.profiler.kineto_results.events()
        if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU
    )
    live = peak = 0
    for _, nbytes in events:
        live += nbytes
        peak = max(peak, live)
    return {"peak_rss_mb": peak_rss, "peak_tensor_mb": peak / 2**20 if events else None}


def _memory_in_subprocess(family: str, seq_len: int, shape: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    spec = json.dumps({"family": family, "seq_len": seq_len, **shape})
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}  # freed tensors go back to the system at once
    proc = subprocess.run(
        [sys.executable, "-m", "harness.bench.attention", spec],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=env,
    )
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
        raise RuntimeError(tail if proc.returncode > 0 else f"killed (signal {-proc.returncode}, out of memory?)")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_attention_benchmark(
    *,
    families: tuple[str, ...] = FAMILIES,
    seq_lens: tuple[int, ...] = DEFAULT_SEQ_LENS,
    batch: int = 4,
    n_head: int = 8,
    head_dim: int = 32,
    repeats: int = 3,
    threads: int | None = None,
    measure_memory: bool = True,
    timeout_s: float = 900.0,
    progress=None,
) -> list[CaseResult]:
    """Time every (family, T) case in this process (families interleaved); measure memory in
    a fresh subprocess per case."""
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        raise InputError(
            f"unknown attention famil{'y' if len(unknown) == 1 else 'ies'} {', '.join(map(repr, unknown))}; "
            f"known: {', '.join(FAMILIES)}"
        )
    if "baseline" not in families:
        families = ("baseline", *families)
    if any(t < 2 for t in seq_lens) or repeats < 1:
        raise InputError("sequence lengths must be >= 2 and repeats >= 1")
    shape = dict(batch=batch, n_head=n_head, head_dim=head_dim, threads=threads)
    raw: dict[tuple[str, int], CaseResult] = {}
    for seq_len in seq_lens:
        memory: dict[str, dict[str, Any]] = {}
        failed: dict[str, str] = {}
        runnable = []
        for family in families:
            if measure_memory:  # a fresh process per case: also checks that the case runs at all
                try:
                    memory[family] = _memory_in_subprocess(family, seq_len, shape, timeout_s)
                except (RuntimeError, subprocess.TimeoutExpired) as exc:
                    failed[family] = f"failed: {exc}"
                    continue
            runnable.append(family)
        timed = time_cases(tuple(runnable), seq_len, repeats=repeats, **shape) if runnable else {}
        for family in families:
            if family in failed:
                result = CaseResult(family, seq_len, failed[family])
            else:
                result = CaseResult(family, seq_len, "ok", **memory.get(family, {}), **timed[family])
            raw[(family, seq_len)] = result
            if progress is not None:
                progress(result)

    def ratio(a: float | None, b: float | None) -> float | None:
        return a / b if a is not None and b else None

    results = []
    for (_family, seq_len), r in raw.items():
        base = raw[("baseline", seq_len)]
        results.append(
            CaseResult(
                **{
                    **asdict(r),
                    "time_ratio": ratio(r.time_ms, base.time_ms),
                    "tensor_ratio": ratio(r.peak_tensor_mb, base.peak_tensor_mb),
                    "rss_ratio": ratio(r.peak_rss_mb, base.peak_rss_mb),
                }
            )
        )
    return results


@dataclass(frozen=True)
class TrainStepResult:
    variant: str
    time_ms: float
    ratio: float | None
    dropout: float


def run_train_step_benchmark(
    *,
    variants: tuple[str, ...] | None = None,
    size: str = "paper",
    seq_len: int = 256,
    batch: int = 16,
    repeats: int = 5,
    threads: int | None = None,
    dropouts: tuple[float, ...] = (0.0,),
    progress=None,
) -> list[TrainStepResult]:
    """Median time of a full training step (forward, cross-entropy, backward, AdamW) per variant,
    in this process, variants taking turns (one step each per round, after one warm-up step)."""
    import torch
    import torch.nn.functional as F

    flush_denormals()  # as training does (harness.models.numerics)
    if threads:
        torch.set_num_threads(threads)
    names = ("baseline", *[n for n in (variants or tuple(VARIANTS)) if n != "baseline"])
    x = torch.randint(0, 65, (batch, seq_len), generator=torch.Generator().manual_seed(0))
    y = torch.randint(0, 65, (batch, seq_len), generator=torch.Generator().manual_seed(1))
    results: list[TrainStepResult] = []
    for dropout in dropouts:
        steps = {}
        for name in names:
            torch.manual_seed(0)
            model = build_model(name, size=size, vocab_size=65, block_size=seq_len, dropout=dropout).train()
            optimiser = torch.optim.AdamW(model.parameters(), lr=1e-3)

            def step(model=model, optimiser=optimiser) -> None:
                loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
                optimiser.zero_grad(set_to_none=True)
                loss.backward()
                optimiser.step()

            step()  # warm-up (also allocates AdamW's state)
            steps[name] = step
        times: dict[str, list[float]] = {name: [] for name in names}
        for _ in range(repeats):
            for name, step in steps.items():
                start = time.perf_counter()
                step()
                times[name].append(1e3 * (time.perf_counter() - start))
        base = statistics.median(times["baseline"])
        for name in names:
            t = statistics.median(times[name])
            result = TrainStepResult(name, t, t / base, dropout)
            results.append(result)
            if progress is not None:
                progress(result)
    return results


if __name__ == "__main__":  # memory worker: python -m harness.bench.attention '<json case spec>'
    _spec = json.loads(sys.argv[1])
    print(json.dumps(memory_case(_spec.pop("family"), _spec.pop("seq_len"), **_spec)))
