"""A user's components: named by import path or entry point, found beside the spec, built with
the keywords they take, and put through the checks that prove the zoo (harness.models.checks)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from components_support import GOOD_GATE, LEAKY_GATE, POSITION, SCORINGS, write_module

from harness.errors import InputError
from harness.models import build_model, make_variant
from harness.models.checks import check_variant
from harness.models.components import (
    COMPONENT_GROUP,
    build_component,
    is_user_component,
    module_source,
    resolve_component,
)
from harness.models.gates import KeyBias, KeyGate


def test_a_gate_beside_the_spec_builds_and_passes_the_checks(tmp_path: Path) -> None:
    module = write_module(tmp_path, "mygates", GOOD_GATE)
    assert not any(str(tmp_path) == p for p in sys.path)  # not on the Python path until asked for
    variant = make_variant("good", position="sinusoidal", gate=f"{module}:GoodGate")
    assert variant.user_components == {"gate": f"{module}:GoodGate"}
    result = check_variant(variant, length=32, component_dir=tmp_path, graphs=False)
    assert result.ok and result.causality.causal and result.causality.unseen == ()
    assert result.gradients.finite_outputs and result.gradients.non_finite == () and result.gradients.unused == ()
    # H (d + 2) per layer: its weight and the base class's tau and alpha (nano: 2 layers, 2 heads, d = 64)
    assert result.parameters - result.baseline_parameters == 2 * 2 * (64 + 2)
    assert str(tmp_path / f"{module}.py") in result.components["gate"]
    model = build_model(variant, size="nano", vocab_size=13, block_size=32, component_dir=str(tmp_path), tau_init=0.3)
    assert [type(g).__name__ for g in model.key_gates()] == ["GoodGate", "GoodGate"]
    torch.testing.assert_close(model.gate_parameters()["tau"], torch.full((2, 2), 0.3))


def test_a_gate_that_normalises_over_the_sequence_is_found_leaking(tmp_path: Path) -> None:
    module = write_module(tmp_path, "leaky", LEAKY_GATE)
    variant = make_variant("leaky", position="sinusoidal", gate=f"{module}:LeakyGate")
    result = check_variant(variant, length=24, component_dir=tmp_path, graphs=False)
    assert not result.ok and not result.causality.causal
    first = result.causality.first_leak
    # position 0 attends to itself alone (its weight is 1 whatever the bias): the first output
    # a later token can move is position 1's, through key 0's or key 1's gate
    assert first.position == 1 and first.token == 2 and first.change > 1e-4
    assert "reads the future: changing the token at position 2 moved the output at position 1" in result.refusal()


def test_scorings_and_positions_are_checked_the_same_way(tmp_path: Path) -> None:
    module = write_module(tmp_path, "scorings", SCORINGS)
    causal = check_variant(
        make_variant("prev", position="rope", scoring=f"{module}:PreviousKey"),
        length=24,
        component_dir=tmp_path,
        graphs=False,
    )
    assert causal.ok
    leaky = check_variant(
        make_variant("next", position="sinusoidal", scoring=f"{module}:NextKey"),
        length=24,
        component_dir=tmp_path,
        graphs=False,
    )
    # k'_1 reads token 2; output 0 has key 0 alone (weight 1 whatever its score): output 1 moves first
    assert not leaky.ok and leaky.causality.first_leak == leaky.causality.leaks[0]
    assert (leaky.causality.first_leak.token, leaky.causality.first_leak.position) == (2, 1)
    position = write_module(tmp_path, "positions", POSITION)
    assert check_variant(
        make_variant("ramp", position=f"{position}:Ramp", gate="ega"), length=24, component_dir=tmp_path, graphs=False
    ).ok


def test_keywords_are_passed_by_name_and_only_those_taken(tmp_path: Path) -> None:
    scorings = write_module(tmp_path, "scorings", SCORINGS)
    scoring = build_component(
        "scoring", f"{scorings}:PreviousKey", search_dir=tmp_path, offered={"n_head": 3, "d_model": 12}
    )
    assert scoring.mix.shape == (3, 1, 1)  # took n_head, was not offered d_model it does not take
    positions = write_module(tmp_path, "positions", POSITION)
    ramp = build_component(
        "position", f"{positions}:Ramp", search_dir=tmp_path, offered={"d_model": 8, "n_head": 2, "block_size": 16}
    )
    assert ramp.seen == {"d_model": 8, "block_size": 16, "n_head": 2}  # **others: every keyword
    with pytest.raises(InputError, match=r"PreviousKey does not take lags, which the config sets"):
        build_component(
            "scoring", f"{scorings}:PreviousKey", search_dir=tmp_path, offered={"n_head": 2}, required={"lags": 3}
        )
    with pytest.raises(InputError, match="does not take tau_init"):
        build_model(
            make_variant("prev", position="sinusoidal", gate=f"{write_module(tmp_path, 'lk', LEAKY_GATE)}:LeakyGate"),
            vocab_size=5,
            block_size=8,
            component_dir=str(tmp_path),
            tau_init=0.2,
        )


@pytest.mark.parametrize(
    ("source", "name", "expected"),
    [
        (None, "{m}:GoodGate", r"no module named '{m}' on the Python path or in {folder}"),
        ("raise RuntimeError('no GPU here')", "{m}:GoodGate", r"importing {m} raised RuntimeError: no GPU here"),
        ("import not_a_module_anywhere_12", "{m}:GoodGate", r"importing {m} failed: No module named 'not_a_mod"),
        ("x = 1", "{m}:GoodGate", r"{m} \(.*\) has no attribute 'GoodGate'"),
        ("def GoodGate(): pass", "{m}:GoodGate", r"is a function, not a class"),
        ("class GoodGate: pass", "{m}:GoodGate", r"is not a component: subclass one of the slots' contracts"),
        (SCORINGS, "{m}:PreviousKey", r"is a scoring component \(it subclasses Scoring\), named here as the gate"),
    ],
)
def test_a_component_that_cannot_be_loaded_is_an_input_error_with_the_reason(
    tmp_path: Path, source: str | None, name: str, expected: str
) -> None:
    module = write_module(tmp_path, "broken", source) if source is not None else "absent_module_for_the_test"
    with pytest.raises(InputError, match=expected.format(m=module, folder=tmp_path)):
        resolve_component(name.format(m=module), slot="gate", search_dir=tmp_path)


def test_a_constructor_that_raises_is_an_input_error_naming_the_keywords(tmp_path: Path) -> None:
    source = GOOD_GATE + "\n\nclass PickyGate(GoodGate):\n    def __init__(self, d_model, n_head):\n"
    source += "        raise ValueError(f'needs an even width, got {d_model}')\n"
    module = write_module(tmp_path, "picky", source)
    variant = make_variant("picky", position="sinusoidal", gate=f"{module}:PickyGate")
    with pytest.raises(InputError, match=r"cannot construct the gate .*PickyGate\(d_model=64, n_head=2\) raised "):
        build_model(variant, vocab_size=5, block_size=8, component_dir=str(tmp_path))


def test_the_bias_shape_is_checked_where_the_attention_calls_it() -> None:
    class WrongShape(KeyBias):
        def key_bias(self, x, k):
            return x.sum(-1)  # (B, T): no head axis

    with pytest.raises(ValueError, match=r"WrongShape.key_bias returned shape \(2, 5\); the gate slot expects"):
        WrongShape()(torch.zeros(2, 5, 4), torch.zeros(2, 3, 5, 2))
    assert issubclass(KeyGate, KeyBias)


def test_names_are_checked_as_names_where_no_torch_is_needed() -> None:
    assert is_user_component("pkg.mod:Cls") and is_user_component("mod:Outer.Inner")
    assert not is_user_component("forget") and not is_user_component("mod:") and not is_user_component("a b:C")
    with pytest.raises(InputError, match=r"unknown gate 'forget'; known gates: none, ega, .* or a user component"):
        make_variant("x", position="sinusoidal", gate="forget")
    with pytest.raises(InputError, match="option lags needs scoring='lagged'"):
        make_variant("x", position="sinusoidal", scoring="dot", lags=2)
    assert make_variant("x", position="sinusoidal", scoring="m:Cls", lags=2).options == {"lags": 2}


def test_installed_packages_register_names_in_the_entry_point_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A distribution on the path (its dist-info with entry_points.txt, as pip writes it) that
    registers ``forgetful = <module>:GoodGate``: the name works wherever an import path does."""
    site = tmp_path / "site"
    module = write_module(site, "installed_gates", GOOD_GATE)
    dist = site / "harness_test_gates-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: harness-test-gates\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[{COMPONENT_GROUP}]\nforgetful = {module}:GoodGate\n")
    assert not is_user_component("forgetful")
    monkeypatch.syspath_prepend(str(site))
    assert is_user_component("forgetful")
    assert module_source("forgetful", tmp_path) is None  # on the Python path: an installed package, not shipped
    variant = make_variant("registered", position="sinusoidal", gate="forgetful")
    model = build_model(variant, vocab_size=5, block_size=8)
    assert type(model.blocks[0].attn.gate).__name__ == "GoodGate"


def test_module_source_finds_the_file_or_package_beside_the_spec(tmp_path: Path) -> None:
    module = write_module(tmp_path, "beside", GOOD_GATE)
    assert module_source(f"{module}:GoodGate", tmp_path) == tmp_path / f"{module}.py"
    (tmp_path / "mypkg_beside").mkdir()
    (tmp_path / "mypkg_beside" / "gates.py").write_text(GOOD_GATE)
    assert module_source("mypkg_beside.gates:GoodGate", tmp_path) == tmp_path / "mypkg_beside"
    with pytest.raises(InputError, match="no module named 'nowhere_at_all' on the Python path or in"):
        module_source("nowhere_at_all:Gate", tmp_path)
