"""The decoder-only character transformer every variant shares, and :func:`build_model`.

    idx (B, T) -> E[idx] (+ position.embedding) -> dropout
      -> L x [ x + attn(LN(x)),  x + MLP(LN(x)) ]          pre-LN blocks, GELU MLP (4d)
      -> LN -> logits = x E^T                               tied input/output embedding E

Variants differ only in the components plugged into the attention slots
(:mod:`harness.models.attention`).

One initialisation recipe for every variant, nanoGPT's (GPT-2's), measured against nanoGPT
at its own recipe (docs/benchmarks.md, "Baseline parity with nanoGPT"):

- every weight matrix and embedding table ~ N(0, INIT_STD^2), INIT_STD = 0.02: the token
  embedding E (unscaled, tied to the output head, so the logits start near zero and the
  loss at step 0 is about log V), the learned position table, the linear layers;
- residual projections (attention and MLP outputs) ~ N(0, INIT_STD^2 / (2 L)), so the
  residual stream's variance does not grow with depth;
- zero biases, unit LayerNorm gains; the components' own parameters (gate tau and alpha,
  MOPE omega and sigma, lag weights) as each component initialises them;
- unit-amplitude encodings (sinusoidal, MOPE: cos/sin pairs of amplitude 1) enter
  multiplied by :data:`FIXED_POSITION_SCALE` = INIT_STD sqrt 2, so that their RMS per
  dimension (1/sqrt 2 for a cos/sin pair) equals the tokens' initial scale, as the learned
  table's does: at amplitude 1 they would outweigh the token identity 35 to 1 at step 0.

It replaced Vaswani's convention (E ~ N(0, 1/d) entering as sqrt(d) E, encodings at
amplitude 1), which trained 0.06-0.10 nats worse than nanoGPT at equal parameters,
tokens and schedule: measured one change at a time, the token-embedding scale was the
cause; the biases of the Linear and LayerNorm layers made no difference and stay.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from harness.errors import InputError
from harness.models.attention import CausalSelfAttention
from harness.models.components import build_component
from harness.models.gates import DEFAULT_ALPHA_INIT, DEFAULT_TAU_INIT, KeyBias, KeyGate, OutputGate, build_gate
from harness.models.positional import MorletScales, PositionalEncoding, build_position
from harness.models.scoring import LaggedScoring, Scoring, build_scoring
from harness.models.sizes import ModelSize, get_size, resolve_size
from harness.models.variants import GATES, POSITIONS, SCORINGS, Variant, get_variant

#: Standard deviation of every weight matrix and embedding table at initialisation (nanoGPT, GPT-2).
INIT_STD = 0.02
#: Factor on unit-amplitude encodings (sinusoidal, MOPE): per-dimension RMS 1/sqrt 2 -> INIT_STD.
FIXED_POSITION_SCALE = INIT_STD * math.sqrt(2)


class MLP(nn.Module):
    """Position-wise feed-forward: Linear(d, 4d) -> GELU -> Linear(4d, d) -> dropout."""

    def __init__(self, d_model: int, dropout: float) -> None:
        super().__init__()
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.proj = nn.Linear(4 * d_model, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.dropout(self.proj(F.gelu(self.fc(x))))


class Block(nn.Module):
    """Pre-LN transformer block: x + attn(LN(x)), then x + MLP(LN(x))."""

    def __init__(self, attn: CausalSelfAttention, d_model: int, dropout: float) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(d_model)
        self.attn = attn
        self.ln_2 = nn.LayerNorm(d_model)
        self.mlp = MLP(d_model, dropout)

    def forward(self, x: Tensor, position: nn.Module, attn_bias: Tensor | None) -> tuple[Tensor, Tensor | None]:
        a, log_g = self.attn(self.ln_1(x), position, attn_bias)
        x = x + a
        return x + self.mlp(self.ln_2(x)), log_g


def build_slot_position(
    variant: Variant, d: int, H: int, block_size: int, component_dir: str | None
) -> PositionalEncoding:
    """The position component of ``variant``: the zoo's, or a user's (:mod:`harness.models.components`)."""
    if variant.position in POSITIONS:
        return build_position(variant.position, d_model=d, n_head=H, block_size=block_size, mope_init=variant.mope_init)
    offered = {"d_model": d, "n_head": H, "block_size": block_size}
    return build_component("position", variant.position, search_dir=component_dir, offered=offered)


def build_slot_gate(
    variant: Variant, d: int, H: int, gate_init: dict[str, float], component_dir: str | None
) -> KeyBias | None:
    """The gate of ``variant`` (None for ``none``); ``gate_init``: the ``tau_init`` / ``alpha_init``
    a config sets (the zoo's gates take their defaults for the others; a user's gate must take them)."""
    if variant.gate in GATES:  # the zoo's, "none" included
        init = {"tau_init": DEFAULT_TAU_INIT, "alpha_init": DEFAULT_ALPHA_INIT, **gate_init}
        return build_gate(variant.gate, d_model=d, n_head=H, **init)
    offered = {"d_model": d, "n_head": H}
    return build_component("gate", variant.gate, search_dir=component_dir, offered=offered, required=gate_init)


def build_slot_scoring(variant: Variant, d: int, H: int, component_dir: str | None) -> Scoring:
    """The scoring of ``variant``; a user's scoring gets ``lags`` when the variant sets that option."""
    if variant.scoring in SCORINGS:
        return build_scoring(variant.scoring, n_head=H, lags=variant.lags)
    required = {"lags": variant.options["lags"]} if "lags" in variant.options else {}
    offered = {"d_model": d, "n_head": H}
    return build_component("scoring", variant.scoring, search_dir=component_dir, offered=offered, required=required)


class CharTransformer(nn.Module):
    """Decoder-only character transformer of one :class:`Variant` at one :class:`ModelSize`.

    ``forward(idx)`` maps token ids (B, T), T <= block_size, to logits (B, T, vocab_size).
    Build it with :func:`build_model`. A user's component in a slot is found on the Python
    path, else in ``component_dir`` (:mod:`harness.models.components`).
    """

    def __init__(
        self,
        variant: Variant,
        size: ModelSize,
        *,
        vocab_size: int,
        block_size: int,
        dropout: float = 0.0,
        attention_dropout: float | None = None,
        tau_init: float | None = None,
        alpha_init: float | None = None,
        component_dir: str | None = None,
    ) -> None:
        super().__init__()
        self.variant = variant
        self.size = size
        self.block_size = block_size
        self.vocab_size = vocab_size
        d, H, L = size.d_model, size.n_head, size.n_layer
        attention_dropout = dropout if attention_dropout is None else attention_dropout

        gate_init = {k: v for k, v in (("tau_init", tau_init), ("alpha_init", alpha_init)) if v is not None}

        self.wte = nn.Embedding(vocab_size, d)
        self.position = build_slot_position(variant, d, H, block_size, component_dir)
        # Unit-amplitude encodings enter at the tokens' initial scale (module docstring).
        self.position_scale = FIXED_POSITION_SCALE if self.position.unit_amplitude else 1.0
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(
            Block(
                CausalSelfAttention(
                    d,
                    H,
                    gate=build_slot_gate(variant, d, H, gate_init, component_dir),
                    scoring=build_slot_scoring(variant, d, H, component_dir),
                    output_gate=OutputGate(d, H) if variant.output_gate else None,
                    dropout=dropout,
                    attention_dropout=attention_dropout,
                ),
                d,
                dropout,
            )
            for _ in range(L)
        )
        self.ln_f = nn.LayerNorm(d)
        self._init_weights(L)

    def _init_weights(self, n_layer: int) -> None:
        """The shared recipe of the module docstring (nanoGPT's ``_init_weights``)."""
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=INIT_STD)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
        for block in self.blocks:
            # Residual projections scaled down so the residual stream's variance does not grow with depth (GPT-2).
            for proj in (block.attn.proj, block.mlp.proj):
                nn.init.normal_(proj.weight, std=INIT_STD / math.sqrt(2 * n_layer))

    def embed(self, idx: Tensor) -> Tensor:
        """The residual stream's input before dropout: E[idx] + position_scale PE, (B, T, d)."""
        x = self.wte(idx)  # (B, T, d)
        pe = self.position.embedding(idx.size(1), idx.device)
        if pe is not None:
            x = x + (self.position_scale * pe).to(x.dtype)
        return x

    # -- forward ---------------------------------------------------------------------
    def _run(self, idx: Tensor, collect_gates: bool, vocab_multiple: int = 1) -> tuple[Tensor, list[Tensor]]:
        B, T = idx.shape
        if T > self.block_size:
            raise InputError(f"input length {T} exceeds the model's block_size {self.block_size}")
        x = self.drop(self.embed(idx))  # (B, T, d)
        attn_bias = self.position.attention_bias(T, idx.device, x.dtype)  # (H, T, T) or None
        gates: list[Tensor] = []
        for block in self.blocks:
            x, log_g = block(x, self.position, attn_bias)
            if collect_gates and log_g is not None and isinstance(block.attn.gate, KeyGate):
                gates.append(torch.exp(log_g))
        x = self.ln_f(x)
        return self._output(x, vocab_multiple), gates

    def _output(self, x: Tensor, vocab_multiple: int) -> Tensor:
        """Tied output layer: x (B, T, d) -> logits x E^T (B, T, V). With ``vocab_multiple`` > 1 the
        table gets zero rows up to a multiple of it, whose logits are -inf (a bias of -inf): the
        matmul is aligned for the tensor cores, and a softmax or cross-entropy over (B, T, V')
        equals the one over (B, T, V) (exp(-inf) = 0, and so is the padding's gradient)."""
        V = self.vocab_size
        padding = -V % vocab_multiple
        if not padding:
            return F.linear(x, self.wte.weight)  # (B, T, V)
        weight = F.pad(self.wte.weight, (0, 0, 0, padding))  # (V', d)
        mask = F.pad(x.new_zeros(V, dtype=torch.float32), (0, padding), value=float("-inf"))  # (V',)
        return F.linear(x, weight, mask)  # (B, T, V')

    def forward(self, idx: Tensor, vocab_multiple: int = 1) -> Tensor:
        """Token ids (B, T) -> logits (B, T, vocab_size); with ``vocab_multiple`` > 1, (B, T, V')
        with V' the vocabulary rounded up to a multiple of it and the padding's logits -inf
        (:meth:`_output`; the mixed-precision training plan's output layer)."""
        return self._run(idx, collect_gates=False, vocab_multiple=vocab_multiple)[0]

    def forward_with_gates(self, idx: Tensor) -> tuple[Tensor, Tensor | None]:
        """Logits and the key-gate values g_j in (0, 1), (L, B, H, T); None without a sigmoid key gate
        (:class:`KeyGate`: a plain :class:`KeyBias` has no gate values)."""
        logits, gates = self._run(idx, collect_gates=True)
        return logits, (torch.stack(gates) if gates else None)

    # -- introspection for logging ------------------------------------------------------
    def key_gates(self) -> list[KeyGate]:
        """The sigmoid key gates of the layers (:class:`KeyGate`: tau, alpha, gate values)."""
        return [block.attn.gate for block in self.blocks if isinstance(block.attn.gate, KeyGate)]

    def gate_parameters(self) -> dict[str, Tensor]:
        """Per layer and head gate parameters, ``{"tau": [L, H], "alpha": [L, H]}`` ({} without a key gate)."""
        gates = self.key_gates()
        if not gates:
            return {}
        return {
            "tau": torch.stack([g.tau.detach() for g in gates]).clone(),
            "alpha": torch.stack([g.alpha.detach() for g in gates]).clone(),
        }

    def wavelet_parameters(self) -> dict[str, Tensor]:
        """The learned Morlet gate filter per layer, ``{"omega": [L], "sigma": [L]}``
        (``morlet-param`` only; {} for every other gate, whose filters are fixed)."""
        per_layer = [p for g in self.key_gates() if (p := getattr(g, "wavelet_parameters", dict)())]
        if not per_layer:
            return {}
        return {name: torch.stack([p[name] for p in per_layer]).clone() for name in per_layer[0]}

    def mope_parameters(self) -> dict[str, Tensor]:
        """MOPE's ``{"omega": [d/2], "sigma": [d/2]}``, relative MOPE's ``[H]`` per head ({} without MOPE)."""
        if not isinstance(self.position, MorletScales):
            return {}
        return {"omega": self.position.omega.detach().clone(), "sigma": self.position.sigma.detach().clone()}

    def num_parameters(self) -> int:
        """Number of trainable parameters (the tied embedding counted once)."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    def no_weight_decay_parameter_names(self) -> set[str]:
        """Parameters an optimiser should not decay: vectors (biases, LayerNorm, tau, alpha,
        MOPE and Morlet parameters) and the lag weights (decay would pull lag 0 from 1 to 0)."""
        names = set()
        for name, module in self.named_modules():
            for pname, p in module.named_parameters(recurse=False):
                full = f"{name}.{pname}" if name else pname
                if p.ndim < 2 or isinstance(module, LaggedScoring):
                    names.add(full)
        return names


_OVERRIDES = ("tau_init", "alpha_init", "attention_dropout", "n_layer", "n_head", "d_model", "component_dir")


def build_model(
    variant: str | Variant,
    *,
    size: str | ModelSize = "nano",
    vocab_size: int,
    block_size: int,
    dropout: float = 0.0,
    **overrides: Any,
) -> CharTransformer:
    """Build the character transformer of ``variant`` (a registry name or a :class:`Variant`).

    Parameters
    ----------
    variant : registry name (``harness.models.VARIANTS``) or a :func:`make_variant` result.
    size : preset name (``harness.models.SIZES``) or a :class:`ModelSize`.
    vocab_size, block_size : vocabulary size and longest input length (<= the size's
        ``max_context_length``).
    dropout : dropout on embeddings, residual branches and (unless ``attention_dropout``
        is given) attention weights.
    overrides : ``tau_init`` / ``alpha_init`` (key-gate initial values; None = default 0 / 1),
        ``attention_dropout`` (dropout on attention weights; on CPU any non-zero value sends
        SDPA to its slow math path), ``n_layer`` / ``n_head`` / ``d_model`` (change the preset),
        ``component_dir`` (the folder searched for a user component's module after the Python
        path: :mod:`harness.models.components`).

    Raises
    ------
    InputError
        Unknown variant, size or override, a block size beyond the preset, an impossible
        shape (width not divisible by heads, odd MOPE/sinusoidal width, odd RoPE head dim), or
        a user component that cannot be imported or constructed.

    Examples
    --------
    >>> model = build_model("ega-mope", size="nano", vocab_size=65, block_size=128, tau_init=0.35)
    >>> model(torch.zeros(2, 16, dtype=torch.long)).shape
    torch.Size([2, 16, 65])
    """
    v = variant if isinstance(variant, Variant) else get_variant(variant)  # a Variant is resolved already
    s = get_size(size)
    unknown = sorted(set(overrides) - set(_OVERRIDES))
    if unknown:
        raise InputError(
            f"unknown build_model override(s) {', '.join(unknown)}; known overrides: {', '.join(_OVERRIDES)}"
        )
    s = resolve_size(s, **{key: overrides.get(key) for key in ("n_layer", "n_head", "d_model")})
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 1:
        raise InputError(f"vocab_size must be a positive integer, got {vocab_size!r}")
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise InputError(f"block_size must be a positive integer, got {block_size!r}")
    if block_size > s.max_context_length:
        raise InputError(
            f"block_size {block_size} exceeds the max_context_length {s.max_context_length} of size {s.name!r}; "
            "use a shorter context or another size"
        )
    if not 0.0 <= dropout < 1.0:
        raise InputError(f"dropout must be in [0, 1), got {dropout!r}")
    init = {key: overrides[key] for key in ("tau_init", "alpha_init") if overrides.get(key) is not None}
    attention_dropout = overrides.get("attention_dropout")
    if attention_dropout is not None and not 0.0 <= attention_dropout < 1.0:
        raise InputError(f"attention_dropout must be in [0, 1), got {attention_dropout!r}")
    return CharTransformer(
        v,
        s,
        vocab_size=vocab_size,
        block_size=block_size,
        dropout=dropout,
        attention_dropout=attention_dropout,
        component_dir=overrides.get("component_dir"),
        **init,
    )
