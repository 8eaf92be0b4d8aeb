"""TrainConfig's rules across fields (harness.training.config_checks): each function alone, and
the config reporting what they raise as one validation error that names the fields."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from harness.training.config import TrainConfig
from harness.training.config_checks import (
    check_schedule,
    check_shape,
    compile_none_is_auto,
    name_the_shape,
    normalise_input,
)


def test_the_input_is_normalised_before_the_fields_validate() -> None:
    assert compile_none_is_auto({"compile": None}) == {"compile": "auto"}
    assert name_the_shape({"n_layer": 4, "n_head": 4, "d_model": 128}) == {
        "n_layer": 4,
        "n_head": 4,
        "d_model": 128,
        "size": "L4H4d128",
    }
    assert name_the_shape({"size": "w", "n_layer": 4, "n_head": 4, "d_model": 128})["size"] == "w"
    assert name_the_shape({"n_layer": 4}) == {"n_layer": 4}  # half a shape: the check after names it
    assert normalise_input({"compile": None, "n_layer": 2, "n_head": 2, "d_model": 64}) == {
        "compile": "auto",
        "n_layer": 2,
        "n_head": 2,
        "d_model": 64,
        "size": "L2H2d64",
    }
    assert normalise_input("not a mapping") == "not a mapping"  # pydantic reports it


def test_the_checks_pass_a_valid_config_and_name_the_fields_of_a_bad_one() -> None:
    config = TrainConfig(n_layer=2, n_head=2, d_model=64)
    check_schedule(config)
    check_shape(config)
    assert config.size == "L2H2d64" and TrainConfig(compile=None).compile == "auto"
    with pytest.raises(ValidationError, match=r"min_lr \(1.0\) must not exceed lr \(0.5\)"):
        TrainConfig(lr=0.5, min_lr=1.0)
    with pytest.raises(ValidationError, match="n_layer, n_head set without d_model"):
        TrainConfig(n_layer=2, n_head=2)
    with pytest.raises(ValidationError, match="min_lr"):  # the schedule is checked before the shape
        TrainConfig(lr=0.5, min_lr=1.0, n_layer=2)
