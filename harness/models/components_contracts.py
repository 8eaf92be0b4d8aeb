"""The slots' contracts checked on a probe batch, before a model runs a component: what each
call returns against what its slot promises the attention (:class:`~harness.models.gates.KeyBias`,
:class:`~harness.models.positional.PositionalEncoding`, :class:`~harness.models.scoring.Scoring`).

With B = 2, T the probe's length, d the width, H the heads and hd = d / H, each component of a
built model is called with random fp32 inputs of the shapes the attention passes, in eval mode
and without gradients, and its output is checked for

- shape: a gate's ``key_bias(x (B, T, d), k (B, H, T, hd))`` -> (B, H, T) (a
  :class:`~harness.models.gates.KeyGate`'s ``signal`` -> (B, H, T) or (B, 1, T); (B, H, K, T)
  when its components multiply); a scoring's ``forward(k)`` -> (B, H, T, hd); a position's
  ``embedding(T)`` -> (T, d), ``rotate(q, k)`` -> q's and k's shapes, ``attention_bias(T)`` ->
  (H, T, T), ``lag_curvature()`` / ``lag_slope()`` -> (H,), ``pair_bias(i (T,), j (T,))`` ->
  (H, T, T), each hook also None where the contract allows it;
- dtype: float32, the dtype of the inputs (the fold and the fused call take the bias as it
  comes: a float64 or an integer bias is a breach, not a cast);
- finiteness: no NaN and no inf (a position's ``attention_bias`` may hold -inf: it is the causal
  mask), since one NaN in a key's bias reaches every later output.

A call that raises is a breach too, with its exception. Each breach names the slot, the class,
the call, what was expected and what came back, so that a wrong shape is refused in one line
instead of surfacing as an error of the fused attention that names neither (``harness zoo check``
and a study's pre-flight exit 2 on it). Cost: one call per component, no model forward.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from harness.models.gates import KeyBias, KeyGate
from harness.models.positional import PositionalEncoding
from harness.models.scoring import Scoring

#: Batch of the probe inputs.
CONTRACT_BATCH = 2


@dataclass(frozen=True)
class ContractBreach:
    """One call of a component whose output breaks its slot's contract."""

    slot: str
    component: str  # module.Class
    call: str  # key_bias(x, k), forward(k), embedding(T), ...
    expected: str
    returned: str

    def describe(self) -> str:
        return f"the {self.slot} slot's {self.component}.{self.call} returned {self.returned}; {self.expected}"


def _class_name(obj: Any) -> str:
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def _shape(t: Any) -> str:
    return f"shape {tuple(t.shape)}" if isinstance(t, Tensor) else f"a {type(t).__name__}"


@dataclass(frozen=True)
class Expected:
    """What a call may return: tensors whose shape ``fits``, spelled ``names`` = ``shape``
    (None too when ``may_be_none``; -inf too when ``mask``: a causal mask)."""

    names: str
    shape: str
    fits: Callable[[tuple[int, ...]], bool]
    may_be_none: bool = False
    mask: bool = False

    @classmethod
    def exactly(cls, names: str, shape: tuple[int, ...], **kw: Any) -> Expected:
        return cls(names, str(shape), lambda s: s == shape, **kw)

    def words(self) -> str:
        none = " (or None)" if self.may_be_none else ""
        return f"the slot expects {self.names} = {self.shape}, float32 and finite{none}"

    def breach(self, out: Any) -> str | None:
        """Why ``out`` breaks it, or None when it keeps it."""
        if out is None:
            return None if self.may_be_none else "None"
        if not isinstance(out, Tensor) or not self.fits(tuple(out.shape)):
            return _shape(out)
        if out.dtype != torch.float32:
            return f"{_shape(out)} of dtype {out.dtype}"
        bad = torch.isnan(out) | (torch.isposinf(out) if self.mask else ~torch.isfinite(out))
        if bool(bad.any()):
            return f"{_shape(out)} with {int(bad.sum())} of {out.numel()} values not finite"
        return None


class _Checker:
    """Calls components and keeps a :class:`ContractBreach` per broken call."""

    def __init__(self) -> None:
        self.breaches: list[ContractBreach] = []

    def call(self, slot: str, obj: Any, call: str, fn: Callable[[], Any], expected: Expected) -> bool:
        """Call ``fn``; True when its output keeps ``expected``."""
        try:
            out = fn()
        except Exception as exc:  # noqa: BLE001 - the component's reason, named with its slot and class
            why = f"raised {type(exc).__name__}: {exc}"
        else:
            why = expected.breach(out)
        if why is not None:
            self.breaches.append(ContractBreach(slot, _class_name(obj), call, expected.words(), why))
        return why is None


def _check_position(check: _Checker, position: PositionalEncoding, B: int, T: int, H: int, d: int, hd: int) -> None:
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(B, H, T, hd, generator=g), torch.randn(B, H, T, hd, generator=g)
    cpu, heads = torch.device("cpu"), Expected.exactly("(B, H, T, hd)", (B, H, T, hd))
    table = Expected.exactly("(T, d)", (T, d), may_be_none=True)
    check.call("position", position, "embedding(T)", lambda: position.embedding(T, cpu), table)
    check.call("position", position, "rotate(q, k)[0] (q)", lambda: position.rotate(q, k)[0], heads)
    check.call("position", position, "rotate(q, k)[1] (k)", lambda: position.rotate(q, k)[1], heads)
    mask = Expected.exactly("(H, T, T)", (H, T, T), may_be_none=True, mask=True)
    check.call("position", position, "attention_bias(T)", lambda: position.attention_bias(T, cpu, torch.float32), mask)
    per_head = Expected.exactly("(H,)", (H,), may_be_none=True)
    check.call("position", position, "lag_curvature()", position.lag_curvature, per_head)
    check.call("position", position, "lag_slope()", position.lag_slope, per_head)
    at = torch.arange(T)
    pairs = Expected.exactly("(H, C, S)", (H, T, T), may_be_none=True)
    check.call("position", position, "pair_bias(i, j)", lambda: position.pair_bias(at, at), pairs)


def _signal_expected(gate: KeyGate, B: int, T: int, H: int) -> Expected:
    if gate.components_multiply:  # K components per head, each gated, the gates multiplied
        fits = lambda s: len(s) == 4 and s[0] == B and s[1] in (H, 1) and s[3] == T  # noqa: E731
        return Expected("(B, H or 1, K, T)", f"({B}, {H} or 1, K, {T})", fits)
    return Expected("(B, H, T) or (B, 1, T)", f"{(B, H, T)} or {(B, 1, T)}", lambda s: s in ((B, H, T), (B, 1, T)))


def _check_gate(check: _Checker, gate: KeyBias, B: int, T: int, H: int, d: int, hd: int) -> None:
    if gate.pairwise:  # the zoo's ega-qnorm: a bias per query and key, asked for in blocks by the attention
        return
    g = torch.Generator().manual_seed(1)
    x, k = torch.randn(B, T, d, generator=g), torch.randn(B, H, T, hd, generator=g)
    if isinstance(gate, KeyGate) and not check.call(
        "gate", gate, "signal(x, k)", lambda: gate.signal(x, k), _signal_expected(gate, B, T, H)
    ):
        return  # the bias is made of the signal: its breach is the one to name
    check.call("gate", gate, "key_bias(x, k)", lambda: gate.key_bias(x, k), Expected.exactly("(B, H, T)", (B, H, T)))


def _check_scoring(check: _Checker, scoring: Scoring, B: int, T: int, H: int, d: int, hd: int) -> None:
    k = torch.randn(B, H, T, hd, generator=torch.Generator().manual_seed(2))
    check.call("scoring", scoring, "forward(k)", lambda: scoring(k), Expected.exactly("(B, H, T, hd)", (B, H, T, hd)))


@torch.no_grad()
def check_contracts(model: nn.Module, *, length: int, batch: int = CONTRACT_BATCH) -> tuple[ContractBreach, ...]:
    """Every breach of its slot's contract by a component of ``model`` (a
    :class:`~harness.models.transformer.CharTransformer`) on probe inputs of ``length`` tokens
    (the module docstring); empty when every component keeps it. The position is called once
    (one instance serves every layer), the gate and the scoring of each layer once per class."""
    size = model.size
    B, T, H, d = batch, length, size.n_head, size.d_model
    hd = d // H
    check = _Checker()
    was_training = model.training
    model.eval()
    try:
        _check_position(check, model.position, B, T, H, d, hd)
        seen: set[type] = set()
        for block in model.blocks:
            for slot, component in (("gate", block.attn.gate), ("scoring", block.attn.scoring)):
                if component is None or type(component) in seen:
                    continue
                seen.add(type(component))
                (_check_gate if slot == "gate" else _check_scoring)(check, component, B, T, H, d, hd)
    finally:
        model.train(was_training)
    return tuple(dict.fromkeys(check.breaches))


__all__ = ["CONTRACT_BATCH", "ContractBreach", "Expected", "check_contracts"]
