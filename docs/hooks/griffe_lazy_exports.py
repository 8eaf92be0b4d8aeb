"""A griffe extension: the public names of a package face are the names its
``lazy_exports(...)`` call lists (``harness/lazy_exports.py``).

A face computes ``__all__`` at import time, which static analysis cannot evaluate, so
without this the API pages would show none of the names the face re-exports. The
extension reads the call from the module's source instead: the names listed under each
submodule, plus the ``eager`` ones, become the module's exports, and mkdocstrings renders
each as the object it names.
"""

from __future__ import annotations

import ast

import griffe


def face_names(node: ast.AST) -> list[str] | None:
    """The names the ``lazy_exports(package, {submodule: [names]}, eager=[names])`` call in
    ``node`` lists, or None when the module makes no such call."""
    for statement in getattr(node, "body", []):
        call = getattr(statement, "value", None)
        if not (isinstance(call, ast.Call) and getattr(call.func, "id", None) == "lazy_exports"):
            continue
        lists = list(call.args[1].values) if len(call.args) > 1 and isinstance(call.args[1], ast.Dict) else []
        lists += [keyword.value for keyword in call.keywords if keyword.arg == "eager"]
        return sorted(element.value for names in lists for element in names.elts)
    return None


class LazyExports(griffe.Extension):
    """Sets a package face's exports from its ``lazy_exports`` call."""

    def on_module_members(self, *, node: ast.AST | griffe.ObjectNode, mod: griffe.Module, **kwargs: object) -> None:
        names = face_names(node) if isinstance(node, ast.AST) else None
        if names is not None:
            mod.exports = names
