"""Grid expansion: one TrainConfig per (dataset, size, T, tau0, variant, seed), stable ids,
seed-major order, shared training settings and resources applied to every trial."""

from __future__ import annotations

import itertools

import yaml

from harness.studies.spec.grid import expand_grid, trial_id
from harness.studies.spec.study_spec import grid_size, parse_spec


def _parse(tiny: dict, **overrides):
    return parse_spec(yaml.safe_dump({**tiny, **overrides}))


def test_trial_id_format() -> None:
    assert trial_id(variant="ega-mope", seed=3, size="nano", context_length=128, dataset="tinyshakespeare") == (
        "ega-mope_s3_nano_T128_tinyshakespeare"
    )
    assert trial_id(variant="ega", seed=0, size="paper", context_length=256, dataset="ptb-char", tau_init=0.1) == (
        "ega_s0_paper_T256_ptb-char_tau0.1"
    )


def test_full_product_with_unique_ids(tiny: dict) -> None:
    spec = _parse(
        tiny,
        datasets=["tinyshakespeare", "ptb-char"],
        variants=["baseline", "ega", "mope"],
        seeds=[4, 1],
        sizes=["nano", "paper"],
        context_lengths=[32, 64],
    )
    trials = expand_grid(spec)
    assert len(trials) == grid_size(spec) == 2 * 3 * 2 * 2 * 2
    assert len({t.trial_id for t in trials}) == len(trials)
    combos = {
        (t.config.dataset, t.config.variant, t.config.seed, t.config.size, t.config.context_length) for t in trials
    }
    expected = set(
        itertools.product(
            ["tinyshakespeare", "ptb-char"], ["baseline", "ega", "mope"], [4, 1], ["nano", "paper"], [32, 64]
        )
    )
    assert combos == expected
    for t in trials:
        c = t.config
        assert t.trial_id == trial_id(
            variant=c.variant, seed=c.seed, size=c.size, context_length=c.context_length, dataset=c.dataset
        )


def test_seed_major_order(tiny: dict) -> None:
    """All trials of the first seed come before any of the second: complete paired blocks early."""
    trials = expand_grid(_parse(tiny, seeds=3, variants=["baseline", "ega", "mope", "ega-mope"]))
    seeds = [t.config.seed for t in trials]
    assert seeds == sorted(seeds)
    assert [t.config.variant for t in trials[:4]] == ["baseline", "ega", "mope", "ega-mope"]


def test_training_overrides_and_resources_reach_every_trial(tiny: dict) -> None:
    trials = expand_grid(_parse(tiny, resources={"cpus": 3, "gpus": 0}))
    for t in trials:
        c = t.config
        assert (c.max_steps, c.batch_size, c.eval_every, c.eval_windows, c.dropout) == (10, 8, 5, 8, 0.0)
        assert c.num_threads == 3 and c.accelerator == "cpu"
        assert c.lr == 1e-3  # not written in the spec: TrainConfig's default
    gpu = expand_grid(_parse(tiny, resources={"cpus": 1, "gpus": 0.25}))
    assert {t.config.accelerator for t in gpu} == {"gpu"}


def test_components_and_tags(tiny: dict) -> None:
    spec = _parse(
        tiny, variants=["ega-mope", {"name": "rope-ega", "position": "rope", "gate": "ega", "scoring": "lagged"}]
    )
    by_variant = {t.config.variant: t for t in expand_grid(spec)}
    ega_mope, inline = by_variant["ega-mope"], by_variant["rope-ega"]
    assert (ega_mope.position, ega_mope.gate, ega_mope.scoring) == ("mope", "ega", "dot")
    assert ega_mope.config.position is None  # a registry variant is named, not spelled out
    assert (inline.config.position, inline.config.gate, inline.config.scoring) == ("rope", "ega", "lagged")
    tags = inline.tags()
    assert tags["harness.trial_id"] == inline.trial_id
    assert {
        k: tags[k] for k in ("variant", "position", "gate", "scoring", "dataset", "size", "context_length", "seed")
    } == {
        "variant": "rope-ega",
        "position": "rope",
        "gate": "ega",
        "scoring": "lagged",
        "dataset": "tinyshakespeare",
        "size": "nano",
        "context_length": "32",
        "seed": "0",
    }


def test_tau_inits_factor(tiny: dict) -> None:
    trials = expand_grid(_parse(tiny, variants=["ega"], seeds=2, tau_inits=[0.0, 0.35, 1.0]))
    assert len(trials) == 6
    assert sorted({t.config.tau_init for t in trials}) == [0.0, 0.35, 1.0]
    assert {t.trial_id.rsplit("_", 1)[1] for t in trials} == {"tau0", "tau0.35", "tau1"}
    assert trials[0].tags()["tau_init"] == "0"


def test_tau_inits_cross_gated_variants_only(tiny: dict) -> None:
    """An ungated variant has no tau: it runs once per cell, beside every swept level."""
    spec = _parse(tiny, variants=["baseline", "ega", "mope", "ega-mope"], seeds=1, tau_inits=[-0.5, 0.0])
    trials = expand_grid(spec)
    assert len(trials) == grid_size(spec) == 1 + 2 + 1 + 2
    assert {t.config.variant: t.config.tau_init for t in trials if t.gate == "none"} == {"baseline": None, "mope": None}
    assert sorted(t.config.tau_init for t in trials if t.config.variant == "ega-mope") == [-0.5, 0.0]


def test_tau_init_variants_names_the_swept_variants(tiny: dict) -> None:
    spec = _parse(
        tiny, variants=["baseline", "ega", "ega-mope"], seeds=2, tau_inits=[-0.5, 0.7], tau_init_variants=["ega"]
    )
    trials = expand_grid(spec)
    assert len(trials) == grid_size(spec) == 2 * (1 + 2 + 1)
    assert {t.trial_id for t in trials if t.config.seed == 0} == {
        "baseline_s0_nano_T32_tinyshakespeare",
        "ega_s0_nano_T32_tinyshakespeare_tau-0.5",
        "ega_s0_nano_T32_tinyshakespeare_tau0.7",
        "ega-mope_s0_nano_T32_tinyshakespeare",
    }


def test_tokens_per_batch_gives_equal_tokens_per_step(tiny: dict) -> None:
    train = {k: v for k, v in tiny["train"].items() if k != "batch_size"}
    trials = expand_grid(_parse(tiny, train=train, context_lengths=[32, 64, 128], tokens_per_batch=512))
    assert {t.config.context_length: t.config.batch_size for t in trials} == {32: 16, 64: 8, 128: 4}
    assert {t.config.batch_size * t.config.context_length for t in trials} == {512}


def test_custom_shapes_reach_the_trial_config_and_id(tiny: dict) -> None:
    w128 = {"name": "w128", "n_layer": 4, "n_head": 4, "d_model": 128}
    trials = expand_grid(_parse(tiny, sizes=["nano", w128], variants=["baseline"], seeds=[1]))
    nano, custom = trials
    assert nano.trial_id == "baseline_s1_nano_T32_tinyshakespeare"
    assert (nano.config.size, nano.config.n_layer, nano.config.model_size().shape) == ("nano", None, "L2H2d64")
    assert custom.trial_id == "baseline_s1_w128-L4H4d128_T32_tinyshakespeare"
    c = custom.config
    assert (c.size, c.n_layer, c.n_head, c.d_model) == ("w128", 4, 4, 128)
    assert c.model_dump()["d_model"] == 128  # the MLflow params of the trial carry the shape
    assert custom.tags()["size"] == "w128"
