"""The optimisation recipe, the data stream and the metric helpers, against hand computation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

from harness.training.config import TrainConfig
from harness.training.gate_readings import auc_from_histograms
from harness.training.module import build_char_model, learning_rate, optimizer_groups, step_seed


def test_learning_rate_is_nanogpt_warmup_then_cosine() -> None:
    c = TrainConfig(lr=1e-3, min_lr=1e-4, warmup_steps=100, max_steps=5000)
    # Hand values: warmup lr*(k+1)/(W+1); cosine from lr at W to min_lr at max_steps.
    assert learning_rate(0, c) == pytest.approx(1e-3 / 101)
    assert learning_rate(99, c) == pytest.approx(1e-3 * 100 / 101)
    assert learning_rate(100, c) == pytest.approx(1e-3)
    assert learning_rate(2550, c) == pytest.approx((1e-3 + 1e-4) / 2)  # half way: cos(pi/2) = 0
    quarter = 100 + (5000 - 100) // 4
    assert learning_rate(quarter, c) == pytest.approx(1e-4 + 0.9e-3 * (1 + math.cos(math.pi / 4)) / 2)
    assert learning_rate(5000, c) == pytest.approx(1e-4)
    assert learning_rate(7000, c) == pytest.approx(1e-4)
    lrs = [learning_rate(k, c) for k in range(100, 5001)]
    assert all(a >= b for a, b in zip(lrs, lrs[1:], strict=False))  # monotone decay after warmup


def test_weight_decay_only_on_matrices() -> None:
    from harness.models import build_model, make_variant

    variant = make_variant("lagged-ega-mope", position="mope", gate="ega", scoring="lagged")
    model = build_model(variant, size="nano", vocab_size=65, block_size=32)
    decay, no_decay = optimizer_groups(model, 0.1)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    names = {id(p): n for n, p in model.named_parameters()}
    decayed = {names[id(p)] for p in decay["params"]}
    kept = {names[id(p)] for p in no_decay["params"]}
    assert not decayed & kept
    assert decayed | kept == set(names.values())  # every parameter once (the tied embedding too)
    assert "wte.weight" in decayed
    for name in kept:
        assert dict(model.named_parameters())[name].dim() < 2 or "scoring" in name, name
    for name in decayed:
        assert dict(model.named_parameters())[name].dim() >= 2, name
        assert not any(k in name.rsplit(".", 1)[-1] for k in ("tau", "alpha", "omega", "sigma", "bias")), name
    assert any("scoring" in n for n in kept)  # lag weights: 2-D but exempt (the model says so)
    assert any(n.endswith("tau") for n in kept) and any(n.endswith("omega") for n in kept)


def test_step_seed_depends_on_seed_and_step_only() -> None:
    seeds = {step_seed(s, k) for s in range(5) for k in range(200)}
    assert len(seeds) == 1000
    assert step_seed(3, 17) == step_seed(3, 17)
    assert all(0 <= s < 2**63 for s in seeds)


def test_auc_from_histograms_matches_mann_whitney() -> None:
    rng = np.random.default_rng(0)
    bins = 64
    pos = rng.integers(0, bins, 300)
    neg = rng.integers(0, bins, 500) // 2  # negatives lower on average
    hist_pos = torch.bincount(torch.from_numpy(pos), minlength=bins)
    hist_neg = torch.bincount(torch.from_numpy(neg), minlength=bins)
    u = stats.mannwhitneyu(pos, neg).statistic  # counts ties as one half
    assert float(auc_from_histograms(hist_pos, hist_neg)) == pytest.approx(u / (300 * 500))


def test_train_stream_resumes_at_any_step(shared_data_dir) -> None:
    from harness.datasets import load, sample_train_batch
    from harness.training.data import TrainBatchStream

    tokens = load("tinyshakespeare").train
    full = iter(TrainBatchStream(tokens, block_size=16, batch_size=3, seed=5))
    batches = [next(full) for _ in range(6)]
    resumed = iter(TrainBatchStream(tokens, block_size=16, batch_size=3, seed=5, start_step=4))
    for k in (4, 5):
        x, y = next(resumed)
        torch.testing.assert_close(x, batches[k][0])
        torch.testing.assert_close(y, batches[k][1])
        ex, ey = sample_train_batch(tokens, block_size=16, batch_size=3, seed=5, step=k)
        np.testing.assert_array_equal(x.numpy(), ex)
        np.testing.assert_array_equal(y.numpy(), ey)
    assert not torch.equal(batches[0][0], next(iter(TrainBatchStream(tokens, block_size=16, batch_size=3, seed=6)))[0])


def test_eval_windows_are_fixed_and_content_mask_aligned(tmp_path) -> None:
    from harness.datasets import load
    from harness.training.data import CharDataModule

    corpus = load("synthetic-salience:n_chars=30000")
    dm_a = CharDataModule(corpus, block_size=32, batch_size=4, seed=1, eval_windows=7, eval_batch_size=3)
    dm_b = CharDataModule(corpus, block_size=32, batch_size=8, seed=2, eval_windows=7, eval_batch_size=5)
    assert set(dm_a.windows) == {"val", "train", "test"}
    for split, w in dm_a.windows.items():
        torch.testing.assert_close(w.x, dm_b.windows[split].x)  # same windows whatever the seed
        assert len(w) == 7
        tokens = getattr(corpus, split)
        for i, s in enumerate(w.starts):
            np.testing.assert_array_equal(w.x[i].numpy(), tokens[s : s + 32])
            np.testing.assert_array_equal(w.y[i].numpy(), tokens[s + 1 : s + 33])
    val = dm_a.windows["val"]
    assert val.content is not None and dm_a.has_content_mask
    for i, s in enumerate(val.starts):
        np.testing.assert_array_equal(val.content[i].numpy(), corpus.content_mask["val"][s : s + 32])
    # The final set: the whole validation split, and as many windows of the other splits.
    whole_val = (len(corpus.val) - 1) // 32
    assert {split: len(w) for split, w in dm_a.final_windows.items()} == dict.fromkeys(dm_a.windows, whole_val)
    # Every window of each set appears in exactly one evaluation batch, tagged with its split and set.
    seen = {}
    for batch in dm_a.val_dataloader():
        for w in batch["window"].tolist():
            key = (batch["set"], batch["split"], w)
            seen[key] = seen.get(key, 0) + 1
    expected = {("periodic", s, i): 1 for s in ("val", "train", "test") for i in range(7)}
    expected |= {("final", s, i): 1 for s in ("val", "train", "test") for i in range(whole_val)}
    assert seen == expected


def test_attention_dropout_defaults_to_dropout_and_can_be_set_apart() -> None:
    def attention_p(**fields) -> set[float]:
        model = build_char_model(TrainConfig(variant="ega-mope", context_length=32, **fields), vocab_size=11)
        return {block.attn.attention_dropout for block in model.blocks}

    assert attention_p(dropout=0.2) == {0.2}  # the papers' recipe: the same dropout everywhere
    assert attention_p(dropout=0.2, attention_dropout=0.0) == {0.0}  # CPU-friendly: SDPA's fused kernel
    with pytest.raises(ValueError, match="attention_dropout"):
        TrainConfig(variant="ega", attention_dropout=1.0)
