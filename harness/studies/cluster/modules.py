"""A user's component modules wherever trials run: what is shipped to a cluster, and a check on
every node that each component resolves there before the first trial.

A trial imports its components by name, on whatever node Tune places it. On a cluster of several
machines that node has neither the spec's folder (the driver's disk) nor a package the user has on
the Python path only as a working copy. So the harness ships, as Ray's ``py_modules`` (each entry
a folder Ray uploads once and puts on the Python path of every worker, on every node):

- the module (``m.py``) or package folder of each user component that lies beside the spec
  (:func:`~harness.models.component_names.module_source`);
- the module or package of each user component that the driver finds on its Python path but
  *not installed* (outside the interpreter's site-packages: an editable install, a folder on
  ``PYTHONPATH``), with the ``*.dist-info`` folder of its distribution, whose
  ``entry_points.txt`` makes a registered name resolve on the node too.

A component from an installed package (site-packages) is not shipped: it must be installed on the
nodes as it is here (the cluster's image). :func:`check_components_on_nodes` then resolves every
user component on every node (one task per node, as the corpus check does) and refuses the study,
naming the node and the component, when one does not resolve there; the check's lines say where
each was found, so that a shipped copy (``.../runtime_resources/py_modules_files/...``) shows.

``harness run --address`` passes these as the job-level ``runtime_env`` of ``ray.init``;
``harness submit`` as the job's ``py_modules`` (inside a job, the job's runtime_env is already
every task's: the driver does not add its own). Ray is imported inside the functions that use it.
"""

from __future__ import annotations

import importlib.util
import shutil
import site
import sys
import sysconfig
from collections.abc import Iterable
from importlib.metadata import entry_points
from pathlib import Path

from harness.errors import InputError
from harness.models.component_names import COMPONENT_GROUP, import_path_of, is_import_path, module_source
from harness.studies.spec.components import user_variants
from harness.studies.spec.study_spec import StudySpec


def _component_names(spec: StudySpec) -> list[str]:
    """Every user component the spec's variants name, each once, in the spec's order."""
    names = (name for variant in user_variants(spec) for name in variant.user_components.values())
    return list(dict.fromkeys(names))


def _installed_roots() -> list[Path]:
    """Where installed packages and the standard library live for this interpreter."""
    paths = sysconfig.get_paths()
    roots = [paths.get(key) for key in ("purelib", "platlib", "stdlib", "platstdlib")]
    roots += [*site.getsitepackages(), site.getusersitepackages()]
    return [Path(root).resolve() for root in dict.fromkeys(filter(None, roots))]


def _is_installed(path: Path, roots: Iterable[Path]) -> bool:
    return any(root == path or root in path.parents for root in roots)


def _module_location(top: str) -> Path | None:
    """The package folder or single-file module ``import top`` loads, without importing it;
    None for a built-in, a namespace package or a module that is not found."""
    found = importlib.util.find_spec(top)
    if found is None:
        return None
    if found.submodule_search_locations:
        locations = list(found.submodule_search_locations)
        return Path(locations[0]).resolve() if len(locations) == 1 and found.origin else None
    return Path(found.origin).resolve() if found.origin and found.origin.endswith(".py") else None


def _dist_info(name: str) -> Path | None:
    """The metadata folder (``*.dist-info``) of the distribution registering component ``name``
    in :data:`COMPONENT_GROUP`; None for an import path or a distribution with no such folder."""
    if is_import_path(name):
        return None
    for ep in entry_points(group=COMPONENT_GROUP, name=name):
        dist = ep.dist
        for file in (dist.files or []) if dist is not None else []:  # RECORD's list, where pip wrote one
            if file.parent.name.endswith(".dist-info") and file.name == "METADATA":
                return Path(dist.locate_file(file)).resolve().parent
        folder = getattr(dist, "_path", None)  # importlib's PathDistribution: its metadata folder, by no public name
        if folder is not None and Path(folder).name.endswith(".dist-info"):
            return Path(folder).resolve()
    return None


def local_packages(spec: StudySpec) -> tuple[Path, ...]:
    """The module or package of each user component on the Python path but not installed (see
    the module docstring), with its distribution's ``*.dist-info`` folder when it registers the
    name; the harness itself is never shipped."""
    roots = _installed_roots()
    found: list[Path] = []
    for name in _component_names(spec):
        top = import_path_of(name).partition(":")[0].split(".")[0]
        where = None if top == "harness" else _module_location(top)
        if where is None or _is_installed(where, roots):
            continue
        found.append(where)
        meta = _dist_info(name)  # of an editable install, it lies in site-packages: shipped all the same
        if meta is not None:
            found.append(meta)
    return tuple(dict.fromkeys(found))


def spec_modules(spec: StudySpec, spec_dir: str) -> tuple[Path, ...]:
    """The module or package folder of each user component that lies beside the spec (InputError
    for one found neither there nor on the Python path)."""
    found = (module_source(name, spec_dir) for name in _component_names(spec))
    return tuple(dict.fromkeys(path for path in found if path is not None))


#: A file in each staged copy naming what it ships (see :func:`stage_py_modules`).
SHIPPED_MARKER = ".harness-shipped"


def stage_py_modules(modules: Iterable[Path], staging: Path) -> list[str]:
    """The ``py_modules`` entries: a copy in ``staging`` of each folder, and of each single-file
    module ``m.py`` as a package ``m/__init__.py`` of the same source (Ray 2.60's job client
    uploads folders only: a ``.py`` entry is refused as "must be an existing directory"); ``import
    m`` finds either on every node.

    Each copy holds a file :data:`SHIPPED_MARKER` naming its module, because Ray names an upload
    by a hash of its files *relative to the folder* (not the folder's name): two modules of
    identical source under different names hash alike, and Ray uploads only the first, so the
    second does not import on the nodes."""
    entries = []
    for path in modules:
        package = staging / (path.name if path.is_dir() else path.stem)
        if path.is_dir():
            shutil.copytree(path, package, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            package.mkdir()
            shutil.copy2(path, package / "__init__.py")
        (package / SHIPPED_MARKER).write_text(f"{package.name}: shipped by the harness from {path}\n")
        entries.append(str(package))
    return entries


def cluster_runtime_env(spec: StudySpec, spec_dir: str | None, staging: Path) -> dict | None:
    """The job-level ``runtime_env`` of ``harness run --address``: ``py_modules`` of the spec's
    modules and the local packages (staged in ``staging``, which must outlive ``ray.init``);
    None when there is nothing to ship."""
    modules = (*(spec_modules(spec, spec_dir) if spec_dir else ()), *local_packages(spec))
    if not modules:
        return None
    return {"py_modules": stage_py_modules(dict.fromkeys(modules), staging)}


def components_here(components: list[tuple[str, str]], search_dir: str | None) -> tuple[list[str], list[str]]:
    """On the node running this: ``(found, problems)``, a line per ``(slot, name)`` saying where
    its class was imported from, or why it could not be. The body of the per-node task."""
    from harness.models.components import resolve_component
    from harness.studies.cluster.corpora import this_node

    found, problems = [], []
    for slot, name in components:
        try:
            cls = resolve_component(name, slot=slot, search_dir=search_dir)
        except InputError as exc:
            problems.append(f"node {this_node()}: {exc}")
            continue
        where = getattr(sys.modules.get(cls.__module__), "__file__", None) or cls.__module__
        found.append(f"node {this_node()}: {slot} {name} from {where}")
    return found, problems


def check_components_on_nodes(spec: StudySpec, search_dir: str | None) -> list[str]:
    """Every user component of ``spec`` resolved on every alive node of the connected Ray (one
    task per node, pinned to it, not retried), as its trials will resolve it. Returns the lines
    of :func:`components_here` (empty when the spec names no user component).

    Raises
    ------
    InputError
        A component does not resolve on some node: each such node and component, and the fix.
    """
    components = list(
        dict.fromkeys((slot, name) for v in user_variants(spec) for slot, name in v.user_components.items())
    )
    if not components:
        return []
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    check = ray.remote(num_cpus=0, max_retries=0)(components_here)
    nodes = [node["NodeID"] for node in ray.nodes() if node.get("Alive")]
    pending = {
        node: check.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node, soft=False)).remote(
            components, search_dir
        )
        for node in nodes
    }
    found: list[str] = []
    problems: list[str] = []
    for node, ref in pending.items():
        try:
            lines, missing = ray.get(ref)
        except Exception as exc:  # noqa: BLE001 - the node left, or its worker could not start
            lines, missing = [], [f"the component check could not run on Ray node {node}: {type(exc).__name__}: {exc}"]
        found += lines
        problems += missing
    if problems:
        raise InputError(
            "the study's components do not import on every node, so no trial was started:\n  "
            + "\n  ".join(problems)
            + "\nA module beside the spec or on this machine's Python path (not installed) is shipped with the "
            "study; a component of an installed package must be installed on every node (the cluster's image)."
        )
    return found


__all__ = [
    "SHIPPED_MARKER",
    "check_components_on_nodes",
    "cluster_runtime_env",
    "components_here",
    "local_packages",
    "spec_modules",
    "stage_py_modules",
]
