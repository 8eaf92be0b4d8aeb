"""Variants: named combinations of the three attention slots, held as data (no torch import).

A :class:`Variant` names one component per slot:

- ``position``: ``sinusoidal`` (fixed, cos at 2i, sin at 2i+1), ``learned``, ``rope``,
  ``alibi``, ``mope`` (learned Morlet, absolute position), ``mope-rel`` (learned Morlet
  lag kernel per head: relative position), ``mope-bias`` (the Morlet lag kernel added to
  the scores per head), ``none`` (NoPE);
- ``gate`` (key gate on the attention, a per-key logit bias): ``none``, ``ega`` (EGA-1,
  one linear energy projection), ``ega-2`` / ``ega-4`` (2 / 4 projection scales),
  ``ega-2-pc`` / ``ega-4-pc`` (energy sum_k (w_k.x + b_k)^2 over 2 / 4 learned directions),
  ``ega-2-prod`` / ``ega-4-prod`` (2 / 4 linear energies, each z-normalised and gated, the
  gates multiplied), ``ega-qnorm`` (EGA-1 z-normalised per query over the keys it sees),
  ``db2`` / ``db4`` (Daubechies wavelet energy), ``morlet-fixed`` / ``morlet-param`` (Morlet
  wavelet energy, fixed or learned), ``db2-dir`` / ``db4-dir`` / ``morlet-dir`` (EGA with a
  fixed wavelet direction in embedding space), ``flux`` (rate of change of the energy),
  ``phase`` (phase coherence of consecutive keys), and the diagnostic ``ega-leaky``
  (EGA z-normalised over the whole sequence: it reads future tokens);
- ``scoring``: ``dot`` or ``lagged`` (keys causally convolved over a few lags);

or, in any slot, a user's component: ``package.module:Class`` or a name an installed package
registers (:mod:`harness.models.components`), checked here as a name only (the class is
loaded where the model is built). The zoo's names are those its components register
(:mod:`harness.models.slots`: one registry per slot, filled by the component modules, so
that :func:`make_variant` checks a name against them and a new component needs no line here);

plus ``options``: ``mope_init`` (``"random"``, ``"scales"`` or ``"scales-frozen"``, the
Morlet positions only), ``lags`` (number of lags of ``lagged`` scoring, default 4) and ``output_gate``
(``True``: the head-wise sigmoid gate on the attention output of Qiu et al. 2025).

``VARIANTS`` holds the papers' models, their baselines and the alternative readings of
the papers' vague points (:data:`READINGS`); :func:`make_variant` names any other
combination (e.g. ``make_variant("rope-ega", position="rope", gate="ega")``).

A variant whose gate reads future tokens (:data:`LEAKY_GATES`) is a *diagnostic*, not a
model (:attr:`Variant.diagnostic`): it shows how much a leak would fake. ``harness zoo``
lists it apart, a study spec runs it only with ``allow_diagnostics: true``, and the report
labels its rows "leaks future tokens".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, Literal, get_args

from harness.errors import InputError
from harness.models.component_names import is_import_path, is_user_component
from harness.models.registry import Registry
from harness.models.slots import GATES, POSITIONS, SCORINGS, SLOT_REGISTRIES

#: The three slots of the attention a variant fills.
Slot = Literal["position", "gate", "scoring"]
SLOTS: tuple[str, ...] = get_args(Slot)

# POSITIONS, GATES and SCORINGS (imported above) are the slots' registries: the names a variant
# may give each slot, as its components register them; a config names them as plain strings.
#: Gates that read future tokens, with how: a variant using one is a diagnostic, not a model.
LEAKY_GATES: dict[str, str] = {"ega-leaky": "z-normalises the energy over the whole sequence, future tokens included"}
#: The label of a diagnostic's rows in ``harness zoo`` and in the study report.
DIAGNOSTIC_LABEL = "leaks future tokens"
#: Positions whose parameters ``mope_init`` initialises (the Morlet encodings: ``takes_mope_init``).
MOPE_POSITIONS = POSITIONS.where(attrgetter("takes_mope_init"))
#: Scorings whose number of lags the option ``lags`` sets (``takes_lags``).
LAGGED_SCORINGS = SCORINGS.where(attrgetter("takes_lags"))
#: ``scales-frozen``: the linguistic scales, never trained.
MOPE_INITS: tuple[str, ...] = ("random", "scales", "scales-frozen")
OPTIONS: tuple[str, ...] = ("mope_init", "lags", "output_gate")
DEFAULT_LAGS = 4
#: tau's initial value when a config names none (every key gate's default).
DEFAULT_TAU_INIT = 0.0


@dataclass(frozen=True)
class Variant:
    """One model of the zoo: a component per slot plus options.

    Build it with :func:`make_variant` (which validates the names) or take one from
    :data:`VARIANTS`. ``options`` is a plain dict (picklable for Ray); the variant is
    hashable all the same.
    """

    name: str
    position: str  # a name of POSITIONS, or a user component (harness.models.components)
    gate: str = "none"  # a name of GATES, or a user component
    scoring: str = "dot"  # a name of SCORINGS, or a user component
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

    @property
    def user_components(self) -> dict[str, str]:
        """The slots a user's component fills: slot -> its name (an import path or a registered name).
        An import path is told apart without loading the zoo (torch); an entry-point name is a
        user's unless the zoo has a component of that name."""
        slots = {slot: getattr(self, slot) for slot in SLOTS}
        return {
            slot: name
            for slot, name in slots.items()
            if is_import_path(name) or (is_user_component(name) and name not in SLOT_REGISTRIES[slot])
        }

    @property
    def leaks_future(self) -> bool:
        """True when a component reads tokens after the query (:data:`LEAKY_GATES`)."""
        return self.gate in LEAKY_GATES

    @property
    def diagnostic(self) -> bool:
        """A diagnostic shows what a flaw would fake; it is not a model to compare as one."""
        return self.leaks_future

    def describe(self) -> str:
        """Short human description of the slots, e.g. ``mope + ega + lagged(4)``."""
        parts = [f"pos={self.position}", f"gate={self.gate}", f"scoring={self.scoring}"]
        if self.scoring in LAGGED_SCORINGS:
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


def _check_choice(kind: str, value: Any, choices: Iterable[str], variant_name: str, *, user: bool = False) -> None:
    """``value`` is one of ``choices`` (or, with ``user``, a user component's name)."""
    if value in choices or (user and is_user_component(value)):
        return
    also = " or a user component package.module:Class" if user else ""
    raise InputError(f"variant {variant_name!r}: unknown {kind} {value!r}; known {kind}s: {', '.join(choices)}{also}")


def make_variant(
    name: str,
    *,
    position: str,
    gate: str = "none",
    scoring: str = "dot",
    **options: Any,
) -> Variant:
    """Validate and build a :class:`Variant` (a named combination of components).

    Parameters
    ----------
    name : str
        The variant's name, as a spec or ``harness train --variant`` will call it.
    position : str
        The positional encoding, a name of :data:`POSITIONS` (or a user component).
    gate : str
        The key gate, a name of :data:`GATES` (``"none"``: no gate).
    scoring : str
        A name of :data:`SCORINGS`: ``"dot"``, or ``"lagged"`` (keys causally convolved over ``lags`` lags).
    **options
        ``mope_init`` (a Morlet position's initialisation, one of :data:`MOPE_INITS`),
        ``lags`` (a positive integer, with ``scoring="lagged"``), ``output_gate`` (bool).

    Returns
    -------
    Variant
        Frozen and hashable; :func:`build_model` takes it as it takes a registry name.

    Raises
    ------
    InputError
        An unknown slot value or option, or an option its slots do not allow; the message
        names the variant and lists the known values.

    Examples
    --------
    >>> make_variant("rope-ega", position="rope", gate="ega").describe()
    'pos=rope gate=ega scoring=dot'
    """
    if not isinstance(name, str) or not name:
        raise InputError(f"a variant needs a non-empty name, got {name!r}")
    _check_choice("position", position, POSITIONS, name, user=True)
    _check_choice("gate", gate, GATES, name, user=True)
    _check_choice("scoring", scoring, SCORINGS, name, user=True)
    for key, value in options.items():
        if key not in OPTIONS:
            raise InputError(f"variant {name!r}: unknown option {key!r}; known options: {', '.join(OPTIONS)}")
        if key == "mope_init":
            _check_choice("mope_init", value, MOPE_INITS, name)
            if position not in MOPE_POSITIONS:
                raise InputError(
                    f"variant {name!r}: option mope_init needs position {' or '.join(map(repr, MOPE_POSITIONS))}, "
                    f"got position={position!r}"
                )
        elif key == "lags":
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"variant {name!r}: option lags must be a positive integer, got {value!r}")
            if scoring in SCORINGS and scoring not in LAGGED_SCORINGS:
                raise InputError(
                    f"variant {name!r}: option lags needs scoring={' or '.join(map(repr, LAGGED_SCORINGS))} "
                    f"(or a user scoring), got scoring={scoring!r}"
                )
        elif key == "output_gate" and not isinstance(value, bool):
            raise InputError(f"variant {name!r}: option output_gate must be true or false, got {value!r}")
    return Variant(name=name, position=position, gate=gate, scoring=scoring, options=dict(options))


#: The registry of variants: the two papers' models, their ablations and reference baselines
#: (``harness zoo`` lists them; :func:`make_variant` builds one of your own).
VARIANT_REGISTRY: Registry[Variant] = Registry(
    "variant", hint=" (or name a combination with make_variant(name, position=..., gate=..., scoring=...))"
)


def _zoo_variant(name: str, *, position: str, gate: str = "none", scoring: str = "dot", **options: Any) -> None:
    """Register a variant of the zoo's own table, as :func:`make_variant` builds it. Its names are
    checked by the tests (``tests/models/test_models_registry.py``) rather than here, where asking
    the slots' registries would load their modules (torch) with this light one."""
    VARIANT_REGISTRY.add(name, Variant(name=name, position=position, gate=gate, scoring=scoring, options=options))


# reference baselines (no gate)
_zoo_variant("baseline", position="sinusoidal")
_zoo_variant("learned-pe", position="learned")
_zoo_variant("rope", position="rope")
_zoo_variant("alibi", position="alibi")
_zoo_variant("nope", position="none")
# Energy-Gated Attention and its energy ablations (sinusoidal positions)
_zoo_variant("ega", position="sinusoidal", gate="ega")
_zoo_variant("ega-2", position="sinusoidal", gate="ega-2")
_zoo_variant("ega-4", position="sinusoidal", gate="ega-4")
_zoo_variant("ega-db2", position="sinusoidal", gate="db2")
_zoo_variant("ega-db4", position="sinusoidal", gate="db4")
_zoo_variant("ega-morlet-fixed", position="sinusoidal", gate="morlet-fixed")
_zoo_variant("ega-morlet-param", position="sinusoidal", gate="morlet-param")
# EGA on learned positions: the EGA paper's learned-position reading, against learned-pe
# (within a contrast only the gate differs)
_zoo_variant("ega-learned", position="learned", gate="ega")
# Morlet positional encoding and EGA + MOPE with its ablations
_zoo_variant("mope", position="mope")
_zoo_variant("ega-mope", position="mope", gate="ega")
_zoo_variant("ega-mope-lagged", position="mope", gate="ega", scoring="lagged")
_zoo_variant("ega-mope-scale-init", position="mope", gate="ega", mope_init="scales")
_zoo_variant("flux-mope", position="mope", gate="flux")
_zoo_variant("phase-mope", position="mope", gate="phase")
# prior-art comparator: head-wise sigmoid gate on the attention output
_zoo_variant("gated-output", position="sinusoidal", output_gate=True)
# readings B of the papers' vague points (READINGS below)
_zoo_variant("mope-rel", position="mope-rel")
_zoo_variant("ega-mope-rel", position="mope-rel", gate="ega")
_zoo_variant("ega-mope-rel-scale-init", position="mope-rel", gate="ega", mope_init="scales")
_zoo_variant("ega-db2-dir", position="sinusoidal", gate="db2-dir")
_zoo_variant("ega-db4-dir", position="sinusoidal", gate="db4-dir")
_zoo_variant("ega-morlet-dir", position="sinusoidal", gate="morlet-dir")
_zoo_variant("ega-2-pc", position="sinusoidal", gate="ega-2-pc")
_zoo_variant("ega-4-pc", position="sinusoidal", gate="ega-4-pc")
_zoo_variant("ega-2-prod", position="sinusoidal", gate="ega-2-prod")
_zoo_variant("ega-4-prod", position="sinusoidal", gate="ega-4-prod")
_zoo_variant("ega-qnorm", position="sinusoidal", gate="ega-qnorm")
_zoo_variant("ega-mope-scale-frozen", position="mope", gate="ega", mope_init="scales-frozen")
_zoo_variant("mope-bias", position="mope-bias")
_zoo_variant("ega-mope-bias", position="mope-bias", gate="ega")
# diagnostic, not a model: EGA z-normalised over the whole sequence (reads future tokens)
_zoo_variant("ega-leaky", position="sinusoidal", gate="ega-leaky")


#: The variants by name (a read-only, live view of :data:`VARIANT_REGISTRY`).
VARIANTS = VARIANT_REGISTRY.entries


@dataclass(frozen=True)
class Reading:
    """One point the papers leave open: their words, the default reading A, the alternative
    reading B, and the registry variants of each (``variants_b[i]`` answers ``variants_a[i]``)."""

    point: str
    papers: str
    reading_a: str
    reading_b: str
    variants_a: tuple[str, ...]
    variants_b: tuple[str, ...]


#: The papers' vague points and the variants that implement each reading (docs/zoo.md, "Readings").
READINGS: tuple[Reading, ...] = (
    Reading(
        "MOPE position",
        '"a Morlet kernel in lag space"; "links to RoPE (phase) and ALiBi (locality)"',
        "absolute position b added to the embeddings",
        "relative lag i - j per head: Gaussian log-envelope bias plus a phase rotation of q and k",
        ("mope", "ega-mope"),
        ("mope-rel", "ega-mope-rel"),
    ),
    Reading(
        "scale initialisation",
        '"initialise the heads at specific frequencies" (character, word, clause, sentence)',
        "MOPE dimension pairs at the four scales",
        "attention heads at the four scales (relative MOPE, per head)",
        ("ega-mope-scale-init",),
        ("ega-mope-rel-scale-init",),
    ),
    Reading(
        "wavelet gates",
        '"the optimal energy direction is data-adaptive and non-sinusoidal"',
        "fixed temporal filter over the keys, mean squared response",
        "fixed direction in embedding space (the filter tiled to width d) replacing the learned w",
        ("ega-db2", "ega-db4", "ega-morlet-fixed"),
        ("ega-db2-dir", "ega-db4-dir", "ega-morlet-dir"),
    ),
    Reading(
        "EGA-2 / EGA-4",
        '"more projection scales"; "the first principal component is sufficient"',
        "projections of causal moving averages over 1, 2 (, 4, 8) tokens",
        "K learned directions per head, energy sum_k (w_k.x + b_k)^2",
        ("ega-2", "ega-4"),
        ("ega-2-pc", "ega-4-pc"),
    ),
    Reading(
        "z-normalisation",
        '"z-normalised"; "strictly causal"',
        "prefix mean and variance (every gated variant)",
        "mean and variance over the whole sequence: leaks the future (a diagnostic, not a model)",
        ("ega",),
        ("ega-leaky",),
    ),
    Reading(
        "z-normalisation (2)",
        '"z-normalised"; "strictly causal"',
        "each key j by the mean and variance of its own prefix 0..j (every gated variant)",
        "each query i by the mean and variance of the keys it sees, 0..i: a pairwise gate",
        ("ega",),
        ("ega-qnorm",),
    ),
    Reading(
        "EGA-2 / EGA-4 (2)",
        '"more projection scales"; "the first principal component is sufficient"',
        "projections of causal moving averages over 1, 2 (, 4, 8) tokens",
        "K linear projections per head, each z-normalised and gated on its own, the gates multiplied",
        ("ega-2", "ega-4"),
        ("ega-2-prod", "ega-4-prod"),
    ),
    Reading(
        "scale initialisation (2)",
        '"initialise the heads at specific frequencies" (character, word, clause, sentence)',
        "MOPE dimension pairs at the four scales, then learned",
        "MOPE dimension pairs at the four scales, frozen",
        ("ega-mope-scale-init",),
        ("ega-mope-scale-frozen",),
    ),
    Reading(
        "MOPE position (2)",
        '"a Morlet kernel in lag space", C(Delta) ~ exp(-Delta^2 / 4 sigma^2) cos(omega Delta)',
        "absolute position b added to the embeddings",
        "the kernel added to the scores per head: a_h exp(-Delta^2 / 4 sigma_h^2) cos(omega_h Delta)",
        ("mope", "ega-mope"),
        ("mope-bias", "ega-mope-bias"),
    ),
)


def is_diagnostic(variant: str, gate: str | None = None) -> bool:
    """Whether a variant named ``variant`` (a registry name, or an inline combination using
    ``gate``) is a diagnostic that leaks future tokens. Unknown names without a gate: False."""
    if gate is not None and gate in LEAKY_GATES:
        return True
    known = VARIANTS.get(variant) if isinstance(variant, str) else None
    return known is not None and known.diagnostic


def get_variant(variant: str | Variant) -> Variant:
    """Look up a registry name (a :class:`Variant` passes through).

    Raises :class:`InputError` listing the known names for an unknown one.
    """
    if isinstance(variant, Variant):
        return variant
    return VARIANT_REGISTRY.get(variant)
