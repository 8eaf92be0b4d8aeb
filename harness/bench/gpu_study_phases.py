"""The GPU check's long-context attention and packed-trials phases (:mod:`harness.bench.gpu_check`)."""

from __future__ import annotations

import math
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from harness.bench.gpu_settings import Phase, Settings

# -- folded attention at long context ---------------------------------------------------------------


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _attention_layer(gated: bool, settings: Settings) -> tuple[Any, Any]:
    """The plain (``baseline``) or gated (``ega``) attention layer of ``harness bench attention``,
    seed 0, on the device, with its position component (none)."""
    from harness.bench.attention import build_attention

    d, H = settings.attention_heads * settings.attention_head_dim, settings.attention_heads
    torch.manual_seed(0)
    layer, position = build_attention("ega" if gated else "baseline", d, H)
    return layer.to(settings.device), position


def _time_layer(layer: Any, position: Any, x: Tensor, settings: Settings) -> tuple[float, float | None]:
    """Median forward + backward time (ms) under bf16 and the peak memory above the input (MiB)."""
    times = []
    base = 0
    for repeat in range(settings.attention_repeats + 1):  # the first pass warms up, untimed
        layer.zero_grad(set_to_none=True)
        _sync(settings.device)
        if repeat == settings.attention_repeats and settings.device == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated() if settings.device == "cuda" else 0
        t0 = time.perf_counter()
        with torch.autocast(device_type=settings.device, dtype=torch.bfloat16):
            out, _ = layer(x, position)
        out.float().sum().backward()
        _sync(settings.device)
        times.append(time.perf_counter() - t0)
    peak = (torch.cuda.max_memory_allocated() - base) / 2**20 if settings.device == "cuda" else None
    return 1000 * sorted(times[1:])[len(times[1:]) // 2], peak


def _oracle_error(settings: Settings, T: int) -> float:
    """Largest |folded - naive| of key_biased_attention against softmax with an explicit
    T x T bias, fp32 (the naive side builds the T x T matrix: the oracle, not the method)."""
    from harness.models import key_biased_attention

    g = torch.Generator(device=settings.device).manual_seed(0)
    B, H, hd = 1, settings.attention_heads, settings.attention_head_dim
    q, k, v = (torch.randn(B, H, T, hd, device=settings.device, generator=g) for _ in range(3))
    bias = torch.nn.functional.logsigmoid(torch.randn(B, H, T, device=settings.device, generator=g))  # log g_j
    precision = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")  # no TF32 in the oracle comparison
    try:
        folded = key_biased_attention(q, k, v, bias)
        causal = torch.ones(T, T, dtype=torch.bool, device=settings.device).tril()
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(hd) + bias[:, :, None, :]  # (B, H, T, T)
        naive = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1) @ v
        return float((folded - naive).abs().max())
    finally:
        torch.set_float32_matmul_precision(precision)


def folded_attention(settings: Settings, phase: Phase) -> None:
    """The gated (folded) attention layer against the plain one at long context (bf16): time and
    memory; an fp32 oracle; a failure when the gated layer's extra memory reaches a quarter of one
    T x T score tensor (it would mean one was built)."""
    B, H = settings.attention_batch, settings.attention_heads
    d = H * settings.attention_head_dim
    for T in settings.attention_lengths:
        x = torch.randn(B, T, d, device=settings.device, requires_grad=True)
        plain_ms, plain_mib = _time_layer(*_attention_layer(False, settings), x, settings)
        gated_ms, gated_mib = _time_layer(*_attention_layer(True, settings), x, settings)
        error = _oracle_error(settings, T)
        score_mib = B * H * T * T * 2 / 2**20  # one bf16 T x T score tensor
        phase.rows.append(
            {
                "T": T,
                "plain_ms": plain_ms,
                "ega_ms": gated_ms,
                "time_ratio": gated_ms / plain_ms,
                "plain_peak_mib": plain_mib,
                "ega_peak_mib": gated_mib,
                "tt_tensor_mib": score_mib,
                "oracle_max_abs_error": error,
            }
        )
        if not error < 1e-4:
            phase.failures.append(f"T={T}: folded attention differs from the naive oracle by {error:.2e}")
        if plain_mib is not None and gated_mib is not None and gated_mib - plain_mib > score_mib / 4:
            phase.failures.append(
                f"T={T}: the gated layer needs {gated_mib - plain_mib:.0f} MiB more than the plain one "
                f"(one T x T score tensor: {score_mib:.0f} MiB): a T x T tensor was built"
            )


# -- packed trials -----------------------------------------------------------------------------------


def study_spec(settings: Settings, trials: int) -> dict[str, Any]:
    """The packed phase's study: ``trials`` seeds of ``baseline`` at the check's size."""
    return {
        "name": f"gpu-check-{trials}",
        "datasets": ["tinyshakespeare"],
        "variants": ["baseline"],
        "seeds": trials,
        "sizes": [settings.size],
        "context_lengths": [settings.context_length],
        "train": {
            "max_steps": settings.study_steps,
            "batch_size": settings.batch_size,
            "eval_every": max(1, settings.study_steps // 2),
            "eval_windows": 64,
            "warmup_steps": min(100, settings.study_steps // 2),
            "dropout": 0.0,
        },
        "resources": {"cpus": settings.study_cpus, "gpus": settings.study_gpus},
        "retries": 0,
    }


def _run_study(settings: Settings, trials: int, workdir: Path) -> dict[str, Any]:
    """``harness run`` of the study in a subprocess; its results table and wall time."""
    import polars as pl
    import yaml

    from harness.bench.study_overhead import run_study_cli

    spec_path = workdir / f"study-{trials}.yaml"
    spec_path.write_text(yaml.safe_dump(study_spec(settings, trials)))
    done, wall = run_study_cli(spec_path, workdir, cwd=workdir)
    if done.returncode != 0:
        raise RuntimeError(f"harness run ({trials} trials) exited {done.returncode}:\n{done.stderr[-2000:]}")
    (table_path,) = (workdir / "results" / f"gpu-check-{trials}").glob("*/results.parquet")
    return {"wall_s": wall, "rows": pl.read_parquet(table_path).to_dicts()}


def packed_study(settings: Settings, phase: Phase) -> None:
    """Total training tokens/s of ``study_trials`` trials sharing the device against one alone;
    the single trial's study gives a study's fixed seconds beyond its steps (Ray's start, the
    worker's imports, the compile, evaluations, checkpoints: its wall time less its steps)."""
    tokens_per_trial = settings.study_steps * settings.batch_size * settings.context_length
    with tempfile.TemporaryDirectory(prefix="harness-gpu-check-") as tmp:
        for trials in (1, settings.study_trials):
            study = _run_study(settings, trials, Path(tmp))
            finished = [r for r in study["rows"] if r["status"] == "finished"]
            if len(finished) != trials:
                phase.failures.append(f"{trials}-trial study: {len(finished)} of {trials} trials finished")
            summed = sum(r["tokens_per_s"] or 0.0 for r in finished)
            phase.rows.append(
                {
                    "trials": trials,
                    "gpus_per_trial": settings.study_gpus,
                    "summed_tokens_per_s": summed,
                    "tokens_per_wall_s": tokens_per_trial * len(finished) / study["wall_s"],
                    "wall_s": study["wall_s"],
                    "fixed_s": study["wall_s"] - tokens_per_trial / summed if trials == 1 and summed else None,
                }
            )
    alone = phase.rows[0]
    for row in phase.rows:
        row["speedup_vs_alone"] = row["summed_tokens_per_s"] / alone["summed_tokens_per_s"] if alone else None
    if alone["fixed_s"] is not None:
        phase.constants["study_fixed_s"] = alone["fixed_s"]
    if len(phase.rows) > 1:
        phase.constants["packed_speedup"] = phase.rows[-1]["speedup_vs_alone"]
