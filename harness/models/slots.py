"""The registries of the attention's three slots: the zoo's positional encodings, key gates and
scoring rules, by name (:class:`~harness.models.registry.Registry`).

Each component registers itself in its own module, by decorator, with a ``from_shape``
classmethod that builds it from the model's shape (:mod:`harness.models.positional`,
:mod:`harness.models.gates`, :mod:`harness.models.scoring`); nothing else lists the names. This
module is light (no torch): a registry imports its component module on the first name asked of
it, so that the variants (plain data) name components without loading torch at import.

A name no registry holds may still name a user's component (an import path
``package.module:Class`` or an entry-point name, :mod:`harness.models.components`).
"""

from __future__ import annotations

from typing import Any

from harness.models.registry import Registry

#: Positional encodings (:class:`~harness.models.positional.PositionalEncoding` subclasses).
POSITIONS: Registry[Any] = Registry("position", loads=("harness.models.positional",))
#: Key gates (:class:`~harness.models.gates.KeyBias` subclasses; ``none``: no gate).
GATES: Registry[Any] = Registry("gate", loads=("harness.models.gates",))
#: Scoring rules (:class:`~harness.models.scoring.Scoring` subclasses).
SCORINGS: Registry[Any] = Registry("scoring", loads=("harness.models.scoring",))
#: Each slot's registry.
SLOT_REGISTRIES: dict[str, Registry[Any]] = {"position": POSITIONS, "gate": GATES, "scoring": SCORINGS}

__all__ = ["GATES", "POSITIONS", "SCORINGS", "SLOT_REGISTRIES"]
