"""``harness zoo`` and ``harness bench attention`` (quick settings)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import typer
from typer.testing import CliRunner

from harness.bench.cli import register as register_bench
from harness.models import VARIANTS
from harness.models.cli import register


def _app() -> typer.Typer:
    app, bench = typer.Typer(), typer.Typer()
    app.add_typer(bench, name="bench")
    register(app)
    register_bench(bench)
    return app


def test_zoo_lists_every_variant_with_overheads():
    result = CliRunner().invoke(_app(), ["zoo", "--size", "nano"])
    assert result.exit_code == 0, result.output
    for name in VARIANTS:
        assert name in result.output
    assert "104,256" in result.output  # nano baseline parameters at vocab 65
    assert "+268" in result.output  # ega over baseline at nano: 2 layers x 2 heads x (64 + 3)


def test_zoo_lists_diagnostics_apart_and_the_readings_with_their_overheads():
    result = CliRunner().invoke(_app(), ["zoo", "--size", "paper"])
    assert result.exit_code == 0, result.output
    models, rest = result.output.split("Diagnostics, not models")
    diagnostics, readings = rest.split("Readings of the papers' vague points")
    assert "ega-leaky" not in models and "ega-leaky" in diagnostics and "allow_diagnostics" in diagnostics
    rows = {line.split("│")[3].strip(): line for line in readings.splitlines() if line.count("│") == 7}
    assert set(rows) == {
        "mope-rel",
        "ega-mope-rel",
        "ega-mope-rel-scale-init",
        "ega-db2-dir",
        "ega-db4-dir",
        "ega-morlet-dir",
        "ega-2-pc",
        "ega-4-pc",
        "ega-leaky (leaks future tokens)",
        "ega-qnorm",
        "ega-2-prod",
        "ega-4-prod",
        "ega-mope-scale-frozen",
        "mope-bias",
        "ega-mope-bias",
    }
    assert "+0.000 %" in rows["mope-rel"] and "-240" in rows["mope-rel"]  # 16 parameters against mope's 256
    assert "+0.521 %" in rows["ega-2-pc"] and "+1.040 %" in rows["ega-4-pc"]
    assert "+0.521 %" in rows["ega-2-prod"] and "-256" in rows["ega-mope-scale-frozen"]  # frozen: not trained
    assert "+0.001 %" in rows["mope-bias"] and "-232" in rows["mope-bias"]  # (a, omega, sigma) x 8 heads


def test_zoo_unknown_size_exits_2_with_the_known_sizes():
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "zoo", "--size", "huge"], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert "unknown model size 'huge'" in proc.stderr and "nano, paper" in proc.stderr


def test_bench_attention_quick_run_writes_json(tmp_path):
    out = tmp_path / "attention.json"
    result = CliRunner().invoke(
        _app(),
        [
            "bench",
            "attention",
            "-T",
            "32",
            "--families",
            "ega,phase",
            "--repeats",
            "1",
            "--batch",
            "1",
            "--heads",
            "2",
            "--no-memory",
            "--no-train-step",
            "--output",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(out.read_text())
    rows = {(r["family"], r["seq_len"]): r for r in payload["attention"]}
    assert set(rows) == {("baseline", 32), ("ega", 32), ("phase", 32)}
    assert all(r["status"] == "ok" and r["time_ms"] > 0 for r in rows.values())
    assert rows[("baseline", 32)]["time_ratio"] == 1.0


def test_bench_attention_rejects_unknown_family(tmp_path):
    result = CliRunner().invoke(
        _app(),
        ["bench", "attention", "--families", "nonsense", "--no-train-step", "--output", str(tmp_path / "a.json")],
    )
    assert result.exit_code != 0 and "unknown attention family 'nonsense'" in str(result.exception)
    assert not (tmp_path / "a.json").exists()


def test_zoo_check_passes_a_gate_from_the_working_directory_and_refuses_a_leaky_one(tmp_path):
    """`harness zoo check module:Class` in the folder of the user's module (not on PYTHONPATH):
    every check named, exit 0; the leaky one is refused with exit 2 naming the first position that
    leaks; one that cannot be imported is refused with the reason."""
    from components_support import GOOD_GATE, LEAKY_GATE, write_module
    from harness_support import run_harness

    good, leaky = write_module(tmp_path, "gates", GOOD_GATE), write_module(tmp_path, "gates", LEAKY_GATE)
    out = run_harness("zoo", "check", f"{good}:GoodGate", "--length", "24", "--no-graphs", cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"gate: {good}:GoodGate (class {good}.GoodGate, {tmp_path / good}.py)" in out.stdout
    for check in (
        "contracts         pass",
        "causal            pass",
        "finite outputs    pass",
        "finite gradients  pass",
        "parameters        note",
    ):
        assert check in out.stdout
    assert "+264 against baseline" in out.stdout  # 2 layers x 2 heads x (d + 2), d = 64

    out = run_harness("zoo", "check", f"{leaky}:LeakyGate", "--length", "24", "--no-graphs", cwd=tmp_path, timeout=300)
    assert out.returncode == 2, out.stdout + out.stderr
    assert (
        "causal            FAIL  reads the future: changing the tokens from position 2 on moved the output at "
        "position 1" in (out.stdout)
    )
    assert "error: variant 'LeakyGate'" in out.stderr and "fails its check before training" in out.stderr

    out = run_harness("zoo", "check", "no_such_module_here:Gate", cwd=tmp_path, timeout=120)
    assert out.returncode == 2 and "no module named 'no_such_module_here' on the Python path or in" in out.stderr


@pytest.mark.slow  # four zoo-check subprocesses probing at 128 tokens (19-23 s beside the other worker)
def test_zoo_check_probes_at_the_length_a_spec_beside_it_trains_and_refuses_hidden_leaks(tmp_path):
    """Done when (issue 43): a gate that leaks only beyond T = 96, one that leaks only in training,
    and a gate whose bias has no head axis are refused by `harness zoo check` with exit 2; with a
    spec beside them training at T = 128 the probe's default length is 128, and a shorter
    --length is warned about."""
    import yaml
    from components_support import BREACHES, HIDDEN_LEAKS, write_module
    from harness_support import run_harness

    hidden, breaches = write_module(tmp_path, "hidden", HIDDEN_LEAKS), write_module(tmp_path, "breaches", BREACHES)
    spec = {"name": "s", "variants": ["baseline", {"name": "long", "gate": f"{hidden}:LongLeakGate"}]}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump({**spec, "context_lengths": [64, 128]}))

    out = run_harness("zoo", "check", f"{hidden}:LongLeakGate", "--no-graphs", cwd=tmp_path, timeout=600)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "at size nano (2 layers, 2 heads, width 64), 128 tokens" in out.stdout
    assert "causal            FAIL  reads the future: changing the tokens from position 2 on" in out.stdout
    assert "warning" not in out.stderr and "Traceback" not in out.stderr

    out = run_harness(
        "zoo", "check", f"{hidden}:LongLeakGate", "--length", "64", "--no-graphs", cwd=tmp_path, timeout=600
    )
    assert out.returncode == 0, out.stdout + out.stderr  # the length that hides it, and the warning that says so
    assert "warning: probing 64 tokens, shorter than" in out.stderr and "spec.yaml at T = 128" in out.stderr

    out = run_harness(
        "zoo", "check", f"{hidden}:TrainLeakGate", "--length", "32", "--no-graphs", cwd=tmp_path, timeout=600
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert "reads the future in train mode (dropout 0.1), not in eval mode" in out.stderr
    assert f"note: no study spec in {tmp_path} names {hidden}:TrainLeakGate; probing 32 tokens" not in out.stderr

    out = run_harness(
        "zoo", "check", f"{breaches}:HeadsLast", "--length", "32", "--no-graphs", cwd=tmp_path, timeout=600
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert (
        f"contracts: the gate slot's {breaches}.HeadsLast.key_bias(x, k) returned shape (2, 32, 2); the slot expects "
        "(B, H, T) = (2, 2, 32), float32 and finite" in out.stderr
    )
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
