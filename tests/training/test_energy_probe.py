"""The energy-direction probe: |cos| between each head's energy projection and the leading
principal component of the gate's input, against a numpy oracle."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from harness.models import build_model
from harness.training.energy_probe import EnergyDirectionProbe, chance_cosine


def test_chance_cosine_matches_monte_carlo() -> None:
    rng = np.random.default_rng(0)
    for d in (8, 64):
        w = rng.standard_normal((200_000, d))
        mc = np.abs(w[:, 0]) / np.linalg.norm(w, axis=1)
        assert chance_cosine(d) == pytest.approx(mc.mean(), rel=0.01)
    assert chance_cosine(256) == pytest.approx(math.sqrt(2 / (math.pi * 256)), rel=0.01)


def test_probe_reads_the_cosine_with_the_leading_principal_component() -> None:
    torch.manual_seed(0)
    model = build_model("ega", size="nano", vocab_size=11, block_size=32).eval()
    inputs: list[list[torch.Tensor]] = [[] for _ in model.key_gates()]
    recorders = [
        g.register_forward_pre_hook(lambda m, a, i=i: inputs[i].append(a[0])) for i, g in enumerate(model.key_gates())
    ]
    probe = EnergyDirectionProbe(model)
    probe.active = True
    idx = torch.randint(0, 11, (6, 32))
    with torch.no_grad():
        model(idx)
    for r in recorders:
        r.remove()
    x0 = torch.cat([t.reshape(-1, t.shape[-1]) for t in inputs[0]]).double().numpy()
    pc1 = np.linalg.eigh(np.cov(x0.T, bias=True))[1][:, -1]
    gate0 = model.key_gates()[0]
    with torch.no_grad():  # head 0 of layer 0 points along the first PC, head 1 stays as initialised
        gate0.weight[0] = torch.from_numpy(-3.0 * pc1).float()
    w = gate0.weight.detach().double().numpy()
    expected = np.abs(w @ pc1) / np.linalg.norm(w, axis=1)
    metrics = probe.metrics()
    assert expected[0] == pytest.approx(1.0)
    assert metrics["gate/pc1_cosine/l0"] == pytest.approx(expected.mean(), rel=1e-4)
    assert set(metrics) == {"gate/pc1_cosine", "gate/pc1_cosine/l0", "gate/pc1_cosine/l1"}
    probe.close()
    assert not gate0._forward_pre_hooks


def test_probe_is_silent_without_a_linear_energy() -> None:
    probe = EnergyDirectionProbe(build_model("baseline", size="nano", vocab_size=11, block_size=8))
    assert probe.gates == [] and probe.metrics() == {}
