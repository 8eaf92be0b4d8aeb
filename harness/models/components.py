"""A user's components: a position, gate or scoring the zoo does not have, named by its
import path (``package.module:Class``) or by a name an installed package registers.

The zoo's own components keep their names (:data:`~harness.models.variants.POSITIONS`,
``GATES``, ``SCORINGS``); any other name of a slot is a user component:

1. a name registered in the entry-point group ``harness.components`` (an installed package's
   ``[project.entry-points."harness.components"] forget = "mypkg.gates:ForgetGate"``) stands
   for its import path;
2. ``package.module:Class`` imports ``package.module`` from the Python path, else from
   ``search_dir``: the folder of the study spec that names it (a study passes it to every
   trial), the working directory for ``harness zoo check`` and ``harness train``. The folder
   is appended to ``sys.path``, so the module's own imports of its neighbours work too;
3. the class must subclass the slot's contract: :class:`~harness.models.gates.KeyBias` for a
   gate (:class:`~harness.models.gates.KeyGate` is one),
   :class:`~harness.models.positional.PositionalEncoding` for a position,
   :class:`~harness.models.scoring.Scoring` for a scoring. Its slot is read from its base;
4. it is constructed with the slot's keyword arguments that its ``__init__`` takes (all of
   them when it takes ``**kwargs``); an argument a config sets explicitly (``tau_init``,
   ``lags``) must be taken.

Every failure (no such module, an import that raises, no such class, the wrong base, a
constructor that raises) is an :class:`~harness.errors.InputError` with the reason. The names
alone are checked without torch, as plain strings (a config stays picklable for Ray), in
:mod:`harness.models.component_names`; this module loads the classes.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.errors import InputError
from harness.models.component_names import (
    COMPONENT_GROUP,
    SLOT_CONTRACTS,
    import_path_of,
    is_import_path,
    is_user_component,
    module_source,
    registered_components,
)
from harness.models.gates import KeyBias
from harness.models.positional import PositionalEncoding
from harness.models.scoring import Scoring


def _missing_module(exc: ModuleNotFoundError, module: str) -> bool:
    """True when the module that is missing is ``module`` or a package above it (not an
    import inside it that fails)."""
    missing = exc.name or ""
    return module == missing or module.startswith(f"{missing}.")


def _import(module: str, shown: str, search_dir: str | Path | None) -> Any:
    """``module`` from the Python path, else from ``search_dir`` (appended to ``sys.path``)."""
    importlib.invalidate_caches()  # a module written after this interpreter started
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if not _missing_module(exc, module):
            raise InputError(f"cannot import {shown}: importing {module} failed: {exc}") from None
        if search_dir is None:
            raise InputError(f"cannot import {shown}: no module named {module!r} on the Python path") from None
    except Exception as exc:  # noqa: BLE001 - a syntax error, an exception at import: the user's reason
        raise InputError(f"cannot import {shown}: importing {module} raised {type(exc).__name__}: {exc}") from None
    folder = str(Path(search_dir).expanduser().resolve())
    if folder not in sys.path:
        sys.path.append(folder)
    importlib.invalidate_caches()
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if _missing_module(exc, module):
            raise InputError(
                f"cannot import {shown}: no module named {module!r} on the Python path or in {folder}"
            ) from None
        raise InputError(f"cannot import {shown}: importing {module} failed: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - as above
        raise InputError(f"cannot import {shown}: importing {module} raised {type(exc).__name__}: {exc}") from None


def _contracts() -> dict[str, type]:
    return {"position": PositionalEncoding, "gate": KeyBias, "scoring": Scoring}


def slot_of(cls: type) -> str | None:
    """The slot whose contract ``cls`` subclasses (None: it subclasses none of them)."""
    return next((slot for slot, base in _contracts().items() if issubclass(cls, base)), None)


def resolve_component(name: str, *, slot: str | None = None, search_dir: str | Path | None = None) -> type:
    """The class ``name`` (an import path or a registered name) stands for, checked against
    its slot's contract (``slot``: the slot it fills; None: any slot). See the module docstring."""
    path = import_path_of(name)
    module_name, _, attribute = path.partition(":")
    shown = name if name == path else f"{name} ({path})"
    obj: Any = _import(module_name, shown, search_dir)
    for part in attribute.split("."):
        if not hasattr(obj, part):
            where = getattr(obj, "__file__", module_name)
            raise InputError(f"cannot import {shown}: {module_name} ({where}) has no attribute {attribute!r}")
        obj = getattr(obj, part)
    if not isinstance(obj, type):
        raise InputError(f"{shown} is a {type(obj).__name__}, not a class: name the component's class")
    found = slot_of(obj)
    bases = ", ".join(f"{contract.split(':')[1]} ({s})" for s, contract in SLOT_CONTRACTS.items())
    if found is None:
        raise InputError(f"{shown} is not a component: subclass one of the slots' contracts, {bases}")
    if slot is not None and found != slot:
        raise InputError(
            f"{shown} is a {found} component (it subclasses {SLOT_CONTRACTS[found].split(':')[1]}), "
            f"named here as the {slot}"
        )
    return obj


def _shown(keywords: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in keywords.items()) or "none"


def constructor_keywords(cls: type, offered: Mapping[str, Any], required: Mapping[str, Any]) -> dict[str, Any]:
    """The keyword arguments ``cls(...)`` gets: those of ``offered`` and ``required`` its
    ``__init__`` takes (all with ``**kwargs``). InputError, listing the keywords the harness
    passes, when it does not take one of ``required``, or when it requires a parameter the
    harness does not pass (a name of its own for the width, a positional-only argument)."""
    parameters = inspect.signature(cls).parameters.values()
    takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)
    names = {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    chosen = {**offered, **required}
    shown = f"{cls.__module__}.{cls.__qualname__}"
    passes = f"the harness passes, by keyword, {_shown(chosen)}"
    refused = [key for key in required if not takes_all and key not in names]
    if refused:
        raise InputError(
            f"{shown} does not take {', '.join(refused)}, which the config sets ({passes}); "
            f"add it to __init__, or drop the setting"
        )
    unmet = [
        p.name
        for p in parameters
        if p.default is inspect.Parameter.empty
        and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        and (p.kind is p.POSITIONAL_ONLY or p.name not in chosen)
    ]
    if unmet:
        raise InputError(
            f"{shown}.__init__ requires {', '.join(unmet)}, which the harness does not pass: {passes}; "
            "name __init__'s parameters after them (or give the others defaults)"
        )
    return chosen if takes_all else {key: value for key, value in chosen.items() if key in names}


def build_component(
    slot: str,
    name: str,
    *,
    search_dir: str | Path | None = None,
    offered: Mapping[str, Any],
    required: Mapping[str, Any] | None = None,
) -> Any:
    """The user component ``name`` of ``slot``, constructed (see the module docstring):
    ``offered`` are the slot's arguments (passed when ``__init__`` takes them), ``required``
    those a config set explicitly (``__init__`` must take them). A constructor that raises is
    an InputError naming the keywords it got and those the harness offered."""
    cls = resolve_component(name, slot=slot, search_dir=search_dir)
    kwargs = constructor_keywords(cls, offered, required or {})
    try:
        return cls(**kwargs)
    except Exception as exc:  # noqa: BLE001 - the user's constructor: its reason, in one message
        left = {k: v for k, v in {**offered, **(required or {})}.items() if k not in kwargs}
        unused = f" (offered, not taken: {_shown(left)})" if left else ""
        raise InputError(
            f"cannot construct the {slot} {name}: {cls.__qualname__}({_shown(kwargs) if kwargs else ''}) raised "
            f"{type(exc).__name__}: {exc}; the keywords passed: {_shown(kwargs)}{unused}"
        ) from None


__all__ = [
    "COMPONENT_GROUP",
    "SLOT_CONTRACTS",
    "build_component",
    "constructor_keywords",
    "import_path_of",
    "is_import_path",
    "is_user_component",
    "module_source",
    "registered_components",
    "resolve_component",
    "slot_of",
]
