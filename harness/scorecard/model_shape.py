"""The shape of a study's models, as the scorecard reads it: the results table's columns.

A results table carries each run's shape (``n_layer``, ``n_head``, ``d_model``) and vocabulary
(``vocab_size``): :data:`~harness.results_schema.SHAPE_COLUMNS`, written when the run ends. The
scorecard reads those columns and nothing else: a size is a name, whatever it is (``nano``,
``L4H4d128``, ``small``), and no model is built to recover a vocabulary.

A table written before the columns were kept has them resolved once, at load
(:func:`with_model_shape`, from :class:`~harness.scorecard.cells.StudyResults`), from what
says what the run trained, never from the name's spelling:

- the shape from the size presets (:data:`~harness.models.sizes.SIZES`: a preset's name meant
  that shape, and a custom shape cannot take a preset's name) or from the custom shapes the
  study's spec names (:func:`spec_shapes`, ``sizes: [{name, n_layer, n_head, d_model}]``);
- the vocabulary from the corpus the run trained on, found on this machine as training finds
  it (``$HARNESS_DATA_DIR``, the cache; never downloaded here): a registered corpus's
  vocabulary is fixed by its checksummed files and its tokenizer.

What cannot be resolved stays null, and a reader that needs it refuses with the reason
(:func:`cell_shape`, :func:`vocabulary`): an unknown shape or vocabulary is never guessed.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from typing import Any, NamedTuple

import polars as pl

from harness.errors import InputError
from harness.models.sizes import SIZES, ModelSize, custom_size
from harness.results_schema import SHAPE_COLUMNS

#: The columns of the shape proper (the vocabulary is the corpus's, not the size's).
LAYOUT_COLUMNS: tuple[str, ...] = ("n_layer", "n_head", "d_model")


class Shape(NamedTuple):
    """A model's layers, heads and width, as a results table records them."""

    n_layer: int
    n_head: int
    d_model: int


def spec_shapes(spec_text: str | None) -> tuple[ModelSize, ...]:
    """The custom shapes a study's spec names in its ``sizes`` (``{name, n_layer, n_head,
    d_model}`` entries; a preset's name needs none), read as plain YAML (the study layer sits
    above this one); none without a spec, or from one that does not parse."""
    import yaml

    try:
        raw = yaml.safe_load(spec_text or "") or {}
    except yaml.YAMLError:
        return ()
    sizes = raw.get("sizes") if isinstance(raw, dict) else None
    out = []
    for entry in sizes if isinstance(sizes, list) else ():
        if isinstance(entry, dict) and all(isinstance(entry.get(k), int) for k in LAYOUT_COLUMNS):
            name = entry.get("name")
            out.append(custom_size(*(entry[k] for k in LAYOUT_COLUMNS), name=str(name) if name else None))
    return tuple(out)


@lru_cache(maxsize=64)
def corpus_vocab_size(dataset: str) -> int | None:
    """The vocabulary of the registered corpus ``dataset`` found on this machine (never
    downloaded); None when it is not a registered corpus or has no copy here."""
    from harness.datasets.corpus import load  # numpy and the token cache: only for an old table

    try:
        return load(dataset, download=False, progress=False).vocab_size
    except (InputError, OSError):
        return None


def _missing(df: pl.DataFrame, columns: Iterable[str]) -> bool:
    return any(df.get_column(c).null_count() for c in columns)


def with_model_shape(frame: pl.DataFrame, shapes: Iterable[ModelSize] = ()) -> pl.DataFrame:
    """``frame`` with :data:`~harness.results_schema.SHAPE_COLUMNS` (Int64), each null filled
    where it can be resolved (the module docstring): the layout by the ``size`` name from the
    presets and ``shapes`` (the study's custom shapes), the vocabulary by ``dataset`` from the
    corpus. A recorded value is never replaced; what cannot be resolved stays null."""
    df = frame.with_columns(
        (pl.col(c) if c in frame.columns else pl.lit(None)).cast(pl.Int64, strict=False).alias(c) for c in SHAPE_COLUMNS
    )
    if "size" in df.columns and _missing(df, LAYOUT_COLUMNS):
        known = {**SIZES, **{s.name: s for s in shapes}}
        names = [n for n in df.get_column("size").drop_nulls().cast(pl.String).unique().to_list() if n in known]
        size = pl.col("size").cast(pl.String)
        df = df.with_columns(
            pl.col(c).fill_null(size.replace_strict(names, [getattr(known[n], c) for n in names], default=None))
            for c in LAYOUT_COLUMNS
        )
    if "dataset" in df.columns and _missing(df, ("vocab_size",)):
        unresolved = df.filter(pl.col("vocab_size").is_null()).get_column("dataset").drop_nulls().cast(pl.String)
        vocab = {d: corpus_vocab_size(d) for d in unresolved.unique().to_list()}
        found = {d: v for d, v in vocab.items() if v is not None}
        lookup = pl.col("dataset").cast(pl.String).replace_strict(list(found), list(found.values()), default=None)
        df = df.with_columns(pl.col("vocab_size").fill_null(lookup.cast(pl.Int64)))
    return df.with_columns(pl.col(c).cast(pl.Int64) for c in SHAPE_COLUMNS)


def with_curves_shape(curves: pl.DataFrame, frame: pl.DataFrame, shapes: Iterable[ModelSize] = ()) -> pl.DataFrame:
    """The curves table with its runs' :data:`~harness.results_schema.SHAPE_COLUMNS`, read from
    the results table ``frame`` (resolved) by ``trial_id`` (the curves do not repeat them); a
    curves table without trial ids is resolved on its own (:func:`with_model_shape`)."""
    if all(c in curves.columns for c in SHAPE_COLUMNS) and not _missing(curves, SHAPE_COLUMNS):
        return curves
    if "trial_id" not in curves.columns or "trial_id" not in frame.columns:
        return with_model_shape(curves, shapes)
    by_trial = frame.select("trial_id", *SHAPE_COLUMNS).unique("trial_id", keep="first")
    joined = curves.drop([c for c in SHAPE_COLUMNS if c in curves.columns]).join(
        by_trial, on="trial_id", how="left", maintain_order="left"
    )
    ordered = joined.select(*curves.columns, *(c for c in SHAPE_COLUMNS if c not in curves.columns))
    return with_model_shape(ordered, shapes)


def _one(rows: pl.DataFrame, columns: tuple[str, ...]) -> list[tuple[Any, ...]]:
    """The distinct complete values of ``columns`` in ``rows`` (none when a column is absent)."""
    if not all(c in rows.columns for c in columns):
        return []
    return sorted(set(rows.select(columns).drop_nulls().iter_rows()))


def cell_shape(rows: pl.DataFrame, size: Any) -> Shape:
    """The one shape of the runs of size ``size`` in ``rows``; :class:`InputError` when the table
    does not record it and it could not be resolved, or when the size holds several shapes."""
    found = _one(rows, LAYOUT_COLUMNS)
    if not found:
        raise InputError(
            f"the shape of size {size!r} is unknown: its results table records no n_layer, n_head and d_model "
            "(a table written before they were kept), and neither the size presets nor the study's spec name it"
        )
    if len(found) > 1:
        shapes = ", ".join(f"L{a}H{b}d{c}" for a, b, c in found)
        raise InputError(f"size {size!r} holds runs of {len(found)} shapes ({shapes}): read each shape as its own size")
    return Shape(*(int(v) for v in found[0]))


def vocabulary(rows: pl.DataFrame) -> int:
    """The one vocabulary the runs of ``rows`` were built with; :class:`InputError` when the
    table does not record it and the corpus is not on this machine, or when the runs differ."""
    found = _one(rows, ("vocab_size",))
    if not found:
        datasets = rows.get_column("dataset").drop_nulls().cast(pl.String) if "dataset" in rows.columns else []
        corpora = sorted(set(datasets))
        raise InputError(
            f"the vocabulary of {', '.join(map(repr, corpora)) or 'the runs'} is unknown: its results table records no "
            "vocab_size (a table written before it was kept) and the corpus is not on this machine "
            "(put its files in $HARNESS_DATA_DIR: `harness data`)"
        )
    if len(found) > 1:
        raise InputError(f"the runs were built with {len(found)} vocabularies ({', '.join(str(v) for (v,) in found)})")
    return int(found[0][0])


__all__ = [
    "LAYOUT_COLUMNS",
    "Shape",
    "cell_shape",
    "corpus_vocab_size",
    "spec_shapes",
    "vocabulary",
    "with_curves_shape",
    "with_model_shape",
]
