"""No forward pass of the zoo reads a tensor on the host or builds a tensor from Python data.

On a GPU each such read (``.tolist()``, ``.item()``, ``.cpu()``, ``float(t)``, ``if t:``) makes
the host wait for the device, and each tensor built from a Python list is a copy from host
memory; inside the training step they stall the GPU in every layer and break a compiled
graph. ``torch.cuda.set_sync_debug_mode`` needs a GPU, so the test refuses the operations
themselves: every variant's forward and backward (training, with the activation recomputation
of the backward pass) and its evaluation forward run under a ``TorchFunctionMode`` that raises
on each of them, in fp32 and under bf16 autocast (the mixed-precision plan's path), and at a
window long enough for ALiBi's steep heads to take the chunked fold. ``benchmarks/gpu_check.py``
counts the real synchronisations on a GPU.
"""

from __future__ import annotations

import pytest
import torch
from harness_support import per_code_path

from harness.bench.host_syncs import HostReadRefused, HostReads
from harness.models import VARIANTS, build_model


def refuse_host_reads() -> HostReads:
    """The mode of harness.bench.host_syncs that raises on every host read."""
    return HostReads(refuse=True)


def test_the_detector_refuses_what_it_should():
    t = torch.arange(4.0)
    for read in (
        lambda: t.tolist(),
        lambda: float(t.sum()),
        lambda: bool(t.max() > 1),
        lambda: t.cpu(),
        lambda: torch.tensor([1, 2]),
        lambda: t[[0, 2]],
        lambda: t[t > 1],
        lambda: t.nonzero(),
    ):
        with refuse_host_reads(), pytest.raises(HostReadRefused):
            read()
    with refuse_host_reads():  # shapes, slices, device-side creation and arithmetic are fine
        assert t[1:3].shape == (2,) and (torch.arange(3) + t[:3]).numel() == 3


def _check(variant: str, T: int, *, bf16: bool, n_layer: int = 1, n_head: int = 2, d_model: int = 32) -> None:
    """One layer is enough: every layer runs the same code."""
    torch.manual_seed(0)
    shape = {"n_layer": n_layer, "n_head": n_head, "d_model": d_model}
    model = build_model(variant, size="nano", vocab_size=17, block_size=T, dropout=0.1, **shape)
    x = torch.randint(17, (1, T))
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        with refuse_host_reads():
            logits = model(x)
            logits.float().square().mean().backward()  # the backward pass recomputes checkpointed forwards
            model.eval()
            with torch.no_grad():
                model.forward_with_gates(x)
    assert torch.isfinite(logits).all()


@pytest.mark.parametrize("bf16", [False, True], ids=["fp32", "bf16"])
@pytest.mark.parametrize("variant", per_code_path(sorted(VARIANTS)))
def test_no_forward_pass_reads_the_device(variant: str, bf16: bool) -> None:
    """T = 130: relative MOPE in three chunks of 64, the last a partial one."""
    _check(variant, 130, bf16=bf16)


@pytest.mark.parametrize("bf16", [False, True], ids=["fp32", "bf16"])
@pytest.mark.parametrize("variant", ["mope-rel", "ega-mope-rel"])
def test_no_forward_pass_reads_the_device_with_several_head_groups(variant: str, bf16: bool) -> None:
    """Six heads: relative MOPE's chunks in three groups of two heads."""
    _check(variant, 130, bf16=bf16, n_layer=1, n_head=6, d_model=48)


@pytest.mark.parametrize("bf16", [False, True], ids=["fp32", "bf16"])
def test_no_forward_pass_reads_the_device_with_alibis_steep_heads(bf16: bool) -> None:
    """Six heads at T = 1100: ALiBi's steepest head (m = 1/2, the fifth of six) needs chunks of
    at most 512 / m = 1024 keys, so it takes the chunked fold and the other five one call: heads
    picked and put back in order by slices that are not one run."""
    _check("alibi", 1100, bf16=bf16, n_layer=1, n_head=6, d_model=48)
