"""The docs site builds as CI builds it (``mkdocs build --strict``: a broken link, a page
missing from the nav or an object griffe cannot resolve is an error), and each API page
documents every name its package face exports (``__all__``, computed at import time; the
site reads the faces statically through docs/hooks/griffe_lazy_exports.py); the README
stays a landing page that links into it."""

from __future__ import annotations

import html
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


#: Longest line of a signature block that fits the content column at 1280 px without scrolling.
MAX_SIGNATURE_CHARS = 90


def _signature_lines(page: str) -> list[str]:
    blocks = re.findall(r'<div class="doc-signature[^"]*"[^>]*>(.*?)</div>', page, re.S)
    return [line for block in blocks for line in html.unescape(re.sub(r"<[^>]+>", "", block)).splitlines()]


@pytest.mark.parametrize("face", sorted(FACES))
def test_api_page_reads_as_a_reference(site: Path, face: str) -> None:
    """Signatures in their own block, formatted to the column (ruff, from the docs extra);
    no heading for a dunder or private member; examples (``>>>``) as code, never as text;
    the page starts with its own introduction (what to read first)."""
    page = (site / FACES[face] / "index.html").read_text()
    lines = _signature_lines(page)
    assert lines, f"{face}: no signature blocks (separate_signature)"
    too_long = [line for line in lines if len(line) > MAX_SIGNATURE_CHARS]
    assert not too_long, f"{face}: signature lines over {MAX_SIGNATURE_CHARS} characters: {too_long[:3]}"
    headings = re.findall(r'<h[2-6][^>]*id="([^"]+)"', page)
    private = [h for h in headings if re.search(r"\._\w*$", h)]
    assert not private, f"{face}: headings of dunder or private members: {private[:5]}"
    prose = re.sub(r"<pre.*?</pre>|<code.*?</code>", "", page, flags=re.S)
    assert "&gt;&gt;&gt;" not in prose, f"{face}: an example (>>>) shown as text, not as code"
    intro = (REPO / "docs" / f"{FACES[face]}.md").read_text().split(":::", 1)[0]
    assert "Read first" in intro, f"docs/{FACES[face]}.md: no introduction before the reference"


def test_docs_extra_formats_signatures() -> None:
    """mkdocstrings formats signatures only with black or ruff installed: the docs extra
    brings one, so `pip install -e ".[docs]"` alone builds the pages this test suite checks."""
    (docs,) = re.findall(r"^docs = \[(.*?)^\]", (REPO / "pyproject.toml").read_text(), re.S | re.M)
    assert re.search(r"\"(ruff|black)\b", docs), docs


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
