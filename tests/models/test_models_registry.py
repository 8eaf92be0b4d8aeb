"""Variant and size registries, bad input, parameter overheads."""

from __future__ import annotations

import pickle

import pytest
import torch

from harness.errors import InputError
from harness.models import SIZES, VARIANTS, ModelSize, build_model, get_size, get_variant, make_variant
from harness.models.gates import EnergyGate, KeyBias, WaveletDirectionGate, build_gate
from harness.models.positional import PositionalEncoding, RotaryPositionalEncoding
from harness.models.registry import Registry
from harness.models.scoring import LaggedScoring, Scoring
from harness.models.sizes import CUSTOM_MAX_CONTEXT_LENGTH, SIZE_REGISTRY, custom_size, resolve_size
from harness.models.variants import (
    GATES,
    LAGGED_SCORINGS,
    LEAKY_GATES,
    MOPE_POSITIONS,
    POSITIONS,
    READINGS,
    SCORINGS,
    VARIANT_REGISTRY,
    is_diagnostic,
)

REGISTRY_NAMES = [
    "baseline",
    "learned-pe",
    "rope",
    "alibi",
    "nope",
    "ega",
    "ega-2",
    "ega-4",
    "ega-db2",
    "ega-db4",
    "ega-morlet-fixed",
    "ega-morlet-param",
    "ega-learned",
    "mope",
    "ega-mope",
    "ega-mope-lagged",
    "ega-mope-scale-init",
    "flux-mope",
    "phase-mope",
    "gated-output",
    "mope-rel",
    "ega-mope-rel",
    "ega-mope-rel-scale-init",
    "ega-db2-dir",
    "ega-db4-dir",
    "ega-morlet-dir",
    "ega-2-pc",
    "ega-4-pc",
    "ega-2-prod",
    "ega-4-prod",
    "ega-qnorm",
    "ega-mope-scale-frozen",
    "mope-bias",
    "ega-mope-bias",
    "ega-leaky",
]


def test_registry_holds_exactly_the_issue_names():
    assert list(VARIANTS) == REGISTRY_NAMES


@pytest.mark.parametrize(
    "name, slots",
    [
        ("baseline", ("sinusoidal", "none", "dot")),
        ("ega", ("sinusoidal", "ega", "dot")),
        ("ega-mope", ("mope", "ega", "dot")),
        ("ega-mope-lagged", ("mope", "ega", "lagged")),
        ("flux-mope", ("mope", "flux", "dot")),
        ("phase-mope", ("mope", "phase", "dot")),
        ("nope", ("none", "none", "dot")),
        ("mope-rel", ("mope-rel", "none", "dot")),
        ("ega-mope-rel", ("mope-rel", "ega", "dot")),
        ("ega-db4-dir", ("sinusoidal", "db4-dir", "dot")),
        ("ega-morlet-dir", ("sinusoidal", "morlet-dir", "dot")),
        ("ega-2-pc", ("sinusoidal", "ega-2-pc", "dot")),
        ("ega-leaky", ("sinusoidal", "ega-leaky", "dot")),
        ("ega-qnorm", ("sinusoidal", "ega-qnorm", "dot")),
        ("ega-2-prod", ("sinusoidal", "ega-2-prod", "dot")),
        ("ega-4-prod", ("sinusoidal", "ega-4-prod", "dot")),
        ("ega-mope-scale-frozen", ("mope", "ega", "dot")),
        ("mope-bias", ("mope-bias", "none", "dot")),
        ("ega-mope-bias", ("mope-bias", "ega", "dot")),
    ],
)
def test_variant_slots(name, slots):
    v = VARIANTS[name]
    assert (v.position, v.gate, v.scoring) == slots
    assert VARIANTS["ega-mope-scale-init"].mope_init == "scales" and VARIANTS["ega-mope"].mope_init == "random"
    assert VARIANTS["gated-output"].output_gate and not VARIANTS["baseline"].output_gate
    assert VARIANTS["ega-mope-rel-scale-init"].mope_init == "scales" and VARIANTS["ega-mope-rel"].mope_init == "random"


def test_only_ega_leaky_is_a_diagnostic_and_inline_leaky_combinations_are_too():
    assert [v.name for v in VARIANTS.values() if v.diagnostic] == ["ega-leaky"]
    assert VARIANTS["ega-leaky"].leaks_future and not VARIANTS["ega"].leaks_future
    assert make_variant("rope-leaky", position="rope", gate="ega-leaky").diagnostic
    assert is_diagnostic("ega-leaky") and is_diagnostic("my-name", "ega-leaky")
    assert not is_diagnostic("ega") and not is_diagnostic("unknown-name") and not is_diagnostic("x", "ega")


def test_readings_name_registry_variants_in_pairs():
    names_b = [name for r in READINGS for name in r.variants_b]
    assert names_b == [
        "mope-rel",
        "ega-mope-rel",
        "ega-mope-rel-scale-init",
        "ega-db2-dir",
        "ega-db4-dir",
        "ega-morlet-dir",
        "ega-2-pc",
        "ega-4-pc",
        "ega-leaky",
        "ega-qnorm",
        "ega-2-prod",
        "ega-4-prod",
        "ega-mope-scale-frozen",
        "mope-bias",
        "ega-mope-bias",
    ]
    for r in READINGS:
        assert len(r.variants_a) == len(r.variants_b) and r.papers and r.reading_a and r.reading_b
        assert all(name in VARIANTS for name in (*r.variants_a, *r.variants_b))


def test_readings_parameter_overheads_at_paper_size():
    """Every reading B costs under 1 % of the paper-size baseline, but ega-4-pc: four per-head
    directions are 4 x EGA-1's weights (1.04 %, as the zoo's ega-4 and the papers' EGA-4)."""
    d, H, L = 256, 8, 6
    with torch.device("meta"):
        count = {
            name: build_model(name, size="paper", vocab_size=65, block_size=256).num_parameters()
            for r in READINGS
            for name in ("baseline", *r.variants_a, *r.variants_b)
        }
    base = count["baseline"]
    assert count["mope-rel"] - base == 2 * H  # (omega, sigma) per head, shared by the layers
    assert count["ega-db4-dir"] - base == L * 2 * H  # tau, alpha: the direction is fixed
    assert count["ega-2-pc"] - base == L * (H * 2 * (d + 1) + 2 * H)
    assert count["ega-4-pc"] - base == L * (H * 4 * (d + 1) + 2 * H)
    assert count["ega-leaky"] == count["ega"] == count["ega-qnorm"]
    assert count["ega-2-prod"] - base == L * (H * 2 * (d + 1) + 2 * H)  # K projections and biases, tau and alpha
    assert count["ega-4-prod"] == count["ega-4-pc"]
    assert count["ega-mope-scale-init"] - count["ega-mope-scale-frozen"] == d  # MOPE's omega, sigma: frozen
    assert count["mope-bias"] - base == 3 * H  # (a, omega, sigma) per head, shared by the layers
    for r in READINGS:
        for name in r.variants_b:
            overhead = (count[name] - base) / base
            assert overhead < (0.0105 if name in ("ega-4-pc", "ega-4-prod") else 0.01), (name, overhead)


def test_the_slots_registries_hold_the_zoos_components_in_their_modules_order():
    assert POSITIONS.names() == ("sinusoidal", "learned", "rope", "alibi", "mope", "mope-rel", "mope-bias", "none")
    assert GATES.names()[:4] == ("none", "ega", "ega-2", "ega-4") and len(GATES) == 19
    assert SCORINGS.names() == ("dot", "lagged")
    assert POSITIONS.get("rope") is RotaryPositionalEncoding and SCORINGS.get("lagged") is LaggedScoring
    assert GATES.get("ega-4") is EnergyGate and GATES.get("morlet-dir") is WaveletDirectionGate
    assert all(issubclass(cls, PositionalEncoding) for _, cls in POSITIONS.items())
    assert all(issubclass(cls, KeyBias) for _, cls in GATES.items())
    assert all(issubclass(cls, Scoring) for _, cls in SCORINGS.items())
    # the lists that ask the components, and the data that names them
    assert list(MOPE_POSITIONS) == ["mope", "mope-rel", "mope-bias"] and list(LAGGED_SCORINGS) == ["lagged"]
    assert set(LEAKY_GATES) <= set(GATES)
    assert (
        build_gate("ega-4", d_model=16, n_head=2).projections == 4 and build_gate("none", d_model=16, n_head=2) is None
    )


def test_every_zoo_variant_is_what_make_variant_builds():
    """The zoo's table is registered without asking the slots' registries (that would load torch
    with the light variants module): here every entry is checked as make_variant checks it."""
    for name, v in VARIANTS.items():
        assert make_variant(name, position=v.position, gate=v.gate, scoring=v.scoring, **v.options) == v
        assert v.user_components == {}


def test_a_registry_registers_by_decorator_refuses_a_duplicate_and_lists_its_names():
    shapes: Registry[type] = Registry("shape", hint=" (or draw one)")

    @shapes.register("square")
    class Square:
        pass

    assert shapes.add("circle", int) is int and shapes.names() == ("square", "circle")
    assert shapes.get("square") is Square and "square" in shapes and "cube" not in shapes and 3 not in shapes
    assert list(shapes) == ["square", "circle"] and len(shapes) == 2 and dict(shapes.entries) == dict(shapes.items())
    assert list(shapes.where(lambda cls: cls is int)) == ["circle"] and "square" not in shapes.where(lambda c: c is int)
    with pytest.raises(InputError, match=r"^unknown shape 'cube'; known shapes: square, circle \(or draw one\)$"):
        shapes.get("cube")
    with pytest.raises(InputError, match="shape 'square' is registered already .*Square.*choose another name"):
        shapes.add("square", float)
    with pytest.raises(InputError, match="a shape needs a non-empty name"):
        shapes.add("", float)
    assert shapes.remove("circle") is int and shapes.names() == ("square",)
    assert SIZE_REGISTRY.get("nano") is SIZES["nano"] and VARIANT_REGISTRY.get("ega") is VARIANTS["ega"]
    with pytest.raises(TypeError):
        VARIANTS["mine"] = VARIANTS["ega"]  # the mappings are read-only views: register instead


def test_a_slots_registry_loads_its_components_module_on_the_first_question():
    import subprocess
    import sys

    code = (
        "import sys; from harness.models.slots import POSITIONS; "
        "assert 'torch' not in sys.modules and 'not loaded yet' in repr(POSITIONS); "
        "assert 'rope' in POSITIONS and 'torch' in sys.modules and 'harness.models.positional' in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_variants_are_hashable_picklable_and_serialisable():
    v = make_variant("rope-ega-lagged", position="rope", gate="ega", scoring="lagged", lags=2)
    assert pickle.loads(pickle.dumps(v)) == v
    assert hash(v) == hash(make_variant("rope-ega-lagged", position="rope", gate="ega", scoring="lagged", lags=2))
    assert v.as_dict() == {
        "name": "rope-ega-lagged",
        "position": "rope",
        "gate": "ega",
        "scoring": "lagged",
        "options": {"lags": 2},
    }
    assert get_variant(v) is v and get_variant("ega") is VARIANTS["ega"]
    model = build_model(v, vocab_size=5, block_size=8)
    assert model.blocks[0].attn.scoring.lags == 2


def test_unknown_variant_is_a_value_error_listing_the_names():
    with pytest.raises(ValueError, match="unknown variant 'egaa'.*baseline.*ega-mope-lagged.*gated-output"):
        build_model("egaa", vocab_size=5, block_size=8)
    with pytest.raises(InputError):
        get_variant("egaa")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(position="sine"), "unknown position 'sine'.*sinusoidal"),
        (dict(position="rope", gate="energy"), "unknown gate 'energy'.*morlet-param"),
        (dict(position="rope", scoring="conv"), "unknown scoring 'conv'.*lagged"),
        (dict(position="rope", colour="red"), "unknown option 'colour'.*mope_init"),
        (dict(position="rope", mope_init="scales"), "mope_init needs position 'mope' or 'mope-rel'"),
        (dict(position="mope", mope_init="grid"), "unknown mope_init 'grid'"),
        (dict(position="rope", scoring="lagged", lags=0), "lags must be a positive integer"),
        (dict(position="rope", lags=2), "lags needs scoring='lagged'"),
        (dict(position="rope", output_gate="yes"), "output_gate must be true or false"),
    ],
)
def test_make_variant_validates(kwargs, message):
    with pytest.raises(InputError, match=message):
        make_variant("x", **kwargs)


def test_unknown_size_lists_the_sizes():
    with pytest.raises(ValueError, match="unknown model size 'huge'.*nano, paper, small, medium, large"):
        build_model("baseline", size="huge", vocab_size=5, block_size=8)
    assert get_size("paper") is SIZES["paper"]


@pytest.mark.parametrize(
    "variant, overrides, message",
    [
        ("baseline", dict(n_head=3), "d_model=64 is not divisible by n_head=3"),
        ("mope", dict(d_model=33, n_head=3), r"Morlet \(MOPE\).*even width d_model.*got 33"),
        ("baseline", dict(d_model=33, n_head=3), "sinusoidal.*even width"),
        ("rope", dict(d_model=66, n_head=6), "rotary.*even head dimension.*got 11"),
        ("baseline", dict(colour=1), "unknown build_model override.*colour.*tau_init"),
    ],
)
def test_impossible_shapes_and_unknown_overrides(variant, overrides, message):
    with pytest.raises(InputError, match=message):
        build_model(variant, vocab_size=5, block_size=8, **overrides)


def test_block_size_and_other_arguments_are_checked():
    with pytest.raises(InputError, match="block_size 9000 exceeds the max_context_length 8192"):
        build_model("baseline", vocab_size=5, block_size=9000)
    with pytest.raises(InputError, match="vocab_size"):
        build_model("baseline", vocab_size=0, block_size=8)
    with pytest.raises(InputError, match="dropout"):
        build_model("baseline", vocab_size=5, block_size=8, dropout=1.0)
    model = build_model("baseline", vocab_size=5, block_size=8)
    with pytest.raises(InputError, match="input length 9 exceeds the model's block_size 8"):
        model(torch.zeros(1, 9, dtype=torch.long))
    with pytest.raises(InputError, match="not divisible"):
        ModelSize("odd", n_layer=1, n_head=3, d_model=64, max_context_length=8)


def test_size_presets():
    assert (SIZES["nano"].n_layer, SIZES["nano"].n_head, SIZES["nano"].d_model) == (2, 2, 64)
    assert (SIZES["paper"].n_layer, SIZES["paper"].n_head, SIZES["paper"].d_model) == (6, 8, 256)
    assert len(SIZES) >= 5 and all(s.max_context_length >= 4096 for s in SIZES.values())
    with torch.device("meta"):
        counts = {
            name: build_model("baseline", size=name, vocab_size=65, block_size=256).num_parameters() for name in SIZES
        }
    assert counts["nano"] < counts["paper"] < counts["small"] < counts["medium"] < counts["large"] <= 310e6
    assert counts["large"] > 250e6


def test_paper_size_parameter_count_by_hand():
    d, L, V, T = 256, 6, 65, 256
    per_block = 2 * 2 * d + (3 * d * d + 3 * d) + (d * d + d) + (4 * d * d + 4 * d) + (4 * d * d + d)
    expected = V * d + L * per_block + 2 * d  # tied head, final LayerNorm
    with torch.device("meta"):
        assert build_model("baseline", size="paper", vocab_size=V, block_size=T).num_parameters() == expected
        ega = build_model("ega", size="paper", vocab_size=V, block_size=T).num_parameters()
    assert ega - expected == L * 8 * (d + 1 + 2)  # per head: w (d), b, tau, alpha
    assert (ega - expected) / expected < 0.003  # the papers: < 0.26 %


def test_tau_init_override_reaches_every_gate():
    model = build_model("ega-mope", size="nano", vocab_size=5, block_size=8, tau_init=0.7)
    torch.testing.assert_close(model.gate_parameters()["tau"], torch.full((2, 2), 0.7))
    default = build_model("ega-mope", size="nano", vocab_size=5, block_size=8, tau_init=None)
    torch.testing.assert_close(default.gate_parameters()["tau"], torch.zeros(2, 2))


def test_size_object_and_shape_overrides():
    custom = ModelSize("tiny", n_layer=1, n_head=4, d_model=32, max_context_length=64)
    model = build_model("ega", size=custom, vocab_size=5, block_size=64)
    assert model.size is custom and len(model.blocks) == 1
    model = build_model("ega", size="nano", vocab_size=5, block_size=64, n_layer=3)
    # A changed preset is a custom shape named after itself (it was "nano-custom", which hid the shape).
    assert len(model.blocks) == 3 and model.size.name == "L3H2d64" and not model.size.is_preset
    assert build_model("ega", size="nano", vocab_size=5, block_size=64, n_layer=2).size == SIZES["nano"]


def test_a_size_gives_the_config_fields_that_name_it():
    assert custom_size(4, 4, 128, name="w128").config_fields() == {
        "size": "w128",
        "n_layer": 4,
        "n_head": 4,
        "d_model": 128,
    }
    assert SIZES["paper"].config_fields() == {"size": "paper", "n_layer": 6, "n_head": 8, "d_model": 256}


def test_custom_sizes_name_their_shape_and_are_validated():
    w128 = custom_size(4, 4, 128, name="w128")
    assert (w128.n_layer, w128.n_head, w128.d_model, w128.head_dim) == (4, 4, 128, 32)
    assert w128.tag == "w128-L4H4d128" and custom_size(4, 4, 128).tag == "L4H4d128" and SIZES["paper"].tag == "paper"
    assert w128.max_context_length == CUSTOM_MAX_CONTEXT_LENGTH
    assert custom_size(2, 2, 64, name="nano") is SIZES["nano"]  # a preset's own shape is the preset
    assert resolve_size("paper", d_model=512) == custom_size(6, 8, 512)
    with pytest.raises(InputError, match="d_model=130 is not divisible by n_head=4"):
        custom_size(4, 4, 130)
    with pytest.raises(InputError, match="n_layer must be a positive integer"):
        custom_size(0, 4, 128)
    with pytest.raises(InputError, match="'nano' is the preset L2H2d64, not L4H4d128"):
        custom_size(4, 4, 128, name="nano")
    with pytest.raises(InputError, match="custom shape"):
        get_size("w128")  # an unknown preset says how to name a shape instead
    # The components check what they need of the shape when the model is built.
    with pytest.raises(InputError, match="even width d_model"):
        build_model("baseline", size=custom_size(2, 3, 33), vocab_size=5, block_size=8)
    with pytest.raises(InputError, match="even head dimension"):
        build_model("rope", size=custom_size(2, 2, 66), vocab_size=5, block_size=8)
    assert build_model("nope", size=custom_size(1, 3, 33), vocab_size=5, block_size=8).num_parameters() > 0


def test_importing_the_zoo_registries_and_cli_does_not_import_torch():
    import subprocess
    import sys

    code = (
        "import sys, harness.models, harness.models.cli; "
        "assert 'torch' not in sys.modules, 'torch imported'; "
        "assert len(harness.models.VARIANTS) == 35"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
