"""The fault campaign: the twin, then every schedule, each a :class:`~harness.bench.chaos.study.
FaultedStudy`; the table of faults injected and not reached, and the JSON (``main``: ``harness
bench chaos``, ``benchmarks/chaos.py``)."""

from __future__ import annotations

import os
import tempfile
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

from harness.bench.chaos.driver import Outcome
from harness.bench.chaos.processes import TAG
from harness.bench.chaos.schedule import KINDS, SPEC, STEPS, TRIALS, draw_schedule, schedule_seeds
from harness.bench.chaos.study import FaultedStudy
from harness.bench.machine import write_result


def _table(outcomes: list[Outcome], seeds: list[int], wall: float) -> tuple[list[str], dict[str, Any]]:
    injected = Counter()
    not_reached = Counter()
    for o in outcomes:
        injected.update(o.injected)
        not_reached.update(o.not_reached)
    failing = [o.seed for o in outcomes if o.failed]
    summary = {
        "schedules": len(outcomes),
        "faults_injected": dict(sorted(injected.items())),
        "faults_not_reached": dict(sorted(not_reached.items())),
        "studies_completed": sum(o.completed for o in outcomes),
        "mismatches": sum(len(o.mismatches) for o in outcomes),
        "findings": sum(len(o.findings) for o in outcomes),
        "failing_seeds": failing,
        "wall_s": round(wall, 1),
    }
    width = max(len(k) for k in KINDS)
    lines = [f"  {'fault':<{width}}  injected  not reached"]
    lines += [f"  {k:<{width}}  {injected[k]:>8}  {not_reached[k]:>11}" for k in KINDS]
    lines += [
        f"  {'total':<{width}}  {sum(injected.values()):>8}  {sum(not_reached.values()):>11}",
        "",
        f"  schedules run        {len(outcomes)}",
        f"  studies completed    {summary['studies_completed']}",
        f"  mismatches           {summary['mismatches']} (results, curves, headline numbers, runs against the twin)",
        f"  other findings       {summary['findings']} (hangs, processes left behind, extra resumes)",
        f"  failing schedules    {', '.join(map(str, failing)) or '-'}"
        + (f"  (replay: python benchmarks/chaos.py --replay {failing[0]})" if failing else ""),
        f"  wall time            {wall / 60:.1f} min",
    ]
    return lines, summary


def main(
    *,
    schedules: int = 10,
    seed: int = 1,
    replay: list[int] | None = None,
    out: Path | str = "benchmarks/results/chaos.json",
    workdir: Path | None = None,
    say: Any = print,
) -> dict[str, Any]:
    """Run the twin, then every schedule (``replay``: exactly these schedule seeds); print
    the table; write the JSON to ``out``. Returns the JSON's content."""
    started = time.monotonic()
    campaign = f"{os.getpid()}-{int(time.time())}"
    os.environ[TAG] = campaign  # inherited by every process the campaign starts
    seeds = list(replay) if replay else schedule_seeds(seed, schedules)
    root = Path(workdir or tempfile.mkdtemp(prefix="harness-chaos-"))
    say(f"Fault campaign: {len(seeds)} schedules, work in {root}; load average {os.getloadavg()[0]:.1f}")
    say("  twin (no faults)")
    twin_outcome, twin = FaultedStudy(None, root / "twin", campaign, say).run(None)
    if twin is None or twin_outcome.failed:
        raise RuntimeError(f"the unfaulted twin did not finish cleanly: {twin_outcome.findings}")
    outcomes = []
    for i, schedule_seed in enumerate(seeds):
        schedule = draw_schedule(schedule_seed)
        say(f"  schedule {i + 1}/{len(seeds)}: seed {schedule_seed}: {schedule.describe()}")
        outcome, _ = FaultedStudy(schedule, root / f"s{schedule_seed}", campaign, say).run(twin)
        outcomes.append(outcome)
        verdict = "ok" if not outcome.failed else f"FAILED: {(outcome.findings + outcome.mismatches)[:3]}"
        say(f"    {outcome.wall_s:.0f} s, injected {outcome.injected}: {verdict}")
    wall = time.monotonic() - started
    lines, summary = _table(outcomes, seeds, wall)
    say(
        f"\nFault campaign: seed {seed}, {len(seeds)} schedules, study {SPEC['name']} ({TRIALS} trials x {STEPS} steps)"
    )
    for line in lines:
        say(line)
    result = {
        "campaign_seed": seed,
        "schedule_seeds": seeds,
        **summary,
        "twin_wall_s": round(twin_outcome.wall_s, 1),
        "outcomes": [asdict(o) for o in outcomes],
        "spec": SPEC,
    }
    written = write_result(out, result)
    say(f"JSON: {out}")
    return written
