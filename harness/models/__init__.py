"""The model zoo: positional encodings, key gates, scoring rules, one causal attention,
the character transformer, and the variant and size registries.

Importing this package is light (the registries are plain data); the torch parts are
loaded on first use of :func:`build_model` or a component class.

Each slot's public base class is the contract a user's component meets: :class:`KeyBias`
(and the sigmoid gate :class:`KeyGate`) for the gate, :class:`PositionalEncoding` for the
position, :class:`Scoring` for the scoring; a variant names a user's component as
``package.module:Class`` (:mod:`harness.models.components`), and :func:`check_variant` runs the
checks every study runs before it trains (``harness zoo check``).

Examples
--------
>>> from harness.models import VARIANTS, SIZES, build_model, make_variant
>>> model = build_model("ega-mope", size="nano", vocab_size=65, block_size=256)
>>> rope_ega = build_model(make_variant("rope-ega", position="rope", gate="ega"), vocab_size=65, block_size=256)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.lazy_exports import lazy_exports
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

# The registries above are plain data, imported with the package; the names below need
# torch and load on first use (harness.lazy_exports).
__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "transformer": ["build_model", "CharTransformer"],
        "attention": ["CausalSelfAttention", "key_biased_attention", "lag_penalised_attention"],
        "numerics": ["flush_denormals"],
        "positional": [
            "PositionalEncoding",
            "SinusoidalPositionalEncoding",
            "LearnedPositionalEncoding",
            "RotaryPositionalEncoding",
            "ALiBiPositionalEncoding",
            "MorletPositionalEncoding",
            "MorletRelativePositionalEncoding",
            "NoPositionalEncoding",
            "build_position",
        ],
        "gates": [
            "KeyBias",
            "KeyGate",
            "EnergyGate",
            "FluxGate",
            "PhaseCoherenceGate",
            "WaveletEnergyGate",
            "WaveletDirectionGate",
            "QuadraticEnergyGate",
            "LeakyEnergyGate",
            "OutputGate",
            "causal_znorm",
            "sequence_znorm",
            "build_gate",
        ],
        "scoring": ["Scoring", "DotScoring", "LaggedScoring", "build_scoring"],
        "components": ["resolve_component", "build_component", "is_user_component", "COMPONENT_GROUP"],
        "checks": ["check_variant", "causality_probe", "VariantCheck", "CausalityResult"],
    },
    eager=[
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
    ],
)

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs
    from harness.models.attention import CausalSelfAttention, key_biased_attention, lag_penalised_attention
    from harness.models.checks import CausalityResult, VariantCheck, causality_probe, check_variant
    from harness.models.components import COMPONENT_GROUP, build_component, is_user_component, resolve_component
    from harness.models.gates import (
        EnergyGate,
        FluxGate,
        KeyBias,
        KeyGate,
        LeakyEnergyGate,
        OutputGate,
        PhaseCoherenceGate,
        QuadraticEnergyGate,
        WaveletDirectionGate,
        WaveletEnergyGate,
        build_gate,
        causal_znorm,
        sequence_znorm,
    )
    from harness.models.numerics import flush_denormals
    from harness.models.positional import (
        ALiBiPositionalEncoding,
        LearnedPositionalEncoding,
        MorletPositionalEncoding,
        MorletRelativePositionalEncoding,
        NoPositionalEncoding,
        PositionalEncoding,
        RotaryPositionalEncoding,
        SinusoidalPositionalEncoding,
        build_position,
    )
    from harness.models.scoring import DotScoring, LaggedScoring, Scoring, build_scoring
    from harness.models.transformer import CharTransformer, build_model
