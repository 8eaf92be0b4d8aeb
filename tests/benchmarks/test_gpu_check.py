"""``benchmarks/gpu_check.py``: the CPU smoke mode runs the GPU check's own phases.

The fast tests run the quick phases in-process (SMOKE settings, the mixed-precision plan on
CPU); the slow one runs the script as a user does (``--cpu-smoke``: the real training run
first, every phase, the packed ``harness run`` studies included), reads its JSON record and
hands its measured constants to the cost model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from harness.bench import gpu_check
from harness.bench.gpu_phases import attention_kernels, bf16_correctness, host_syncs, judge_speed, train_speed
from harness.bench.gpu_settings import FLASH_FAMILIES, SMOKE, Phase
from harness.bench.gpu_study_phases import folded_attention

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "gpu_check.py"


def test_syncs_kernels_and_bf16_phases_on_cpu(shared_data_dir: Path) -> None:
    settings = replace(SMOKE, sync_variants=("ega-mope", "mope-rel", "alibi"))
    syncs = Phase("host syncs")
    host_syncs(settings, syncs)
    assert syncs.ok, syncs.failures
    assert [r["variant"] for r in syncs.rows] == list(settings.sync_variants)
    assert all(r["syncs_per_step"] == 0 for r in syncs.rows)

    kernels = Phase("attention kernels")
    attention_kernels(settings, kernels)
    assert kernels.ok, kernels.failures
    by_family = {r["family"]: r["kernels"] for r in kernels.rows if "kernels" in r}
    assert all(by_family[f] == ["aten::_scaled_dot_product_flash_attention_for_cpu"] for f in FLASH_FAMILIES)
    assert Path(kernels.rows[-1]["trace"]).is_file()

    bf16 = Phase("bf16 correctness")
    bf16_correctness(settings, bf16)
    assert bf16.ok, bf16.failures
    fold = bf16.rows[0]
    assert fold["case"] == "ega fold" and fold["error"] <= 1.05 * fold["bf16_floor"] and fold["grad_log_g_rel"] < 0.03


def test_speed_and_attention_phases_on_cpu(shared_data_dir: Path) -> None:
    speed = Phase("training speed")
    train_speed(SMOKE, speed)
    assert speed.ok, speed.failures
    assert [r["variant"] for r in speed.rows] == ["baseline", "ega", "ega-mope"]
    assert speed.rows[0]["step_time_ratio"] == 1.0 and all(r["tokens_per_s"] > 0 for r in speed.rows)
    assert set(speed.constants["step_s"]) == {"baseline", "ega", "ega-mope"}

    attention = Phase("folded attention")
    folded_attention(SMOKE, attention)
    assert attention.ok, attention.failures
    assert [r["T"] for r in attention.rows] == list(SMOKE.attention_lengths)


def test_the_speed_thresholds_fail_a_slow_step() -> None:
    phase = Phase("training speed")
    phase.rows = [{"variant": "baseline", "step_ms": 12.0}, {"variant": "ega", "step_ms": 24.0}]
    judge_speed(replace(SMOKE, max_baseline_step_ms=10.0, max_step_ratio=1.6), phase)
    assert len(phase.failures) == 2 and "12.0 ms" in phase.failures[0] and "x2.00" in phase.failures[1]


def test_a_failed_real_run_stops_the_check(shared_data_dir: Path) -> None:
    """The real training path runs first; when it fails the other phases are not run."""
    settings = replace(SMOKE, train_variant="no-such-variant")
    phases = gpu_check.run_phases(settings, ["train", "syncs", "bf16"])
    assert [p.name for p in phases] == ["real training run"]
    assert not phases[0].ok and "no-such-variant" in phases[0].failures[0]


def test_usage_errors_exit_2(capsys) -> None:
    assert gpu_check.main(["--cpu-smoke", "--phase", "train,warp"]) == 2
    assert "unknown phase(s) warp" in capsys.readouterr().err
    if not __import__("torch").cuda.is_available():
        assert gpu_check.main([]) == 2
        assert "--cpu-smoke" in capsys.readouterr().err


@pytest.mark.slow
def test_cpu_smoke_runs_every_phase(tmp_path: Path, shared_data_dir: Path) -> None:
    from harness.studies.spec.cost import load_measured_constants

    output, constants = tmp_path / "gpu_check.json", tmp_path / "constants.json"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--cpu-smoke", "--output", str(output), "--constants", str(constants)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=1800,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "FAILED" not in done.stdout
    record = json.loads(output.read_text())
    assert record["ok"] and [p["name"] for p in record["phases"]] == [title for title, _ in gpu_check.PHASES.values()]
    train = record["phases"][0]["rows"]
    assert [r["status"] for r in train] == ["finished", "finished"] and train[0]["syncs_per_steady_step"] == 0
    packed = record["phases"][-1]["rows"]
    assert [r["trials"] for r in packed] == [1, 4] and all(r["summed_tokens_per_s"] > 0 for r in packed)
    measured = load_measured_constants(constants)
    assert measured.source == str(constants) and measured.study_fixed_s > 0
    assert measured.step_s["ega-mope"] > 0 and measured.checkpoint_mb > 0
