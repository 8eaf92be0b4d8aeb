"""A run resolves its variant once: its plan turns the config's variant into a
:class:`~harness.models.Variant`, and the model, the compile key, the MLflow params and tags and
the results row take that object instead of looking the name up again."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import pytest

from harness.models import variants
from harness.training import train
from harness.training.config import TrainConfig


def _counted(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, calls: list[str]) -> None:
    """Replace ``owner.name`` by a wrapper that appends ``name`` to ``calls`` on every call."""
    original = getattr(owner, name)

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(name)
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, counting)


def _count_resolutions(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Count every way a name becomes a variant: ``TrainConfig.variant_spec``, ``get_variant``
    (in every harness module that imported it by name) and the registry lookup beneath it."""
    calls: list[str] = []
    _counted(monkeypatch, TrainConfig, "variant_spec", calls)
    _counted(monkeypatch, variants.VARIANT_REGISTRY, "get", calls)
    original = variants.get_variant
    for module in [m for name, m in sys.modules.items() if name.startswith("harness") and m is not None]:
        if getattr(module, "get_variant", None) is original:
            _counted(monkeypatch, module, "get_variant", calls)
    return calls


# With MLflow the run also writes its params, tags and description from the variant (a SQLite
# store: 15 s more, so in the slow suite).
@pytest.mark.parametrize("mlflow", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["plain", "mlflow"])
def test_a_run_resolves_its_variant_once(
    tiny_config: Callable[..., TrainConfig], sqlite_tracking_uri: str, monkeypatch: pytest.MonkeyPatch, mlflow: bool
) -> None:
    config = tiny_config(max_steps=2, eval_every=2, tracking_uri=sqlite_tracking_uri, experiment="resolution")
    calls = _count_resolutions(monkeypatch)
    result = train(config, mlflow_logging=mlflow, progress_bar=False)
    assert result.status == "finished" and result.steps == 2
    assert sorted(calls) == ["get", "get_variant", "variant_spec"]  # the plan's, one chain
