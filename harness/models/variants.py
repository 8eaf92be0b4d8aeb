"""Variants: named combinations of the three attention slots, held as data (no torch import).

A :class:`Variant` names one component per slot:

- ``position``: ``sinusoidal`` (fixed, cos at 2i, sin at 2i+1), ``learned``, ``rope``,
  ``alibi``, ``mope`` (learned Morlet), ``none`` (NoPE);
- ``gate`` (key gate on the attention, a per-key logit bias): ``none``, ``ega`` (EGA-1,
  one linear energy projection), ``ega-2`` / ``ega-4`` (2 / 4 projection scales), ``db2`` /
  ``db4`` (Daubechies wavelet energy), ``morlet-fixed`` / ``morlet-param`` (Morlet wavelet
  energy, fixed or learned), ``flux`` (rate of change of the energy), ``phase`` (phase
  coherence of consecutive keys);
- ``scoring``: ``dot`` or ``lagged`` (keys causally convolved over a few lags);

plus ``options``: ``mope_init`` (``"random"`` or ``"scales"``, MOPE only), ``lags``
(number of lags of ``lagged`` scoring, default 4) and ``output_gate`` (``True``: the
head-wise sigmoid gate on the attention output of Qiu et al. 2025).

``VARIANTS`` holds the papers' models and their baselines; :func:`make_variant` names any
other combination (e.g. ``make_variant("rope-ega", position="rope", gate="ega")``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from harness.errors import InputError

#: The three slots of the attention a variant fills.
Slot = Literal["position", "gate", "scoring"]
SLOTS: tuple[str, ...] = get_args(Slot)

#: The components of each slot (one Literal each: a config names them as plain strings).
PositionName = Literal["sinusoidal", "learned", "rope", "alibi", "mope", "none"]
GateName = Literal["none", "ega", "ega-2", "ega-4", "db2", "db4", "morlet-fixed", "morlet-param", "flux", "phase"]
ScoringName = Literal["dot", "lagged"]
POSITIONS: tuple[str, ...] = get_args(PositionName)
GATES: tuple[str, ...] = get_args(GateName)
SCORINGS: tuple[str, ...] = get_args(ScoringName)
MOPE_INITS: tuple[str, ...] = ("random", "scales")
OPTIONS: tuple[str, ...] = ("mope_init", "lags", "output_gate")
DEFAULT_LAGS = 4


@dataclass(frozen=True)
class Variant:
    """One model of the zoo: a component per slot plus options.

    Build it with :func:`make_variant` (which validates the names) or take one from
    :data:`VARIANTS`. ``options`` is a plain dict (picklable for Ray); the variant is
    hashable all the same.
    """

    name: str
    position: PositionName
    gate: GateName = "none"
    scoring: ScoringName = "dot"
    options: dict[str, Any] = field(default_factory=dict)

    def __hash__(self) -> int:
        return hash((self.name, self.position, self.gate, self.scoring, tuple(sorted(self.options.items()))))

    @property
    def has_key_gate(self) -> bool:
        return self.gate != "none"

    @property
    def output_gate(self) -> bool:
        return bool(self.options.get("output_gate", False))

    @property
    def mope_init(self) -> str:
        return str(self.options.get("mope_init", "random"))

    @property
    def lags(self) -> int:
        return int(self.options.get("lags", DEFAULT_LAGS))

    def describe(self) -> str:
        """Short human description of the slots, e.g. ``mope + ega + lagged(4)``."""
        parts = [f"pos={self.position}", f"gate={self.gate}", f"scoring={self.scoring}"]
        if self.scoring == "lagged":
            parts[-1] += f"({self.lags})"
        parts += [f"{key}={value}" for key, value in sorted(self.options.items()) if key != "lags"]
        return " ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        """Plain dict (for logs, MLflow tags, YAML)."""
        return {
            "name": self.name,
            "position": self.position,
            "gate": self.gate,
            "scoring": self.scoring,
            "options": dict(self.options),
        }


def _check_choice(kind: str, value: Any, choices: tuple[str, ...], variant_name: str) -> None:
    if value not in choices:
        raise InputError(f"variant {variant_name!r}: unknown {kind} {value!r}; known {kind}s: {', '.join(choices)}")


def make_variant(
    name: str, *, position: PositionName, gate: GateName = "none", scoring: ScoringName = "dot", **options: Any
) -> Variant:
    """Validate and build a :class:`Variant` (a named combination of components).

    Examples
    --------
    >>> make_variant("rope-ega", position="rope", gate="ega").describe()
    'pos=rope gate=ega scoring=dot'
    """
    if not isinstance(name, str) or not name:
        raise InputError(f"a variant needs a non-empty name, got {name!r}")
    _check_choice("position", position, POSITIONS, name)
    _check_choice("gate", gate, GATES, name)
    _check_choice("scoring", scoring, SCORINGS, name)
    for key, value in options.items():
        if key not in OPTIONS:
            raise InputError(f"variant {name!r}: unknown option {key!r}; known options: {', '.join(OPTIONS)}")
        if key == "mope_init":
            _check_choice("mope_init", value, MOPE_INITS, name)
            if position != "mope":
                raise InputError(f"variant {name!r}: option mope_init needs position='mope', got position={position!r}")
        elif key == "lags":
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"variant {name!r}: option lags must be a positive integer, got {value!r}")
            if scoring != "lagged":
                raise InputError(f"variant {name!r}: option lags needs scoring='lagged', got scoring={scoring!r}")
        elif key == "output_gate" and not isinstance(value, bool):
            raise InputError(f"variant {name!r}: option output_gate must be true or false, got {value!r}")
    return Variant(name=name, position=position, gate=gate, scoring=scoring, options=dict(options))


# The registry: the two papers' models, their ablations and reference baselines.
VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in (
        # reference baselines (no gate)
        make_variant("baseline", position="sinusoidal"),
        make_variant("learned-pe", position="learned"),
        make_variant("rope", position="rope"),
        make_variant("alibi", position="alibi"),
        make_variant("nope", position="none"),
        # Energy-Gated Attention and its energy ablations (sinusoidal positions)
        make_variant("ega", position="sinusoidal", gate="ega"),
        make_variant("ega-2", position="sinusoidal", gate="ega-2"),
        make_variant("ega-4", position="sinusoidal", gate="ega-4"),
        make_variant("ega-db2", position="sinusoidal", gate="db2"),
        make_variant("ega-db4", position="sinusoidal", gate="db4"),
        make_variant("ega-morlet-fixed", position="sinusoidal", gate="morlet-fixed"),
        make_variant("ega-morlet-param", position="sinusoidal", gate="morlet-param"),
        # Morlet positional encoding and EGA + MOPE with its ablations
        make_variant("mope", position="mope"),
        make_variant("ega-mope", position="mope", gate="ega"),
        make_variant("ega-mope-lagged", position="mope", gate="ega", scoring="lagged"),
        make_variant("ega-mope-scale-init", position="mope", gate="ega", mope_init="scales"),
        make_variant("flux-mope", position="mope", gate="flux"),
        make_variant("phase-mope", position="mope", gate="phase"),
        # prior-art comparator: head-wise sigmoid gate on the attention output
        make_variant("gated-output", position="sinusoidal", output_gate=True),
    )
}


def get_variant(variant: str | Variant) -> Variant:
    """Look up a registry name (a :class:`Variant` passes through).

    Raises :class:`InputError` listing the known names for an unknown one.
    """
    if isinstance(variant, Variant):
        return variant
    try:
        return VARIANTS[variant]
    except (KeyError, TypeError):
        raise InputError(
            f"unknown variant {variant!r}; known variants: {', '.join(VARIANTS)} "
            "(or name a combination with make_variant(name, position=..., gate=..., scoring=...))"
        ) from None
