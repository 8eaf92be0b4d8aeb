"""Positional encodings: the *position* slot of the attention.

Every encoding implements the hooks it needs of one small interface, so that a single
attention module serves them all:

- ``embedding(T)`` -> ``(T, d)`` added to the token embeddings (sinusoidal, learned, MOPE);
- ``rotate(q, k)`` -> rotated ``q, k`` inside every attention layer (RoPE);
- ``attention_bias(T)`` -> ``(H, T, T)`` additive float mask, causality included (no
  component of the zoo needs one: a hook for biases that fold into nothing);
- ``lag_curvature()`` -> ``(H,)`` gamma_h >= 0: the score of query i and key j gains
  -gamma_h (i - j)^2 (relative MOPE's Gaussian lag envelope);
- ``lag_slope()`` -> ``(H,)`` m_h >= 0: the score gains -m_h (i - j) (ALiBi).

The attention folds the lag penalties into its fused kernel
(:func:`harness.models.attention.lag_penalised_attention`): no T x T tensor.

Each encoding registers its name by the decorator above its class (``@POSITIONS.register("rope")``,
:mod:`harness.models.slots`) and builds itself from the model's shape (:meth:`PositionalEncoding.from_shape`):
a new encoding is one class here and its test (docs/contracts.md, "Adding a positional encoding").

Positions are ``b = 0, 1, ..., T-1`` within the window. Costs: O(T d) per forward for the
additive encodings, RoPE, relative MOPE and ALiBi.
"""

from __future__ import annotations

import math
from array import array
from typing import ClassVar

import torch
from torch import Tensor, nn

from harness.errors import InputError
from harness.models.heads import select_heads
from harness.models.slots import POSITIONS
from harness.models.variants import MOPE_INITS


def sinusoidal_frequencies(n_pairs: int, *, base: float = 10000.0) -> Tensor:
    """omega_i = base^(-2i/d) for i = 0..n_pairs-1 (d = 2 n_pairs): Vaswani et al.'s frequencies."""
    return base ** (-torch.arange(n_pairs, dtype=torch.float32) * 2.0 / (2 * n_pairs))


def _interleave(even: Tensor, odd: Tensor) -> Tensor:
    """(..., n) and (..., n) -> (..., 2n) with ``even`` at 2i and ``odd`` at 2i+1."""
    return torch.stack((even, odd), dim=-1).flatten(-2)


def rotate_pairs(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate each pair (2p, 2p+1) of x (B, H, T, hd) by the angle whose cos and sin broadcast
    against (B, H, T, hd/2): (x_2p, x_2p+1) -> (x_2p cos - x_2p+1 sin, x_2p sin + x_2p+1 cos)."""
    even, odd = x[..., 0::2], x[..., 1::2]  # (B, H, T, hd/2) each
    return _interleave(even * cos - odd * sin, even * sin + odd * cos)


def rotate_pairs_backward(grad: Tensor, x: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The gradients of :func:`rotate_pairs` with respect to x, cos and sin given the gradient of its
    output: the rotation back (by -angle) of ``grad`` (B, H, T, hd), and, for cos and sin,
    sum(grad_2p x_2p + grad_2p+1 x_2p+1) and sum(grad_2p+1 x_2p - grad_2p x_2p+1) per pair,
    (B, H, T, hd/2) (the caller sums them to the shapes of its cos and sin)."""
    g_even, g_odd = grad[..., 0::2], grad[..., 1::2]
    even, odd = x[..., 0::2], x[..., 1::2]
    dx = _interleave(g_even * cos + g_odd * sin, g_odd * cos - g_even * sin)
    return dx, g_even * even + g_odd * odd, g_odd * even - g_even * odd


def _check_even(kind: str, width: int, what: str) -> None:
    if width % 2:
        raise InputError(f"{kind} positional encoding needs an even {what} (pairs of dimensions), got {width}")


class PositionalEncoding(nn.Module):
    """The contract of the *position* slot; every hook is a no-op here (this is also NoPE,
    ``position="none"``). A subclass overrides the hooks it needs; the harness guarantees
    around them:

    - construction: by keyword, with the slot's arguments that ``__init__`` takes (all of
      them when it takes ``**kwargs``): ``d_model``, ``n_head``, ``block_size`` (the longest
      input). This base takes them and keeps them (``self.d_model`` ...), so a subclass needs no
      ``__init__`` of its own. One instance is shared by every layer of the model;
    - :meth:`embedding` ``(T, d)`` is added to the token embeddings once, before the first
      block (times ``INIT_STD sqrt 2`` when :attr:`unit_amplitude`, so that cos/sin pairs
      enter at the tokens' initial scale); row b may depend on the position b only;
    - :meth:`rotate` gets each layer's q and k ``(B, H, T, hd)`` after projection (the gate
      has read k already) and must return tensors of the same shapes whose row b depends on
      rows <= b only; set :attr:`transforms_qk` when it is not the identity;
    - :meth:`attention_bias` ``(H, T, T)`` replaces the causal mask (so it must put -inf
      above the diagonal itself): the slow path, a T x T tensor;
    - :meth:`lag_curvature`, :meth:`lag_slope`, :meth:`pair_bias` are folded by the attention
      without a T x T tensor (relative MOPE, ALiBi, the Morlet kernel);
    - initialisation: every ``nn.Linear`` and ``nn.Embedding`` in the model, a component's
      included, is re-initialised by the shared recipe (N(0, 0.02^2), zero bias); parameters
      made with ``nn.Parameter`` keep the component's own values;
    - causality: ``harness zoo check``, and every study naming a user component before any
      trial, perturbs token t and refuses a component through which an output before t moves.
    """

    transforms_qk: ClassVar[bool] = False  # True when rotate() is not the identity
    #: True when the variant option ``mope_init`` initialises this encoding (the Morlet ones).
    takes_mope_init: ClassVar[bool] = False
    # True when embedding() has amplitude 1 by construction (cos/sin pairs, not a learned table):
    # the model then scales it to the token embeddings' initial scale (harness.models.transformer).
    unit_amplitude: ClassVar[bool] = False

    def __init__(self, d_model: int | None = None, n_head: int | None = None, block_size: int | None = None) -> None:
        # Takes the slot's keywords (and keeps them), so that a subclass needs no __init__ of its own.
        super().__init__()
        self.d_model = d_model
        self.n_head = n_head
        self.block_size = block_size

    @classmethod
    def from_shape(cls, *, d_model: int, n_head: int, block_size: int, mope_init: str = "random") -> PositionalEncoding:
        """The encoding for a model of this shape: how the zoo builds the component it registered
        (:data:`harness.models.slots.POSITIONS`). Here: with the slot's keywords, as a subclass
        without an ``__init__`` of its own takes them."""
        return cls(d_model=d_model, n_head=n_head, block_size=block_size)

    def embedding(self, T: int, device: torch.device) -> Tensor | None:
        """Additive encoding ``(T, d)`` for positions 0..T-1, or None."""
        return None

    def rotate(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        """Position-dependent transform of queries and keys ``(B, H, T, hd)``."""
        return q, k

    def rotate_heads(self, q: Tensor, k: Tensor, heads: list[int]) -> tuple[Tensor, Tensor]:
        """:meth:`rotate` for heads ``heads`` only: q, k ``(B, len(heads), T, hd)``. The same
        for every head here; an encoding whose rotation differs per head overrides it."""
        return self.rotate(q, k)

    def pair_rotation(self, T: int, device: torch.device) -> tuple[Tensor, Tensor] | None:
        """When :meth:`rotate` turns each pair of dimensions (2p, 2p+1) of head h at position t by an
        angle theta[h, t, p]: its cos and sin, ``(H, T, 1 or hd/2)``, else None. The lag fold
        then rotates inside its kernel and keeps no rotated copy of q and k
        (:mod:`harness.models.lag_kernel`); an encoding may leave it None at no cost but memory."""
        return None

    def attention_bias(self, T: int, device: torch.device, dtype: torch.dtype) -> Tensor | None:
        """Additive attention mask ``(H, T, T)`` including causality, or None (plain causal)."""
        return None

    def lag_curvature(self) -> Tensor | None:
        """gamma ``(H,)``: the score of (i, j) gains -gamma_h (i - j)^2; None for no lag penalty."""
        return None

    def lag_slope(self) -> Tensor | None:
        """m ``(H,)``: the score of (i, j) gains -m_h (i - j); None for no linear lag penalty."""
        return None

    def fixed_lag_slope(self) -> tuple[float, ...] | None:
        """:meth:`lag_slope` as Python numbers when it is fixed (not learned), else None: the
        attention plans its calls from them without reading a tensor (no graph break)."""
        return None

    def pair_bias(self, i: Tensor, j: Tensor) -> Tensor | None:
        """Additive score bias ``(H, C, S)`` for query positions i (C,) and key positions j (S,) that
        folds into nothing (a function of i - j that is no polynomial); None when there is none.
        The attention asks for it in chunks of queries (:attr:`pairwise`), never for T x T."""
        return None

    #: True when :meth:`pair_bias` is not None.
    pairwise: ClassVar[bool] = False


@POSITIONS.register("sinusoidal")
class SinusoidalPositionalEncoding(PositionalEncoding):
    """Fixed sinusoidal encoding, the papers' baseline, added to the token embeddings.

        PE(b, 2i)   = cos(omega_i b)
        PE(b, 2i+1) = sin(omega_i b),     omega_i = 10000^(-2i/d)

    Note the pair convention (cos at 2i, sin at 2i+1): it is MOPE's, so that MOPE with
    sigma -> infinity and these frequencies is exactly this encoding. No parameters.
    """

    unit_amplitude = True

    def __init__(self, d_model: int) -> None:
        super().__init__()
        _check_even("sinusoidal", d_model, "width d_model")
        self.register_buffer("omega", sinusoidal_frequencies(d_model // 2), persistent=False)

    @classmethod
    def from_shape(cls, *, d_model: int, n_head: int, block_size: int, mope_init: str = "random") -> PositionalEncoding:
        return cls(d_model)

    def embedding(self, T: int, device: torch.device) -> Tensor:
        b = torch.arange(T, device=device, dtype=torch.float32)
        phase = b[:, None] * self.omega[None, :]  # (T, d/2)
        return _interleave(torch.cos(phase), torch.sin(phase))  # (T, d)


@POSITIONS.register("learned")
class LearnedPositionalEncoding(PositionalEncoding):
    """Learned absolute position table P (block_size x d), PE(b) = P[b] (GPT-2, nanoGPT's ``wpe``).

    Initialised like the token embedding, P ~ N(0, 0.02^2) (the model's shared recipe,
    :data:`harness.models.transformer.INIT_STD`), unscaled, so positions and tokens start at
    the same scale and learn at the same rate. block_size * d parameters.
    """

    def __init__(self, d_model: int, block_size: int, *, init_std: float = 0.02) -> None:
        super().__init__()
        self.table = nn.Embedding(block_size, d_model)
        nn.init.normal_(self.table.weight, std=init_std)

    @classmethod
    def from_shape(cls, *, d_model: int, n_head: int, block_size: int, mope_init: str = "random") -> PositionalEncoding:
        return cls(d_model, block_size)

    def embedding(self, T: int, device: torch.device) -> Tensor:
        return self.table.weight[:T]


@POSITIONS.register("rope")
class RotaryPositionalEncoding(PositionalEncoding):
    """RoPE (Su et al. 2021): rotate each pair (2i, 2i+1) of q and k by angle theta_i b.

        q'(b)_{2i}   = q_{2i} cos(theta_i b) - q_{2i+1} sin(theta_i b)
        q'(b)_{2i+1} = q_{2i} sin(theta_i b) + q_{2i+1} cos(theta_i b),   theta_i = 10000^(-2i/hd)

    (same for k), so q'(i).k'(j) depends on i - j only. O(T hd) per layer, no parameters.
    """

    transforms_qk = True

    def __init__(self, head_dim: int, base: float = 10000.0) -> None:
        super().__init__()
        _check_even("rotary", head_dim, "head dimension d_model / n_head")
        self.register_buffer("theta", sinusoidal_frequencies(head_dim // 2, base=base), persistent=False)

    @classmethod
    def from_shape(cls, *, d_model: int, n_head: int, block_size: int, mope_init: str = "random") -> PositionalEncoding:
        return cls(d_model // n_head)

    def rotate(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        T = q.size(-2)
        angle = torch.arange(T, device=q.device, dtype=torch.float32)[:, None] * self.theta[None, :]  # (T, hd/2)
        cos, sin = torch.cos(angle).to(q.dtype), torch.sin(angle).to(q.dtype)
        return rotate_pairs(q, cos, sin), rotate_pairs(k, cos, sin)


def alibi_slope_values(n_head: int) -> list[float]:
    """Head slopes m_h of ALiBi (Press et al. 2022) as Python numbers rounded to fp32: the
    geometric sequence 2^(-8h/H) for a power-of-two H, and the paper's interleaving of the next
    power's slopes otherwise. Plain Python, so that a model built on the meta device has them."""

    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-(2.0 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(n_head).is_integer():
        slopes = power_of_two(n_head)
    else:
        closest = 2 ** math.floor(math.log2(n_head))
        slopes = power_of_two(closest) + power_of_two(2 * closest)[0::2][: n_head - closest]
    return array("f", slopes).tolist()  # the values of the fp32 buffer, exactly


def alibi_slopes(n_head: int) -> Tensor:
    """:func:`alibi_slope_values` as an fp32 tensor (H,)."""
    return torch.tensor(alibi_slope_values(n_head), dtype=torch.float32)


@POSITIONS.register("alibi")
class ALiBiPositionalEncoding(PositionalEncoding):
    """ALiBi (Press et al. 2022): a linear distance penalty added to the attention logits.

        score(h, i, j) += -m_h (i - j)   for j <= i   (causal)

    with the fixed slopes m_h of :func:`alibi_slopes`. -m_h (i - j) = -m_h i + m_h j: the
    query's term cancels in the softmax, so the penalty is a per-key bias m_h j, which the
    attention folds into its fused kernel (:meth:`lag_slope`, centred on each chunk of
    queries for fp32 precision; steep heads attend only to the keys within reach). No
    T x T tensor, no parameters.
    """

    def __init__(self, n_head: int) -> None:
        super().__init__()
        self._slope_values = tuple(alibi_slope_values(n_head))
        self.register_buffer("slopes", torch.tensor(self._slope_values, dtype=torch.float32), persistent=False)

    @classmethod
    def from_shape(cls, *, d_model: int, n_head: int, block_size: int, mope_init: str = "random") -> PositionalEncoding:
        return cls(n_head)

    def lag_slope(self) -> Tensor:
        return self.slopes

    def fixed_lag_slope(self) -> tuple[float, ...]:
        return self._slope_values


# Linguistic scales (characters) for MOPE's "scales" initialisation, one group of pairs (or heads) each.
LINGUISTIC_SCALES: dict[str, float] = {"character": 3.0, "word": 6.0, "clause": 30.0, "sentence": 100.0}


def linguistic_scale_grid(n: int) -> Tensor:
    """n scales (characters) in four equal groups at :data:`LINGUISTIC_SCALES`; within a group
    s spreads geometrically over [s / sqrt 2, s sqrt 2] so that no two start identical (a group
    of one sits at s / sqrt 2; with n < 4 the largest scales are left out)."""
    scale = torch.empty(n)
    groups = torch.tensor_split(torch.arange(n), len(LINGUISTIC_SCALES))
    for index, s in zip(groups, LINGUISTIC_SCALES.values(), strict=False):
        if len(index):
            scale[index] = torch.logspace(math.log10(s / math.sqrt(2)), math.log10(s * math.sqrt(2)), len(index))
    return scale


class MorletScales(PositionalEncoding):
    """Base of the Morlet encodings: one learned frequency omega and width
    sigma = exp(log_sigma) (positive) per slot, a dimension pair for
    :class:`MorletPositionalEncoding` and a head for :class:`MorletRelativePositionalEncoding`
    and :class:`MorletBiasPositionalEncoding`, initialised by ``init`` as
    :class:`MorletPositionalEncoding` describes. ``init="scales-frozen"`` is ``"scales"`` with
    omega and sigma frozen (``requires_grad=False``: not trained, not counted as parameters)."""

    takes_mope_init = True

    def __init__(self, n_slots: int, init: str) -> None:
        super().__init__()
        if init not in MOPE_INITS:
            raise InputError(f"unknown MOPE initialisation {init!r}; known: {', '.join(MOPE_INITS)}")
        self.init = init
        frozen = init == "scales-frozen"  # the linguistic scales, fixed: buffers' role, parameters' names
        self.omega = nn.Parameter(torch.empty(n_slots), requires_grad=not frozen)
        self.log_sigma = nn.Parameter(torch.empty(n_slots), requires_grad=not frozen)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        n = self.omega.numel()
        if self.init == "random":
            u_omega, u_sigma = torch.rand(n), torch.rand(n)
            self.omega.copy_(torch.exp(math.log(1e-4) * (1.0 - u_omega)))  # log-uniform [1e-4, 1]
            self.log_sigma.copy_(math.log(1e4) * u_sigma)  # log-uniform [1, 1e4]
        else:
            scale = linguistic_scale_grid(n)
            self.omega.copy_(2 * math.pi / scale)
            self.log_sigma.copy_(torch.log(scale))

    @property
    def sigma(self) -> Tensor:
        return torch.exp(self.log_sigma)


@POSITIONS.register("mope")
class MorletPositionalEncoding(MorletScales):
    """MOPE: learned Morlet (Gaussian-windowed sinusoid) encoding, added to the token embeddings.

        MOPE(b, 2i)   = cos(omega_i b) exp(-b^2 / (2 sigma_i^2))
        MOPE(b, 2i+1) = sin(omega_i b) exp(-b^2 / (2 sigma_i^2))

    for position b = 0..T-1 and pair i = 0..d/2-1; omega_i and sigma_i are learned
    (sigma_i = exp(log_sigma_i) stays positive). With sigma_i -> infinity and
    omega_i = 10000^(-2i/d) this is :class:`SinusoidalPositionalEncoding`. d parameters.

    Reading of the formula: b is the absolute position within the window, as written in the
    paper (its lag kernel exp(-tau^2/(4 sigma^2)) cos(omega tau) follows from exactly this),
    so a pair fades out for positions beyond a few sigma_i.

    Initialisation (``init``):

    - ``"random"``: omega_i log-uniform on [1e-4, 1] rad/char (the sinusoidal range) and
      sigma_i log-uniform on [1, 1e4] chars, independently: a wide range of scales;
    - ``"scales"``: the pairs are split into four equal groups at the linguistic scales s of
      :data:`LINGUISTIC_SCALES` (character 3, word 6, clause 30, sentence 100 characters),
      with sigma_i = s and omega_i = 2 pi / s (one period per scale, omega sigma = 2 pi, close
      to the usual Morlet omega_0 ~ 6); within a group s spreads geometrically over
      [s / sqrt 2, s sqrt 2] so that no two pairs start identical;
    - ``"scales-frozen"``: ``"scales"``, never trained (the papers' "fixed scale
      initialisation" read as fixed scales).

    Scale: the model adds this encoding multiplied by 0.02 sqrt 2 (``unit_amplitude``), the
    token embeddings' initial scale under the shared recipe (nanoGPT's N(0, 0.02) tables).
    That recipe helped every variant, MOPE included (docs/benchmarks.md, "Baseline parity with nanoGPT"),
    but MOPE's amplitude now starts about 35 times below its old amplitude of 1. Added at
    amplitude 1 beside N(0, 0.02) tokens instead, it trains 0.46 nats worse at nanoGPT's CPU recipe.
    """

    unit_amplitude = True

    def __init__(self, d_model: int, init: str = "random") -> None:
        _check_even("Morlet (MOPE)", d_model, "width d_model")
        super().__init__(d_model // 2, init)

    @classmethod
    def from_shape(cls, *, d_model: int, n_head: int, block_size: int, mope_init: str = "random") -> PositionalEncoding:
        return cls(d_model, init=mope_init)

    def embedding(self, T: int, device: torch.device) -> Tensor:
        b = torch.arange(T, device=device, dtype=torch.float32)[:, None]  # (T, 1)
        phase = b * self.omega[None, :]  # (T, d/2)
        envelope = torch.exp(-(b**2) / (2 * self.sigma[None, :] ** 2))  # (T, d/2)
        return _interleave(torch.cos(phase) * envelope, torch.sin(phase) * envelope)  # (T, d)


@POSITIONS.register("mope-rel")
class MorletRelativePositionalEncoding(MorletScales):
    """Relative MOPE (``mope-rel``): the Morlet lag kernel of the papers, per head, on q.k.

    The papers derive MOPE's effect in *lag* space, C(Delta) ~ exp(-Delta^2 / (4 sigma^2))
    cos(omega Delta), and tie it to RoPE (phase) and ALiBi (locality). Read as a relative
    scheme, each head h gets one learned frequency omega_h and width sigma_h, and for query
    i, key j, Delta = i - j >= 0:

        score_ij = q_i^T R(-omega_h Delta) k_j / sqrt(hd)  -  Delta^2 / (4 sigma_h^2)

    R(theta) rotates every pair (2p, 2p+1) of the head by theta: q_i is rotated by
    omega_h i and k_j by omega_h j, as RoPE does (here one frequency per head), and
    R(omega i)^T R(omega j) = R(-omega Delta). So the attention weight is

        a_ij  ~  exp(-Delta^2 / (4 sigma_h^2))  x  exp(q_i^T R(-omega_h Delta) k_j / sqrt(hd))

    the Morlet kernel's two factors: its Gaussian envelope multiplies the weights (a
    log-envelope bias, ALiBi's place), and its phase omega_h Delta turns the content score
    (RoPE's place). For a query aligned with a key, q^T R(theta) k = |q||k| cos(theta +
    phi): the score oscillates as cos(omega_h Delta), under the envelope. omega_h -> 0 and
    sigma_h -> infinity give NoPE (plain causal attention); no absolute position is used, so
    a token late in the window gets the same positional signal as an early one.

    Hooks: :meth:`rotate` applies R (O(T hd) per layer), :meth:`lag_curvature` returns
    gamma_h = 1 / (4 sigma_h^2) and the attention folds -gamma_h (i - j)^2 exactly into its
    fused kernel (:func:`~harness.models.attention.lag_penalised_attention`; no T x T tensor).
    One (omega, sigma) per head, shared by all layers as ALiBi's slopes are: 2 H parameters
    (sigma_h = exp(log_sigma_h) stays positive).

    Initialisation (``init``), as :class:`MorletPositionalEncoding`'s, over heads instead of
    dimension pairs: ``"random"`` draws omega_h log-uniform on [1e-4, 1] rad/char and
    sigma_h log-uniform on [1, 1e4] chars; ``"scales"`` puts the heads in four groups at the
    linguistic scales s (character 3, word 6, clause 30, sentence 100 characters) with
    sigma_h = s and omega_h = 2 pi / s, spread over [s / sqrt 2, s sqrt 2] within a group
    (8 heads: two per scale).
    """

    transforms_qk = True

    def __init__(self, n_head: int, head_dim: int, init: str = "random") -> None:
        _check_even("relative Morlet (mope-rel)", head_dim, "head dimension d_model / n_head")
        super().__init__(n_head, init)

    @classmethod
    def from_shape(cls, *, d_model: int, n_head: int, block_size: int, mope_init: str = "random") -> PositionalEncoding:
        return cls(n_head, d_model // n_head, init=mope_init)

    def rotate(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        return self.rotate_heads(q, k, list(range(self.omega.numel())))

    def rotate_heads(self, q: Tensor, k: Tensor, heads: list[int]) -> tuple[Tensor, Tensor]:
        cos, sin = (select_heads(t, heads, dim=0).to(q.dtype) for t in self.pair_rotation(q.size(-2), q.device))
        return rotate_pairs(q, cos, sin), rotate_pairs(k, cos, sin)

    def pair_rotation(self, T: int, device: torch.device) -> tuple[Tensor, Tensor]:
        """cos and sin of omega_h t, (H, T, 1): the same angle for every pair of head h."""
        b = torch.arange(T, device=device, dtype=torch.float32)
        angle = (self.omega.float()[:, None] * b[None, :]).unsqueeze(-1)  # (H, T, 1)
        return torch.cos(angle), torch.sin(angle)

    def lag_curvature(self) -> Tensor:
        return 0.25 * torch.exp(-2.0 * self.log_sigma.float())  # 1 / (4 sigma^2), (H,)


@POSITIONS.register("mope-bias")
class MorletBiasPositionalEncoding(MorletScales):
    """Additive Morlet bias (``mope-bias``): the papers' lag kernel added to the scores, per head.

        score_ij += a_h exp(-Delta^2 / (4 sigma_h^2)) cos(omega_h Delta),   Delta = i - j >= 0

    The other relative reading of MOPE's "Morlet kernel in lag space" beside ``mope-rel``
    (which multiplies the weights by the envelope and turns the scores by the phase): here the
    kernel C(Delta) itself is a bias on the logits, as ALiBi's line is, one learned amplitude
    a_h, frequency omega_h and width sigma_h per head, shared by all layers (3 H parameters).
    a_h = 1 at initialisation (the kernel adds at most one nat to the score of the nearby keys);
    omega and sigma by ``init`` as :class:`MorletPositionalEncoding`'s, over heads. a -> 0 gives
    NoPE. A Gaussian times a cosine of i - j is no low-rank term, so it does not fold: the
    attention adds :meth:`pair_bias` to the scores chunk by chunk
    (:func:`~harness.models.attention.pairwise_biased_attention`), never a T x T tensor.
    """

    pairwise = True

    def __init__(self, n_head: int, init: str = "random") -> None:
        super().__init__(n_head, init)
        self.amplitude = nn.Parameter(torch.ones(n_head))

    @classmethod
    def from_shape(cls, *, d_model: int, n_head: int, block_size: int, mope_init: str = "random") -> PositionalEncoding:
        return cls(n_head, init=mope_init)

    def pair_bias(self, i: Tensor, j: Tensor) -> Tensor:
        lag = (i[:, None] - j[None, :]).float()  # (C, S): Delta = i - j
        gamma = 0.25 * torch.exp(-2.0 * self.log_sigma.float())[:, None, None]  # (H, 1, 1): 1 / (4 sigma^2)
        omega = self.omega.float()[:, None, None]  # (H, 1, 1)
        return self.amplitude.float()[:, None, None] * torch.exp(-gamma * lag * lag) * torch.cos(omega * lag)


@POSITIONS.register("none")
class NoPositionalEncoding(PositionalEncoding):
    """NoPE: no positional information beyond the causal mask (Kazemnejad et al. 2023)."""


def build_position(
    name: str, *, d_model: int, n_head: int, block_size: int, mope_init: str = "random"
) -> PositionalEncoding:
    """Instantiate the position component ``name`` of the registry for a model of this shape."""
    return POSITIONS.get(name).from_shape(d_model=d_model, n_head=n_head, block_size=block_size, mope_init=mope_init)
