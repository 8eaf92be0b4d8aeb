"""Fixtures of the studies tests: tiny specs and the ``run_study`` arguments that keep a
study in the test's directory (the embedded Ray is the test-wide ``local_ray``)."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import harness_support
import pytest
import yaml

#: The tiny study of the studies tests: 2 variants x 1 seed (the shared one has 2 seeds).
TINY = {**harness_support.TINY, "seeds": 1}


@pytest.fixture
def tiny() -> dict[str, Any]:
    """The tiny study as a mapping (2 variants x 1 seed x nano x T=32 x 10 steps)."""
    import copy

    return copy.deepcopy(TINY)


@pytest.fixture
def write_spec(tmp_path: Path) -> Callable[..., Path]:
    """``write_spec(text=None, **overrides)``: a spec file (the tiny study, updated with
    ``overrides``, or the raw ``text``) in the test's temporary directory."""
    counter = {"n": 0}

    def make(text: str | None = None, **overrides: Any) -> Path:
        counter["n"] += 1
        path = tmp_path / f"spec{counter['n']}.yaml"
        if text is None:
            data = {**TINY, **overrides}
            text = yaml.safe_dump(data, sort_keys=False)
        path.write_text(text)
        return path

    return make


@pytest.fixture
def study_env(tmp_path: Path, shared_data_dir: Path, local_ray: None) -> dict[str, Any]:
    """Keyword arguments of ``run_study`` that keep everything in the test's directory."""
    return {
        "tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}",
        "storage_path": str(tmp_path / "results"),
        "stream": io.StringIO(),
        "live": False,
    }
