"""A training config's rules across fields, and the inputs it reads in today's form: what no
single field of :class:`~harness.training.config.TrainConfig` can check on its own (the schedule's
two learning rates, a custom shape's three numbers). The config runs :func:`normalise_input`
before its fields validate and :func:`check_consistent` after; each rule raises ``ValueError``
(or :class:`~harness.errors.InputError`) naming the fields, which pydantic reports against the
config at the boundary (CLI, study spec, Tune trial)."""

from __future__ import annotations

from typing import Any

from harness.models.sizes import custom_size, shape_name

#: A :class:`~harness.training.config.TrainConfig` whose fields have validated (typed loosely:
#: that module imports this one).
TrainConfig = Any


def normalise_input(data: Any) -> Any:
    """The raw input of a config (a mapping of its fields, or anything pydantic accepts) with the
    older and shorter forms rewritten: :func:`compile_none_is_auto`, then :func:`name_the_shape`."""
    return name_the_shape(compile_none_is_auto(data))


def compile_none_is_auto(data: Any) -> Any:
    """``compile: null`` (configs and checkpoints written when the default was None) is ``auto``."""
    if isinstance(data, dict) and "compile" in data and data["compile"] is None:
        return {**data, "compile": "auto"}
    return data


def name_the_shape(data: Any) -> Any:
    """A custom shape without a ``size`` is named after itself (``L4H4d128``)."""
    if isinstance(data, dict) and "size" not in data:
        shape = [data.get(k) for k in ("n_layer", "n_head", "d_model")]
        if all(isinstance(v, int) for v in shape):
            return {**data, "size": shape_name(*shape)}
    return data


def check_consistent(config: TrainConfig) -> None:
    """Every cross-field rule, in the order of the config's fields: the schedule, then the shape."""
    check_schedule(config)
    check_shape(config)


def check_schedule(config: TrainConfig) -> None:
    """The cosine ends at ``min_lr`` from its peak ``lr``: min_lr <= lr."""
    if config.min_lr > config.lr:
        raise ValueError(f"min_lr ({config.min_lr}) must not exceed lr ({config.lr})")


def check_shape(config: TrainConfig) -> None:
    """A custom shape sets ``n_layer``, ``n_head`` and ``d_model`` together, and is one
    :func:`~harness.models.sizes.custom_size` accepts (the heads divide the width, ...)."""
    shape = {"n_layer": config.n_layer, "n_head": config.n_head, "d_model": config.d_model}
    given = [k for k, v in shape.items() if v is not None]
    if given and len(given) < 3:
        missing = [k for k in shape if k not in given]
        raise ValueError(
            f"a custom shape needs n_layer, n_head and d_model together; {', '.join(given)} set without "
            f"{', '.join(missing)}"
        )
    if given:
        custom_size(config.n_layer, config.n_head, config.d_model, name=config.size)  # type: ignore[arg-type]
