"""Training-step benchmark: tokens/s per variant against ``baseline``, and the overhead of
``train()``'s Lightning loop, callbacks and MLflow logging over a plain PyTorch loop.

Used by ``benchmarks/train_step.py`` and ``harness bench train``. Prints a table and
writes JSON (default ``benchmarks/results/train_step.json``).

Step = forward, cross-entropy, backward, gradient clipping, AdamW step, in train mode
with the studies' dropout (:data:`STUDY_DROPOUT`: residual 0.2, none on the attention
weights, as every spec in ``studies/`` sets it), fp32 on CPU. Variants are timed in
interleaved rounds, so that load from other processes on a shared machine hits all variants
alike; the fastest round of each variant is reported (the median is kept in the JSON too).
"""

from __future__ import annotations

import contextlib
import os
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness.bench.machine import write_result
from harness.errors import InputError
from harness.models.sizes import get_size
from harness.models.transformer import build_model
from harness.models.variants import VARIANTS
from harness.training import callbacks as cb
from harness.training import tracking
from harness.training.config import TrainConfig
from harness.training.module import learning_rate, optimizer_groups, reseed_dropout
from harness.training.plan import available_cpus
from harness.training.run import train

_REPO = Path(__file__).resolve().parents[2]

#: The dropout the studies train with (``studies/*.yaml``): residual 0.2 and none on the
#: attention weights (which on CPU keeps SDPA on its fused kernel), so the benchmark times the
#: step the studies run.
STUDY_DROPOUT = {"dropout": 0.2, "attention_dropout": 0.0}


def _default_output() -> Path:
    base = _REPO if (_REPO / "benchmarks").is_dir() else Path.cwd()
    return base / "benchmarks" / "results" / "train_step.json"


def _make_step(variant: str, *, size: str, context_length: int, batch_size: int, vocab_size: int, seed: int = 0) -> Any:
    """A closure running one training step of ``variant`` on fixed random batches."""
    import torch
    import torch.nn.functional as F

    torch.manual_seed(seed)
    model = build_model(variant, size=size, vocab_size=vocab_size, block_size=context_length, **STUDY_DROPOUT)
    model.train()
    config = TrainConfig(
        variant=variant, size=size, context_length=context_length, batch_size=batch_size, **STUDY_DROPOUT
    )
    optimizer = torch.optim.AdamW(
        optimizer_groups(model, config.weight_decay), lr=config.lr, betas=(config.beta1, config.beta2)
    )
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(vocab_size, (batch_size, context_length), generator=g)
    y = torch.randint(vocab_size, (batch_size, context_length), generator=g)
    state = {"k": 0}

    def step() -> None:
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(state["k"], config)
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        state["k"] += 1

    return step, model.num_parameters()


def time_variants(
    variants: list[str],
    *,
    size: str,
    context_length: int,
    batch_size: int,
    steps: int,
    warmup: int,
    rounds: int = 3,
    vocab_size: int = 65,
) -> dict[str, dict[str, float]]:
    """Seconds per training step of each variant in ``rounds`` interleaved rounds: the
    minimum over rounds (the least disturbed one on a shared machine) and the median."""
    steppers = {}
    for v in variants:
        step, n_params = _make_step(
            v, size=size, context_length=context_length, batch_size=batch_size, vocab_size=vocab_size
        )
        for _ in range(warmup):
            step()
        steppers[v] = (step, n_params)
    per_round: dict[str, list[float]] = {v: [] for v in variants}
    per_round_steps = max(1, steps // rounds)
    for _ in range(rounds):
        for v, (step, _) in steppers.items():
            t0 = time.perf_counter()
            for _ in range(per_round_steps):
                step()
            per_round[v].append((time.perf_counter() - t0) / per_round_steps)
    tokens = batch_size * context_length
    out = {}
    for v in variants:
        s = min(per_round[v])
        out[v] = {
            "step_ms": 1000 * s,
            "median_step_ms": 1000 * statistics.median(per_round[v]),
            "tokens_per_s": tokens / s,
            "num_parameters": steppers[v][1],
            "rounds_ms": [1000 * r for r in per_round[v]],
        }
    return out


@contextlib.contextmanager
def _timed_hooks(targets: list[tuple[Any, str, str]]) -> Iterator[dict[str, list[float]]]:
    """Wrap ``cls.method`` for each (cls, method, key) with a timer; yields key -> durations."""
    timings: dict[str, list[float]] = defaultdict(list)
    saved = []
    for owner, name, key in targets:
        original = getattr(owner, name)
        saved.append((owner, name, original))

        def wrapper(*args: Any, _original: Any = original, _key: str = key, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return _original(*args, **kwargs)
            finally:
                timings[_key].append(time.perf_counter() - t0)

        setattr(owner, name, wrapper)
    try:
        yield timings
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)


def measure_overhead(
    *, size: str, context_length: int, batch_size: int, steps: int, variant: str = "ega-mope"
) -> dict[str, Any]:
    """What ``train()`` adds to the bare training step, for the same model and batches.

    Robust part (timers, insensitive to load from other processes): the time spent in
    every per-step hook of the harness (throughput clock, divergence check, checkpoint
    test, per-step dropout reseeding) and in MLflow calls at evaluation time
    (``log_batch``), as a percentage of the training time (``steps`` x step time);
    checkpoint writes are reported separately (disk, once per evaluation).

    Noisy part (wall clocks, affected by whatever else runs): the step time of a bare
    PyTorch loop and ``train()``'s steady-state step time with and without MLflow.
    """
    plain = _plain_step_seconds(variant, size=size, context_length=context_length, batch_size=batch_size, steps=steps)
    reseed_s = _reseed_seconds()
    results: dict[str, Any] = {"variant": variant, "steps": steps, "plain_step_ms": 1000 * plain}
    with_logging, without_logging, timings = _timed_train_runs(
        variant, size=size, context_length=context_length, batch_size=batch_size, steps=steps
    )
    results.update(
        _overhead_summary(
            timings,
            tokens_per_step=batch_size * context_length,
            tokens_per_s=with_logging.tokens_per_s,
            tokens_per_s_without_logging=without_logging.tokens_per_s,
            plain_s=plain,
            reseed_s=reseed_s,
            steps=steps,
        )
    )
    return results


def _plain_step_seconds(variant: str, *, size: str, context_length: int, batch_size: int, steps: int) -> float:
    """Seconds per step of the bare PyTorch loop (:func:`_make_step`), after two warm-up steps."""
    step, _ = _make_step(variant, size=size, context_length=context_length, batch_size=batch_size, vocab_size=65)
    for _ in range(2):
        step()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - t0) / steps


def _reseed_seconds() -> float:
    """Seconds per call of the per-step dropout reseeding on CPU (mean of 1,000 calls)."""
    import torch

    t0 = time.perf_counter()
    for k in range(1000):
        reseed_dropout(0, k, torch.device("cpu"))
    return (time.perf_counter() - t0) / 1000


def _timed_train_runs(
    variant: str, *, size: str, context_length: int, batch_size: int, steps: int
) -> tuple[Any, Any, dict[str, list[float]]]:
    """Two ``train()`` runs of ``steps`` steps evaluating twice, on tinyshakespeare in a
    temporary folder: with MLflow, its per-step hooks and per-evaluation calls timed
    (:func:`_timed_hooks`), then without; their results and the hooks' durations."""
    import torch

    with tempfile.TemporaryDirectory() as tmp:
        common = dict(
            variant=variant,
            dataset="tinyshakespeare",
            size=size,
            context_length=context_length,
            batch_size=batch_size,
            max_steps=steps,
            eval_every=max(1, steps // 2),
            eval_windows=4,
            eval_batch_size=4,
            checkpoint_dir=str(Path(tmp) / "ckpt"),
            num_threads=torch.get_num_threads(),
            tracking_uri=f"sqlite:///{Path(tmp) / 'mlflow.db'}",
            **STUDY_DROPOUT,
        )
        # Create the store first so that the timed run does not pay MLflow's schema migration.
        tracking.prepare_tracking(common["tracking_uri"], "harness")
        per_step = [
            (cb.TokenThroughput, "on_train_batch_end", "throughput"),
            (cb.BatchLossMonitor, "on_train_batch_end", "divergence_check"),
            (cb.RollingCheckpoint, "on_train_batch_end", "checkpoint_test"),
        ]
        per_eval = [
            (tracking.TrackedRun, "log_metrics", "mlflow_log_batch"),
            (cb.RollingCheckpoint, "save", "checkpoint_write"),
        ]
        with _timed_hooks(per_step + per_eval) as timings:
            with_logging = train(common, mlflow_logging=True, progress_bar=False)
        without_logging = train(common, mlflow_logging=False, progress_bar=False)
    return with_logging, without_logging, timings


def _overhead_summary(
    timings: dict[str, list[float]],
    *,
    tokens_per_step: int,
    tokens_per_s: float,
    tokens_per_s_without_logging: float,
    plain_s: float,
    reseed_s: float,
    steps: int,
) -> dict[str, Any]:
    """The overhead numbers of :func:`measure_overhead` from the hooks' durations (seconds) and the
    throughputs of the two ``train()`` runs: step = tokens_per_step / tokens_per_s, per-step hooks
    H_s = sum of their seconds / steps, MLflow per evaluation H_e = its seconds / evaluations,
    overhead = (H_s steps + H_e evaluations) / (steps x step) in this run and
    (H_s + H_e / 250) / step at the recipe's evaluation cadence."""
    step_s = tokens_per_step / tokens_per_s
    train_time = steps * step_s
    hooks = {key: sum(v) for key, v in timings.items()}
    hooks["dropout_reseed"] = reseed_s * steps
    evaluations = max(1, len(timings.get("mlflow_log_batch", [])))
    per_step = (
        sum(hooks.get(k, 0.0) for k in ("throughput", "divergence_check", "checkpoint_test", "dropout_reseed")) / steps
    )
    per_eval = hooks.get("mlflow_log_batch", 0.0) / evaluations
    recipe_eval_every = TrainConfig().eval_every
    return {
        "train_step_ms_with_logging": 1000 * step_s,
        "train_step_ms_without_logging": 1000 * tokens_per_step / tokens_per_s_without_logging,
        "hook_seconds": hooks,
        "evaluations": evaluations,
        "per_step_hooks_ms": 1000 * per_step,
        "per_evaluation_mlflow_ms": 1000 * per_eval,
        # This run evaluates every steps/2 steps; the recipe every 250.
        "logging_and_callbacks_overhead_pct_this_run": 100 * (per_step * steps + per_eval * evaluations) / train_time,
        "logging_and_callbacks_overhead_pct_recipe": 100 * (per_step + per_eval / recipe_eval_every) / step_s,
        "checkpoint_write_ms": 1000 * hooks.get("checkpoint_write", 0.0) / evaluations,
        "loop_overhead_pct": 100 * (step_s / plain_s - 1),
    }


def main(
    *,
    size: str = "paper",
    context_length: int = 256,
    batch_size: int = 8,
    steps: int = 10,
    warmup: int = 2,
    variants: list[str] | None = None,
    overhead: bool = True,
    overhead_steps: int = 12,
    num_threads: int | None = None,
    rounds: int = 3,
    output: str | os.PathLike[str] | None = None,
) -> dict[str, Any]:
    """Run the benchmark, print a table, write JSON; returns the JSON payload."""
    import torch

    names = _variant_names(size, variants)
    threads = num_threads or available_cpus()
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        timings = time_variants(
            names,
            size=size,
            context_length=context_length,
            batch_size=batch_size,
            steps=steps,
            warmup=warmup,
            rounds=rounds,
        )
        base = timings["baseline"]["step_ms"]
        for t in timings.values():
            t["ratio_to_baseline"] = t["step_ms"] / base
        payload: dict[str, Any] = {
            "benchmark": "train_step",
            "size": size,
            "context_length": context_length,
            "batch_size": batch_size,
            "steps": steps,
            "rounds": rounds,
            "threads": threads,
            "variants": timings,
        }
        if overhead:
            payload["overhead"] = measure_overhead(
                size=size, context_length=context_length, batch_size=batch_size, steps=overhead_steps
            )
    finally:
        torch.set_num_threads(saved)

    _print_variants(timings, size=size, context_length=context_length, batch_size=batch_size, threads=threads)
    if overhead:
        _print_overhead(payload["overhead"])
    out = Path(output) if output else _default_output()
    written = write_result(out, payload)
    print(f"wrote {out}")
    return written


def _variant_names(size: str, variants: list[str] | None) -> list[str]:
    """The variants to time (all of the zoo when none are named), ``baseline`` first when not
    among them; an unknown size or variant is an :class:`InputError` before any work."""
    get_size(size)
    names = list(variants) if variants else list(VARIANTS)
    unknown = [v for v in names if v not in VARIANTS]
    if unknown:
        raise InputError(f"unknown variants {unknown}; known: {', '.join(VARIANTS)}")
    if "baseline" not in names:
        names.insert(0, "baseline")
    return names


def _print_variants(
    timings: dict[str, dict[str, Any]], *, size: str, context_length: int, batch_size: int, threads: int
) -> None:
    """The table of step times: ms/step, tokens/s, the ratio to baseline and the parameters."""
    print(f"training step, size={size} T={context_length} B={batch_size}, {threads} threads, fp32 CPU")
    print(f"{'variant':<22}{'ms/step':>10}{'tokens/s':>12}{'x baseline':>12}{'params':>12}")
    for name, t in timings.items():
        print(
            f"{name:<22}{t['step_ms']:>10.1f}{t['tokens_per_s']:>12,.0f}{t['ratio_to_baseline']:>12.2f}{t['num_parameters']:>12,}"
        )


def _print_overhead(o: dict[str, Any]) -> None:
    """The overhead of ``train()`` (:func:`measure_overhead`) in three lines: hooks and MLflow,
    their share of the training time, the noisy wall clocks."""
    print(
        f"\noverhead ({o['variant']}, {o['steps']} steps, {o['evaluations']} evaluations): per-step hooks "
        f"{o['per_step_hooks_ms']:.3f} ms/step, MLflow log_batch {o['per_evaluation_mlflow_ms']:.1f} "
        "ms/evaluation, "
        f"checkpoint write {o['checkpoint_write_ms']:.0f} ms/evaluation\n"
        f"logging + callbacks: {o['logging_and_callbacks_overhead_pct_this_run']:.2f} % of training time "
        "in this run "
        f"(evaluating every {max(1, o['steps'] // 2)} steps), "
        f"{o['logging_and_callbacks_overhead_pct_recipe']:.3f} % at the recipe's evaluation every 250 steps\n"
        f"wall clocks (noisy): plain loop {o['plain_step_ms']:.1f} ms/step, train() "
        f"{o['train_step_ms_without_logging']:.1f} / {o['train_step_ms_with_logging']:.1f} ms/step "
        "without / with MLflow "
        f"(loop overhead {o['loop_overhead_pct']:+.1f} %)"
    )
