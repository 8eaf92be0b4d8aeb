"""The shared initialisation recipe (nanoGPT's), one property per test, for every variant of the zoo.

The recipe was chosen by measurement against nanoGPT (docs/benchmarks.md, "Baseline parity with
nanoGPT"; ``benchmarks/parity_nanogpt.py``); these tests pin what it is, so that a change to
it is a deliberate one."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from harness_support import per_code_path
from torch import nn

from harness.models import VARIANTS, build_model, make_variant
from harness.models.transformer import FIXED_POSITION_SCALE, INIT_STD

VOCAB = 65
RECIPE_SHAPE = {"n_layer": 4, "n_head": 4, "d_model": 128}  # nanoGPT's CPU recipe


def _model(variant, seed: int = 0, block_size: int = 64, **shape):
    torch.manual_seed(seed)
    return build_model(variant, size="nano", vocab_size=VOCAB, block_size=block_size, **(shape or RECIPE_SHAPE))


@pytest.mark.parametrize("variant", per_code_path(VARIANTS))
def test_initial_loss_is_close_to_log_vocab(variant: str) -> None:
    """Tied head, N(0, 0.02) embedding: the logits start near zero, every variant predicts about
    uniformly (the Vaswani scaling started at about 7 nats, a large logit for the input token)."""
    model = _model(variant).eval()
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, VOCAB, (8, 64), generator=g)
    target = torch.randint(0, VOCAB, (8, 64), generator=g)
    with torch.no_grad():
        loss = F.cross_entropy(model(idx).reshape(-1, VOCAB), target.reshape(-1))
    assert abs(float(loss) - math.log(VOCAB)) < 0.1, f"{variant}: {float(loss):.3f} vs log V {math.log(VOCAB):.3f}"


@pytest.mark.parametrize("variant", ["baseline", "learned-pe", "ega-mope", "rope"])
def test_embedding_tables_are_unscaled_n_0_002(variant: str) -> None:
    model = _model(variant)
    assert model.wte.weight.std().item() == pytest.approx(INIT_STD, rel=0.05)
    idx = torch.randint(0, VOCAB, (2, 64))
    expected = model.wte(idx)  # tokens enter as E[idx], no sqrt(d)
    if variant == "learned-pe":
        table = model.position.table.weight
        assert table.std().item() == pytest.approx(INIT_STD, rel=0.05)
        expected = expected + table[:64]  # the learned table unscaled too (nanoGPT's wpe)
    elif variant in ("baseline", "ega-mope"):
        expected = expected + FIXED_POSITION_SCALE * model.position.embedding(64, idx.device)
    torch.testing.assert_close(model.embed(idx), expected)


def test_unit_amplitude_encodings_enter_at_the_token_scale() -> None:
    """Sinusoidal (and MOPE) cos/sin pairs have RMS 1/sqrt 2 per dimension; scaled, it equals the tokens' 0.02."""
    model = _model("baseline", block_size=1024)
    pe = model.position_scale * model.position.embedding(1024, torch.device("cpu"))  # (T, d)
    assert pe.pow(2).mean().sqrt().item() == pytest.approx(INIT_STD, rel=0.02)
    assert _model("ega-mope").position_scale == model.position_scale == FIXED_POSITION_SCALE
    assert _model("learned-pe").position_scale == _model("rope").position_scale == 1.0


def test_mope_with_infinite_sigma_is_the_baseline_stream() -> None:
    """MOPE's limit (sigma -> infinity, sinusoidal frequencies) is the baseline also after scaling."""
    baseline, mope = _model("baseline", seed=3), _model("mope", seed=3)
    mope.load_state_dict(baseline.state_dict(), strict=False)  # the shared weights; MOPE's own next
    with torch.no_grad():
        pairs = mope.position.omega.numel()
        mope.position.omega.copy_(10000.0 ** (-torch.arange(pairs, dtype=torch.float32) * 2.0 / (2 * pairs)))
        mope.position.log_sigma.fill_(1e6)
    idx = torch.randint(0, VOCAB, (2, 64))
    torch.testing.assert_close(mope.embed(idx), baseline.embed(idx))


@pytest.mark.parametrize("variant", ["baseline", "ega-mope-lagged", "gated-output"])
def test_linear_layers_biases_and_norms(variant: str) -> None:
    model = _model(variant, **{"n_layer": 6, "n_head": 4, "d_model": 256})
    residual = {id(m) for b in model.blocks for m in (b.attn.proj, b.mlp.proj)}
    for module in model.modules():
        if isinstance(module, nn.Linear):
            std = INIT_STD / math.sqrt(2 * 6) if id(module) in residual else INIT_STD
            assert module.weight.std().item() == pytest.approx(std, rel=0.1)
            assert module.bias is None or not module.bias.any()
        if isinstance(module, nn.LayerNorm):
            assert bool((module.weight == 1).all()) and not module.bias.any()


def test_gate_parameters_keep_their_own_initialisation() -> None:
    variant = make_variant("rope-ega", position="rope", gate="ega")
    model = _model(variant)
    for gate in model.key_gates():
        assert bool((gate.tau == 0).all()) and bool((gate.alpha == 1).all())
        assert gate.weight.std().item() == pytest.approx(INIT_STD, rel=0.2)
