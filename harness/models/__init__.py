"""The model zoo: positional encodings, key gates, scoring rules, one causal attention,
the character transformer, and the variant and size registries.

Importing this package is light (the registries are plain data); the torch parts are
loaded on first use of :func:`build_model` or a component class.

>>> from harness.models import VARIANTS, SIZES, build_model, make_variant
>>> model = build_model("ega-mope", size="nano", vocab_size=65, block_size=256)
>>> rope_ega = build_model(make_variant("rope-ega", position="rope", gate="ega"), vocab_size=65, block_size=256)
"""

from __future__ import annotations

import importlib
from typing import Any

from harness.models.sizes import SIZES, ModelSize, get_size
from harness.models.variants import (
    DIAGNOSTIC_LABEL,
    GATES,
    POSITIONS,
    READINGS,
    SCORINGS,
    VARIANTS,
    Reading,
    Variant,
    get_variant,
    is_diagnostic,
    make_variant,
)

# Lazily imported names (they need torch) -> defining module.
_LAZY = {
    "build_model": "transformer",
    "CharTransformer": "transformer",
    "CausalSelfAttention": "attention",
    "key_biased_attention": "attention",
    "lag_penalised_attention": "attention",
    "PositionalEncoding": "positional",
    "SinusoidalPositionalEncoding": "positional",
    "LearnedPositionalEncoding": "positional",
    "RotaryPositionalEncoding": "positional",
    "ALiBiPositionalEncoding": "positional",
    "MorletPositionalEncoding": "positional",
    "MorletRelativePositionalEncoding": "positional",
    "NoPositionalEncoding": "positional",
    "build_position": "positional",
    "KeyGate": "gates",
    "EnergyGate": "gates",
    "FluxGate": "gates",
    "PhaseCoherenceGate": "gates",
    "WaveletEnergyGate": "gates",
    "WaveletDirectionGate": "gates",
    "QuadraticEnergyGate": "gates",
    "LeakyEnergyGate": "gates",
    "OutputGate": "gates",
    "causal_znorm": "gates",
    "sequence_znorm": "gates",
    "build_gate": "gates",
    "DotScoring": "scoring",
    "LaggedScoring": "scoring",
    "build_scoring": "scoring",
}

__all__ = [
    "SIZES",
    "ModelSize",
    "get_size",
    "VARIANTS",
    "Variant",
    "get_variant",
    "make_variant",
    "is_diagnostic",
    "READINGS",
    "Reading",
    "DIAGNOSTIC_LABEL",
    "POSITIONS",
    "GATES",
    "SCORINGS",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(f"harness.models.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'harness.models' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
