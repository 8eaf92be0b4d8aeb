"""Bad input, each through the command line as a user types it: exit code 2, one clear
message naming the problem, nothing started (no process left running, no study line
printed) and nothing written (no MLflow database or run, no Tune directory, no checkpoint
folder, no corpus cache file).

Every case runs in an empty working directory with the default tracking store
(``./mlflow.db``), the default storage (``./results``) and a private corpus cache, so
that anything written would show up there."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness_support import TINY, free_port, run_harness, sqlite_runs, write_spec


@dataclass(frozen=True)
class Case:
    """One bad input: how to make it (``make(tmp) -> argv``) and what the message says."""

    make: Any
    expect: str
    env: dict[str, str] = field(default_factory=dict)


def _spec(tmp: Path, **overrides: Any) -> Path:
    return write_spec(tmp / "spec.yaml", **overrides)


def _spec_text(tmp: Path, text: str) -> Path:
    path = tmp / "spec.yaml"
    path.write_text(text)
    return path


def _spec_with_binary_bytes(tmp: Path) -> Path:
    """A spec whose 9th byte is not UTF-8 (a binary file saved under a .yaml name)."""
    path = tmp / "spec.yaml"
    path.write_bytes(b"name: ti\xffny\n\x00\x01binary")
    return path


def _corpus_with_bad_bytes(tmp: Path) -> Path:
    """A data folder holding WikiText-2's three files (whose members carry no published
    checksum), the training file with a byte that is not UTF-8 at offset 13000."""
    data = tmp / "data" / "wikitext-2-raw"
    data.mkdir(parents=True)
    (data / "wiki.train.raw").write_bytes(("h\u00e9llo world\n" * 1000).encode() + b"\xff tail\n")
    (data / "wiki.valid.raw").write_text(" = Valid = \n")
    (data / "wiki.test.raw").write_text(" = Test = \n")
    return tmp / "data"


def _without_context_key(tmp: Path) -> Path:
    data = {k: v for k, v in TINY.items() if k != "context_lengths"}
    data["contxt_lengths"] = [32]
    return _spec_text(tmp, yaml.safe_dump(data, sort_keys=False))


def _corrupt_checkpoint(tmp: Path) -> Path:
    """A checkpoint file cut short (as a full disk or a killed copy leaves it)."""
    import torch

    path = tmp / "ckpt" / "last.ckpt"
    path.parent.mkdir()
    torch.save({"state_dict": {"w": torch.zeros(64, 64)}, "harness": {"config": {}}, "global_step": 4}, path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def _corpus_with_wrong_checksum(tmp: Path, shared_data_dir: Path) -> Path:
    """A data folder whose input.txt has the right size but one flipped bit."""
    data = tmp / "data" / "tinyshakespeare"
    data.mkdir(parents=True)
    raw = bytearray((shared_data_dir / "tinyshakespeare" / "input.txt").read_bytes())
    raw[1000] ^= 1
    (data / "input.txt").write_bytes(bytes(raw))
    return tmp / "data"


def _has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


TRAIN = ["train", "--variant", "baseline", "--context-length", "32", "--batch-size", "4", "--max-steps", "2"]

CASES: dict[str, Case] = {
    "malformed-yaml": Case(
        lambda t: ["run", str(_spec_text(t, "name: tiny\nvariants: [baseline, ega\nseeds: 2\n"))],
        "spec.yaml is not valid YAML at line",
    ),
    "unknown-key": Case(
        lambda t: ["run", str(_without_context_key(t))],
        "unknown key 'contxt_lengths' (did you mean 'context_lengths'?)",
    ),
    "unknown-variant": Case(
        lambda t: ["run", str(_spec(t, variants=["baseline", "egga"]))],
        "variants[1]: unknown variant 'egga' (did you mean 'ega'?)",
    ),
    "unknown-dataset": Case(
        lambda t: ["run", str(_spec(t, datasets=["tinyshakespear"]))],
        "datasets[0]: unknown dataset 'tinyshakespear' (did you mean 'tinyshakespeare'?)",
    ),
    "zero-seeds": Case(lambda t: ["run", str(_spec(t, seeds=0))], "seeds: expected a count of seeds"),
    "context-too-long": Case(
        lambda t: ["run", str(_spec(t, context_lengths=[32, 100000]))],
        "context_lengths: 100000 exceed the maximum context length of size 'nano'",
    ),
    "gpus-where-there-are-none": Case(
        lambda t: ["run", str(_spec(t, resources={"cpus": 1, "gpus": 0.5}))],
        "resources.gpus is 0.5 per trial, but local Ray has no GPUs",
    ),
    "gpu-for-harness-train": Case(lambda t: [*TRAIN, "--accelerator", "gpu"], "no CUDA device"),
    "unreachable-ray-address": Case(
        lambda t: ["run", str(_spec(t)), "--address", f"127.0.0.1:{free_port()}"],
        "cannot reach the Ray cluster at 127.0.0.1:",
    ),
    "corrupt-checkpoint": Case(
        lambda t: ["train", "--resume", str(_corrupt_checkpoint(t))], "cannot be read (corrupt or not a checkpoint)"
    ),
    "corpus-wrong-checksum-run": Case(lambda t: ["run", str(_spec(t))], "input.txt at", env={"corrupt_corpus": "1"}),
    "corpus-wrong-checksum-train": Case(lambda t: TRAIN, "input.txt at", env={"corrupt_corpus": "1"}),
    "spec-not-utf8": Case(
        lambda t: ["run", str(_spec_with_binary_bytes(t))],
        "spec.yaml is not UTF-8 text: byte 0xff at offset 8 cannot be decoded",
    ),
    "corpus-not-utf8-run": Case(
        lambda t: ["run", str(_spec(t, datasets=["wikitext-2-raw"]))],
        "wiki.train.raw is not UTF-8 text: byte 0xff at offset 13000 cannot be decoded",
        env={"bad_bytes_corpus": "1"},
    ),
    "corpus-not-utf8-train": Case(
        lambda t: [*TRAIN, "--dataset", "wikitext-2-raw"],
        "wiki.train.raw is not UTF-8 text: byte 0xff at offset 13000 cannot be decoded",
        env={"bad_bytes_corpus": "1"},
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_exits_2_starts_and_writes_nothing(name: str, tmp_path: Path, shared_data_dir: Path) -> None:
    case = CASES[name]
    if "gpu" in name and _has_gpu():
        pytest.skip("a GPU is present: asking for one is not bad input here")
    work = tmp_path / "work"  # the user's working directory: defaults write here
    work.mkdir()
    cache = tmp_path / "cache"
    env = {"HARNESS_CACHE_DIR": str(cache)}
    expect = case.expect
    if case.env.get("corrupt_corpus"):
        env["HARNESS_DATA_DIR"] = str(_corpus_with_wrong_checksum(tmp_path, shared_data_dir))
        expect = "sha256 mismatch"
    if case.env.get("bad_bytes_corpus"):
        env["HARNESS_DATA_DIR"] = str(_corpus_with_bad_bytes(tmp_path))
    argv = case.make(tmp_path)
    out = run_harness(*argv, cwd=work, env=env, timeout=120)

    assert out.returncode == 2, (out.stdout[-2000:], out.stderr[-2000:])
    assert expect in out.stderr, out.stderr
    assert out.stderr.count("error:") == 1 and "Traceback" not in out.stderr, out.stderr  # one clear message
    assert "Study tiny:" not in out.stdout  # nothing started
    assert out.left_running == {}, out.left_running  # no Ray (or other) process left behind
    assert sorted(p.name for p in work.iterdir()) == []  # no mlflow.db, results/, checkpoints/
    assert sqlite_runs(work / "mlflow.db") == 0
    cached = sorted(str(p) for p in cache.rglob("*") if not p.is_dir()) if cache.exists() else []
    assert cached == []  # no cache file (empty folders may stay)
