"""A new positional encoding is one class in one file: registered by its decorator, it is a name
a variant may give (``make_variant``, a study spec, ``harness train --position``), and the model
builds it from its shape and runs it through the attention, which asks the encoding what it does
(here :meth:`lag_slope`), never its name. The encoding below is registered by this test only
(docs/contracts.md, "Adding a positional encoding", shows the same diff for a shipped one)."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
import torch

from harness.models import build_model, make_variant
from harness.models.attention import CausalSelfAttention
from harness.models.positional import PositionalEncoding
from harness.models.scoring import DotScoring
from harness.models.slots import POSITIONS

#: The one slope every head of the test's encoding shares.
FLAT_SLOPE = 0.125


class FlatSlopePositionalEncoding(PositionalEncoding):
    """ALiBi with one slope for every head: score(h, i, j) += -m (i - j), m = FLAT_SLOPE.
    No parameters; O(1) per layer (the attention folds the slope into its fused kernel)."""

    @classmethod
    def from_shape(cls, *, d_model: int, n_head: int, block_size: int, mope_init: str = "random") -> PositionalEncoding:
        return cls(n_head=n_head)

    def lag_slope(self) -> torch.Tensor:
        return torch.full((self.n_head,), FLAT_SLOPE)

    def fixed_lag_slope(self) -> tuple[float, ...]:
        return (FLAT_SLOPE,) * self.n_head


@pytest.fixture
def flat_slope() -> Iterator[str]:
    """The encoding registered as ``flat-slope`` while a test runs (as its decorator would, for good)."""
    POSITIONS.register("flat-slope")(FlatSlopePositionalEncoding)
    try:
        yield "flat-slope"
    finally:
        POSITIONS.remove("flat-slope")


def test_a_registered_position_is_a_name_a_variant_gives_and_a_model_builds(flat_slope: str) -> None:
    variant = make_variant("flat-ega", position=flat_slope, gate="ega")
    assert variant.user_components == {} and flat_slope in POSITIONS.names()
    model = build_model(variant, vocab_size=7, block_size=16)
    assert type(model.position) is FlatSlopePositionalEncoding and model.position.n_head == 2
    logits = model(torch.randint(0, 7, (2, 16), generator=torch.Generator().manual_seed(0)))
    assert logits.shape == (2, 16, 7) and bool(torch.isfinite(logits).all())


def test_the_attention_applies_the_new_position_by_what_it_does(flat_slope: str) -> None:
    """Against the oracle: softmax(q.k / sqrt(hd) - m (i - j), causal) v, written out."""
    torch.manual_seed(0)
    B, T, d, H = 2, 24, 32, 4
    hd = d // H
    position = POSITIONS.get(flat_slope).from_shape(d_model=d, n_head=H, block_size=T)
    attn = CausalSelfAttention(d, H, gate=None, scoring=DotScoring())
    x = torch.randn(B, T, d)
    y, log_g = attn(x, position)

    q, k, v = (t.view(B, T, H, hd).transpose(1, 2) for t in attn.qkv(x).split(d, dim=2))  # (B, H, T, hd)
    i = torch.arange(T)
    lag = (i[:, None] - i[None, :]).float()  # (T, T)
    scores = q @ k.transpose(-1, -2) / math.sqrt(hd) - FLAT_SLOPE * lag
    scores = scores.masked_fill(lag < 0, float("-inf"))
    expected = attn.proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, d))
    assert log_g is None
    torch.testing.assert_close(y, expected, atol=2e-5, rtol=1e-4)


def test_the_name_is_gone_when_the_test_registering_it_ends() -> None:
    assert "flat-slope" not in POSITIONS
