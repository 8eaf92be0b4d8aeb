"""No function in ``harness/`` over 80 lines and no class over 200 (issue 42's done-when).

A length is ``end_lineno - lineno + 1`` of the ``def`` or ``class`` node, decorators left out,
docstrings and comments counted. The entries still over a limit that belong to another part of
the remodel are allowed below with their length today: an allowed entry may not grow, and one
that has come within its limit fails until it is struck from the list, so the list only shrinks.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "harness"
FUNCTION_LIMIT = 80
CLASS_LIMIT = 200

#: ``path:qualified name`` -> (its length when allowed, the issue that splits it). Strike an entry
#: when its split lands; never add one.
ALLOWED: dict[str, tuple[int, int]] = {}


def _definitions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, ast.AST]]:
    """Every function and class of a module with its qualified name (``Class.method``,
    ``outer.inner``), nested ones included."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            name = f"{prefix}{node.name}"
            yield name, node
            yield from _definitions(node, f"{name}.")
        else:
            yield from _definitions(node, prefix)


def measured(root: Path = PACKAGE) -> dict[str, tuple[str, int, int]]:
    """``path:qualified name`` -> (kind, length, limit) of every definition over its limit under ``root``."""
    over = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent).as_posix()
        for name, node in _definitions(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            is_class = isinstance(node, ast.ClassDef)
            limit = CLASS_LIMIT if is_class else FUNCTION_LIMIT
            length = node.end_lineno - node.lineno + 1
            if length > limit:
                over[f"{rel}:{name}"] = ("class" if is_class else "function", length, limit)
    return over


@pytest.fixture(scope="module")
def over() -> dict[str, tuple[str, int, int]]:
    """The package's definitions over their limits, measured once for the tests below."""
    return measured()


def test_no_function_or_class_over_its_limit_outside_the_allow_list(over: dict[str, tuple[str, int, int]]) -> None:
    new = [
        f"{key}: {kind} of {n} lines (limit {limit})" for key, (kind, n, limit) in over.items() if key not in ALLOWED
    ]
    assert not new, (
        "over the size limit; split it into named phases (a long procedure reads as small functions whose "
        "names tell the story, STYLE.md 12):\n  " + "\n  ".join(new)
    )


def test_an_allowed_entry_does_not_grow(over: dict[str, tuple[str, int, int]]) -> None:
    grown = [
        f"{key}: {over[key][1]} lines, allowed {allowed} (issue {issue})"
        for key, (allowed, issue) in ALLOWED.items()
        if key in over and over[key][1] > allowed
    ]
    assert not grown, "an allowed entry grew; split it rather than raise its allowance:\n  " + "\n  ".join(grown)


def test_the_allow_list_only_holds_entries_still_over_their_limit(over: dict[str, tuple[str, int, int]]) -> None:
    done = [f"{key} (issue {issue})" for key, (_, issue) in ALLOWED.items() if key not in over]
    assert not done, "within its limit now (or gone): strike it from ALLOWED in this file:\n  " + "\n  ".join(done)


def test_the_measure_finds_a_long_function_and_class(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(FUNCTION_LIMIT))  # with its def: one line over
    edge = "\n".join(f"    x{i} = {i}" for i in range(FUNCTION_LIMIT - 1))  # with its def: at the limit
    n_methods = CLASS_LIMIT // 3 + 1  # each 2 lines and a blank one between: 3 n lines with "class"
    methods = "\n".join(f"    def m{i}(self):\n        return {i}\n" for i in range(n_methods))
    source = f"def edge():\n{edge}\n\n\ndef long():\n{body}\n\n\nclass Big:\n{methods}\n"
    (package / "mod.py").write_text(source)
    assert measured(package) == {
        "pkg/mod.py:long": ("function", FUNCTION_LIMIT + 1, FUNCTION_LIMIT),
        "pkg/mod.py:Big": ("class", 3 * n_methods, CLASS_LIMIT),
    }
