"""Imports run one way: down the layers written in ``harness/__init__.py``'s docstring, and
never in a circle.

The check reads every ``import`` and ``from ... import`` in every module under ``harness/``
with :mod:`ast`, including the ones inside functions and under ``if TYPE_CHECKING:`` (an
import deferred into a function still ties the two modules together; it only hides the tie
from the reader). ``from harness.a import b`` is an import of the module ``harness.a.b``
when that module exists, of ``harness.a`` otherwise. A package face's lazy names
(:mod:`harness.lazy_exports`) are strings, not imports, and are not counted; its
``TYPE_CHECKING`` imports are.

Layers: a module belongs to the layer that lists the longest prefix of its name; a
top-level module (``harness/<name>.py``) not listed elsewhere is in the base layer; a
module named ``cli`` is in the top layer. A layer listed for a package that does not exist
(yet) simply has no modules.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "harness"

#: Circles allowed for now, each a set of modules that import each other, with the reason.
ALLOWED_CYCLES: list[frozenset[str]] = []


# --- the layer list, read from the package docstring ----------------------------------


def layer_list(init: Path = PACKAGE / "__init__.py") -> list[list[str]]:
    """The numbered list in ``harness/__init__.py``'s docstring: per layer, low to high, the
    dotted names in double backquotes on its item (an item may run over several lines)."""
    doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
    items = re.split(r"^\d+\. ", doc.split("Layers, low to high", 1)[-1], flags=re.MULTILINE)[1:]
    return [re.findall(r"``(harness(?:\.\w+)*)``", item.split("\n\n", 1)[0]) for item in items]


def layer_of(module: str, layers: list[list[str]], root: Path = PACKAGE) -> int:
    """The index of ``module``'s layer in ``layers`` (0 = base, ``len(layers) - 1`` = the CLI);
    ``root`` is the package's folder, where a top-level module is a file."""
    if module.rsplit(".", 1)[-1] == "cli":
        return len(layers) - 1
    best, best_len = None, -1
    for index, names in enumerate(layers):
        for name in names:
            if (module == name or module.startswith(name + ".")) and len(name) > best_len:
                best, best_len = index, len(name)
    if best is not None:
        return best
    if module == "harness" or (module.count(".") == 1 and (root / f"{module.split('.')[1]}.py").exists()):
        return 0  # the package's own __init__, or a top-level helper module
    raise AssertionError(f"{module} is in no layer: add its package to the list in harness/__init__.py's docstring")


# --- the import graph -----------------------------------------------------------------


def module_names(root: Path = PACKAGE) -> dict[str, Path]:
    """``dotted name -> file`` of every module under ``root`` (a package is its ``__init__``)."""
    names = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def _imported(node: ast.AST, module: str, is_package: bool, known: Mapping[str, Path]) -> Iterator[str]:
    """The modules of ``known`` that one import statement ``node`` in ``module`` imports."""
    if isinstance(node, ast.Import):
        targets = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            anchor = module.split(".")
            anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
            base = ".".join(anchor + ([base] if base else []))
        targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
    else:
        return
    for target in targets:
        while target and target not in known:  # `import harness.a.b.name` style: the longest known prefix
            target = target.rpartition(".")[0]
        if target and target != module:
            yield target


def import_graph(root: Path = PACKAGE) -> dict[str, dict[str, int]]:
    """``module -> {imported module: line of the first such import}`` over every module under
    ``root``, counting imports anywhere in the file (functions, ``TYPE_CHECKING`` blocks)."""
    known = module_names(root)
    graph: dict[str, dict[str, int]] = {}
    for module, path in known.items():
        edges: dict[str, int] = {}
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            for target in _imported(node, module, path.name == "__init__.py", known):
                edges.setdefault(target, node.lineno)
        graph[module] = edges
    return graph


def cycles(graph: Mapping[str, Mapping[str, int]]) -> list[frozenset[str]]:
    """The circles of ``graph``: its strongly connected components of more than one module
    (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph.get(child, {}))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


# --- the checks -----------------------------------------------------------------------


def upward_imports(graph: Mapping[str, Mapping[str, int]], layers: list[list[str]]) -> list[str]:
    """``"<module>:<line> imports <higher module>"`` for every import that runs up a layer."""
    return [
        f"{module}:{line} imports {target} (layer {layer_of(target, layers) + 1} > {layer_of(module, layers) + 1})"
        for module, edges in sorted(graph.items())
        for target, line in sorted(edges.items())
        if layer_of(target, layers) > layer_of(module, layers)
    ]


def cross_imports(graph: Mapping[str, Mapping[str, int]], layers: list[list[str]]) -> list[str]:
    """``"<module>:<line> imports <module>"`` for every import between two packages listed on
    the same layer (the base layer's top-level modules excepted: they are not packages)."""
    found = []
    for names in layers[1:-1]:
        for module, edges in sorted(graph.items()):
            home = next((n for n in names if module == n or module.startswith(n + ".")), None)
            for target, line in sorted(edges.items()):
                other = next((n for n in names if target == n or target.startswith(n + ".")), None)
                if home and other and home != other:
                    found.append(f"{module}:{line} imports {target}")
    return found


def test_the_layer_list_is_read_from_the_package_docstring() -> None:
    layers = layer_list()
    assert layers[0][:2] == ["harness.errors", "harness.lazy_exports"]
    assert ["harness.models", "harness.datasets"] in layers
    assert layers[-1] == ["harness.cli"]
    order = [
        layers.index([name]) for name in ("harness.training", "harness.analysis", "harness.studies", "harness.bench")
    ]
    assert order == [2, 3, len(layers) - 3, len(layers) - 2]


def test_every_module_has_a_layer() -> None:
    layers = layer_list()
    for module in module_names():
        layer_of(module, layers)


def test_no_import_runs_up_a_layer() -> None:
    found = upward_imports(import_graph(), layer_list())
    assert not found, "imports that run up a layer (move the code down, or the caller up):\n" + "\n".join(found)


#: The phases of a study (harness/studies/__init__.py), low to high: what to run, where it runs,
#: where it is kept, the run on Tune, its record in MLflow, then the modules that put them together
#: (and the device runner, which runs a study without Ray and records it as the replay does).
STUDY_PHASES = [
    ["harness.studies.spec", "harness.studies.signals"],
    ["harness.studies.cluster"],
    ["harness.studies.storage"],
    ["harness.studies.plan"],
    ["harness.studies.tune"],
    ["harness.studies.record"],
    ["harness.studies.launch", "harness.studies.dry_run", "harness.studies.collect", "harness.studies.finish"],
    ["harness.studies.runner", "harness.studies.submit"],
    ["harness.studies.replay"],
    ["harness.studies.device"],
    ["harness.studies.cli"],
]


def test_the_phases_of_a_study_import_one_way() -> None:
    """Inside ``harness.studies`` the phase folders import down their list, never up or across."""
    graph = {
        module: {t: line for t, line in edges.items() if t.startswith("harness.studies.")}
        for module, edges in import_graph().items()
        if module.startswith("harness.studies.")
    }
    for module in graph:
        layer_of(module, STUDY_PHASES)  # every module of the package is in a phase
    found = upward_imports(graph, STUDY_PHASES) + cross_imports(graph, [[], *STUDY_PHASES, []])
    assert not found, "imports against the phases of a study:\n" + "\n".join(found)


def test_packages_of_one_layer_do_not_import_each_other() -> None:
    found = cross_imports(import_graph(), layer_list())
    assert not found, "imports between packages of one layer (move the shared part down a layer):\n" + "\n".join(found)


#: The simulators of known truth (calibration, sequential designs, the scorecard's rules and cards):
#: test-only code, imported by the benchmarks and the tests, and inside the package by the bench only.
SIMULATORS = "harness.bench.simulate"


def simulator_imports(graph: Mapping[str, Mapping[str, int]]) -> list[str]:
    """``"<module>:<line> imports <simulator>"`` for every module outside ``harness.bench`` that
    imports a module of :data:`SIMULATORS` (at the top, in a function or under ``TYPE_CHECKING``)."""
    return [
        f"{module}:{line} imports {target}"
        for module, edges in sorted(graph.items())
        if not (module == "harness.bench" or module.startswith("harness.bench."))
        for target, line in sorted(edges.items())
        if target == SIMULATORS or target.startswith(SIMULATORS + ".")
    ]


def test_only_the_bench_imports_the_simulators() -> None:
    graph = import_graph()
    assert any(m.startswith(SIMULATORS + ".") for m in graph), f"no module under {SIMULATORS}"
    found = simulator_imports(graph)
    assert not found, "simulators imported outside the bench (they are test-only code):\n" + "\n".join(found)


def test_no_modules_import_each_other_in_a_circle() -> None:
    graph = import_graph()
    found = [sorted(c) for c in cycles(graph) if c not in ALLOWED_CYCLES]
    assert not found, "modules that import each other in a circle (give the shared part one home below them):\n" + (
        "\n".join(" <-> ".join(c) for c in found)
    )


def test_the_allowed_circles_still_exist() -> None:
    """An allowed circle that is gone must leave the list."""
    current = cycles(import_graph())
    assert not [sorted(c) for c in ALLOWED_CYCLES if c not in current]


# --- the checker itself, on a made-up package -----------------------------------------


def _package(tmp_path: Path, files: Mapping[str, str]) -> Path:
    root = tmp_path / "harness"
    for name, source in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    return root


LAYERS = [["harness.errors"], ["harness.models"], ["harness.studies"], ["harness.cli"]]


def test_the_check_sees_imports_in_functions_and_type_checking_blocks(tmp_path: Path) -> None:
    root = _package(
        tmp_path,
        {
            "__init__.py": "",
            "errors.py": "",
            "cli.py": "import harness.studies.run\n",
            "models/__init__.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .core import x\n",
            "models/core.py": "def f():\n    from harness.studies import run\n",
            "studies/__init__.py": "",
            "studies/run.py": "from harness.models import core\nfrom ..errors import E\n",
        },
    )
    graph = import_graph(root)
    assert graph["harness.models"] == {"harness.models.core": 3}
    assert graph["harness.studies.run"] == {"harness.models.core": 1, "harness.errors": 2}
    assert upward_imports(graph, LAYERS) == ["harness.models.core:2 imports harness.studies.run (layer 3 > 2)"]
    assert cycles(graph) == [frozenset({"harness.models.core", "harness.studies.run"})]
    side_by_side = [["harness.errors"], ["harness.models", "harness.studies"], ["harness.cli"]]
    assert cross_imports(graph, side_by_side) == [
        "harness.models.core:2 imports harness.studies.run",
        "harness.studies.run:1 imports harness.models.core",
    ]


def test_the_check_sees_a_simulator_imported_in_a_function_outside_the_bench(tmp_path: Path) -> None:
    empty = ("__init__.py", "bench/__init__.py", "bench/simulate/__init__.py", "bench/simulate/sim.py")
    files = dict.fromkeys(empty, "")
    files["cli.py"] = "def main():\n    from harness.bench.simulate import sim\n"  # outside the bench: found
    files["bench/runner.py"] = "import harness.bench.simulate.sim\n"  # the bench's own: allowed
    graph = import_graph(_package(tmp_path, files))
    assert simulator_imports(graph) == ["harness.cli:2 imports harness.bench.simulate.sim"]


def test_a_module_named_cli_is_on_top_and_a_missing_layer_is_empty() -> None:
    layers = [["harness.errors"], ["harness.report"], ["harness.studies"], ["harness.cli"]]
    assert layer_of("harness.analysis.cli", layers) == 3
    assert layer_of("harness.studies.runner", layers) == 2
    with pytest.raises(AssertionError, match="harness.nowhere.x is in no layer"):
        layer_of("harness.nowhere.x", layers)
