"""The papers' own studies read as the scorecard reads them (issue 30, item 5).

``studies/superadditivity.yaml`` and ``studies/tau.yaml`` are the papers' setting on a GPU. Their
real grid (:func:`expand_grid`), the evaluation steps their cadence gives (every ``eval_every``
steps and at the end: harness.training.module) and their analysis settings go through the real
scorecard, with simulated losses and levels in place of a GPU's: every claim either study
measures has its cell row at the papers' setting, a ``training`` row at every evaluation step
whose last step is the cell row, and (an effect) a ``predicted`` row, refused because the papers'
size and steps were measured: nothing to extrapolate. A tiny copy of each (nano, 30 steps, 2
seeds) run with ``harness run`` on CPU gives the same kinds of rows (docs/scorecard.md,
"Replicating the papers on one GPU")."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from scorecard_sim import zoo_params

from harness.analysis import AnalysisSettings
from harness.analysis.surface import MIN_SIZES
from harness.results_schema import CURVE_COLUMNS
from harness.scorecard import StudyResults, load_claims, scorecard_table
from harness.scorecard.cells import DERIVED_FROM
from harness.scorecard.model_shape import corpus_vocab_size as vocab_of
from harness.scorecard.readers import READERS
from harness.studies.spec.grid import expand_grid
from harness.studies.spec.study_spec import StudySpec, load_spec

STUDIES = Path(__file__).resolve().parents[2] / "studies"
CLAIMS = load_claims()


def evaluation_steps(spec: StudySpec) -> list[int]:
    """Where a trial of the spec evaluates: every ``eval_every`` steps, and at ``max_steps``."""
    every, last = spec.train.eval_every, spec.train.max_steps
    return sorted(set(range(every, last + 1, every)) | {last})


def simulated(spec: StudySpec, rng: int = 0) -> StudyResults:
    """The spec's grid, finished: each trial's curve at the spec's evaluation steps (loss
    falling, gated runs' tau and open fraction drifting from their start) and its final row."""
    gen = np.random.default_rng(rng)
    trials = expand_grid(spec)
    params = {  # each corpus's runs built with its own vocabulary, as training builds them
        dataset: zoo_params(
            tuple(spec.variant_names), {s: (0, 0, 0) for s in spec.size_names}, context=256, vocab=vocab_of(dataset)
        )
        for dataset in spec.datasets
    }
    curves, finals = [], []
    for trial in trials:
        c = trial.config
        gated = "ega" in c.variant
        tau0 = 0.0 if c.tau_init is None else c.tau_init
        common = {
            "study": spec.name,
            "trial_id": trial.trial_id,
            "dataset": c.dataset,
            "size": c.size,
            "params": params[c.dataset][c.variant, c.size],
            "context_length": c.context_length,
            "variant": c.variant,
            "seed": c.seed,
            "tau_init": c.tau_init,
            "status": "finished",
        }
        level = gen.normal(0.0, 0.05)
        for step in evaluation_steps(spec):
            share = step / spec.train.max_steps
            curves.append(
                {
                    **common,
                    "step": step,
                    "val_loss": 1.5 + (1.0 - share) + level + gen.normal(0.0, 0.01),
                    "gen_gap": 0.2 * share + gen.normal(0.0, 0.005),  # above the floor a relative gap needs
                    "tau_mean": tau0 + 0.1 * share + gen.normal(0.0, 0.01) if gated else None,
                    "open_fraction": 0.5 - 0.05 * share + gen.normal(0.0, 0.01) if gated else None,
                    "pc1_cosine": 0.1 + gen.normal(0.0, 0.01) if gated else None,
                }
            )
        last = curves[-1]
        finals.append(
            {
                **common,
                **{k: last[k] for k in ("val_loss", "gen_gap", "tau_mean", "open_fraction", "pc1_cosine")},
                "tokens_per_s": 1e5 * (1.0 + gen.normal(0.0, 0.01)),
                "steps": spec.train.max_steps,
            }
        )
    settings = AnalysisSettings.from_mapping(spec.analysis_settings())
    frame, table = (pl.DataFrame(rows, infer_schema_length=None) for rows in (finals, curves))
    assert set(table.columns) <= set(CURVE_COLUMNS), "the simulated curves hold only what curves.parquet holds"
    return StudyResults(spec.name, frame, settings, source="simulated", curves=table)


@pytest.fixture(scope="module", params=["superadditivity", "tau"])
def read(request) -> tuple[StudySpec, pl.DataFrame]:
    spec = load_spec(STUDIES / f"{request.param}.yaml")
    return spec, scorecard_table([simulated(spec)])


def _measured_here(spec: StudySpec):
    """(claim, measure) of every claim the spec's study measures (``study:`` in claims.yaml)."""
    return [(c, m) for c in CLAIMS for m in c.measures if m.study == spec.name and c.trend is None]


def _rows(table: pl.DataFrame, claim, measure, kind: str) -> pl.DataFrame:
    mine = (pl.col("claim") == claim.id) & (pl.col("reading") == measure.reading) & (pl.col("kind") == kind)
    return table.filter(mine)


def test_the_papers_studies_evaluate_often_enough_to_draw_a_curve(read) -> None:
    spec, _ = read
    steps = evaluation_steps(spec)
    assert len(steps) >= 2 and steps[-1] == spec.train.max_steps
    assert spec.train.max_steps % spec.train.eval_every == 0, "the final evaluation is on the curve's grid"


def test_every_claim_they_measure_has_a_cell_at_the_papers_setting(read) -> None:
    spec, table = read
    assert _measured_here(spec), spec.name
    for claim, measure in _measured_here(spec):
        if READERS[claim.kind].needs_sigmas:
            continue  # the MOPE widths are read from MLflow only
        cells = _rows(table, claim, measure, "cell")
        assert cells.height >= 1, (claim.id, measure.reading)
        at_paper = cells.filter(pl.col("dataset") == claim.setting.dataset)
        assert at_paper.height and at_paper.get_column("at_paper_setting").all(), claim.id


def _has_a_curve(claim) -> bool:
    """A quantity with seeds that the curves table records at every evaluation (not a count,
    not throughput)."""
    reader = READERS[claim.kind]
    sources = {DERIVED_FROM.get(c, c) for c in reader.columns(claim)}  # a derived metric: its source's curve
    return reader.over_training and sources <= set(CURVE_COLUMNS)


def test_every_claim_with_a_curve_is_read_at_every_evaluation_step(read) -> None:
    """One training row per cell (and initial value of tau) and step; its last step is the cell row."""
    spec, table = read
    steps = evaluation_steps(spec)
    for claim, measure in _measured_here(spec):
        if not _has_a_curve(claim):
            assert _rows(table, claim, measure, "training").height == 0, claim.id
            continue
        cells, training = _rows(table, claim, measure, "cell"), _rows(table, claim, measure, "training")
        for cell in cells.iter_rows(named=True):
            curve = training.filter((pl.col("dataset") == cell["dataset"]) & pl.col("group").eq_missing(cell["group"]))
            read_at = curve.get_column("step").sort().to_list()
            if claim.metric == "gen_gap_rel":  # read from the step the baseline's gap reaches the floor on
                assert read_at == steps[len(steps) - len(read_at) :], (claim.id, read_at)
            else:
                assert read_at == steps, (claim.id, cell["dataset"], cell["group"])
            last = curve.filter(pl.col("step") == steps[-1]).row(0, named=True)
            assert last["estimate"] == pytest.approx(cell["estimate"]), claim.id
            assert last["verdict_kind"] == cell["verdict_kind"], claim.id
    if spec.tau_inits:  # tau over training, per initial value
        claim, measure = next((c, m) for c, m in _measured_here(spec) if c.id == "tau-035")
        groups = set(_rows(table, claim, measure, "training").get_column("group").to_list())
        assert groups == {f"tau_init={v:g}" for v in spec.tau_inits}


def test_every_effect_they_measure_is_predicted_or_refused_with_why(read) -> None:
    """One predicted row per corpus; the papers' studies train the papers' size itself, so the
    row is refused as having nothing to extrapolate (the cells are the measurement)."""
    spec, table = read
    effects = [(c, m) for c, m in _measured_here(spec) if READERS[c.kind].trends]
    for claim, measure in effects:
        predicted = _rows(table, claim, measure, "predicted")
        corpora = set(_rows(table, claim, measure, "cell").get_column("dataset").to_list())
        assert sorted(predicted.get_column("dataset").to_list()) == sorted(corpora), claim.id
        if len(spec.sizes) >= MIN_SIZES:
            continue
        for row in predicted.iter_rows(named=True):
            assert row["verdict_kind"] == "not predictable", claim.id
            assert row["verdict"].startswith(
                "not predictable: nothing to extrapolate: the setting lies within the sizes and steps measured "
                "(read its cells)"
            ), row["verdict"]
    if spec.factorial() is None:  # the tau study reads levels only, which are never extrapolated
        assert table.filter(pl.col("kind") == "predicted").height == 0
