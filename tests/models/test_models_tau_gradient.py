"""The gradient of the renormalised gate with respect to tau and alpha (docs/training.md, "What moves tau"),
against autograd through the folded attention: dL/dtau = alpha sum_i Cov_{j ~ a_i}(u_ij, g_j)."""

from __future__ import annotations

import math

import torch

from harness.models import EnergyGate, causal_znorm, key_biased_attention


def _setup():
    torch.manual_seed(0)
    B, H, T, hd, d = 2, 3, 16, 8, 24
    gate = EnergyGate(d, H)
    with torch.no_grad():
        gate.tau.normal_()
        gate.alpha.uniform_(0.5, 2.0)
    x = torch.randn(B, T, d)
    q, k, v = (torch.randn(B, H, T, hd) for _ in range(3))
    upstream = torch.randn(B, H, T, hd)  # dL/do_i
    return gate, x, q, k, v, upstream


def test_tau_and_alpha_gradients_are_attention_weighted_covariances() -> None:
    gate, x, q, k, v, upstream = _setup()
    log_g = gate(x, None)  # (B, H, T)
    (key_biased_attention(q, k, v, log_g) * upstream).sum().backward()

    with torch.no_grad():
        T = q.size(-2)
        logits = q @ k.transpose(-1, -2) / math.sqrt(q.size(-1)) + log_g[:, :, None, :]  # (B, H, T, T)
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        a = torch.softmax(logits.masked_fill(~causal, float("-inf")), dim=-1)  # a_ij
        u = upstream @ v.transpose(-1, -2)  # u_ij = dL/do_i . v_j, (B, H, T, T)
        g = log_g.exp()[:, :, None, :]  # g_j, (B, H, 1, T)

        def covariance(f: torch.Tensor) -> torch.Tensor:
            """sum over batch and queries of Cov_{j ~ a_i}(u_ij, f_j), per head: (H,)."""
            return ((a * u * f).sum(-1) - (a * u).sum(-1) * (a * f).sum(-1)).sum(dim=(0, 2))

        z = causal_znorm(gate.signal(x, None))[:, :, None, :]  # z_j, (B, H, 1, T)
        expected_tau = gate.alpha * covariance(g)
        expected_alpha = covariance((1 - g) * (z - gate.tau[None, :, None, None]))
    torch.testing.assert_close(gate.tau.grad, expected_tau, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(gate.alpha.grad, expected_alpha, rtol=1e-4, atol=1e-6)


def test_a_uniform_shift_of_log_g_cancels_in_the_softmax() -> None:
    gate, x, q, k, v, _ = _setup()
    with torch.no_grad():
        log_g = gate(x, None)
        out = key_biased_attention(q, k, v, log_g)
        shifted = key_biased_attention(q, k, v, log_g - 3.0)
    torch.testing.assert_close(shifted, out, rtol=1e-5, atol=1e-5)
