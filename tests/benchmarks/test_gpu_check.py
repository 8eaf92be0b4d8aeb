"""``benchmarks/gpu_check.py``: the CPU smoke mode runs the GPU check's own phases.

The fast test runs the training-speed and folded-attention phases in-process (SMOKE
settings); the slow one runs the script as a user does (``--cpu-smoke``), the packed
``harness run`` studies included, and reads its JSON."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "gpu_check.py"


def _load_gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_speed_and_attention_phases_on_cpu(shared_data_dir: Path) -> None:
    gpu_check = _load_gpu_check()
    settings = gpu_check.SMOKE
    speed = gpu_check.Phase("training speed")
    gpu_check.train_speed(settings, speed)
    assert speed.ok, speed.failures
    assert [r["variant"] for r in speed.rows] == ["baseline", "ega", "ega-mope"]
    assert speed.rows[0]["step_time_ratio"] == 1.0
    assert all(r["tokens_per_s"] > 0 and r["parameters"] > 0 for r in speed.rows)

    attention = gpu_check.Phase("folded attention")
    gpu_check.folded_attention(settings, attention)
    assert attention.ok, attention.failures
    assert [r["T"] for r in attention.rows] == list(settings.attention_lengths)
    assert all(r["oracle_max_abs_error"] < 1e-4 for r in attention.rows)


def test_compiled_graph_phase_on_cpu() -> None:
    gpu_check = _load_gpu_check()
    settings = gpu_check.SMOKE
    graphs = gpu_check.Phase("compiled graphs")
    gpu_check.compiled_graphs(settings, graphs)
    assert graphs.ok, graphs.failures
    rows = {r["variant"]: r for r in graphs.rows}
    assert list(rows) == list(settings.graph_variants)
    assert all(r["graph_breaks"] == 0 and r["recompiles"] == 0 for r in rows.values())
    assert rows["baseline"]["graphs"] == 1 and rows["baseline"]["documented_breaks"] == 0
    assert rows["ega-mope-rel"]["documented_breaks"] > 0  # mope-rel's fused lag attention runs eager


def test_compiled_graph_phase_fails_on_an_undocumented_break(monkeypatch: pytest.MonkeyPatch) -> None:
    """mope-rel's break, no longer documented, is a failure of the phase."""
    import harness.bench.compile_cost as compile_bench

    gpu_check = _load_gpu_check()
    monkeypatch.setattr(compile_bench, "DOCUMENTED_GRAPH_BREAKS", {})
    phase = gpu_check.Phase("compiled graphs")
    gpu_check.compiled_graphs(replace(gpu_check.SMOKE, graph_variants=("ega-mope-rel",)), phase)
    assert not phase.ok and "ega-mope-rel: graph breaks" in phase.failures[0]
    assert phase.rows[0]["graph_breaks"] > 0


def test_no_gpu_without_cpu_smoke_is_a_usage_error(capsys) -> None:
    if __import__("torch").cuda.is_available():
        pytest.skip("a GPU is present")
    assert _load_gpu_check().main([]) == 2
    assert "--cpu-smoke" in capsys.readouterr().err


@pytest.mark.slow
def test_cpu_smoke_runs_every_phase(tmp_path: Path, shared_data_dir: Path) -> None:
    output = tmp_path / "gpu_check.json"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--cpu-smoke", "--output", str(output)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "packed trials" in done.stdout and "FAILED" not in done.stdout
    record = json.loads(output.read_text())
    assert record["ok"] and [p["name"] for p in record["phases"]] == [
        "training speed",
        "compiled graphs",
        "folded attention",
        "packed trials",
    ]
    packed = record["phases"][3]["rows"]
    assert [r["trials"] for r in packed] == [1, 4] and all(r["summed_tokens_per_s"] > 0 for r in packed)
