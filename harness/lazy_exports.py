"""The lazy names of the package faces (``harness/<area>/__init__.py``), one helper for all.

A package face lists what its area offers (``from harness.analysis import main_effect``)
without importing it: the first use of a name imports its module, later uses find the name
in the package itself. So ``import harness.<area>`` costs nothing, and the ``harness`` CLI,
which imports every area for ``harness --help``, loads none of numpy, pydantic, torch, polars,
scipy or MLflow (measured with ``python -X importtime -c "import harness.cli"``; checked by
tests/test_package_faces.py).

A face calls :func:`lazy_exports` once and assigns its three results::

    __getattr__, __dir__, __all__ = lazy_exports(__name__, {"results": ["results_frame"], ...})

and imports the same names under ``if TYPE_CHECKING:`` for type checkers and IDEs.
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def lazy_exports(
    package: str, names_by_module: Mapping[str, Sequence[str]], *, eager: Sequence[str] = ()
) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """``(__getattr__, __dir__, __all__)`` for the package ``package`` whose names live in
    its submodules: ``names_by_module`` maps a submodule (``"results"`` for
    ``<package>.results``) to the names it exports; ``eager`` names the package imports
    itself, at its top (light ones: plain data).

    ``__getattr__(name)`` imports the name's submodule, caches the name in the package (the
    next lookup does not reach ``__getattr__``) and returns it; an unknown name is an
    ``AttributeError`` naming the package. ``__dir__`` lists the package's own names and
    the lazy ones; ``__all__`` is the eager and the lazy names, sorted.

    A lazy name that is also the name of a submodule (``harness.datasets.fetch``, the
    function, in the module ``harness.datasets.fetch``) stays the name: the import system
    binds a submodule on its package when it first imports it (another module's ``import
    harness.datasets.fetch``), which would hide ``__getattr__``; the package's module class
    refuses that binding, so the package behaves as if it had imported the name eagerly.

    Raises
    ------
    ValueError
        A name listed under two submodules, or an eager name the package does not define
        (the face calls this after its own imports).
    """
    undefined = [name for name in eager if name not in vars(sys.modules[package])]
    if undefined:
        raise ValueError(f"{package}: eager names not defined before lazy_exports(): {undefined}")
    module_of: dict[str, str] = {}
    for submodule, names in names_by_module.items():
        for name in names:
            if name in module_of:
                raise ValueError(f"{package}: {name!r} is listed under {module_of[name]!r} and {submodule!r}")
            module_of[name] = submodule

    class LazyFace(types.ModuleType):
        def __setattr__(self, name: str, value: Any) -> None:
            if name in module_of and isinstance(value, types.ModuleType) and value.__name__ == f"{package}.{name}":
                return  # the submodule of the same name: the name stays the exported one
            super().__setattr__(name, value)

    face = sys.modules[package]
    face.__class__ = LazyFace
    for name in module_of:
        if isinstance(vars(face).get(name), types.ModuleType):
            delattr(face, name)  # a same-named submodule imported before the face was set up

    def __getattr__(name: str) -> Any:
        submodule = module_of.get(name)
        if submodule is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{submodule}"), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(module_of))

    return __getattr__, __dir__, sorted({*eager, *module_of})
