"""The docs site builds as CI builds it (``mkdocs build --strict``: a broken link, a page
missing from the nav or an object griffe cannot resolve is an error), and each API page
documents every name its package face exports (``__all__``, computed at import time; the
site reads the faces statically through docs/hooks/griffe_lazy_exports.py); the README
stays a landing page that links into it."""

from __future__ import annotations

import importlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FACES = {
    "harness.models": "api/models",
    "harness.analysis": "api/analysis",
    "harness.report": "api/report",
    "harness.scorecard": "api/scorecard",
    "harness.studies": "api/studies",
}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("mkdocs") is None:
        pytest.fail('mkdocs is not installed: pip install -e ".[docs]"')
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    return out


@pytest.mark.parametrize("face", sorted(FACES))
def test_api_page_documents_every_exported_name(site: Path, face: str) -> None:
    page = (site / FACES[face] / "index.html").read_text()
    documented = set(re.findall(r'id="' + re.escape(face) + r'\.(\w+)"', page))
    exported = set(importlib.import_module(face).__all__)
    assert exported, face
    assert not exported - documented, f"{face}: not on its API page: {sorted(exported - documented)}"
    # Sphinx roles become code (docs/hooks/griffe_sphinx_roles.py), never ":func:" shown raw.
    raw_roles = re.findall(r":(?:func|meth|class|mod|data|attr):(?:`|<code>)", page)
    assert not raw_roles, f"{face}: Sphinx roles shown raw: {raw_roles[:3]}"


def test_readme_is_a_landing_page_whose_links_resolve() -> None:
    """At most 200 lines, the two commands as .ci/run and the e2e test use them, and every
    relative link pointing at a file of the repository (the docs pages)."""
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    assert "pip install torch==2.13.0 && pip install -e . && harness run studies/smoke.yaml" in text
    assert 'pip install torch==2.13.0 && pip install -e ".[test]" && pytest' in text
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    relative = [link for link in links if "://" not in link]
    assert relative, "the README links into docs/"
    assert not [link for link in relative if not (REPO / link).is_file()]
