"""The model's shape as the scorecard reads it (issue 42, move 1): the results table's
n_layer, n_head, d_model and vocab_size; an old table's resolved once at load from the size
presets, its spec's custom shapes and its corpus, never from the spelling of a size's name."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal
from scorecard_sim import row_of, simulated_study

from harness.errors import InputError
from harness.results_schema import SHAPE_COLUMNS
from harness.scorecard import StudyResults, scorecard_table
from harness.scorecard.cli import studies_from_path
from harness.scorecard.model_shape import (
    cell_shape,
    spec_shapes,
    vocabulary,
    with_curves_shape,
    with_model_shape,
)

PUBLISHED = Path(__file__).resolve().parents[2] / "published"
SPEC = """
name: ladder
sizes:
  - nano
  - {name: L3H4d96, n_layer: 3, n_head: 4, d_model: 96}
  - {name: w128, n_layer: 4, n_head: 4, d_model: 128}
"""


def _old_table(sizes: list[str], dataset: str = "tinyshakespeare") -> pl.DataFrame:
    """A results table written before the shape columns were kept."""
    return pl.DataFrame({"trial_id": [f"t{i}" for i in range(len(sizes))], "dataset": dataset, "size": sizes})


def _shapes(df: pl.DataFrame) -> list[tuple]:
    return df.select("size", *SHAPE_COLUMNS).rows()


def test_an_old_table_is_resolved_from_the_presets_its_spec_and_its_corpus() -> None:
    got = with_model_shape(_old_table(["nano", "L3H4d96", "w128", "L9H9d900"]), spec_shapes(SPEC))
    assert _shapes(got) == [
        ("nano", 2, 2, 64, 65),
        ("L3H4d96", 3, 4, 96, 65),
        ("w128", 4, 4, 128, 65),
        ("L9H9d900", None, None, None, 65),  # named like a shape, named by nothing: unknown, not parsed
    ]
    assert dict(got.select(SHAPE_COLUMNS).schema) == dict.fromkeys(SHAPE_COLUMNS, pl.Int64)
    unknown_corpus = with_model_shape(_old_table(["nano"], dataset="not-a-corpus"))
    assert _shapes(unknown_corpus) == [("nano", 2, 2, 64, None)]


def test_a_recorded_shape_is_never_replaced_by_a_presets() -> None:
    """``small`` is a preset (L8 H8 d512); a table that records another shape under that name keeps it."""
    table = _old_table(["small", "small"]).with_columns(
        n_layer=pl.Series([2, None]), n_head=pl.Series([2, None]), d_model=pl.Series([64, None]), vocab_size=50
    )
    assert _shapes(with_model_shape(table)) == [("small", 2, 2, 64, 50), ("small", 8, 8, 512, 50)]


def test_the_spec_names_its_custom_shapes_only() -> None:
    assert [(s.name, s.n_layer, s.n_head, s.d_model) for s in spec_shapes(SPEC)] == [
        ("L3H4d96", 3, 4, 96),
        ("w128", 4, 4, 128),
    ]
    assert spec_shapes(None) == () and spec_shapes("sizes: [nano]") == () and spec_shapes(": not yaml: [") == ()


def test_the_readers_refuse_an_unknown_or_mixed_shape_and_vocabulary() -> None:
    unknown = with_model_shape(_old_table(["L9H9d900"], dataset="not-a-corpus"))
    with pytest.raises(InputError, match=r"the shape of size 'L9H9d900' is unknown: its results table records no"):
        cell_shape(unknown, "L9H9d900")
    with pytest.raises(InputError, match=r"the vocabulary of 'not-a-corpus' is unknown.*HARNESS_DATA_DIR"):
        vocabulary(unknown)
    mixed = with_model_shape(_old_table(["nano", "nano"]))
    mixed = mixed.with_columns(d_model=pl.Series([64, 128]), vocab_size=pl.Series([65, 50]))
    with pytest.raises(InputError, match=r"size 'nano' holds runs of 2 shapes \(L2H2d64, L2H2d128\)"):
        cell_shape(mixed, "nano")
    with pytest.raises(InputError, match=r"built with 2 vocabularies \(50, 65\)"):
        vocabulary(mixed)
    assert tuple(cell_shape(mixed.head(1), "nano")) == (2, 2, 64) and vocabulary(mixed.head(1)) == 65


def test_the_curves_read_their_runs_shape_from_the_results_table() -> None:
    frame = pl.DataFrame({"trial_id": ["a", "b"], "dataset": "tinyshakespeare", "size": ["small", "big"]})
    frame = frame.with_columns(n_layer=pl.Series([1, 3]), n_head=2, d_model=pl.Series([32, 96]), vocab_size=65)
    curves = pl.DataFrame({"trial_id": ["b", "a", "b"], "size": ["big", "small", "big"], "step": [1, 1, 2]})
    got = with_curves_shape(curves, with_model_shape(frame))
    assert got.columns == [*curves.columns, *SHAPE_COLUMNS]
    assert got.select("trial_id", "n_layer", "d_model", "vocab_size").rows() == [
        ("b", 3, 96, 65),
        ("a", 1, 32, 65),
        ("b", 3, 96, 65),
    ]


def test_the_gate_is_counted_per_head_at_the_shape_its_table_records() -> None:
    """A size named ``small`` trained at L2 H2 d64 (recorded): the count per head is read at
    that shape (4 heads, d = 64), not at the preset ``small``'s L8 H8 d512."""
    study = simulated_study(
        {"ega": 0.05, "mope": -0.03, "ega-mope": 0.08},
        sizes={"small": 100_000},
        params={"ega": 4 * 67, "ega-mope": 4 * 67},
    )
    frame = study.frame.with_columns(n_layer=2, n_head=2, d_model=64, vocab_size=65)
    row = row_of(scorecard_table([StudyResults("sim", frame, study.settings)]), "ega-parameter-count")
    assert row["estimate"] == pytest.approx(67) and row["paper_value"] == 66, row["verdict"]
    assert "d + 2 with d = 64, 2 layers x 2 heads" in row["verdict"]


@pytest.mark.parametrize("folder", ["ladder-cpu-2026-12-02", "ladder-long-cpu-2026-12-03", "long-cpu-2026-12-02"])
def test_every_published_table_resolves_its_shape_at_load(folder: str) -> None:
    """The published tables were written before the columns were kept: each loads with every
    shape and vocabulary resolved (its spec's custom shapes, TinyShakespeare's 65), and the
    table on disk is left as it was."""
    path = PUBLISHED / folder / "results.parquet"
    (study,) = studies_from_path(path)
    assert study.frame.select(SHAPE_COLUMNS).null_count().row(0) == (0, 0, 0, 0)
    assert study.curves is not None and study.curves.select(SHAPE_COLUMNS).null_count().row(0) == (0, 0, 0, 0)
    by_size = dict(study.frame.select("size", "d_model").unique().rows())
    widths = {"nano": 64, "L3H4d96": 96, "L4H4d128": 128}
    assert by_size and by_size == {size: widths[size] for size in by_size}
    assert set(study.frame.get_column("vocab_size")) == {65}
    on_disk = pl.read_parquet(path)
    assert not set(SHAPE_COLUMNS) & set(on_disk.columns)
    assert_frame_equal(study.frame.drop(SHAPE_COLUMNS).select(on_disk.columns), on_disk, check_dtypes=False)
