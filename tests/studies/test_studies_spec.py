"""Study specs: every kind of mistake is one InputError naming the file, the field and
what was expected; the ready specs in studies/ are valid."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from harness.errors import InputError
from harness.studies.spec.study_spec import StudySpec, check_registries, grid_size, load_spec, parse_spec

REPO = Path(__file__).resolve().parents[2]
READY = sorted((REPO / "studies").glob("*.yaml"))


@pytest.fixture
def make_spec(tiny: dict):
    """``make_spec(**overrides)``: the tiny spec's YAML text with top-level overrides."""

    def make(**overrides) -> str:
        return yaml.safe_dump({**tiny, **overrides}, sort_keys=False)

    return make


_L2 = {"n_layer": 2, "n_head": 2, "d_model": 32}


def _error(text: str, source: str = "my.yaml") -> str:
    with pytest.raises(InputError) as info:
        spec = parse_spec(text, source=source)
        check_registries(spec, source=source)
    assert source in str(info.value), "the message names the file"
    return str(info.value)


def test_tiny_spec_parses_with_defaults(make_spec, tiny: dict) -> None:
    spec = parse_spec(make_spec())
    assert spec.seeds == [0]
    assert spec.train_overrides() == tiny["train"]  # only what the YAML wrote
    assert spec.resources.cpus == 1 and spec.resources.gpus == 0
    assert spec.retries == 1 and spec.max_concurrent_trials is None
    assert spec.experiment_name() == "tiny"
    assert spec.factorial() is None  # mope and ega-mope are not run
    check_registries(spec)


def test_seed_count_and_list(make_spec) -> None:
    assert parse_spec(make_spec(seeds=3)).seeds == [0, 1, 2]
    assert parse_spec(make_spec(seeds=[7, 3])).seeds == [7, 3]


@pytest.mark.parametrize(
    ("overrides", "field", "expected"),
    [
        ({"seeds": 0}, "seeds", "0 seeds would run nothing"),
        ({"seeds": "ten"}, "seeds", "a count of seeds"),
        ({"seeds": []}, "seeds", "empty list"),
        ({"seeds": [1, 1]}, "seeds", "repeat"),
        ({"seeds": [-1]}, "seeds", "non-negative"),
        ({"contxt_lengths": [32]}, "contxt_lengths", "did you mean 'context_lengths'"),
        ({"context_lengths": [0]}, "context_lengths[0]", "greater than 0"),
        ({"datasets": []}, "datasets", "at least 1"),
        ({"sizes": ["nano", "nano"]}, "sizes", "duplicate"),
        (
            {"sizes": [{"name": "w", "n_layer": 4, "n_head": 3, "d_model": 128}]},
            "sizes[0]",
            "not divisible by n_head=3",
        ),
        ({"sizes": [{"name": "w", "n_layer": 0, "n_head": 4, "d_model": 128}]}, "sizes[0].n_layer", "greater than 0"),
        ({"sizes": [{"name": "w", "n_layers": 4, "n_head": 4, "d_model": 128}]}, "sizes[0].n_layers", "'n_layer'"),
        ({"sizes": [{"name": "w", "n_head": 4, "d_model": 128}]}, "sizes[0].n_layer", "required field is missing"),
        ({"sizes": [{"name": "has space", "n_layer": 1, "n_head": 1, "d_model": 8}]}, "sizes[0].name", "pattern"),
        ({"sizes": [[4, 4, 128]]}, "sizes[0]", "a size preset (e.g. nano) or a custom shape"),
        (
            {"sizes": [{"name": "a", "n_layer": 1, "n_head": 1, "d_model": 8}, {"name": "a", **_L2}]},
            "sizes",
            "duplicate size name(s) a",
        ),
        (
            {"sizes": [{"name": "a", **_L2}, {"name": "b", **_L2}]},
            "sizes",
            "duplicate custom shape(s) L2H2d32",
        ),
        ({"train": {"d_model": 128}}, "train.d_model", "top-level 'sizes (a custom shape"),
        ({"train": {"max_stepz": 3}}, "train.max_stepz", "did you mean 'max_steps'"),
        ({"train": {"max_steps": -3}}, "train.max_steps", "greater than 0"),
        ({"train": {"seed": 3}}, "train.seed", "top-level 'seeds'"),
        ({"train": {"tracking_uri": "x"}}, "train.tracking_uri", "tracking.uri"),
        ({"train": {"lr": 1e-5}}, "train", "min_lr"),
        ({"resources": {"gpus": 1.5}}, "resources.gpus", "whole GPUs"),
        ({"resources": {"cpus": 0}}, "resources.cpus", "greater than 0"),
        ({"resources": {"cpu": 2}}, "resources.cpu", "did you mean 'cpus'"),
        ({"variants": ["baseline", "baseline"]}, "variants", "more than once"),
        ({"variants": [3]}, "variants[0]", "variant name"),
        ({"variants": [{"name": "x", "position": "rope", "gat": "ega"}]}, "variants[0].gat", "did you mean 'gate'"),
        ({"name": "has space"}, "name", "pattern"),
        ({"tau_inits": [0.1], "train": {"tau_init": 0.2}}, "tau_init", "both set"),
        ({"tau_init_variants": ["ega"]}, "tau_init_variants", "set tau_inits too"),
        ({"tau_inits": [0.1], "tau_init_variants": ["egaa"]}, "tau_init_variants", "egaa not among"),
        (
            {"analysis": {"factorial": {"base": "baseline", "a": "ega", "b": "mope", "ab": "ega-mope"}}},
            "analysis.factorial.b",
            "does not run",
        ),
        ({"analysis": {"tau": {"margin": 0}}}, "analysis.tau.margin", "greater than 0"),
        ({"retries": -1}, "retries", "greater than or equal to 0"),
        ({"tokens_per_batch": 512}, "tokens_per_batch", "both set"),
        (
            {"tokens_per_batch": 100, "train": {"max_steps": 3}},
            "tokens_per_batch",
            "not a multiple of context length(s) 32",
        ),
    ],
)
def test_structural_errors_name_the_field(make_spec, overrides: dict, field: str, expected: str) -> None:
    message = _error(make_spec(**overrides))
    assert field in message
    assert expected in message


@pytest.mark.parametrize(
    ("analysis", "expected"),
    [
        (
            {"primary": {"treatment": "ega-mop", "control": "baseline"}},
            "analysis.primary.treatment: unknown variant 'ega-mop' (did you mean 'ega-mope'?); the study runs "
            "baseline, ega, mope, ega-mope",
        ),
        (
            {"primary": {"treatment": "ega", "control": "basline"}},
            "analysis.primary.control: unknown variant 'basline' (did you mean 'baseline'?)",
        ),
        (
            {"factorial": {"base": "baseline", "a": "ega", "b": "mop", "ab": "ega-mope"}},
            "analysis.factorial.b: unknown variant 'mop' (did you mean 'mope'?)",
        ),
        (  # a zoo variant the study leaves out is no typo
            {"primary": {"treatment": "rope", "control": "baseline"}},
            "analysis.primary.treatment is 'rope', which the study does not run (its variants: baseline, ega, mope, "
            "ega-mope)",
        ),
    ],
)
def test_a_typo_in_a_variant_the_analysis_names_is_an_unknown_variant(make_spec, analysis: dict, expected: str) -> None:
    assert expected in _error(make_spec(variants=["baseline", "ega", "mope", "ega-mope"], analysis=analysis))


def test_missing_field_is_named(tiny: dict) -> None:
    data = dict(tiny)
    del data["sizes"]
    message = _error(yaml.safe_dump(data))
    assert "sizes: required field is missing" in message


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"variants": ["baseline", "egaa"]}, "variants[1]: unknown variant 'egaa' (did you mean 'ega'?)"),
        (
            {"datasets": ["tinyshakespear"]},
            "datasets[0]: unknown dataset 'tinyshakespear' (did you mean 'tinyshakespeare'?)",
        ),
        ({"sizes": ["huge"]}, "sizes[0]: unknown size 'huge'"),
        (
            {"sizes": [{"name": "nano", "n_layer": 4, "n_head": 4, "d_model": 128}]},
            "sizes[0].name: 'nano' is the preset",
        ),
        (
            {"sizes": [{"name": "w33", "n_layer": 1, "n_head": 3, "d_model": 33}], "variants": ["nope", "baseline"]},
            "sizes[0] (w33, L1H3d33) with variant 'baseline': sinusoidal positional encoding needs an even width",
        ),
        (
            {"sizes": [{"name": "w66", "n_layer": 1, "n_head": 2, "d_model": 66}], "variants": ["rope"]},
            "sizes[0] (w66, L1H2d66) with variant 'rope': rotary positional encoding needs an even head dimension",
        ),
        (
            {"sizes": [{"name": "w66", "n_layer": 1, "n_head": 2, "d_model": 66}], "variants": ["phase-mope"]},
            "with variant 'phase-mope': phase-coherence gate needs an even head dimension",
        ),
        (
            {"sizes": [{"name": "w", **_L2}], "context_lengths": [9000]},
            "exceed the maximum context length of size 'w' (8192)",
        ),
        ({"context_lengths": [32, 100000]}, "exceed the maximum context length of size 'nano'"),
        ({"variants": [{"name": "rope-x", "position": "ropey", "gate": "ega"}]}, "variants[0] (rope-x)"),
        ({"variants": [{"name": "ega", "position": "rope", "gate": "ega"}]}, "is a registry variant already"),
    ],
)
def test_registry_errors(make_spec, overrides: dict, expected: str) -> None:
    assert expected in _error(make_spec(**overrides))


@pytest.mark.parametrize(
    "variants",
    [["baseline", "ega-leaky"], ["baseline", {"name": "rope-leaky", "position": "rope", "gate": "ega-leaky"}]],
)
def test_diagnostics_run_only_with_allow_diagnostics(make_spec, variants: list) -> None:
    message = _error(make_spec(variants=variants))
    assert "variants[1]:" in message and "is a diagnostic, not a model (leaks future tokens)" in message
    assert "allow_diagnostics: true" in message
    spec = parse_spec(make_spec(variants=variants, allow_diagnostics=True))
    check_registries(spec)
    assert spec.allow_diagnostics and not parse_spec(make_spec()).allow_diagnostics


def test_allow_diagnostics_must_be_a_boolean(make_spec) -> None:
    message = _error(make_spec(allow_diagnostics="sure"))
    assert "allow_diagnostics" in message and "bool" in message


def test_custom_sizes_beside_presets(make_spec) -> None:
    w128 = {"name": "w128", "n_layer": 4, "n_head": 4, "d_model": 128}
    spec = parse_spec(make_spec(sizes=["nano", w128], variants=["nope", "baseline", "rope", "ega-mope"]))
    check_registries(spec)  # every variant builds at L4H4d128 (even width and head dimension)
    assert spec.size_names == ["nano", "w128"]
    assert spec.sizes[1].model_size().tag == "w128-L4H4d128"
    assert grid_size(spec) == 2 * 4
    # A spec of presets only keeps its canonical form (and so its hash: running studies resume).
    assert "n_layer" not in parse_spec(make_spec(sizes=["nano"])).canonical_yaml()
    # likewise a spec that runs no diagnostic (allow_diagnostics false: the default)
    assert "allow_diagnostics" not in parse_spec(make_spec(sizes=["nano"])).canonical_yaml()
    assert "allow_diagnostics: true" in parse_spec(make_spec(allow_diagnostics=True)).canonical_yaml()


def test_unknown_variant_lists_known_names(make_spec) -> None:
    message = _error(make_spec(variants=["nonsense"]))
    for known in ("baseline", "ega-mope", "phase-mope"):
        assert known in message


def test_yaml_syntax_error_gives_line() -> None:
    message = _error("name: tiny\nvariants: [baseline, ega\nseeds: 2\n")
    assert "not valid YAML" in message and "line" in message


def test_not_a_mapping() -> None:
    assert "must be a YAML mapping" in _error("- baseline\n- ega\n")


def test_yaml_is_loaded_safely() -> None:
    # A python tag would construct objects with yaml.load; safe_load refuses it.
    assert "not valid YAML" in _error("name: !!python/object/apply:os.system ['true']\n")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="does not exist"):
        load_spec(tmp_path / "nope.yaml")


def test_inline_variant_and_tau_sweep(make_spec) -> None:
    spec = parse_spec(
        make_spec(variants=["ega", {"name": "rope-ega", "position": "rope", "gate": "ega"}], tau_inits=[0.1, 0.5])
    )
    check_registries(spec)
    assert spec.variant_names == ["ega", "rope-ega"]
    assert grid_size(spec) == 4


def test_hash_ignores_formatting_but_not_content(make_spec, tiny: dict) -> None:
    a = parse_spec(make_spec())
    b = parse_spec(yaml.safe_dump(tiny, default_flow_style=True))
    c = parse_spec(make_spec(seeds=2))
    assert a.sha256() == b.sha256() != c.sha256()


def test_default_factorial_when_all_four_run(make_spec) -> None:
    spec = parse_spec(make_spec(variants=["baseline", "ega", "mope", "ega-mope"]))
    f = spec.factorial()
    assert (f.base, f.a, f.b, f.ab) == ("baseline", "ega", "mope", "ega-mope")


@pytest.mark.parametrize("path", READY, ids=[p.stem for p in READY])
def test_ready_specs_are_valid(path: Path) -> None:
    spec = load_spec(path)
    assert isinstance(spec, StudySpec)
    assert spec.name == path.stem
    assert path.read_text().startswith("#"), "each ready spec says what it tests and costs"


def test_ready_specs_cover_the_issue() -> None:
    assert {p.stem for p in READY} >= {"smoke", "superadditivity", "scaling", "context", "tau", "ablations", "corpora"}
    smoke = load_spec(REPO / "studies" / "smoke.yaml")
    assert grid_size(smoke) == 8 and smoke.sizes == ["nano"] and smoke.datasets == ["tinyshakespeare"]
    ablations = load_spec(REPO / "studies" / "ablations.yaml")
    expected = {
        "ega-2",
        "ega-4",
        "ega-db2",
        "ega-db4",
        "ega-morlet-fixed",
        "ega-morlet-param",
        "ega-mope-lagged",
        "ega-mope-scale-init",
        "flux-mope",
        "phase-mope",
        "baseline",
        "ega",
        "ega-mope",
    }
    assert expected <= set(ablations.variant_names)
    context = load_spec(REPO / "studies" / "context.yaml")
    assert min(context.context_lengths) == 256 and max(context.context_lengths) > 4096
    assert set(load_spec(REPO / "studies" / "corpora.yaml").datasets) == {"tinyshakespeare", "ptb-char", "enwik8"}
    assert load_spec(REPO / "studies" / "tau.yaml").tau_inits
