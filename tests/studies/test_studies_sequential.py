"""Sequential studies: seed blocks in batches until the primary effect is settled.

Real components: the searcher's logic on its own (no Tune), then real tiny studies on the
embedded Ray and a real MLflow store - one whose rule holds at once (only its first batch
runs), one whose rule never holds (it runs up to ``max``); the bad inputs through the CLI
(exit 2, the field named). The kill-and-resume test is in
tests/reliability/test_sequential_killed.py."""

from __future__ import annotations

import pickle
from pathlib import Path

import polars as pl
import pytest
import yaml
from harness_support import run_harness
from mlflow import MlflowClient
from typer.testing import CliRunner

from harness.analysis.sequential import confidence_sequence, sequential_verdict_kind
from harness.cli import app
from harness.errors import InputError
from harness.studies.runner import run_study
from harness.studies.spec.grid import expand_grid
from harness.studies.spec.study_spec import parse_spec
from harness.studies.tune.results_table import results_table
from harness.studies.tune.seed_search import SeedBatchSearcher
from harness.studies.tune.sequential import (
    DECISIONS_FILE,
    Decision,
    DecisionLog,
    SequentialDesign,
    decide,
    design_changed,
)

PAIR = {"primary": {"treatment": "ega", "control": "baseline"}}


def _spec(tiny: dict, **overrides) -> dict:
    return {**tiny, "analysis": PAIR, **overrides}


# ----------------------------------------------------------------------------- the spec
def test_a_sequential_spec_and_its_design(tiny: dict) -> None:
    spec = parse_spec(
        yaml.safe_dump(_spec(tiny, seeds={"min": 3, "max": 8, "batch": 2}, stop_when={"precision": 0.01}))
    )
    design = SequentialDesign.from_spec(spec)
    assert spec.grid_seeds() == list(range(8)) and len(expand_grid(spec)) == 16
    assert [design.batch_seeds(i) for i in range(design.n_batches)] == [[0, 1, 2], [3, 4], [5, 6], [7]]
    assert design.tightest_at == pytest.approx(24**0.5)
    plain = parse_spec(yaml.safe_dump(tiny))
    assert plain.seed_schedule is None and SequentialDesign.from_spec(plain) is None
    assert "stop_when" not in plain.canonical_yaml()  # plain specs hash as before


def test_a_resume_refuses_a_changed_sequential_design(tiny: dict) -> None:
    def design(**seq):
        return SequentialDesign.from_spec(parse_spec(yaml.safe_dump(_spec(tiny, **seq))))

    started = design(seeds={"min": 3, "max": 8, "batch": 2}, stop_when={"precision": 0.01})
    stored = {"sequential": started.record()}
    assert not design_changed(started, stored)
    assert design_changed(design(seeds={"min": 3, "max": 10, "batch": 2}, stop_when={"precision": 0.01}), stored)
    assert design_changed(design(seeds={"min": 3, "max": 8, "batch": 2}, stop_when={"precision": 0.02}), stored)
    assert design_changed(design(seeds=8), stored)
    assert not design_changed(design(seeds=8), {})  # a study from before sequential studies


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"seeds": {"min": 5, "max": 3}, "stop_when": {"precision": 0.01}}, "seeds.min (5) is larger than seeds.max"),
        ({"seeds": {"min": 2, "max": 6, "batch": 0}, "stop_when": {"precision": 0.01}}, "seeds.batch"),
        (
            {"seeds": {"min": 2, "max": 6, "step": 2}, "stop_when": "settled"},
            "seeds.step: unknown key 'step'; expected one of: min, max, batch",
        ),
        ({"seeds": {"min": 2, "max": 6}}, "need a stopping rule"),
        ({"stop_when": {"precision": 0.01}}, "stop_when needs sequential seeds"),
        ({"seeds": {"min": 2, "max": 6}, "stop_when": "soon"}, "stop_when"),
        ({"seeds": {"min": 2, "max": 6}, "stop_when": {"precision": -1}}, "stop_when.precision"),
    ],
)
def test_bad_sequential_specs_name_the_field(tiny: dict, overrides: dict, named: str) -> None:
    with pytest.raises(InputError, match="invalid study spec") as exc:
        parse_spec(yaml.safe_dump(_spec(tiny, **overrides)))
    assert named in str(exc.value)


def test_rule_needs_a_primary_effect_and_settled_a_smallest_effect(tiny: dict) -> None:
    sequential = {"seeds": {"min": 2, "max": 6}, "stop_when": "settled"}
    with pytest.raises(InputError, match="stop_when: the rule is evaluated on the study's primary effect"):
        parse_spec(yaml.safe_dump({**tiny, **sequential}))  # baseline + ega: no factorial, no analysis.primary
    with pytest.raises(InputError, match="analysis.smallest_effect"):
        parse_spec(yaml.safe_dump(_spec(tiny, **sequential)))
    parse_spec(yaml.safe_dump({**tiny, **sequential, "analysis": {**PAIR, "smallest_effect": 0.02}}))


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"seeds": {"min": 5, "max": 3}, "stop_when": {"precision": 0.01}}, "seeds.min"),
        ({"seeds": {"min": 2, "max": 6, "batch": 0}, "stop_when": {"precision": 0.01}}, "seeds.batch"),
        ({"seeds": {"min": 2, "max": 6}, "stop_when": {"precision": 0.01}, "analysis": {}}, "analysis.primary"),
        ({"seeds": {"min": 2, "max": 6}, "stop_when": "settled"}, "analysis.smallest_effect"),
    ],
)
def test_cli_refuses_bad_sequential_input_with_exit_2(write_spec, tmp_path: Path, overrides: dict, named: str) -> None:
    spec = write_spec(**{"analysis": PAIR, **overrides})
    done = run_harness("run", str(spec), "--dry-run", cwd=tmp_path, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert named in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "results").exists() and not (tmp_path / "mlflow.db").exists()


def test_dry_run_prints_the_rule_and_the_trial_and_cost_range(write_spec, tmp_path: Path) -> None:
    spec = write_spec(analysis=PAIR, seeds={"min": 3, "max": 20, "batch": 2}, stop_when={"precision": 0.01})
    done = run_harness("run", str(spec), "--dry-run", cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "6 to 40 trials (2 variants x 3 to 20 seeds (batches of 2)" in out
    assert "sequential: seeds 3 to 20 in batches of 2; stop when" in out and "half-width is at most 0.01" in out
    assert "total: 6 trials at least" in out and "40 at most (20 seeds)" in out
    assert "at least: time (rough estimate)" in out and "at most:  time (rough estimate)" in out


# ----------------------------------------------------------------------------- the searcher alone
def _searcher(tiny: dict, tmp_path: Path, **seq) -> SeedBatchSearcher:
    spec = parse_spec(yaml.safe_dump(_spec(tiny, **seq)))
    design = SequentialDesign.from_spec(spec)
    return SeedBatchSearcher(design, spec.analysis_settings(), expand_grid(spec), str(tmp_path))


def _finish(searcher: SeedBatchSearcher, tune_id: str, gain: float) -> None:
    """Complete a handed-out trial with a loss that makes ega better by ``gain`` + noise."""
    tid = searcher.state.tune_ids[tune_id]
    seed = searcher.trials[tid].config.seed
    loss = 2.0 - (gain + 0.01 * ((seed * 7919) % 13 - 6) if tid.startswith("ega") else 0.0)
    searcher.on_trial_complete(tune_id, {"status": "finished", "final/val_loss": loss, "config/trial": tid})


def test_searcher_hands_out_batches_and_waits_between_them(tiny: dict, tmp_path: Path) -> None:
    searcher = _searcher(tiny, tmp_path, seeds={"min": 2, "max": 5, "batch": 2}, stop_when={"precision": 1e-9})
    first = [searcher.suggest(f"t{i}") for i in range(4)]
    assert [c["trial"] for c in first] == [
        "baseline_s0_nano_T32_tinyshakespeare",
        "ega_s0_nano_T32_tinyshakespeare",
        "baseline_s1_nano_T32_tinyshakespeare",
        "ega_s1_nano_T32_tinyshakespeare",
    ]
    assert searcher.suggest("t4") is None  # the batch runs: wait
    for i in range(4):
        _finish(searcher, f"t{i}", 0.05)
    second = [searcher.suggest(f"t{i}") for i in range(4, 8)]
    assert sorted(c["trial"].split("_")[1] for c in second) == ["s2", "s2", "s3", "s3"]
    for i in range(4, 8):
        _finish(searcher, f"t{i}", 0.05)
    last = [searcher.suggest(f"t{i}") for i in range(8, 10)]  # max 5: one seed more
    assert [c["trial"].split("_")[1] for c in last] == ["s4", "s4"]
    for i in range(8, 10):
        _finish(searcher, f"t{i}", 0.05)
    assert searcher.suggest("t10") == "FINISHED"
    decisions = DecisionLog(str(tmp_path)).decisions()
    assert [(d.seeds_scheduled, d.action, d.stopped_by) for d in decisions] == [
        (2, "continue", None),
        (4, "continue", None),
        (5, "stop", "max"),
    ]
    assert decisions[-1].text.startswith("max seeds reached (5)")


def test_searcher_evaluates_results_table_rows_and_a_failure_counts_failed(tiny: dict, tmp_path: Path) -> None:
    searcher = _searcher(tiny, tmp_path, seeds={"min": 2, "max": 5, "batch": 2}, stop_when={"precision": 1e-9})
    for i in range(2):
        searcher.suggest(f"t{i}")
    _finish(searcher, "t0", 0.05)
    failed = searcher.state.tune_ids["t1"]
    searcher.on_trial_complete("t1", {"status": "finished", "final/val_loss": 1.5}, error=True)
    rows = searcher.state.outcomes
    table = results_table("", [searcher.trials[t] for t in rows], {t: ({"status": "finished"}, None) for t in rows})
    assert list(rows[searcher.state.tune_ids["t0"]]) == list(table.columns)
    assert rows[failed]["status"] == "failed" and rows[failed]["val_loss"] is None


def test_searcher_stops_when_the_interval_is_settled_and_its_numbers_are_the_analysis(
    tiny: dict, tmp_path: Path
) -> None:
    searcher = _searcher(
        tiny,
        tmp_path,
        seeds={"min": 6, "max": 12, "batch": 2},
        stop_when="settled",
        analysis={**PAIR, "smallest_effect": 0.02},
    )
    ids = [f"t{i}" for i in range(12)]
    assert all(searcher.suggest(t) for t in ids)
    for t in ids:
        _finish(searcher, t, 0.5)  # a large gain: the interval excludes 0 at once
    assert searcher.suggest("t12") == "FINISHED"
    (decision,) = DecisionLog(str(tmp_path)).decisions()
    gains = [0.5 + 0.01 * ((s * 7919) % 13 - 6) for s in range(6)]
    cs = confidence_sequence(gains, tightest_at=(6 * 12) ** 0.5)
    assert decision.stopped_by == "settled" and decision.n_seeds == 6
    assert (decision.low, decision.high) == pytest.approx((cs.low, cs.high), rel=1e-9)
    assert decision.text.startswith("settled at 6 seeds: 95% anytime-valid CI [")


def test_a_restored_searcher_keeps_its_logged_decisions(tiny: dict, tmp_path: Path) -> None:
    """Tune's snapshot may be older than the decision log (the log is written first): the
    restored searcher replays the logged decision instead of taking a new one."""
    seq = {"seeds": {"min": 2, "max": 6, "batch": 2}, "stop_when": {"precision": 1e-9}}
    searcher = _searcher(tiny, tmp_path, **seq)
    for i in range(4):
        searcher.suggest(f"t{i}")
    snapshot = tmp_path / "searcher.json"
    searcher.save(str(snapshot))  # Tune's snapshot: the batch runs
    # The decision the study took before the kill (logged): stop, though the data say go on.
    logged = Decision(0, 2, 2, 0.05, 0.01, 0.09, "stop", "precision", "precision reached at 2 seeds: (logged)")
    DecisionLog(str(tmp_path)).write(searcher.design, [logged])
    restored = _searcher(tiny, tmp_path, **seq)
    restored.restore(str(snapshot))
    for i in range(4):
        _finish(restored, f"t{i}", 0.05)
    assert restored.suggest("t4") == "FINISHED"
    assert DecisionLog(str(tmp_path)).decisions() == [logged]
    # and trials Tune already holds are never handed out twice
    again = _searcher(tiny, tmp_path / "other", **seq)
    again.known = {"baseline_s0_nano_T32_tinyshakespeare"}
    again.restore(str(snapshot))
    assert "baseline_s0_nano_T32_tinyshakespeare" not in again.state.queue


def test_searcher_state_derives_batches_and_finished_and_restores_the_old_shape(tiny: dict, tmp_path: Path) -> None:
    searcher = _searcher(tiny, tmp_path, seeds={"min": 2, "max": 5, "batch": 2}, stop_when={"precision": 1e-9})
    for i in range(4):
        searcher.suggest(f"t{i}")
    for i in range(4):
        _finish(searcher, f"t{i}", 0.05)
    assert (searcher.state.batches, searcher.state.finished) == (2, False)
    state = searcher.get_state()
    assert "batches" not in state and "finished" not in state
    # a state saved when the two were stored alongside the decisions still restores
    restored = _searcher(tiny, tmp_path, seeds={"min": 2, "max": 5, "batch": 2}, stop_when={"precision": 1e-9})
    restored.set_state({**state, "batches": 2, "finished": False})
    assert restored.get_state() == state and restored.state.queue == searcher.state.queue


def test_a_searcher_and_its_decision_log_pickle(tiny: dict, tmp_path: Path) -> None:
    """Tune pickles the searcher with the experiment: the log's filesystem goes with it."""
    searcher = _searcher(tiny, tmp_path, seeds={"min": 2, "max": 5, "batch": 2}, stop_when={"precision": 1e-9})
    for i in range(4):
        searcher.suggest(f"t{i}")
    for i in range(4):
        _finish(searcher, f"t{i}", 0.05)
    copy = pickle.loads(pickle.dumps(searcher))
    assert copy.log.decisions() == searcher.log.decisions() and len(copy.log.decisions()) == 1
    assert copy.get_state() == searcher.get_state()


def test_decide_words_the_stop() -> None:
    design = SequentialDesign(3, 20, 2, "precision", 0.01, None, 0.95)
    tight = confidence_sequence([0.010, 0.012, 0.011, 0.013, 0.009, 0.0105], tightest_at=design.tightest_at)
    assert decide(design, tight, batch=2).text.startswith("precision reached at 6 seeds: 95% anytime-valid CI")
    wide = confidence_sequence([0.1, -0.2, 0.3], tightest_at=design.tightest_at)
    going = decide(design, wide, batch=0)
    assert going.action == "continue" and going.text.endswith("not settled, running seeds 3, 4")
    assert "unbounded at 3 seeds" in going.text and going.low is None


# ----------------------------------------------------------------------------- real studies
def _parent(uri: str):
    client = MlflowClient(uri)
    (experiment,) = [e for e in client.search_experiments() if e.name == "tiny"]
    runs = client.search_runs([experiment.experiment_id])
    (parent,) = [r for r in runs if r.data.tags.get("harness.role") == "study"]
    return parent, [r for r in runs if r.data.tags.get("harness.role") == "trial"]


@pytest.mark.slow  # a real sequential study of several batches (~1 min on 2 cores)
def test_a_rule_met_at_once_runs_only_the_first_batch(write_spec, study_env: dict) -> None:
    # At 3 seeds the interval made tightest at sqrt(3 * 4) seeds is bounded (about 6.4 sd wide each side).
    spec = write_spec(analysis=PAIR, seeds={"min": 3, "max": 4, "batch": 1}, stop_when={"precision": 5.0})
    outcome = run_study(spec, **study_env)
    log = study_env["stream"].getvalue()
    assert outcome.status == "finished", log
    assert outcome.counts == {"finished": 6, "diverged": 0, "failed": 0, "incomplete": 0}
    assert "Study tiny: 6 to 8 trials (2 variants x 3 to 4 seeds (batches of 1)" in log
    assert "sequential: precision reached at 3 seeds: 95% anytime-valid CI [" in log
    table = pl.read_parquet(Path(outcome.study_dir) / "results.parquet")
    assert sorted(set(table.get_column("seed"))) == [0, 1, 2] and table.height == 6
    data = DecisionLog.parse((Path(outcome.study_dir) / DECISIONS_FILE).read_text())
    assert [d["action"] for d in data["decisions"]] == ["stop"] and data["design"]["max_seeds"] == 4

    parent, children = _parent(study_env["tracking_uri"])
    assert len(children) == 6 and parent.info.status == "FINISHED"
    assert parent.data.metrics["sequential/n_seeds"] == 3 and parent.data.metrics["sequential/stopped_by"] == 1
    assert parent.data.tags["sequential.stopped_by"].startswith("precision reached at 3 seeds")
    # The report: the rule, the stop, the anytime-valid interval beside the fixed-n one, the verdict on it.
    (primary,) = [v for v in outcome.report.verdicts if v.role == "primary"]
    assert primary.test == "anytime t" and primary.n_seeds == 3
    cs = confidence_sequence(outcome.report.results["ega"].per_seed, tightest_at=(3 * 4) ** 0.5)
    assert (primary.confidence_interval.low, primary.confidence_interval.high) == pytest.approx((cs.low, cs.high))
    assert primary.kind == sequential_verdict_kind(cs)  # coloured by the anytime interval, not the fixed-n one
    markdown = outcome.report.markdown
    assert "## Sequential design" in markdown and "Stopped: precision reached at 3 seeds" in markdown
    assert "anytime-valid 95% (confidence sequence)" in markdown and "fixed-n 95% t-interval" in markdown
    assert "supports the verdict" in markdown
    assert "anytime t: anytime-valid t-mixture test" in " ".join(outcome.report.verdict_table.split())  # wrapped


@pytest.mark.slow  # a real sequential study of several batches (~1 min on 2 cores)
def test_a_rule_never_met_runs_up_to_max(write_spec, study_env: dict) -> None:
    spec = write_spec(analysis=PAIR, seeds={"min": 2, "max": 4, "batch": 1}, stop_when={"precision": 1e-9})
    outcome = run_study(spec, **study_env)
    log = study_env["stream"].getvalue()
    assert outcome.status == "finished", log
    assert outcome.counts["finished"] == 8
    decisions = DecisionLog(outcome.study_dir).decisions()
    assert [(d.seeds_scheduled, d.action, d.stopped_by) for d in decisions] == [
        (2, "continue", None),
        (3, "continue", None),
        (4, "stop", "max"),
    ]
    assert "sequential: after 2 seeds:" in log and "sequential: max seeds reached (4)" in log
    parent, children = _parent(study_env["tracking_uri"])
    assert len(children) == 8
    assert parent.data.metrics["sequential/n_seeds"] == 4 and parent.data.metrics["sequential/stopped_by"] == 3
    assert "Stopped: max seeds reached (4)" in outcome.report.markdown
    # `harness report` recomputes it from MLflow with the same sequential part (the spec and
    # the decision log are artifacts of the parent run).
    out = Path(study_env["storage_path"]).parent / "recomputed"
    result = CliRunner().invoke(
        app,
        ["report", "tiny", "--tracking-uri", study_env["tracking_uri"], "--out", str(out), "--no-windows", "--no-log"],
    )
    assert result.exit_code == 0, result.output
    recomputed = (out / "summary.md").read_text()
    assert "## Sequential design" in recomputed and "Stopped: max seeds reached (4)" in recomputed
    assert "(anytime t)" in result.output
