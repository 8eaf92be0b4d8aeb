"""A run's MLflow params hold every setting as used: the variant's slots and options, the
shape of a preset, the dropout on attention weights (not the spec's unset overrides)."""

from __future__ import annotations

from harness.training.config import TrainConfig
from harness.training.run import run_params


def test_the_params_of_a_registry_variant_hold_its_slots_and_shape() -> None:
    params = run_params(TrainConfig(variant="ega-mope", size="nano", context_length=64, dropout=0.1))
    assert (params["position"], params["gate"], params["scoring"]) == ("mope", "ega", "dot")
    assert (params["size"], params["n_layer"], params["n_head"], params["d_model"]) == ("nano", 2, 2, 64)
    assert params["context_length"] == 64 and params["attention_dropout"] == 0.1
    assert not [k for k, v in params.items() if v is None and k in ("position", "gate", "scoring", "n_layer")]


def test_options_and_inline_slots_are_resolved() -> None:
    lagged = run_params(TrainConfig(variant="ega-mope-lagged"))
    assert lagged["scoring"] == "lagged" and lagged["lags"] == 4
    inline = run_params(TrainConfig(variant="rope-ega", position="rope", gate="ega", attention_dropout=0.0))
    assert (inline["position"], inline["gate"], inline["scoring"]) == ("rope", "ega", "dot")
    assert inline["attention_dropout"] == 0.0 and inline["dropout"] == 0.2
