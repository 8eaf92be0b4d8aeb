"""One machine record for every benchmark: the same keys in every JSON, written by one function
(:func:`harness.bench.machine.write_result`), and no benchmark that describes the machine its own way."""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path

from harness.bench.machine import MACHINE_KEYS, machine_record, write_result

REPO = Path(__file__).resolve().parents[2]


def test_the_record_holds_its_keys_with_this_machines_values() -> None:
    record = machine_record()
    assert tuple(record) == MACHINE_KEYS
    assert record["cpu_count"] == os.cpu_count() and record["python"] == platform.python_version()
    assert record["arch"] == platform.machine() and len(record["load_average"]) == 3
    json.dumps(record)  # JSON as it is


def test_a_result_is_written_whole_with_the_record_beside_it(tmp_path: Path) -> None:
    out = tmp_path / "deep" / "bench.json"
    written = write_result(out, {"benchmark": "x", "rows": [1, 2]})
    assert json.loads(out.read_text()) == written
    assert written["benchmark"] == "x" and tuple(written["machine"]) == MACHINE_KEYS
    assert [p.name for p in out.parent.iterdir()] == ["bench.json"]  # no temporary file left
    given = {**machine_record(), "load_average": [9.0, 9.0, 9.0]}  # taken earlier by the benchmark
    assert write_result(out, {"benchmark": "y"}, machine=given)["machine"] == given


def test_no_benchmark_describes_the_machine_its_own_way() -> None:
    """The machine is read in harness/bench/machine.py only: nowhere else in the benchmark code
    does ``platform.`` appear or a ``"machine"`` key get written."""
    sources = sorted((REPO / "harness" / "bench").rglob("*.py")) + sorted((REPO / "benchmarks").glob("*.py"))
    found = [
        p.relative_to(REPO).as_posix()
        for p in sources
        if p.name != "machine.py" and ("platform." in (text := p.read_text(encoding="utf-8")) or '"machine":' in text)
    ]
    assert found == []
