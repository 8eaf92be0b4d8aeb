"""Key gates, scoring and the output gate against hand-written oracles (loops, numpy, wavelet identities)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from harness.models.gates import (
    EnergyGate,
    FluxGate,
    LeakyEnergyGate,
    OutputGate,
    PhaseCoherenceGate,
    QuadraticEnergyGate,
    WaveletDirectionGate,
    WaveletEnergyGate,
    build_gate,
    causal_moving_average,
    causal_znorm,
    daubechies_highpass,
    daubechies_lowpass,
    morlet_filter,
    sequence_znorm,
    wavelet_direction,
)
from harness.models.scoring import LaggedScoring
from harness.models.variants import GATES


def _prefix_znorm_numpy(s: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    out = np.empty_like(s)
    for j in range(s.shape[-1]):
        prefix = s[..., : j + 1]
        out[..., j] = (s[..., j] - prefix.mean(-1)) / np.sqrt(prefix.var(-1) + eps)
    return out


def test_causal_znorm_equals_prefix_statistics():
    rng = np.random.default_rng(0)
    s = rng.normal(loc=40.0, scale=0.5, size=(2, 3, 200))  # |mean| >> std: the cancellation case
    np.testing.assert_allclose(
        causal_znorm(torch.tensor(s, dtype=torch.float32)).numpy(), _prefix_znorm_numpy(s), rtol=1e-3, atol=2e-3
    )
    assert causal_znorm(torch.tensor(s)).dtype == torch.float32


def test_causal_moving_average_equals_loop():
    p = torch.randn(2, 11, 3)
    for window in (1, 2, 4, 8):
        want = torch.stack([p[:, max(0, j - window + 1) : j + 1].mean(1) for j in range(11)], dim=1)
        torch.testing.assert_close(causal_moving_average(p, window), want)


def test_ega4_energy_equals_projections_of_windowed_inputs():
    torch.manual_seed(0)
    d, H, T = 8, 2, 13
    gate = EnergyGate(d, H, projections=4)
    with torch.no_grad():
        gate.bias.normal_()
    x = torch.randn(3, T, d)
    w = gate.weight.view(4, H, d)
    want = torch.zeros(3, H, T)
    for j in range(T):
        for i, window in enumerate((1, 2, 4, 8)):
            xbar = x[:, max(0, j - window + 1) : j + 1].mean(1)  # (B, d)
            want[:, :, j] += xbar @ w[i].T
        want[:, :, j] += gate.bias
    torch.testing.assert_close(gate.energy(x), want, rtol=1e-5, atol=1e-5)


def test_gate_output_is_log_sigmoid_of_normalised_energy():
    torch.manual_seed(1)
    gate = EnergyGate(6, 3, tau_init=0.35, alpha_init=1.7)
    x = torch.randn(2, 9, 6)
    z = _prefix_znorm_numpy(gate.energy(x).detach().double().numpy())
    want = np.log(1 / (1 + np.exp(-1.7 * (z - 0.35))))
    np.testing.assert_allclose(gate(x, None).detach().numpy(), want, rtol=1e-4, atol=1e-5)


def test_flux_signal_is_absolute_energy_difference():
    torch.manual_seed(2)
    gate = FluxGate(6, 2)
    x = torch.randn(2, 10, 6)
    e = gate.energy(x)
    want = torch.cat([torch.zeros(2, 2, 1), (e[..., 1:] - e[..., :-1]).abs()], dim=-1)
    torch.testing.assert_close(gate.signal(x, None), want)


def test_phase_coherence_equals_complex_formula():
    torch.manual_seed(3)
    k = torch.randn(2, 3, 7, 8)
    z = (k[..., 0::2] + 1j * k[..., 1::2]).numpy().astype(np.complex128)
    prev = np.concatenate([z[..., :1, :], z[..., :-1, :]], axis=-2)
    want = (np.real(z * np.conj(prev)) / (np.abs(z) * np.abs(prev))).mean(-1)
    np.testing.assert_allclose(PhaseCoherenceGate(3).signal(None, k).numpy(), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name, taps, moments", [("db2", 4, 2), ("db4", 8, 4)])
def test_daubechies_filters_are_orthonormal_with_vanishing_moments(name, taps, moments):
    h, g = daubechies_lowpass(name).numpy(), daubechies_highpass(name).numpy()
    assert len(h) == taps
    np.testing.assert_allclose(h.sum(), math.sqrt(2), atol=1e-10)
    for shift in range(0, taps, 2):  # orthonormal under even shifts
        np.testing.assert_allclose(np.dot(h[: taps - shift], h[shift:]), 1.0 if shift == 0 else 0.0, atol=1e-10)
    k = np.arange(taps)
    for p in range(moments):  # a db(N) wavelet has N vanishing moments
        np.testing.assert_allclose((k**p * g).sum(), 0.0, atol=1e-8 * max(1, taps**p))
    np.testing.assert_allclose(np.dot(h, g), 0.0, atol=1e-12)


def test_morlet_filter_is_zero_mean_with_the_right_envelope():
    re, im = morlet_filter(torch.tensor(1.0), torch.tensor(2.0))
    assert abs(re.sum()) < 1e-5 and abs(im.sum()) < 1e-5
    assert re.shape == (16,) and torch.argmax(re**2 + im**2) in (6, 7, 8, 9)


@pytest.mark.parametrize("kind", ["db2", "db4", "morlet-fixed", "morlet-param"])
def test_wavelet_energy_equals_causal_fir_loop(kind):
    torch.manual_seed(4)
    d, T = 5, 20
    gate = WaveletEnergyGate(d, 2, kind=kind)
    psi = gate.filters().detach().double().numpy()  # (n_out, M)
    x = torch.randn(2, T, d)
    xn = x.double().numpy()
    M = psi.shape[1]
    want = np.zeros((2, 1, T))
    for j in range(T):
        energy = 0.0
        for row in psi:  # real filter, or the real and imaginary parts of the Morlet filter
            # causal FIR: r_j = sum_m psi_m x_{j-(M-1)+m}, zero before the start
            r = sum(row[m] * xn[:, j - (M - 1) + m] for m in range(M) if j - (M - 1) + m >= 0)  # (B, d)
            energy = energy + (r**2).mean(-1)
        want[:, 0, j] = energy
    np.testing.assert_allclose(gate.signal(x, None).detach().numpy(), want, rtol=1e-4, atol=1e-6)


def test_morlet_param_gate_learns_its_filter():
    gate = WaveletEnergyGate(4, 2, kind="morlet-param")
    x = torch.randn(1, 12, 4)
    gate(x, None).sum().backward()
    assert gate.omega.grad is not None and gate.log_sigma.grad is not None
    assert set(gate.wavelet_parameters()) == {"omega", "sigma"}


def test_lagged_scoring_equals_loop_and_starts_as_identity():
    torch.manual_seed(5)
    scoring = LaggedScoring(n_head=2, lags=3)
    k = torch.randn(2, 2, 9, 4)
    torch.testing.assert_close(scoring(k), k)
    with torch.no_grad():
        scoring.lag_weight.normal_()
    a = scoring.lag_weight
    want = torch.zeros_like(k)
    for j in range(9):
        for lag in range(3):
            if j - lag >= 0:
                want[:, :, j] += a[:, lag, None] * k[:, :, j - lag]
    torch.testing.assert_close(scoring(k), want)


def test_output_gate_shape_and_range():
    gate = OutputGate(8, 2)
    g = gate(torch.randn(3, 5, 8))
    assert g.shape == (3, 2, 5, 1) and bool(((g > 0) & (g < 1)).all())


def test_every_registered_gate_name_builds_and_gates_lie_in_0_1():
    x, k = torch.randn(2, 12, 16), torch.randn(2, 4, 12, 4)
    assert build_gate("none", d_model=16, n_head=4) is None
    for name in GATES:
        if name == "none":
            continue
        gate = build_gate(name, d_model=16, n_head=4, tau_init=0.5)
        log_g = gate(x, k)
        assert log_g.shape == (2, 4, 12), name
        assert bool((log_g < 0).all()) and bool(torch.isfinite(log_g).all()), name
        torch.testing.assert_close(gate.tau.detach(), torch.full((4,), 0.5))


# -- readings B of the papers' vague points ----------------------------------------------------


def test_sequence_znorm_uses_the_whole_sequence():
    rng = np.random.default_rng(1)
    s = rng.normal(loc=3.0, scale=2.0, size=(2, 3, 50))
    want = (s - s.mean(-1, keepdims=True)) / np.sqrt(s.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(sequence_znorm(torch.tensor(s)).numpy(), want, rtol=1e-5, atol=1e-5)


def test_leaky_gate_is_ega_with_whole_sequence_statistics():
    torch.manual_seed(6)
    leaky = LeakyEnergyGate(6, 3, tau_init=0.35, alpha_init=1.7)
    x = torch.randn(2, 11, 6)
    e = (x @ leaky.weight.T + leaky.bias).transpose(1, 2).detach().double().numpy()  # e_j = w.x_j + b
    z = (e - e.mean(-1, keepdims=True)) / np.sqrt(e.var(-1, keepdims=True) + 1e-5)  # over all 11 positions
    want = np.log(1 / (1 + np.exp(-1.7 * (z - 0.35))))
    np.testing.assert_allclose(leaky(x, None).detach().numpy(), want, rtol=1e-4, atol=1e-5)
    # the causal gate with the same weights differs (it cannot see positions after j)
    causal = EnergyGate(6, 3, tau_init=0.35, alpha_init=1.7)
    causal.load_state_dict(leaky.state_dict())
    assert not torch.allclose(causal(x, None), leaky(x, None))
    torch.testing.assert_close(causal(x, None)[..., -1], leaky(x, None)[..., -1])  # the last key sees everything


@pytest.mark.parametrize("directions", [2, 4])
def test_pc_energy_is_the_sum_of_squared_projections(directions):
    torch.manual_seed(7)
    d, H, T = 8, 3, 10
    gate = QuadraticEnergyGate(d, H, directions=directions)
    with torch.no_grad():
        gate.bias.normal_()
    x = torch.randn(2, T, d)
    w, b = gate.weight.view(H, directions, d), gate.bias.view(H, directions)
    want = torch.zeros(2, H, T)
    for h in range(H):
        for k in range(directions):
            for j in range(T):
                want[:, h, j] += (x[:, j] @ w[h, k] + b[h, k]) ** 2
    torch.testing.assert_close(gate.signal(x, None), want, rtol=1e-5, atol=1e-5)
    assert sum(p.numel() for p in gate.parameters()) == H * directions * (d + 1) + 2 * H


@pytest.mark.parametrize("kind, taps", [("db2", 4), ("db4", 8), ("morlet", 16)])
def test_wavelet_direction_is_the_filter_tiled_to_width_d_with_unit_norm(kind, taps):
    d = 40
    u = wavelet_direction(kind, d).double()
    psi = (
        daubechies_highpass(kind)
        if kind != "morlet"
        else morlet_filter(torch.tensor(math.pi / 3), torch.tensor(2.0))[0]
    )
    tiled = torch.tensor([float(psi[c % taps]) for c in range(d)], dtype=torch.float64)
    torch.testing.assert_close(u, tiled / tiled.norm(), rtol=1e-6, atol=1e-7)
    assert abs(float(u.norm()) - 1.0) < 1e-6
    if d % taps == 0:  # whole periods of a zero-mean filter: orthogonal to the constant direction
        assert abs(float(u.sum())) < 1e-6


def test_direction_gate_energy_is_the_projection_on_the_fixed_direction():
    torch.manual_seed(8)
    gate = WaveletDirectionGate(16, 4, kind="db4", tau_init=0.2)
    x = torch.randn(2, 9, 16)
    u = wavelet_direction("db4", 16)
    torch.testing.assert_close(gate.signal(x, None), (x @ u).unsqueeze(1))
    assert [name for name, _ in gate.named_parameters()] == ["tau", "alpha"]  # w is fixed, not learned
    gate(x, None).sum().backward()
    assert gate.tau.grad is not None and gate.alpha.grad is not None
