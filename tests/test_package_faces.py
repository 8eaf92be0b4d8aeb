"""The package faces (``harness/<area>/__init__.py``) share one lazy-export helper,
:func:`harness.lazy_exports.lazy_exports`: every listed name resolves, is cached in the
package after its first use and is listed by ``dir()``; an unknown name is an
``AttributeError`` naming the package; and importing the CLI (what ``harness --help``
costs) loads none of the heavy libraries behind the faces."""

from __future__ import annotations

import importlib
import subprocess
import sys
import types

import pytest

from harness.lazy_exports import lazy_exports

FACES = (
    "harness.models",
    "harness.datasets",
    "harness.training",
    "harness.studies",
    "harness.analysis",
    "harness.report",
    "harness.scorecard",
)
HEAVY = ("numpy", "pydantic", "torch", "lightning", "polars", "scipy", "statsmodels", "mlflow", "ray")


@pytest.mark.parametrize("face", FACES)
def test_every_name_of_a_face_resolves_and_is_cached(face: str) -> None:
    package = importlib.import_module(face)
    assert package.__all__ == sorted(set(package.__all__))
    for name in package.__all__:
        value = getattr(package, name)
        assert vars(package)[name] is value  # cached: the next lookup skips __getattr__
        assert name in dir(package)
    with pytest.raises(AttributeError, match=face.replace(".", r"\.") + ".*no_such_name"):
        package.no_such_name  # noqa: B018


def test_importing_the_cli_loads_no_heavy_library() -> None:
    code = f"import sys, harness.cli; print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_helper_refuses_a_name_listed_twice_and_an_undefined_eager_name() -> None:
    module = types.ModuleType("harness_faces_probe")
    sys.modules[module.__name__] = module
    try:
        with pytest.raises(ValueError, match="'x' is listed under 'a' and 'b'"):
            lazy_exports(module.__name__, {"a": ["x"], "b": ["x"]})
        with pytest.raises(ValueError, match=r"eager names not defined.*\['y'\]"):
            lazy_exports(module.__name__, {"a": ["x"]}, eager=["y"])
        module.y = 1
        getattr_, dir_, all_ = lazy_exports(module.__name__, {"a": ["x"]}, eager=["y"])
        assert all_ == ["x", "y"] and {"x", "y"} <= set(dir_())
    finally:
        del sys.modules[module.__name__]


def test_a_name_shared_with_a_submodule_stays_the_exported_name() -> None:
    # harness.datasets.corpus imports the submodule harness.datasets.fetch first; the
    # package's ``fetch`` is still the function, as when the face imported it eagerly.
    code = (
        "import harness.datasets.corpus, harness.datasets.fetch; "
        "from harness.datasets import fetch; import harness.datasets as face; "
        "assert callable(fetch) and fetch.__module__ == 'harness.datasets.fetch' and face.fetch is fetch"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
