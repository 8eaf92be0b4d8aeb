"""The simulations serve the benchmarks and the tests: no module of the package outside
``harness.analysis.simulate`` imports it, at the top or inside a function."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "harness"
SIMULATE = PACKAGE / "analysis" / "simulate"


def _imported_modules(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


def test_no_package_module_imports_the_simulations() -> None:
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if SIMULATE in path.parents:
            continue
        imported = _imported_modules(ast.parse(path.read_text(encoding="utf-8")))
        if any(m == "harness.analysis.simulate" or m.startswith("harness.analysis.simulate.") for m in imported):
            offenders.append(str(path.relative_to(PACKAGE.parent)))
    assert not offenders, offenders


def test_the_check_sees_an_import_inside_a_function() -> None:
    tree = ast.parse("def f():\n    from harness.analysis.simulate.calibration import t_coverage\n")
    assert "harness.analysis.simulate.calibration" in _imported_modules(tree)
