"""A rough cost estimate of a study, printed by ``harness run --dry-run``.

Tokens are exact (steps x batch x T per trial, plus the evaluation windows); time is an
*estimate* from a FLOP count and an assumed effective throughput per device:

    FLOPs per trained token  ~ 6 N + 6 L T d     (N parameters; causal attention, fwd+bwd)
    FLOPs per evaluated token ~ 2 N + 2 L T d

Effective rates: one CPU core of this development machine ~ 2e10 FLOP/s (calibrated on
``nano`` and ``paper`` trainings here); one H200 in bf16 at a utilisation that grows with
model size. Reference point: nanoGPT's shakespeare_char (10.7 M parameters) trains at
about 4.5e5 tokens/s on an A100 (5,000 steps x 64 x 256 in ~3 minutes), ~3e13 FLOP/s;
an H200 is taken as 1.5x that, 4.5e13 FLOP/s, at 10.7 M parameters. Below that, small
models are bound by kernel launches rather than by the matrix units, so the rate is
taken proportional to the parameter count (tokens/s roughly constant); above 20 M it is
1.5e14 FLOP/s, above 150 M 2.5e14. A fixed start-up cost per trial is added
(8 s on CPU, 30 s on GPU with compilation). Treat the hours as the order of magnitude,
not a promise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: Effective FLOP/s of one CPU core (measured order of magnitude on the dev machine).
CPU_CORE_FLOPS = 2.0e10
#: H200 bf16 dense peak is ~9.9e14 FLOP/s; effective rates by parameter count.
H200_REFERENCE = (10.7e6, 4.5e13)  # nanoGPT shakespeare_char size, effective FLOP/s
H200_EFFECTIVE_FLOPS = ((150e6, 1.5e14), (math.inf, 2.5e14))
#: Fixed cost per trial: process start, imports, data, (on GPU) torch.compile.
TRIAL_OVERHEAD_S = {"cpu": 8.0, "gpu": 30.0}
#: Evaluation windows assumed when a spec evaluates whole splits (eval_windows: null).
WHOLE_SPLIT_WINDOWS = 1000
CHAR_VOCAB = 100


def approx_parameters(n_layer: int, d_model: int, vocab: int = CHAR_VOCAB) -> float:
    """12 L d^2 (attention + 4x MLP) + embeddings (tied)."""
    return 12 * n_layer * d_model**2 + vocab * d_model


@dataclass(frozen=True)
class CostEstimate:
    trials: int
    train_tokens: float  # summed over trials
    eval_tokens: float
    flops: float
    cpu_core_hours: float  # on one core (divide by the cores a trial gets)
    h200_hours: float  # one H200, trials one after another
    wall_hours: float  # with the spec's resources on the machine described by `on`
    on: str

    def lines(self) -> list[str]:
        return [
            f"tokens: {self.train_tokens:.3g} trained + {self.eval_tokens:.3g} evaluated over {self.trials} trials "
            f"({self.flops:.2g} FLOPs)",
            f"time (rough estimate): ~{_hours(self.h200_hours)} on one H200 (trials one after another), "
            f"~{_hours(self.cpu_core_hours)} of CPU-core time; ~{_hours(self.wall_hours)} wall time {self.on}",
        ]


def _hours(h: float) -> str:
    if h < 1 / 60:
        return f"{h * 3600:.0f} s"
    if h < 1:
        return f"{h * 60:.0f} min"
    if h < 48:
        return f"{h:.1f} h"
    return f"{h / 24:.1f} days"


def _h200_rate(parameters: float) -> float:
    ref_n, ref_rate = H200_REFERENCE
    if parameters < 20e6:
        return ref_rate * max(parameters / ref_n, 0.02)
    return next(rate for limit, rate in H200_EFFECTIVE_FLOPS if parameters < limit)


def estimate(
    trials: Sequence[Any], *, cpus_per_trial: int, gpus_per_trial: float, total_cpus: float | None = None
) -> CostEstimate:
    """Cost of ``trials`` (:class:`~harness.studies.spec.grid.Trial`). ``total_cpus``: the CPUs
    of the Ray cluster, when known (for the wall-time estimate of CPU studies)."""
    train_tokens = eval_tokens = flops = cpu_s = gpu_s = 0.0
    for trial in trials:
        c = trial.config
        size = c.model_size()
        n = approx_parameters(size.n_layer, size.d_model)
        attention = size.n_layer * c.context_length * size.d_model
        tokens = float(c.max_steps * c.batch_size * c.context_length)
        windows = c.eval_windows or WHOLE_SPLIT_WINDOWS
        evaluations = math.ceil(c.max_steps / c.eval_every) + 1
        evaluated = float(evaluations * windows * c.context_length * 2)  # train + val windows
        f = tokens * (6 * n + 6 * attention) + evaluated * (2 * n + 2 * attention)
        train_tokens += tokens
        eval_tokens += evaluated
        flops += f
        cpu_s += f / CPU_CORE_FLOPS + TRIAL_OVERHEAD_S["cpu"]
        gpu_s += f / _h200_rate(n) + TRIAL_OVERHEAD_S["gpu"]
    if gpus_per_trial > 0:
        # Fractional GPUs pack trials; assume packing buys at most 2x aggregate throughput.
        packing = min(2.0, 1.0 / gpus_per_trial) if gpus_per_trial < 1 else 1.0
        wall = gpu_s / packing / 3600
        on = f"on one H200 with {gpus_per_trial:g} GPU per trial"
    else:
        cores = total_cpus or cpus_per_trial
        concurrent = max(1, int(cores // cpus_per_trial))
        wall = cpu_s / (cpus_per_trial * min(concurrent, len(trials) or 1)) / 3600
        on = f"on {cores:g} CPU cores ({cpus_per_trial} per trial)"
    return CostEstimate(
        trials=len(trials),
        train_tokens=train_tokens,
        eval_tokens=eval_tokens,
        flops=flops,
        cpu_core_hours=cpu_s / 3600,
        h200_hours=gpu_s / 3600,
        wall_hours=wall,
        on=on,
    )
