"""Which studies one prediction pools: studies of one design that differ in sizes and run length.

``harness scorecard --from A --from B ...`` reads each study on its own for its cells, trends and
training rows; a prediction over size x training steps reads them together when they share a
**recipe**: every training setting that changes what a run computes, apart from its length
(``max_steps``) and when it is evaluated (``eval_every``; the final evaluation's windows are not
in the curves). :func:`recipe_of` reads it off a spec's training settings with their defaults
filled in; a study whose recipe is not recorded (a table without its spec) is predicted on its
own. The batch size a spec sets through ``tokens_per_batch`` is resolved per context length
(``tokens_per_batch / T``), so the T = 128 cells of a context study pool with a size ladder at
batch 16.

Seeds are matched by number (seed s fixes initialisation and data order in every study of the
recipe: the same seed at the same size is the same model until the schedules part), and two
studies holding a run of one size and length for one seed hold the same run, read once
(:func:`harness.analysis.extrapolation.surface_effects`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

#: Training settings that do not change what a run computes apart from its length, or that a
#: trial sets for itself (its variant, size, seed, corpus, context): left out of the recipe.
NOT_RECIPE: frozenset[str] = frozenset(
    {
        "variant", "position", "gate", "scoring", "tau_init", "dataset", "size", "n_layer", "n_head",
        "d_model", "context_length", "seed", "max_steps", "eval_every", "final_eval_windows",
        "eval_batch_size", "accelerator", "num_threads", "checkpoint_every", "checkpoint_dir",
        "tracking_uri", "experiment", "data_dir", "component_dir",
    }
)  # fmt: skip


def recipe_of(train: Mapping[str, Any], tokens_per_batch: int | None = None) -> dict[str, Any]:
    """The recipe of a study's training settings (``TrainConfig``'s fields, defaults filled in)
    and its ``tokens_per_batch`` (None: the batch size is the spec's)."""
    recipe = {k: v for k, v in train.items() if k not in NOT_RECIPE}
    if tokens_per_batch is not None:
        recipe["batch_size"] = None
        recipe["tokens_per_batch"] = int(tokens_per_batch)
    return recipe


def recipe_at(recipe: Mapping[str, Any] | None, context_length: int | None) -> str | None:
    """The recipe at one context length, as a comparable key (None: not recorded)."""
    if recipe is None:
        return None
    resolved = dict(recipe)
    tokens = resolved.pop("tokens_per_batch", None)
    if tokens is not None and context_length:
        resolved["batch_size"] = int(tokens) // int(context_length)
    return json.dumps(resolved, sort_keys=True, default=str)


def prediction_pools(readable: Sequence[tuple[Any, Any]], context_length: int | None) -> list[list[tuple[Any, Any]]]:
    """The (study, its readable cells) pairs of ``readable`` grouped by recipe at
    ``context_length``, in the order first read; a study without a recorded recipe alone."""
    pools: dict[str, list[tuple[Any, Any]]] = {}
    alone: list[list[tuple[Any, Any]]] = []
    for pair in readable:
        key = recipe_at(pair[0].recipe, context_length)
        if key is None:
            alone.append([pair])
        else:
            pools.setdefault(key, []).append(pair)
    return [*pools.values(), *alone]


def dropout_words(recipes: Mapping[str, Mapping[str, Any] | None]) -> str:
    """The dropout each study read trained with, grouped: "residual 0.2, on attention weights 0
    (ladder-cpu, long-cpu); not recorded (smoke)". The papers state none, so a card says what
    its evidence ran (``attention_dropout`` unset is the residual value)."""
    groups: dict[str, list[str]] = {}
    for study, recipe in recipes.items():
        if recipe is None or "dropout" not in recipe:
            key = "not recorded"
        else:
            residual = float(recipe["dropout"])
            attention = recipe.get("attention_dropout")
            attention = residual if attention is None else float(attention)
            key = f"residual {residual:g}, on attention weights {attention:g}"
        groups.setdefault(key, []).append(study)
    return "; ".join(f"{key} ({', '.join(names)})" for key, names in groups.items())


__all__ = ["NOT_RECIPE", "dropout_words", "prediction_pools", "recipe_at", "recipe_of"]
