"""A user's components: named by import path or entry point, found beside the spec, built with
the keywords they take, and put through the checks that prove the zoo (harness.models.checks)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from components_support import (
    BREACHES,
    GOOD_GATE,
    HIDDEN_LEAKS,
    LEAKY_GATE,
    NO_INIT,
    POSITION,
    SCORINGS,
    write_module,
)

from harness.errors import InputError
from harness.models import build_model, make_variant
from harness.models.checks import PROBE_SPLITS, check_variant, split_points
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
    result = check_variant(variant, length=24, component_dir=tmp_path, graphs=False, seeds=(0,))
    assert not result.ok and not result.causality.causal
    first = result.causality.first_leak
    # position 0 attends to itself alone (its weight is 1 whatever the bias): the first output
    # a later token can move is position 1's, through key 0's or key 1's gate
    assert first.position == 1 and first.split == 2 and first.change > 1e-4
    assert "reads the future: changing the tokens from position 2 on moved the output at position 1" in result.refusal()


def test_scorings_and_positions_are_checked_the_same_way(tmp_path: Path) -> None:
    module = write_module(tmp_path, "scorings", SCORINGS)
    causal = check_variant(
        make_variant("prev", position="rope", scoring=f"{module}:PreviousKey"),
        length=24,
        component_dir=tmp_path,
        graphs=False,
        seeds=(0,),
    )
    assert causal.ok
    leaky = check_variant(
        make_variant("next", position="sinusoidal", scoring=f"{module}:NextKey"),
        length=24,
        component_dir=tmp_path,
        graphs=False,
        seeds=(0,),
    )
    # k'_1 reads token 2; output 0 has key 0 alone (weight 1 whatever its score): output 1 moves first
    assert not leaky.ok and leaky.causality.first_leak == leaky.causality.leaks[0]
    assert (leaky.causality.first_leak.split, leaky.causality.first_leak.position) == (2, 1)
    position = write_module(tmp_path, "positions", POSITION)
    ramp = make_variant("ramp", position=f"{position}:Ramp", gate="ega")
    assert check_variant(ramp, length=24, component_dir=tmp_path, graphs=False, seeds=(0,)).ok


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


@pytest.mark.parametrize(
    ("source", "cls", "told"),
    [
        (
            GOOD_GATE
            + "\n\nclass PickyGate(GoodGate):\n    def __init__(self, d_model, n_head):\n"
            + "        raise ValueError(f'needs an even width, got {d_model}')\n",
            "PickyGate",
            r"cannot construct the gate .*PickyGate\(d_model=64, n_head=2\) raised ValueError: needs an even width, "
            r"got 64; the keywords passed: d_model=64, n_head=2$",
        ),
        (
            NO_INIT,
            "OwnNames",
            r"{m}.OwnNames.__init__ requires dim, heads, which the harness does not pass: the harness passes, "
            r"by keyword, d_model=64, n_head=2; name __init__'s parameters after them",
        ),
    ],
)
def test_a_constructor_that_fails_is_an_input_error_naming_the_keywords_passed(
    tmp_path: Path, source: str, cls: str, told: str
) -> None:
    module = write_module(tmp_path, "ctor", source)
    variant = make_variant("ctor", position="sinusoidal", gate=f"{module}:{cls}")
    with pytest.raises(InputError, match=told.replace("{m}", module)):
        build_model(variant, vocab_size=5, block_size=8, component_dir=str(tmp_path))


def test_the_bias_shape_is_checked_where_the_attention_calls_it() -> None:
    class WrongShape(KeyBias):
        def key_bias(self, x, k):
            return x.sum(-1)  # (B, T): no head axis

    with pytest.raises(
        ValueError, match=r"the gate slot's .*WrongShape.key_bias returned shape \(2, 5\); the slot expects"
    ):
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


# -- leaks a short probe in eval mode does not see ---------------------------------------------


def test_a_leak_beyond_96_tokens_passes_at_64_and_is_refused_at_128(tmp_path: Path) -> None:
    module = write_module(tmp_path, "hidden", HIDDEN_LEAKS)
    variant = make_variant("long", position="sinusoidal", gate=f"{module}:LongLeakGate")
    assert check_variant(
        variant, length=64, component_dir=tmp_path, graphs=False, seeds=(0,)
    ).ok  # the old probe's length
    at_128 = check_variant(variant, length=128, component_dir=tmp_path, graphs=False)
    assert not at_128.ok and not at_128.causality.causal
    run = at_128.causality.leaking_run
    assert run.mode == "eval" and (run.leaks[0].split, run.leaks[0].position) == (2, 1)
    assert "reads the future: changing the tokens from position 2 on moved the output at position 1" in at_128.refusal()
    assert "at 128 tokens" in at_128.refusal()


def test_a_leak_in_training_mode_only_is_refused_and_named_as_such(tmp_path: Path) -> None:
    module = write_module(tmp_path, "hidden", HIDDEN_LEAKS)
    variant = make_variant("train", position="sinusoidal", gate=f"{module}:TrainLeakGate")
    eval_only = check_variant(variant, length=32, component_dir=tmp_path, graphs=False, modes=("eval",))
    assert eval_only.ok  # what the probe saw before it ran in training mode
    result = check_variant(variant, length=32, component_dir=tmp_path, graphs=False)
    assert not result.ok
    assert [(r.mode, bool(r.leaks)) for r in result.causality.runs] == [
        ("eval", False),
        ("eval", False),
        ("train", True),
        ("train", True),
    ]
    assert "reads the future in train mode (dropout 0.1), not in eval mode" in result.refusal()


def test_the_train_mode_probe_draws_the_same_dropout_masks_for_both_forwards(tmp_path: Path) -> None:
    """An honest gate in a model with dropout on embeddings, residuals and attention weights:
    no output before a split moves, to the last bit, because both forwards of a row draw the
    same masks (and dropout does reach the outputs: two seeds give different outputs)."""
    module = write_module(tmp_path, "hidden", HIDDEN_LEAKS)
    variant = make_variant("honest", position="rope", gate=f"{module}:HonestGate", scoring="lagged")
    result = check_variant(variant, length=40, component_dir=tmp_path, graphs=False)
    assert result.ok and result.causality.largest_change == 0.0 and result.causality.unseen == ()
    assert {(r.mode, r.seed) for r in result.causality.runs} == {("eval", 0), ("eval", 1), ("train", 0), ("train", 1)}
    model = build_model(variant, vocab_size=13, block_size=8, dropout=0.5, component_dir=str(tmp_path)).train()
    idx = torch.randint(0, 13, (1, 8))
    assert not torch.equal(model(idx), model(idx))


def test_split_points_are_every_position_up_to_the_budget_and_a_schedule_beyond() -> None:
    assert split_points(100) == tuple(range(100))
    long = split_points(1000)
    edge = PROBE_SPLITS // 4
    assert (
        len(long) == PROBE_SPLITS
        and long[:edge] == tuple(range(edge))
        and long[-edge:] == tuple(range(1000 - edge, 1000))
    )
    gaps = [b - a for a, b in zip(long, long[1:], strict=False)]
    assert max(gaps) == -(-(1000 - 2 * edge - 1) // (PROBE_SPLITS // 2 - 1))  # the spread's spacing, rounded up


# -- contracts ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("slot", "cls", "call", "expected", "returned"),
    [
        ("gate", "NoHeadAxis", "key_bias(x, k)", "(B, H, T) = (2, 2, 24)", "shape (2, 24)"),
        ("gate", "HeadsLast", "key_bias(x, k)", "(B, H, T) = (2, 2, 24)", "shape (2, 24, 2)"),
        ("gate", "TrailingOne", "key_bias(x, k)", "(B, H, T) = (2, 2, 24)", "shape (2, 2, 24, 1)"),
        ("gate", "Float64Bias", "key_bias(x, k)", "(B, H, T) = (2, 2, 24)", "shape (2, 2, 24) of dtype torch.float64"),
        (
            "gate",
            "NanBias",
            "key_bias(x, k)",
            "(B, H, T) = (2, 2, 24)",
            "shape (2, 2, 24) with 4 of 96 values not finite",
        ),
        (
            "gate",
            "SignalWithoutHeads",
            "signal(x, k)",
            "(B, H, T) or (B, 1, T) = (2, 2, 24) or (2, 1, 24)",
            "shape (2, 24)",
        ),
        ("scoring", "HalfWidth", "forward(k)", "(B, H, T, hd) = (2, 2, 24, 32)", "shape (2, 2, 24, 16)"),
    ],
)
def test_a_contract_breach_names_the_slot_the_class_and_both_shapes_and_runs_nothing(
    tmp_path: Path, slot: str, cls: str, call: str, expected: str, returned: str
) -> None:
    module = write_module(tmp_path, "breaches", BREACHES)
    variant = make_variant(cls, position="sinusoidal", **{slot: f"{module}:{cls}"})
    result = check_variant(variant, length=24, component_dir=tmp_path, graphs=False, seeds=(0,))
    assert not result.ok and result.causality is None and result.gradients is None  # the model never ran
    (breach,) = result.contracts
    assert (breach.slot, breach.component, breach.call) == (slot, f"{module}.{cls}", call)
    told = (
        f"the {slot} slot's {module}.{cls}.{call} returned {returned}; the slot expects {expected}, float32 and finite"
    )
    assert breach.describe() == told and told in result.refusal()


def test_every_zoo_variant_keeps_its_slots_contracts() -> None:
    from harness.models import VARIANTS
    from harness.models.components_contracts import check_contracts

    for name, variant in VARIANTS.items():
        assert check_contracts(build_model(variant, vocab_size=13, block_size=24), length=24) == (), name


@pytest.mark.parametrize(
    ("slot", "cls"),
    [
        ("gate", "PlainBias"),
        ("gate", "PlainGate"),
        ("position", "PlainPosition"),
        ("scoring", "PlainScoring"),
        ("gate", "GateInitPattern"),
    ],
)
def test_a_component_without_its_own_init_is_built_and_passes(tmp_path: Path, slot: str, cls: str) -> None:
    module = write_module(tmp_path, "plain", NO_INIT)
    variant = make_variant(cls, **{"position": "sinusoidal", slot: f"{module}:{cls}"})
    assert check_variant(variant, length=16, component_dir=tmp_path, graphs=False, seeds=(0,)).ok
    if cls in ("PlainGate", "GateInitPattern"):  # and a config's tau_init reaches it through the base
        model = build_model(variant, vocab_size=5, block_size=8, component_dir=str(tmp_path), tau_init=0.3)
        torch.testing.assert_close(model.gate_parameters()["tau"], torch.full((2, 2), 0.3))
