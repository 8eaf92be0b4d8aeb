"""Seed-batched training is the same experiment as separate runs (issue 40, item 4)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from harness.errors import InputError
from harness.training import seed_batch
from harness.training.device_step import clip_per_seed
from harness.training.run import train
from harness.training.seed_batch import train_seed_batch

SEEDS = (0, 1)
TOL = 1e-5


def _with_gradient(name: str, p: torch.Tensor) -> torch.Tensor:
    """The entries of parameter ``name`` that the loss depends on. Two kinds cancel exactly: the
    keys' part of the qkv bias (q_i.b_k is the same for every key of a query: the softmax drops
    it) and EGA's energy bias b (the z-normalisation removes it). Their gradients are rounding
    noise, which AdamW divides by its own square root into steps of about the learning rate,
    in each path differently; the function (every loss above) does not see them."""
    if name.endswith("attn.gate.bias"):
        return p[:0]
    if name.endswith("attn.qkv.bias"):
        d = p.shape[0] // 3  # (3 d,): q, k, v
        return torch.cat([p[:d], p[2 * d :]])
    return p


def _trained_parameters(path: str) -> dict[str, torch.Tensor]:
    state = torch.load(Path(path), map_location="cpu", weights_only=True)["state_dict"]
    return {k.removeprefix("model."): v for k, v in state.items()}


@pytest.mark.parametrize(
    "variant",
    ["baseline", pytest.param("ega", marks=pytest.mark.slow), pytest.param("ega-mope", marks=pytest.mark.slow)],
)
def test_seed_batched_run_equals_separate_runs(variant, tiny_config, tmp_path, monkeypatch) -> None:
    """fp32, dropout 0, 50 steps: each seed's losses (final, per window, every evaluation) and
    parameters within 1e-5 of its own run's (ega and ega-mope: slow, about 40 s each on 2 CPUs)."""
    common = dict(variant=variant, max_steps=50, eval_every=25, dropout=0.0, attention_dropout=0.0, compile=False)
    configs = [tiny_config(**common, seed=s) for s in SEEDS]
    built = []

    class Recorded(seed_batch.SeedBatch):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            built.append(self)

    monkeypatch.setattr(seed_batch, "SeedBatch", Recorded)
    batched = train_seed_batch(configs, progress_bar=False)
    separate = [
        train(
            c.model_copy(update={"checkpoint_dir": str(tmp_path / f"s{c.seed}")}),
            mlflow_logging=False,
            progress_bar=False,
        )
        for c in configs
    ]
    for s, (b, r) in enumerate(zip(batched, separate, strict=True)):
        assert (b.status, b.steps, b.config) == ("finished", 50, configs[s])
        for field in ("final_val_loss", "final_train_loss", "best_val_loss", "final_test_loss"):
            assert getattr(b, field) == pytest.approx(getattr(r, field), abs=TOL), field
        assert b.window_losses.keys() == r.window_losses.keys()
        for split, losses in r.window_losses.items():
            np.testing.assert_allclose(b.window_losses[split], losses, atol=TOL, rtol=0)
        assert [e["step"] for e in b.evaluations] == [e["step"] for e in r.evaluations] == [25, 50]
        for mine, theirs in zip(b.evaluations, r.evaluations, strict=True):
            assert mine.keys() == theirs.keys()
            assert mine["val/loss"] == pytest.approx(theirs["val/loss"], abs=TOL)
            assert mine["train/batch_loss"] == pytest.approx(theirs["train/batch_loss"], abs=TOL)
        own = _trained_parameters(r.checkpoint_path)
        batched_params = dict(built[0].models[s].named_parameters())
        for name, p in batched_params.items():
            mine, theirs = _with_gradient(name, p.detach()), _with_gradient(name, own[name])
            torch.testing.assert_close(mine, theirs, atol=TOL, rtol=0, msg=name)
    assert separate[0].final_val_loss != separate[1].final_val_loss  # two experiments, not one twice


def test_clipping_is_per_seed() -> None:
    """Each seed's gradient scaled by its own norm: a large seed clipped, a small one untouched."""
    big, small = torch.full((3, 4), 10.0), torch.full((3, 4), 0.01)
    grads = [torch.stack([big, small]), torch.stack([big[0], small[0]])]  # (S, 3, 4), (S, 4)
    expected = [g.clone() for g in grads]
    norms = clip_per_seed(grads, 1.0)
    whole = [torch.cat([g[s].flatten() for g in expected]) for s in range(2)]
    torch.testing.assert_close(norms, torch.stack([w.norm() for w in whole]))
    assert torch.cat([g[0].flatten() for g in grads]).norm() == pytest.approx(1.0, rel=1e-5)
    for g, e in zip(grads, expected, strict=True):
        torch.testing.assert_close(g[1], e[1])


def test_every_zoo_variant_but_the_unstackable_ones_runs_under_vmap() -> None:
    """Two seeds of a one-layer model under vmap(functional_call): forward and backward run, and
    seed 1's loss is its own model's; exactly the variants of UNSTACKABLE fail."""
    from torch.func import functional_call, stack_module_state, vmap

    from harness.models import VARIANTS, build_model

    failing = set()
    x = torch.randint(17, (2, 2, 40))  # (S, B, T)
    for name in VARIANTS:
        models = []
        for s in SEEDS:
            torch.manual_seed(s)
            models.append(build_model(name, size="nano", vocab_size=17, block_size=40, dropout=0.0, n_layer=1))
        params, _ = stack_module_state(models)
        buffers = dict(models[0].named_buffers())

        def loss(p, xx, model=models[0], buffers=buffers):
            return functional_call(model, (p, buffers), (xx,)).float().square().mean()

        try:
            losses = vmap(loss, randomness="different")(params, x)
            losses.sum().backward()
        except RuntimeError:
            failing.add(name)
            continue
        assert losses[1].item() == pytest.approx(models[1](x[1]).float().square().mean().item(), abs=1e-5), name
    assert failing == set(seed_batch.UNSTACKABLE)


def test_configs_must_differ_only_in_seed(tiny_config) -> None:
    with pytest.raises(InputError, match="differ only in seed; these differ: lr"):
        train_seed_batch([tiny_config(seed=0), tiny_config(seed=1, lr=2e-3)])
    with pytest.raises(InputError, match="repeat a seed"):
        train_seed_batch([tiny_config(seed=0), tiny_config(seed=0)])
