"""Key gates: the *gate* slot of the attention (Energy-Gated Attention and its ablations).

Every key gate computes, per head h and key position j, a causal scalar signal s_j
(an "energy"), normalises it causally and turns it into a gate in (0, 1):

    s~_j = (s_j - mean_{i<=j} s_i) / sqrt(var_{i<=j} s_i + eps)      (prefix statistics)
    g_j  = sigmoid(alpha_h (s~_j - tau_h))                           (tau, alpha learned per head)

The attention weights of key j are multiplied by g_j and renormalised, which is exactly a
per-key additive logit bias:

    a_ij = w_ij g_j / sum_j' w_ij' g_j' = softmax_j(q_i.k_j scale + log g_j)

so a gate returns ``log g`` (``logsigmoid``, stable for closed gates), shape (B, H, T), and
the attention folds it into one fused SDPA call (see :mod:`harness.models.attention`).
Every signal uses positions <= j only; all gates are O(T) work per head.

The slot's contract is :class:`KeyBias` (any per-key additive logit bias: what the harness
passes a component, what it expects back, what it guarantees around it); :class:`KeyGate`
is the sigmoid gate of a causal signal above, the base of every gate of the zoo. A user's
gate subclasses either one and is named ``package.module:Class`` in a variant
(:mod:`harness.models.components`).

Families, each class registered under its names in :data:`harness.models.slots.GATES` by a
decorator above it (:func:`registered_as`): ``ega`` / ``ega-2`` / ``ega-4`` (:class:`EnergyGate`),
``ega-2-pc`` / ``ega-4-pc`` (:class:`QuadraticEnergyGate`), ``ega-2-prod`` / ``ega-4-prod``
(:class:`ProductEnergyGate`), ``ega-qnorm`` (:class:`QueryNormalisedEnergyGate`, the one
pairwise gate: its z-normalisation depends on the query), ``db2`` / ``db4`` /
``morlet-fixed`` / ``morlet-param`` (:class:`WaveletEnergyGate`), ``db2-dir`` / ``db4-dir``
/ ``morlet-dir`` (:class:`WaveletDirectionGate`), ``flux`` (:class:`FluxGate`), ``phase``
(:class:`PhaseCoherenceGate`); plus the output gate of the prior-art comparator
(:class:`OutputGate`), which is not a key gate, and one diagnostic that is *not causal*:
``ega-leaky`` (:class:`LeakyEnergyGate`, z-normalised over the whole sequence).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from harness.errors import InputError
from harness.models.slots import GATES
from harness.models.variants import DEFAULT_TAU_INIT

DEFAULT_ALPHA_INIT = 1.0
ZNORM_EPS = 1e-5


def causal_moments(s: Tensor, eps: float = ZNORM_EPS) -> tuple[Tensor, Tensor, Tensor]:
    """Prefix statistics along the last axis, in fp32, O(T) via cumulative sums:
    (d, m, r) with d_j = s_j - s_0, m_i = mean(d_0..d_i), r_i = 1 / sqrt(var(d_0..d_i) + eps),
    var_i = mean(d_0^2..d_i^2) - m_i^2.

    The signal is shifted by its first value before the sums (mean and variance do not
    change; the shift avoids cancellation in the variance when |mean| >> std)."""
    s = s.float()
    d = s - s[..., :1].detach()
    n = torch.arange(1, s.size(-1) + 1, device=s.device, dtype=torch.float32)
    mean = torch.cumsum(d, dim=-1) / n
    var = (torch.cumsum(d * d, dim=-1) / n - mean * mean).clamp_min(0.0)
    return d, mean, torch.rsqrt(var + eps)


def causal_znorm(s: Tensor, eps: float = ZNORM_EPS) -> Tensor:
    """Causal z-normalisation along the last axis, in fp32 (:func:`causal_moments`):

        s~_j = (s_j - m_j) / sqrt(v_j + eps),  m_j = mean(s_0..s_j),  v_j = var(s_0..s_j)

    each key normalised by its own prefix. The first position has v_0 = 0 and s~_0 = 0.
    """
    d, mean, rstd = causal_moments(s, eps)
    return (d - mean) * rstd


def sequence_znorm(s: Tensor, eps: float = ZNORM_EPS) -> Tensor:
    """Z-normalisation over the whole sequence (NOT causal: key j sees the statistics of
    every position, future ones included), in fp32:

        s~_j = (s_j - m) / sqrt(v + eps),  m = mean(s_0..s_{T-1}),  v = var(s_0..s_{T-1})

    Only for the ``ega-leaky`` diagnostic, which measures what such a leak would fake.
    """
    s = s.float()
    return (s - s.mean(-1, keepdim=True)) * torch.rsqrt(s.var(-1, unbiased=False, keepdim=True) + eps)


def causal_moving_average(p: Tensor, window: int) -> Tensor:
    """Mean of p over the last ``window`` positions <= j along dim -2 (fewer at the start).

    A sum of ``window`` shifted copies (O(T window), exact; the windows here are <= 8),
    rather than a difference of cumulative sums, which loses precision at long T.
    """
    if window == 1:
        return p
    T = p.size(-2)
    total = p
    for lag in range(1, min(window, T)):
        total = total + F.pad(p[..., : T - lag, :], (0, 0, lag, 0))  # p_{j-lag}, zero before the start
    count = torch.arange(1, T + 1, device=p.device, dtype=p.dtype).clamp_max(window)
    return total / count[:, None]


class KeyBias(nn.Module):
    """The contract of the *gate* slot: a per-key additive logit bias b_j.

    Every layer's attention calls ``b = gate(x, k)`` and computes

        y_i = sum_{j<=i} softmax_j(q_i . k_j / sqrt(hd) + b_j) v_j

    folding b into its one fused SDPA call (an extra key column, :mod:`harness.models.attention`):
    no T x T tensor. A per-*query* term cancels in the softmax, so a bias of the form
    c_i - c_j (the Forgetting Transformer's cumulative log forget gate) is the per-key
    bias -c_j; a term that mixes i and j otherwise does not fit this slot.

    A subclass implements :meth:`key_bias`; the harness guarantees around it:

    - input: ``x`` (B, T, d), the layer's normalised input (LayerNorm of the residual stream),
      and ``k`` (B, H, T, hd), the layer's keys after projection and before the position's
      rotation and the scoring; both fp32, with autocast off (:meth:`forward`);
    - output: (B, H, T) (checked), fp32; b_j may use positions <= j only: the causality probe
      (:func:`harness.models.checks.check_variant`, ``harness zoo check`` and the check every
      study naming a user component runs before any trial) refuses a bias that reads later tokens;
    - construction: by keyword, with the slot's arguments that ``__init__`` takes (all of them
      when it takes ``**kwargs``): ``n_head``, ``d_model``; for a :class:`KeyGate` also
      ``tau_init`` / ``alpha_init``, passed only when a config sets them (and then required).
      This base takes ``n_head`` and ``d_model`` and keeps them (``self.n_head``, ``self.d_model``),
      so a subclass needs no ``__init__`` of its own;
    - initialisation: every ``nn.Linear`` and ``nn.Embedding`` in the model, a component's
      included, is re-initialised by the model's shared recipe, N(0, 0.02^2) with zero bias
      (:mod:`harness.models.transformer`); parameters made with ``nn.Parameter`` keep the
      component's own values;
    - range: the fold carries b_j sqrt(hd) to fp32's precision, under a GPU's bf16 autocast too
      (three bf16 pieces, :mod:`harness.models.fold`): about 7 significant digits, so a bias of
      1000 still resolves differences of 1e-4;
    - readings: only :class:`KeyGate` layers report gate readings (tau, alpha, the open
      fraction); a plain ``KeyBias`` has none.

    ``pairwise`` is reserved for the zoo's ``ega-qnorm`` (a bias per query and key).
    """

    #: True when the bias depends on the query too (:class:`QueryNormalisedEnergyGate`): the
    #: attention then asks :meth:`KeyGate.pair_log_gate` for blocks of pairs instead of a per-key bias.
    pairwise: ClassVar[bool] = False

    def __init__(self, n_head: int | None = None, d_model: int | None = None) -> None:
        # Takes the slot's keywords, so that a subclass without an __init__ of its own is built
        # as the harness builds every gate: by keyword, with n_head and d_model (kept here).
        super().__init__()
        self.n_head = n_head
        self.d_model = d_model

    def key_bias(self, x: Tensor, k: Tensor | None) -> Tensor:
        """b (B, H, T) from x (B, T, d) and k (B, H, T, hd), both fp32 (see the class docstring)."""
        raise NotImplementedError(f"{type(self).__name__} must implement key_bias(x, k) -> (B, H, T)")

    def forward(self, x: Tensor, k: Tensor | None) -> Tensor:
        """b (B, H, T) in fp32, also under autocast (the bias is cheap; its sums need the precision)."""
        with torch.autocast(device_type=x.device.type, enabled=False):
            b = self.key_bias(x.float(), k.float() if k is not None else None)
        if k is not None and tuple(b.shape) != (x.size(0), k.size(1), x.size(1)):
            cls = type(self)
            raise ValueError(
                f"the gate slot's {cls.__module__}.{cls.__qualname__}.key_bias returned shape {tuple(b.shape)}; "
                f"the slot expects (B, H, T) = {(x.size(0), k.size(1), x.size(1))}"
            )
        return b


class KeyGate(KeyBias):
    """A sigmoid gate of a causal per-key signal: ``log g = logsigmoid(alpha (normalise(s) - tau))``.

    A subclass implements :meth:`signal` -> s, (B, H, T) or (B, 1, T) (shared by the heads),
    from the layer's normalised input x (B, T, d) and keys k (B, H, T, hd); the base class
    z-normalises it causally (:func:`causal_znorm`: prefix mean and variance; ``normalise``
    may be overridden) and returns log g (B, H, T) as the bias (see :class:`KeyBias` for what the
    harness guarantees around it). tau and alpha are per-head parameters (2 H per layer),
    initialised from ``tau_init`` / ``alpha_init``; the harness logs them per layer and head and
    the fraction of open gates (g > 1/2). ``__init__`` takes ``n_head`` and, by keyword,
    ``d_model``, ``tau_init`` and ``alpha_init``: a subclass without ``__init__`` is built as it is,
    and one with its own passes what it does not use on
    (``def __init__(self, n_head, **gate_init): super().__init__(n_head, **gate_init)``).
    """

    # Recompute the signal in the backward pass instead of keeping its intermediates
    # (gates whose signal has (B, d, T)- or (B, H, T, hd)-sized intermediates).
    recompute_signal: ClassVar[bool] = False
    #: The z-normalisation of the signal (prefix statistics: causal).
    normalise: ClassVar = staticmethod(causal_znorm)
    #: True when the signal has K components per head (B, H, K, T), each gated, the gates multiplied.
    components_multiply: ClassVar[bool] = False
    #: The constructor's keywords of each name the class registers under (:func:`registered_as`).
    registered_keywords: ClassVar[dict[str, dict[str, Any]]] = {}

    def __init__(
        self,
        n_head: int,
        *,
        d_model: int | None = None,
        tau_init: float = DEFAULT_TAU_INIT,
        alpha_init: float = DEFAULT_ALPHA_INIT,
    ) -> None:
        # d_model is taken (and kept) so that a subclass without __init__, or one that passes
        # **gate_init on, is built with every keyword the harness passes.
        super().__init__(n_head=n_head, d_model=d_model)
        self.tau = nn.Parameter(torch.full((n_head,), float(tau_init)))
        self.alpha = nn.Parameter(torch.full((n_head,), float(alpha_init)))

    @classmethod
    def from_shape(cls, name: str, *, d_model: int, n_head: int, **gate_init: float) -> KeyBias | None:
        """The gate registered as ``name`` (:data:`harness.models.slots.GATES`) for a model of this
        shape: by keyword, with the name's own keywords (``projections=2`` for ``ega-2``) and
        ``tau_init`` / ``alpha_init``."""
        return cls(d_model=d_model, n_head=n_head, **cls.registered_keywords.get(name, {}), **gate_init)

    def signal(self, x: Tensor, k: Tensor | None) -> Tensor:
        """Causal per-key signal from the layer's normalised input x (B, T, d) and keys k (B, H, T, hd)
        (k may be None for gates that do not read the keys)."""
        raise NotImplementedError(f"{type(self).__name__} must implement signal(x, k) -> (B, H or 1, T)")

    def key_bias(self, x: Tensor, k: Tensor | None) -> Tensor:
        """log g (B, H, T) of the normalised signal."""
        if self.recompute_signal and torch.is_grad_enabled():
            s = checkpoint(self.signal, x, k, use_reentrant=False)
        else:
            s = self.signal(x, k)
        return self.log_gate(self.normalise(s))  # (B, H, T)

    def log_gate(self, z: Tensor) -> Tensor:
        """log g = logsigmoid(alpha_h (z - tau_h)) for normalised signals z (B, H or 1, [K,] ..., T):
        alpha and tau broadcast over the head axis 1. A signal with K components per head (B, H, K, T)
        gets K gates, multiplied: log g = sum_k logsigmoid(alpha_h (z_k - tau_h)), (B, H, T)."""
        shape = (-1,) + (1,) * (z.dim() - 2)  # (H, 1, ...) against z's (B, H, ...)
        log_g = F.logsigmoid(self.alpha.view(shape) * (z - self.tau.view(shape)))
        return log_g.sum(2) if self.components_multiply else log_g


def registered_as(members: dict[str, dict[str, Any]]) -> Callable[[type[KeyGate]], type[KeyGate]]:
    """Register a family of gates: the decorated class under each name of ``members``, built with
    that name's keywords (``{"ega-2": {"projections": 2}}``) by :meth:`KeyGate.from_shape`."""

    def decorate(cls: type[KeyGate]) -> type[KeyGate]:
        cls.registered_keywords = members
        for name in members:
            GATES.add(name, cls)
        return cls

    return decorate


@GATES.register("none")
class NoKeyGate(KeyBias):
    """``gate: none``: no key gate. Never built: the attention then takes its plain path."""

    @classmethod
    def from_shape(cls, name: str, **shape: Any) -> None:
        return None


@registered_as({"ega": {"projections": 1}, "ega-2": {"projections": 2}, "ega-4": {"projections": 4}})
class EnergyGate(KeyGate):
    """EGA: energy from K learned linear projections of the layer input (EGA-1, -2, -4).

        e_j = b + sum_{k<K} w_k . xbar^(k)_j,   xbar^(k)_j = mean(x_{j-2^k+1} .. x_j)

    per head: K = 1 is EGA-1 (e_j = w.x_j + b, the paper's main method); K = 2, 4 average
    the input causally over windows 1, 2 (, 4, 8) before projecting ("projection scales"),
    the simplest causal reading of the paper's multi-scale variants. Since a projection is
    linear, w_k.xbar^(k) is computed as the moving average of w_k.x (O(T) per head).
    x_j is the layer's normalised input at key j. (b cancels under the z-normalisation. The
    EGA paper counts d + 2 per head, w, tau and alpha; with b this gate has d + 3, one more:
    ``harness scorecard`` reads the claim per head and says so.) H (K d + 1) + 2 H parameters
    per layer.
    """

    def __init__(self, d_model: int, n_head: int, *, projections: int = 1, **gate_init: float) -> None:
        super().__init__(n_head, **gate_init)
        self.projections = projections
        self.weight = nn.Parameter(torch.empty(projections * n_head, d_model))
        self.bias = nn.Parameter(torch.zeros(n_head))
        nn.init.normal_(self.weight, std=0.02)

    def energy(self, x: Tensor) -> Tensor:
        B, T, _ = x.shape
        p = F.linear(x.float(), self.weight.float()).view(B, T, self.projections, self.n_head)  # (B, T, K, H)
        e = sum(causal_moving_average(p[:, :, i, :], 2**i) for i in range(self.projections))  # (B, T, H)
        return (e + self.bias).transpose(1, 2)  # (B, H, T)

    def signal(self, x: Tensor, k: Tensor) -> Tensor:
        return self.energy(x)


@registered_as({"ega-2-pc": {"directions": 2}, "ega-4-pc": {"directions": 4}})
class QuadraticEnergyGate(KeyGate):
    """EGA-K read as K principal directions (``ega-2-pc``, ``ega-4-pc``): per head h,

        e_j = sum_{k<K} (w_{h,k} . x_j + b_{h,k})^2

    the energy of x_j in a learned K-dimensional subspace (the papers: "more projection
    scales ... the first principal component is sufficient"), then the same causal
    z-normalisation and gate as EGA. w ~ N(0, 0.02) as EGA's, b = 0. Unlike EGA-1's linear
    energy, a key scores high for a large projection of either sign. O(T d K) per head;
    H K (d + 1) + 2 H parameters per layer (K = 4 at d = 256 is 4 x EGA-1's, as are the
    papers' EGA-4 and the zoo's ``ega-4``).
    """

    def __init__(self, d_model: int, n_head: int, *, directions: int, **gate_init: float) -> None:
        super().__init__(n_head, **gate_init)
        self.directions = directions
        self.weight = nn.Parameter(torch.empty(n_head * directions, d_model))
        self.bias = nn.Parameter(torch.zeros(n_head * directions))
        nn.init.normal_(self.weight, std=0.02)

    def signal(self, x: Tensor, k: Tensor | None) -> Tensor:
        B, T, _ = x.shape
        p = F.linear(x.float(), self.weight.float(), self.bias.float())  # (B, T, H K): w_{h,k}.x_j + b_{h,k}
        return p.view(B, T, self.n_head, self.directions).square().sum(-1).transpose(1, 2)  # (B, H, T)


@registered_as({"ega-2-prod": {"gates": 2}, "ega-4-prod": {"gates": 4}})
class ProductEnergyGate(KeyGate):
    """EGA-K read as K gates multiplied (``ega-2-prod``, ``ega-4-prod``): per head h,

        e^(k)_j = w_{h,k} . x_j + b_{h,k},   g_j = prod_{k<K} sigmoid(alpha_h (z^(k)_j - tau_h))

    K linear energies (EGA-1's, K of them), each z-normalised causally on its own (z^(k) =
    :func:`causal_znorm` of e^(k)) and gated on its own; the key's gate is their product, so
    log g_j = sum_k logsigmoid(...). The energies stay linear in x (unlike ``-pc``'s squares)
    and "more components" means more gates a key must pass. tau and alpha are shared by the
    K gates of a head, so that ``gate/tau`` keeps one value per head (the papers' tau claim).
    w ~ N(0, 0.02) as EGA's, b = 0; H K (d + 1) + 2 H parameters per layer. O(T d K) per head.
    """

    components_multiply = True

    def __init__(self, d_model: int, n_head: int, *, gates: int, **gate_init: float) -> None:
        super().__init__(n_head, **gate_init)
        self.gates = gates
        self.weight = nn.Parameter(torch.empty(n_head * gates, d_model))
        self.bias = nn.Parameter(torch.zeros(n_head * gates))
        nn.init.normal_(self.weight, std=0.02)

    def signal(self, x: Tensor, k: Tensor | None) -> Tensor:
        B, T, _ = x.shape
        p = F.linear(x.float(), self.weight.float(), self.bias.float())  # (B, T, H K)
        return p.view(B, T, self.n_head, self.gates).permute(0, 2, 3, 1)  # (B, H, K, T)


@GATES.register("ega-qnorm")
class QueryNormalisedEnergyGate(EnergyGate):
    """EGA-1 with the energies z-normalised per *query* (``ega-qnorm``): query i normalises the
    energies of the keys it sees, 0..i, by their mean and variance:

        z_ij = (e_j - m_i) / sqrt(v_i + eps),   m_i = mean(e_0..e_i),  v_i = var(e_0..e_i)
        g_ij = sigmoid(alpha_h (z_ij - tau_h))

    (EGA's default reading normalises key j by its own prefix 0..j: z_jj here, so key 0
    always gets z = 0 and key 1 z = +-1.) Causal: m_i and v_i use e_0..e_i only. The gate is
    pairwise, so it is no per-key bias: the attention adds log g_ij to the scores in query
    chunks (:func:`~harness.models.attention.pairwise_biased_attention`), never a T x T
    tensor. Same parameters as EGA-1. :meth:`forward` returns the gates the last query gives
    every key (normalised over the whole window), for logging.
    """

    pairwise = True

    def __init__(self, d_model: int, n_head: int, **gate_init: float) -> None:
        super().__init__(d_model, n_head, projections=1, **gate_init)

    def moments(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(d, m, r) of :func:`causal_moments` of the energy, each (B, H, T), in fp32."""
        with torch.autocast(device_type=x.device.type, enabled=False):
            return causal_moments(self.energy(x.float()))

    def pair_log_gate(self, moments: tuple[Tensor, Tensor, Tensor], start: int, stop: int) -> Tensor:
        """log g_ij for queries start..stop-1 and keys 0..stop-1: (B, H, C, stop) (j > i included:
        the attention masks them)."""
        d, mean, rstd = moments
        z = (d[..., None, :stop] - mean[..., start:stop, None]) * rstd[..., start:stop, None]  # (B, H, C, stop)
        return self.log_gate(z)

    def forward(self, x: Tensor, k: Tensor | None) -> Tensor:
        moments = self.moments(x)
        T = moments[0].size(-1)
        return self.pair_log_gate(moments, T - 1, T)[..., 0, :]  # (B, H, T): the last query's gates


@GATES.register("ega-leaky")
class LeakyEnergyGate(EnergyGate):
    """DIAGNOSTIC, not a model (``ega-leaky``): EGA-1 with the energy z-normalised over the
    whole sequence (:func:`sequence_znorm`) instead of its causal prefix.

        e~_j = (e_j - mean_{i<T} e_i) / sqrt(var_{i<T} e_i + eps)

    Key j's gate then depends on tokens after j, and so does every earlier query's output:
    the model reads the future. The papers' unusually large gains (+0.09 to +0.10 nats from
    12 k parameters) would follow from such a leak; this gate measures how much it fakes.
    Same parameters as EGA-1.
    """

    normalise = staticmethod(sequence_znorm)

    def __init__(self, d_model: int, n_head: int, **gate_init: float) -> None:
        super().__init__(d_model, n_head, projections=1, **gate_init)


@GATES.register("flux")
class FluxGate(EnergyGate):
    """Spectral-flux gate: the EGA-1 energy's rate of change drives the gate.

        s_j = |e_j - e_{j-1}|,  e_j = w.x_j + b  (s_0 = 0)

    The paper's "spectral flux" ablation read as the absolute first difference of the
    per-head energy along time (causal: j and j-1). H (d + 1) + 2 H parameters per layer.
    """

    def __init__(self, d_model: int, n_head: int, **gate_init: float) -> None:
        super().__init__(d_model, n_head, projections=1, **gate_init)

    def signal(self, x: Tensor, k: Tensor) -> Tensor:
        e = self.energy(x)  # (B, H, T)
        previous = torch.cat([e[..., :1], e[..., :-1]], dim=-1)  # e_{j-1}, with e_{-1} = e_0
        return torch.abs(e - previous)


@GATES.register("phase")
class PhaseCoherenceGate(KeyGate):
    """Phase-coherence gate: how well key j keeps the phase of key j-1.

        z_j = k_j[0::2] + i k_j[1::2]   (head dims read as hd/2 complex numbers)
        s_j = mean_i Re(z_{j,i} conj(z_{j-1,i})) / (|z_{j,i}| |z_{j-1,i}| + eps)
            = mean_i cos(phase difference of pair i)

    with z_{-1} = z_0 (s_0 = 1). Reads the keys after projection, before RoPE or lagging.
    The simplest causal reading of the paper's "phase coherence information"; only tau and
    alpha are learned (2 H parameters per layer). O(T hd) per head; the intermediates are
    recomputed in the backward pass rather than kept.
    """

    recompute_signal = True

    def __init__(self, n_head: int, *, eps: float = 1e-6, **gate_init: float) -> None:
        super().__init__(n_head, **gate_init)
        self.eps = eps

    @classmethod
    def from_shape(cls, name: str, *, d_model: int, n_head: int, **gate_init: float) -> KeyBias | None:
        if (d_model // n_head) % 2:
            raise InputError(
                "phase-coherence gate needs an even head dimension d_model / n_head (keys read as pairs), "
                f"got {d_model // n_head}"
            )
        return super().from_shape(name, d_model=d_model, n_head=n_head, **gate_init)

    def signal(self, x: Tensor, k: Tensor) -> Tensor:
        k = k.float()
        prev = torch.cat([k[..., :1, :], k[..., :-1, :]], dim=-2)  # k_{j-1}, (B, H, T, hd)
        kr, ki, pr, pi = k[..., 0::2], k[..., 1::2], prev[..., 0::2], prev[..., 1::2]
        real = kr * pr + ki * pi  # Re(z conj(z_prev)), (B, H, T, hd/2)
        magnitude = torch.sqrt((kr * kr + ki * ki) * (pr * pr + pi * pi) + self.eps**2)
        return (real / magnitude).mean(dim=-1)  # (B, H, T)


def daubechies_lowpass(name: str) -> Tensor:
    """Scaling (low-pass) filter of Daubechies db2 (4 taps) or db4 (8 taps), reconstruction
    order h_0..h_{M-1} (sum = sqrt 2, unit norm)."""
    if name == "db2":
        r3, norm = math.sqrt(3.0), 4.0 * math.sqrt(2.0)
        taps = [(1 + r3) / norm, (3 + r3) / norm, (3 - r3) / norm, (1 - r3) / norm]
    elif name == "db4":
        taps = [
            0.23037781330885523,
            0.7148465705525415,
            0.6308807679295904,
            -0.02798376941698385,
            -0.18703481171888114,
            0.030841381835986965,
            0.032883011666982945,
            -0.010597401784997278,
        ]
    else:
        raise InputError(f"unknown Daubechies filter {name!r}; known: db2, db4")
    return torch.tensor(taps, dtype=torch.float64)


def daubechies_highpass(name: str) -> Tensor:
    """Wavelet (high-pass) filter g_k = (-1)^k h_{M-1-k} (quadrature mirror of the scaling filter)."""
    h = daubechies_lowpass(name)
    signs = torch.tensor([(-1.0) ** k for k in range(len(h))], dtype=torch.float64)
    return signs * h.flip(0)


MORLET_TAPS = 16
MORLET_OMEGA_INIT = math.pi / 3  # period 6 characters: about one English word and its space
MORLET_SIGMA_INIT = 2.0


def morlet_filter(omega: Tensor, sigma: Tensor, taps: int = MORLET_TAPS) -> tuple[Tensor, Tensor]:
    """Real and imaginary parts of an admissible (zero-mean) Morlet filter over ``taps`` lags,
    centred on the middle of the window c = (taps-1)/2:

        psi_m = env_m (exp(i omega (m - c)) - kappa),  env_m = exp(-(m - c)^2 / (2 sigma^2)),
        kappa = sum_m env_m exp(i omega (m - c)) / sum_m env_m   (so that sum_m psi_m = 0)
    """
    t = torch.arange(taps, dtype=torch.float32, device=omega.device) - (taps - 1) / 2
    env = torch.exp(-(t**2) / (2 * sigma**2))
    cos, sin = torch.cos(omega * t), torch.sin(omega * t)
    kappa_re, kappa_im = (env * cos).sum() / env.sum(), (env * sin).sum() / env.sum()
    return env * (cos - kappa_re), env * (sin - kappa_im)


@registered_as({kind: {"kind": kind} for kind in ("db2", "db4", "morlet-fixed", "morlet-param")})
class WaveletEnergyGate(KeyGate):
    """Wavelet-energy gate (EGA-DB2, EGA-DB4, EGA-M-F, EGA-M-P).

        r_{j,c} = sum_{m<M} psi_m x_{j-(M-1)+m, c}      (causal FIR along time, channel c)
        s_j     = mean_c |r_{j,c}|^2                    (mean squared response)

    x is the layer's normalised input (zero before the start). psi is the Daubechies
    wavelet (high-pass) filter ``db2`` (M = 4) or ``db4`` (M = 8), real; or a complex
    Morlet filter (M = 16 taps, :func:`morlet_filter`, |r|^2 = Re^2 + Im^2) with omega =
    pi/3, sigma = 2 fixed (``morlet-fixed``) or learned per layer (``morlet-param``; sigma =
    exp(log_sigma), truncated to the 16-tap window). The energy is shared by the heads
    (the paper: "mean squared response"); each head has its own tau and alpha, so these
    gates cost 2 H parameters per layer (+2 for morlet-param).

    Computed without the (B, d, T) responses, through the local autocorrelation of x
    (an exact identity, since the energy is quadratic in x):

        s_j = sum_{m<M} sum_{l<M-m} c_l(m) A_{j-(M-1)+m}(l),   A_t(l) = mean_c x_{t,c} x_{t+l,c}
        c_0(m) = |psi_m|^2,   c_l(m) = 2 Re(psi_m conj(psi_{m+l}))  (l > 0)

    i.e. M lagged channel-means of x (O(T d M), transient (B, T, d) products only) and one
    small convolution over time of the (B, M, T) autocorrelations (O(T M^2)); the filter,
    learned or not, enters only through the M x M weights c.
    """

    def __init__(self, d_model: int, n_head: int, *, kind: str, **gate_init: float) -> None:
        super().__init__(n_head, **gate_init)
        self.kind = kind
        self.d_model = d_model
        if kind in ("db2", "db4"):
            self.register_buffer("filter", daubechies_highpass(kind).float(), persistent=False)
        elif kind == "morlet-fixed":
            re, im = morlet_filter(torch.tensor(MORLET_OMEGA_INIT), torch.tensor(MORLET_SIGMA_INIT))
            self.register_buffer("filter", torch.stack([re, im]), persistent=False)  # (2, M)
        elif kind == "morlet-param":
            self.omega = nn.Parameter(torch.tensor(MORLET_OMEGA_INIT))
            self.log_sigma = nn.Parameter(torch.tensor(math.log(MORLET_SIGMA_INIT)))
        else:
            raise InputError(f"unknown wavelet gate {kind!r}; known: db2, db4, morlet-fixed, morlet-param")

    def filters(self) -> Tensor:
        """The wavelet filters psi, one row per output: ``(1, M)`` real (Daubechies) or
        ``(2, M)`` real and imaginary parts (Morlet, learned or fixed)."""
        if self.kind == "morlet-param":
            return torch.stack(morlet_filter(self.omega, torch.exp(self.log_sigma)))  # (2, M)
        return self.filter.view(-1, self.filter.size(-1))  # (1 or 2, M)

    def _pair_weights(self) -> Tensor:
        """c[l, m] = (2 - [l = 0]) Re(psi_m conj(psi_{m+l})) for m + l < M, else 0: (M, M)."""
        psi = self.filters().float()  # (n_out, M): n_out = 1 (real) or 2 (Re, Im)
        taps = psi.size(-1)
        rows = []
        for lag in range(taps):
            products = (psi[:, : taps - lag] * psi[:, lag:]).sum(0)  # Re(psi_m conj psi_{m+lag}), (M - lag,)
            rows.append(F.pad(products * (1.0 if lag == 0 else 2.0), (0, lag)))
        return torch.stack(rows)  # (M lags, M taps)

    def signal(self, x: Tensor, k: Tensor | None) -> Tensor:
        c = self._pair_weights()
        taps = c.size(0)
        B, T, _ = x.shape
        # A_t(l) = mean_c x_{t,c} x_{t+l,c}: (B, M, T), zero where t + l >= T (never used: causal).
        autocorrelation = torch.stack(
            [
                F.pad((x[:, : T - lag] * x[:, lag:]).mean(-1), (0, lag)) if lag < T else x.new_zeros(B, T)
                for lag in range(taps)
            ],
            dim=1,
        )
        padded = F.pad(autocorrelation, (taps - 1, 0))  # zeros before the start
        # conv1d cross-correlates: s_j = sum_{l, m} c[l, m] A_{j-(M-1)+m}(l).
        return F.conv1d(padded, c.unsqueeze(0))  # (B, 1, T)

    def wavelet_parameters(self) -> dict[str, Tensor]:
        if self.kind != "morlet-param":
            return {}
        return {"omega": self.omega.detach(), "sigma": torch.exp(self.log_sigma.detach())}


def wavelet_direction(kind: str, d_model: int) -> Tensor:
    """A fixed unit direction u in embedding space (width d) built from a wavelet's coefficients,
    tiled: u_c = psi_{c mod M} / ||.||, c = 0..d-1.

    psi is the Daubechies wavelet (high-pass) filter (``db2``: M = 4, ``db4``: M = 8) or the
    real part of the fixed Morlet filter (``morlet``: M = 16, omega = pi/3, sigma = 2,
    :func:`morlet_filter`). Tiling keeps the coefficients' values and their zero sum over
    each period (so u is orthogonal to the constant direction when M divides d).
    """
    if kind in ("db2", "db4"):
        psi = daubechies_highpass(kind).float()
    elif kind == "morlet":
        psi = morlet_filter(torch.tensor(MORLET_OMEGA_INIT), torch.tensor(MORLET_SIGMA_INIT))[0]
    else:
        raise InputError(f"unknown wavelet direction {kind!r}; known: db2, db4, morlet")
    u = psi[torch.arange(d_model) % psi.numel()]  # (d,)
    return u / u.norm()


@registered_as({f"{kind}-dir": {"kind": kind} for kind in ("db2", "db4", "morlet")})
class WaveletDirectionGate(KeyGate):
    """EGA with its learned direction w replaced by a fixed wavelet direction in embedding
    space (``db2-dir``, ``db4-dir``, ``morlet-dir``):

        e_j = u . x_j,   u = :func:`wavelet_direction` (the filter tiled to width d, unit norm)

    then EGA's causal z-normalisation and gate, tau and alpha learned per head. The papers'
    "the optimal energy direction is data-adaptive and non-sinusoidal" read as: the
    structured bases fix the *direction* of the energy, not a filter over time. The energy
    is shared by the heads (one u); 2 H parameters per layer. O(T d).
    """

    def __init__(self, d_model: int, n_head: int, *, kind: str, **gate_init: float) -> None:
        super().__init__(n_head, **gate_init)
        self.kind = kind
        self.register_buffer("direction", wavelet_direction(kind, d_model), persistent=False)

    def signal(self, x: Tensor, k: Tensor | None) -> Tensor:
        return (x.float() @ self.direction).unsqueeze(1)  # (B, 1, T)


class OutputGate(nn.Module):
    """Head-wise sigmoid gate on the attention output (Qiu et al. 2025, "Gated Attention for LLMs").

        y_{i,h} <- y_{i,h} sigmoid(w_h . x_i + b_h)

    for query position i (causal: x_i only), applied to each head's SDPA output before the
    output projection. Not a key gate (it does not change the attention weights). H (d + 1)
    parameters per layer; b = 0 at initialisation (gates start at about 1/2).
    """

    def __init__(self, d_model: int, n_head: int) -> None:
        super().__init__()
        self.proj = nn.Linear(d_model, n_head)

    def forward(self, x: Tensor) -> Tensor:
        return torch.sigmoid(self.proj(x)).transpose(1, 2).unsqueeze(-1)  # (B, H, T, 1)


def build_gate(
    name: str, *, d_model: int, n_head: int, tau_init: float = DEFAULT_TAU_INIT, alpha_init: float = DEFAULT_ALPHA_INIT
) -> KeyBias | None:
    """Instantiate the key gate ``name`` of the registry ("none" -> None)."""
    init = {"tau_init": tau_init, "alpha_init": alpha_init}
    return GATES.get(name).from_shape(name, d_model=d_model, n_head=n_head, **init)
