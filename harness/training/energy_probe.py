"""Does EGA's energy projection learn the first principal component of its input?

The EGA paper says the projection w of e_j = w . x_j + b "learns the first principal
component" of the key embeddings. At each evaluation this probe measures it: over the
validation windows it accumulates, per layer l, the covariance of the gate's input x (the
layer's normalised input, (B, T, d)), takes its leading eigenvector u_l, and reads for each
head h

    c_lh = |w_lh . u_l| / ||w_lh||          (the sign of an eigenvector is arbitrary)

logged as ``gate/pc1_cosine`` (mean over layers and heads) and ``gate/pc1_cosine/l<i>``.
A direction drawn at random in d dimensions has E|cos| = Gamma(d/2) / (sqrt(pi) Gamma((d+1)/2)),
about sqrt(2 / (pi d)) (0.10 at d = 64, 0.05 at d = 256): :func:`chance_cosine`.

Only gates whose energy is one linear projection per head (``weight`` of shape (H, d): EGA-1
and the gates built on it) are probed. The probe reads the gate's input through a forward
pre-hook during evaluation (eager, no gradient): training never sees it.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def chance_cosine(d: int) -> float:
    """E|cos(w, u)| for w uniform on the sphere in d dimensions and a fixed unit u."""
    return math.exp(math.lgamma(d / 2) - math.lgamma((d + 1) / 2)) / math.sqrt(math.pi)


def probed_gates(model: nn.Module) -> list[nn.Module]:
    """The key gates whose energy is one linear direction per head (``weight`` (H, d))."""
    gates = model.key_gates() if hasattr(model, "key_gates") else []
    return [g for g in gates if isinstance(getattr(g, "weight", None), Tensor) and g.weight.shape[0] == g.n_head]


class EnergyDirectionProbe:
    """Accumulates the gate inputs' covariance per layer while :attr:`active`; see the module docstring."""

    def __init__(self, model: nn.Module) -> None:
        self.gates = probed_gates(model)
        self.active = False
        self._n = [0] * len(self.gates)
        self._sum: list[Tensor | None] = [None] * len(self.gates)
        self._outer: list[Tensor | None] = [None] * len(self.gates)
        self._handles = [g.register_forward_pre_hook(self._hook(i)) for i, g in enumerate(self.gates)]

    def _hook(self, layer: int):
        def record(module: nn.Module, args: tuple) -> None:
            if not self.active:
                return
            x = args[0].detach().reshape(-1, args[0].shape[-1]).double()  # (B*T, d)
            self._n[layer] += x.shape[0]
            s, o = x.sum(0), x.T @ x  # (d,), (d, d)
            self._sum[layer] = s if self._sum[layer] is None else self._sum[layer] + s
            self._outer[layer] = o if self._outer[layer] is None else self._outer[layer] + o

        return record

    def metrics(self) -> dict[str, float]:
        """``gate/pc1_cosine`` and ``gate/pc1_cosine/l<i>`` from what was accumulated ({} if nothing)."""
        per_layer = []
        for layer, gate in enumerate(self.gates):
            n = self._n[layer]
            if n < 2:
                return {}
            mean = self._sum[layer] / n
            cov = self._outer[layer] / n - torch.outer(mean, mean)  # (d, d)
            u = torch.linalg.eigh(cov).eigenvectors[:, -1]  # (d,): the leading eigenvector
            w = gate.weight.detach().double().cpu()  # (H, d)
            per_layer.append((w @ u.cpu()).abs() / w.norm(dim=1).clamp_min(1e-12))  # (H,)
        if not per_layer:
            return {}
        metrics = {f"gate/pc1_cosine/l{i}": float(c.mean()) for i, c in enumerate(per_layer)}
        metrics["gate/pc1_cosine"] = float(torch.cat(per_layer).mean())
        return metrics

    def close(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
