"""The fault campaign (harness/bench/chaos/, benchmarks/chaos.py): its schedules are a
function of their seed alone (a failing one replays exactly), any 8 consecutive schedules
inject every kind of fault, the comparison with the twin catches each kind of difference it
is meant to, and (slow) a short campaign of a few faults ends equal to its twin."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from harness.bench.chaos.campaign import main
from harness.bench.chaos.comparison import StudyRecord, compare
from harness.bench.chaos.faults import FAULT_KINDS
from harness.bench.chaos.schedule import KINDS, REPORT_PHASE, draw_schedule, schedule_seeds


def test_a_schedule_is_a_function_of_its_seed() -> None:
    seeds = schedule_seeds(1, 10)
    assert seeds == schedule_seeds(1, 10) and seeds != schedule_seeds(2, 10)
    assert [draw_schedule(s) for s in seeds] == [draw_schedule(s) for s in seeds]
    for s in seeds:
        schedule = draw_schedule(s)
        assert KINDS[s % len(KINDS)] in {f.kind for f in schedule.faults}  # its lead kind
        assert 1 <= len(schedule.faults) <= 3
        assert schedule.cluster == any(f.kind == "node_leave" for f in schedule.faults)
        ats = [f.at for f in schedule.faults if f.at != REPORT_PHASE]
        assert ats == sorted(ats)  # fired in the order of the study's progress


def test_every_kind_has_its_fault() -> None:
    assert sorted(FAULT_KINDS) == sorted(KINDS)


def test_any_eight_consecutive_schedules_inject_every_kind() -> None:
    seeds = schedule_seeds(7, 11)
    for start in range(len(seeds) - len(KINDS) + 1):
        kinds = {f.kind for s in seeds[start : start + len(KINDS)] for f in draw_schedule(s).faults}
        assert kinds == set(KINDS)


def _record() -> StudyRecord:
    return StudyRecord(
        table={"a": {"trial_id": "a", "val_loss": 3.25, "tau_heads": [0.5, 0.25], "status": "finished"}},
        parents=1,
        children={"a": ["r1"]},
        ended={"p": "FINISHED/finished", "r1": "FINISHED/finished"},
        curves={"a": {"val/loss": [(5, 3.5), (10, 3.25)]}},
        headline={"ega/gain/estimate": 0.125},
    )


def test_compare_finds_every_difference_it_is_meant_to() -> None:
    twin = _record()
    assert compare(twin, copy.deepcopy(twin)) == []
    cases = {
        "results a val_loss": lambda r: r.table["a"].update(val_loss=3.2500000000000004),  # one ulp
        "results a tau_heads": lambda r: r.table["a"].update(tau_heads=[0.5, 0.26]),
        "2 parent runs": lambda r: setattr(r, "parents", 2),
        "2 child runs of a": lambda r: r.children["a"].append("r2"),
        "run r1 ended KILLED/interrupted": lambda r: r.ended.update(r1="KILLED/interrupted"),
        "a val/loss: a step logged twice [10]": lambda r: r.curves["a"]["val/loss"].append((10, 3.25)),
        "a val/loss: curve differs": lambda r: r.curves["a"].update({"val/loss": [(5, 3.5), (10, 3.0)]}),
        "a val/loss: missing": lambda r: r.curves["a"].pop("val/loss"),
        "headline ega/gain/estimate": lambda r: r.headline.update({"ega/gain/estimate": 0.12500001}),
    }
    for expected, change in cases.items():
        got = copy.deepcopy(twin)
        change(got)
        found = compare(twin, got)
        assert found and any(f.startswith(expected) for f in found), (expected, found)


@pytest.mark.slow
def test_a_short_campaign_ends_equal_to_its_twin(tmp_path: Path, shared_data_dir: Path) -> None:
    """Schedule 144272504, the one that found the duplicated summaries and the aborting
    SIGTERM (tests/reliability/test_chaos_regressions.py): a trial's process killed while it
    trains, the driver stopped by SIGTERM and resumed, the tracking server stopped during
    the report; the study ends equal to its twin and leaves no process behind."""
    seed = 144272504
    assert draw_schedule(seed).describe() == "trial_kill_step@13, driver_term@17, mlflow_during_report@report"
    out = tmp_path / "chaos.json"
    result = main(replay=[seed], out=out, workdir=tmp_path / "work")
    assert json.loads(out.read_text())["schedule_seeds"] == [seed]
    (outcome,) = result["outcomes"]
    assert outcome["completed"] and outcome["mismatches"] == [] and outcome["findings"] == [], outcome
    assert outcome["injected"]["driver_term"] == 1 and result["failing_seeds"] == []
