"""The shape of the code: no function in ``harness/`` is longer than a screen, no class longer
than :data:`MAX_CLASS_LINES`, no module longer than :data:`MAX_MODULE_LINES`.

A long procedure becomes named phases (docs/conventions.md, convention 12), so that the entry point
reads like its own docstring. Measured with :mod:`ast` from the ``def`` line to the last
line of the body (decorators excluded, docstring and comments included). A long class becomes
classes along its responsibilities (one object per concern, not parallel dictionaries that
every method keeps in step); measured like a function, from the ``class`` line. A long module
becomes modules along its concerns; measured in lines of the file.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "harness"

#: The longest a function may be, in lines.
MAX_FUNCTION_LINES = 120

#: Functions allowed over the limit for now, each with the reason. Empty it as they are split.
ALLOWED_LONG_FUNCTIONS: set[str] = set()

#: The longest a class may be, in lines (nested classes too; no class is allowed over it).
MAX_CLASS_LINES = 250

#: The longest a module may be, in lines.
MAX_MODULE_LINES = 800

#: Modules allowed over the limit for now (paths under harness/), each with the reason.
ALLOWED_LONG_MODULES: set[str] = set()


def _visit(node: ast.AST, prefix: str, out: dict[str, int]) -> None:
    """Lengths of the functions under ``node`` (nested ones too), named ``Class.method.inner``."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            name = f"{prefix}{child.name}"
            out[name] = child.end_lineno - child.lineno + 1
            _visit(child, f"{name}.", out)
        elif isinstance(child, ast.ClassDef):
            _visit(child, f"{prefix}{child.name}.", out)
        else:
            _visit(child, prefix, out)


def function_lengths(root: Path = PACKAGE) -> dict[str, int]:
    """``"<path under root>:<qualified name>" -> lines`` of every function and method."""
    lengths: dict[str, int] = {}
    for path in sorted(root.rglob("*.py")):
        found: dict[str, int] = {}
        _visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)), "", found)
        rel = path.relative_to(root).as_posix()
        lengths.update({f"{rel}:{name}": n for name, n in found.items()})
    return lengths


def test_no_function_is_longer_than_a_screen() -> None:
    lengths = function_lengths()
    too_long = {name: n for name, n in lengths.items() if n > MAX_FUNCTION_LINES and name not in ALLOWED_LONG_FUNCTIONS}
    listing = "\n".join(f"  {name}: {n} lines" for name, n in sorted(too_long.items(), key=lambda kv: -kv[1]))
    assert not too_long, f"functions over {MAX_FUNCTION_LINES} lines (split them into named phases):\n{listing}"


def test_the_allow_list_names_only_long_functions() -> None:
    """An entry whose function was split (or renamed) must leave the list."""
    lengths = function_lengths()
    stale = sorted(name for name in ALLOWED_LONG_FUNCTIONS if lengths.get(name, 0) <= MAX_FUNCTION_LINES)
    assert not stale, f"no longer over {MAX_FUNCTION_LINES} lines (remove from ALLOWED_LONG_FUNCTIONS): {stale}"


def test_the_measure_counts_a_function_from_def_to_its_last_line(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    (tmp_path / "m.py").write_text(
        f"import functools\n\n\n@functools.cache\ndef long():\n{body}\n\n\nclass C:\n    def short(self):\n"
        "        def inner():\n            return 1\n\n        return inner\n"
    )
    lengths = function_lengths(tmp_path)
    assert lengths == {"m.py:long": MAX_FUNCTION_LINES + 1, "m.py:C.short": 5, "m.py:C.short.inner": 2}


def class_lengths(root: Path = PACKAGE) -> dict[str, int]:
    """``"<path under root>:<qualified name>" -> lines`` of every class (nested ones too)."""
    lengths: dict[str, int] = {}
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                names, up = [node.name], parents.get(node)
                while up is not None:
                    if isinstance(up, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                        names.append(up.name)
                    up = parents.get(up)
                name = ".".join(reversed(names))
                lengths[f"{path.relative_to(root).as_posix()}:{name}"] = node.end_lineno - node.lineno + 1
    return lengths


def test_no_class_is_longer_than_its_limit() -> None:
    lengths = class_lengths()
    too_long = {name: n for name, n in lengths.items() if n > MAX_CLASS_LINES}
    listing = "\n".join(f"  {name}: {n} lines" for name, n in sorted(too_long.items(), key=lambda kv: -kv[1]))
    assert not too_long, f"classes over {MAX_CLASS_LINES} lines (split them by responsibility):\n{listing}"


def test_the_measure_counts_a_class_from_its_line_to_its_last(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_CLASS_LINES))
    (tmp_path / "m.py").write_text(
        f"import dataclasses\n\n\n@dataclasses.dataclass\nclass Long:\n{body}\n\n\n"
        "def f():\n    class Inner:\n        class Deeper:\n            y = 1\n\n    return Inner\n"
    )
    assert class_lengths(tmp_path) == {"m.py:Long": MAX_CLASS_LINES + 1, "m.py:f.Inner": 3, "m.py:f.Inner.Deeper": 2}


def module_lengths(root: Path = PACKAGE) -> dict[str, int]:
    """``"<path under root>" -> lines`` of every module."""
    return {
        path.relative_to(root).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
        for path in sorted(root.rglob("*.py"))
    }


def test_no_module_is_longer_than_its_limit() -> None:
    lengths = module_lengths()
    too_long = {name: n for name, n in lengths.items() if n > MAX_MODULE_LINES and name not in ALLOWED_LONG_MODULES}
    listing = "\n".join(f"  {name}: {n} lines" for name, n in sorted(too_long.items(), key=lambda kv: -kv[1]))
    assert not too_long, f"modules over {MAX_MODULE_LINES} lines (split them along their concerns):\n{listing}"


def test_the_module_allow_list_names_only_long_modules() -> None:
    """An entry whose module was split (or removed) must leave the list."""
    lengths = module_lengths()
    stale = sorted(name for name in ALLOWED_LONG_MODULES if lengths.get(name, 0) <= MAX_MODULE_LINES)
    assert not stale, f"no longer over {MAX_MODULE_LINES} lines (remove from ALLOWED_LONG_MODULES): {stale}"
