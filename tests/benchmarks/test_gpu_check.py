"""``benchmarks/gpu_check.py``: the CPU smoke mode runs the GPU check's own phases.

The fast tests run the quick phases in-process (SMOKE settings, the mixed-precision plan on
CPU); the slow one runs the script's extra phases as a user does (``--cpu-smoke --phase extra``:
speed, compile, attention, the packed ``harness run`` studies), reads its JSON record and hands
its measured constants to the cost model. The default phases (a lease's command) run in the
device image's environment: tests/studies/test_device_image.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from harness_support import round_trip_fold

from harness.bench import gpu_check
from harness.bench.gpu_device_phases import bf16_eager_and_compiled, judge_fold_pieces, papers_spec_text
from harness.bench.gpu_phases import attention_kernels, host_syncs, judge_speed, train_speed
from harness.bench.gpu_settings import FLASH_FAMILIES, FULL, PHASE_BUDGETS_S, SMOKE, Phase
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
    bf16_eager_and_compiled(settings, bf16)
    assert bf16.ok, bf16.failures
    fold = bf16.rows[0]
    assert fold["case"] == "ega fold" and fold["error"] <= 1.05 * fold["bf16_floor"] and fold["grad_log_g_rel"] < 0.03
    cases = [r["case"] for r in bf16.rows]
    assert cases[-3:] == ["fold pieces, eager", "fold pieces, inductor", "ega fold, aot_eager"]


def test_the_bf16_phase_fails_a_fold_that_collapses_compiled_and_passes_the_bit_mask_fold() -> None:
    """The bf16 phase's judgement of the fold's pieces, on CPU with Inductor as on the GPU: the
    round-trip fold passes eager and fails compiled; the model's bit-mask fold passes both."""
    from harness.models.fold import FOLD_ERROR_LIMIT

    collapsed = Phase("bf16")
    judge_fold_pieces(collapsed, "cpu", fold=round_trip_fold)
    errors = {row["case"]: row["error"] for row in collapsed.rows}
    assert errors["fold pieces, eager"] <= FOLD_ERROR_LIMIT < 100 * FOLD_ERROR_LIMIT < errors["fold pieces, inductor"]
    assert len(collapsed.failures) == 1 and "(inductor)" in collapsed.failures[0]

    bit_mask = Phase("bf16")
    judge_fold_pieces(bit_mask, "cpu")
    assert bit_mask.ok, bit_mask.failures
    assert [row["error"] for row in bit_mask.rows] == [0.0, 0.0]


def test_the_default_phases_fit_one_lease_command_and_the_2x2_is_the_papers() -> None:
    assert gpu_check.DEFAULT_PHASES == ("import", "train", "syncs", "kernels", "bf16", "study")
    assert list(gpu_check.PHASES)[: len(gpu_check.DEFAULT_PHASES)] == list(gpu_check.DEFAULT_PHASES)
    assert sum(PHASE_BUDGETS_S[n] for n in gpu_check.DEFAULT_PHASES) <= FULL.budget_s <= 9 * 60
    full = yaml.safe_load(papers_spec_text(FULL))
    assert (full["variants"], full["seeds"], full["sizes"], full["train"]["max_steps"]) == (
        ["baseline", "ega", "mope", "ega-mope"],
        4,
        ["paper"],
        5000,
    )
    smoke = yaml.safe_load(papers_spec_text(SMOKE))
    assert smoke["sizes"] == ["nano"] and smoke["train"]["batch_size"] == 4
    assert (smoke["variants"], smoke["seeds"]) == (full["variants"], full["seeds"])


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
def test_cpu_smoke_runs_the_extra_phases(tmp_path: Path, shared_data_dir: Path) -> None:
    from harness.studies.spec.cost import load_measured_constants

    output, constants = tmp_path / "gpu_check.json", tmp_path / "constants.json"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("RAY_ADDRESS", None)
    arguments = ["--cpu-smoke", "--report-budgets", "--phase", "extra", "--output", str(output)]
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *arguments, "--constants", str(constants)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=1800,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    record = json.loads(output.read_text())
    titles = [gpu_check.PHASES[n][0] for n in gpu_check.EXTRA_PHASES]
    assert record["ok"] and [p["name"] for p in record["phases"]] == titles
    packed = record["phases"][-1]["rows"]
    assert [r["trials"] for r in packed] == [1, 4] and all(r["summed_tokens_per_s"] > 0 for r in packed)
    measured = load_measured_constants(constants)
    assert measured.source == str(constants) and measured.study_fixed_s > 0
    assert measured.step_s["ega-mope"] > 0


def test_a_phase_over_its_budget_fails_and_the_2x2_takes_the_time_left(monkeypatch) -> None:
    """A phase over its budget fails (reported only with enforce_budgets off); the last phase, the
    2x2, gets what the others left of the check's budget, less a margin."""
    import time

    seen = {}

    def slow(settings, phase):
        time.sleep(0.3)

    def study(settings, phase):
        seen["budget"] = settings.phase_budget_s("study")

    phases = {"import": ("imports", slow), "study": ("the 2x2", study)}
    monkeypatch.setattr(gpu_check, "PHASES", phases)
    budgets = {"import": 0.1, "study": 10.0}
    settings = replace(SMOKE, budget_s=100.0, phase_budgets_s=budgets)
    first, last = gpu_check.run_phases(replace(settings, enforce_budgets=False), ["import", "study"])
    assert first.ok and first.over_budget and last.ok
    assert 100.0 - gpu_check.LAST_MARGIN_S - 1 < seen["budget"] < 100.0 - gpu_check.LAST_MARGIN_S
    (failed,) = gpu_check.run_phases(settings, ["import", "study"])  # enforced: a failed import stops the check
    assert failed.failures == ["took 0 s, over its budget of 0 s"]
