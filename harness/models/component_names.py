"""The names of a user's components, checked as plain strings (no torch, no class loaded):
``package.module:Class`` import paths, the names installed packages register in the
entry-point group ``harness.components``, and where a component's module lies. A config keeps
these strings (picklable for Ray); :mod:`harness.models.components` loads the classes.
"""

from __future__ import annotations

import re
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from harness.errors import InputError

#: The entry-point group where installed packages register component names.
COMPONENT_GROUP = "harness.components"
#: ``package.module:Class`` (dotted module path, ``:``, a dotted attribute path).
IMPORT_PATH = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
#: The contract (base class) of each slot, as ``module:Class`` of the zoo.
SLOT_CONTRACTS: dict[str, str] = {
    "position": "harness.models.positional:PositionalEncoding",
    "gate": "harness.models.gates:KeyBias",
    "scoring": "harness.models.scoring:Scoring",
}


def is_import_path(name: Any) -> bool:
    """Whether ``name`` is written as an import path ``package.module:Class``."""
    return isinstance(name, str) and IMPORT_PATH.match(name) is not None


def registered_components() -> dict[str, str]:
    """Names that installed packages register in :data:`COMPONENT_GROUP` -> their import paths."""
    return {ep.name: ep.value for ep in entry_points(group=COMPONENT_GROUP)}


def is_user_component(name: Any) -> bool:
    """Whether ``name`` names a user component: an import path or a registered name (the
    caller checks the zoo's own names first)."""
    return is_import_path(name) or (isinstance(name, str) and name in registered_components())


def import_path_of(name: str) -> str:
    """The import path ``name`` stands for: itself, or a registered name's entry point."""
    if is_import_path(name):
        return name
    registered = registered_components()
    if name not in registered:
        raise InputError(
            f"{name!r} is neither a component of the zoo, an import path package.module:Class, nor a name registered "
            f"in the entry-point group {COMPONENT_GROUP!r}"
            + (f" (registered: {', '.join(sorted(registered))})" if registered else "")
        )
    return registered[name]


def module_source(name: str, search_dir: str | Path) -> Path | None:
    """Where the module of component ``name`` lies in ``search_dir`` (``module.py`` or the
    package folder of its top-level name), or None when it is not there but on the Python
    path (an installed package). Found by name, without importing it. InputError when it is
    in neither place. A job ships what this finds (``harness submit``)."""
    import importlib.util

    top = import_path_of(name).partition(":")[0].split(".")[0]
    folder = Path(search_dir).expanduser().resolve()
    for candidate in (folder / f"{top}.py", folder / top):
        if candidate.exists():
            return candidate
    if importlib.util.find_spec(top) is None:
        raise InputError(f"cannot find {name}: no module named {top!r} on the Python path or in {folder}")
    return None


__all__ = [
    "COMPONENT_GROUP",
    "IMPORT_PATH",
    "SLOT_CONTRACTS",
    "import_path_of",
    "is_import_path",
    "is_user_component",
    "module_source",
    "registered_components",
]
