"""The study cost model (harness.studies.spec.cost): its CPU step against the measurements it
was fitted to, the two long CPU studies against their measured wall times, the H200's
assumptions, and measured constants (benchmarks/gpu_check.py's file) replacing them."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from harness.studies.spec import cost
from harness.studies.spec.grid import expand_grid
from harness.studies.spec.study_spec import load_spec

REPO = Path(__file__).resolve().parents[2]

#: ``harness train ... --num-threads 1``, ega-mope, T = 128, batch 16, quiet 2-core machine: seconds a step.
MEASURED_CPU_STEPS = {(2, 2, 64): 0.057, (3, 4, 96): 0.149, (4, 4, 128): 0.270}


@pytest.fixture(autouse=True)
def _assumed_gpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No measured constants unless a test writes some (a checkout may hold a GPU's file)."""
    monkeypatch.setenv("HARNESS_MEASURED_COSTS", str(tmp_path / "none.json"))


@pytest.mark.parametrize(("shape", "measured"), list(MEASURED_CPU_STEPS.items()))
def test_the_cpu_step_reproduces_the_measured_steps(shape: tuple[int, int, int], measured: float) -> None:
    n_layer, _, d_model = shape
    assert cost.cpu_step_s(n_layer, d_model, 16, 128) == pytest.approx(measured, rel=0.08)


@pytest.mark.parametrize(("study", "low", "high"), [("long-cpu", 1.3, 1.5), ("ladder-cpu", 2.2, 2.5)])
def test_the_long_cpu_studies_estimate_their_measured_wall_time(study: str, low: float, high: float) -> None:
    spec = load_spec(REPO / "studies" / f"{study}.yaml")
    # Measured before the final evaluation read the whole validation split: estimate the study as
    # it ran then (its final numbers on the periodic windows).
    as_measured = [
        dataclasses.replace(t, config=t.config.model_copy(update={"final_eval_windows": t.config.eval_windows}))
        for t in expand_grid(spec)
    ]
    estimate = cost.estimate(as_measured, cpus_per_trial=1, gpus_per_trial=0, total_cpus=2)
    assert low <= estimate.wall_hours <= high
    assert estimate.paper_h200_hours is not None and estimate.paper_h200_hours > 0
    text = "\n".join(estimate.lines())
    assert "the same study at size paper" in text and "assumed: CPU step" in text
    assert "the performance review's estimates" in text


def test_the_assumed_h200_step_is_launch_bound_at_the_papers_size() -> None:
    gpu = cost.GpuModel.from_constants(None)
    paper = gpu.step_s(6, cost.step_flops(6, 256, 64, 256))
    assert 0.003 <= paper <= 0.0045  # compiled, not eager (issue 40)
    large = cost.step_flops(24, 1024, 64, 1024)
    assert gpu.step_s(24, large) == pytest.approx(large / cost.GPU_EFFECTIVE_FLOPS)  # the FLOPs bind


def _constants(path: Path, **fields: object) -> Path:
    data = {"device": "NVIDIA H200", "torch": "2.13", "date": "2027-01-01", "size": "paper"}
    data |= {"context_length": 256, "batch_size": 64, "step_s": {"baseline": 0.008, "ega-mope": 0.011}}
    path.write_text(json.dumps(data | fields))
    return path


def test_measured_gpu_constants_replace_the_assumptions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = load_spec(REPO / "studies" / "smoke.yaml")
    trials = expand_grid(spec)
    assumed = cost.estimate(trials, cpus_per_trial=1, gpus_per_trial=0, total_cpus=2)
    path = _constants(tmp_path / "h200.json", cold_compile_s=100.0, warm_compile_s=20.0, study_fixed_s=130.0)
    monkeypatch.setenv("HARNESS_MEASURED_COSTS", str(path))
    measured = cost.load_measured_constants()
    assert measured is not None and measured.source == str(path) and measured.is_gpu
    gpu = cost.GpuModel.from_constants(measured)
    assert gpu.step_s(6, cost.step_flops(6, 256, 64, 256)) == pytest.approx(0.011)  # the slowest variant measured
    assert (gpu.cold_compile_s, gpu.warm_compile_s, gpu.imports_s) == (100.0, 20.0, 30.0)  # 130 s less the compile
    with_measured = cost.estimate(trials, cpus_per_trial=1, gpus_per_trial=0, total_cpus=2)
    assert with_measured.paper_h200_hours > assumed.paper_h200_hours
    assert with_measured.wall_hours == assumed.wall_hours  # a GPU's constants leave the CPU estimate alone
    assert f"measured on NVIDIA H200 on 2027-01-01 ({path})" in "\n".join(with_measured.lines())
    imported = _constants(tmp_path / "h200-imports.json", cold_compile_s=100.0, study_fixed_s=130.0, imports_s=12.0)
    assert cost.GpuModel.from_constants(cost.load_measured_constants(imported)).imports_s == 12.0  # measured wins


def test_a_worker_imports_once_not_per_trial() -> None:
    """Trials one after another share a worker: one more trial adds its compile and steps, not the
    imports; packed trials import at the same time, once in the wall time."""
    spec = load_spec(REPO / "studies" / "superadditivity.yaml")
    trials = expand_grid(spec)
    gpu = cost.GpuModel.from_constants(None)
    configs = [t.config for t in trials]
    one, two = cost._gpu_seconds(configs[:1], gpu), cost._gpu_seconds(configs[:1] * 2, gpu)
    again = cost._trial_cost(configs[0], threads=1, gpu=gpu, warm=True).gpu_s
    assert two - one == pytest.approx(again) and one == pytest.approx(
        gpu.imports_s + again - gpu.warm_compile_s + gpu.cold_compile_s
    )
    packed = cost.estimate(trials, cpus_per_trial=2, gpus_per_trial=0.25)
    assert packed.wall_hours * 3600 == pytest.approx(
        (packed.h200_hours * 3600 - gpu.imports_s) / gpu.packing + gpu.imports_s
    )


def test_a_cpu_smoke_file_does_not_replace_the_h200_assumptions(tmp_path: Path) -> None:
    measured = cost.load_measured_constants(_constants(tmp_path / "cpu.json", device="cpu", size="nano"))
    assert measured is not None and not measured.is_gpu
    assert cost.GpuModel.from_constants(measured) == cost.GpuModel.from_constants(None)
    assert cost.load_measured_constants(tmp_path / "missing.json") is None
