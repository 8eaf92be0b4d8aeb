"""The docs site builds as CI builds it (``mkdocs build --strict``: a broken link, a page
missing from the nav or an object griffe cannot resolve is an error), and each API page
documents every name its package face exports (``__all__``, computed at import time; the
site reads the faces statically through docs/hooks/griffe_lazy_exports.py) and reads as a
reference; the README stays a landing page that links into it; the figures are real files
of a reasonable size; what the home page, getting-started and the README say about the
package and the main job's output agrees with the code; and, in the slow suite, the wide
tables fit a 1280 px window in Chromium."""

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


# ----------------------------------------------------------------------------- figures
#: The site's figures (docs/figures/make.py draws them): at least this many, on this many pages.
MIN_FIGURES, MIN_FIGURE_PAGES = 8, 5
MAX_FIGURE_BYTES = 300_000


def test_figures_are_served_small_and_all_used(site: Path) -> None:
    """Every image a page shows is a file under docs/figures/ that the site serves, under
    300 kB; every figure there is shown somewhere; at least 8 images over at least 5 pages."""
    shown: dict[str, set[str]] = {}
    for page in site.rglob("index.html"):
        for src in re.findall(r'<img[^>]+src="([^"]+)"', page.read_text()):
            name = src.rsplit("/", 1)[-1]
            if "figures/" in src:
                assert (site / "figures" / name).is_file(), f"{page}: {src} is not in the built site"
                shown.setdefault(name, set()).add(str(page.parent.relative_to(site)))
    drawn = {p.name for p in (REPO / "docs" / "figures").glob("*.png")}
    assert set(shown) == drawn, (
        f"drawn but not shown: {sorted(drawn - set(shown))}; shown, not drawn: {sorted(set(shown) - drawn)}"
    )
    assert len(drawn) >= MIN_FIGURES and len(set().union(*shown.values())) >= MIN_FIGURE_PAGES, shown
    heavy = {n: (REPO / "docs" / "figures" / n).stat().st_size for n in drawn}
    assert max(heavy.values()) < MAX_FIGURE_BYTES, heavy


# ----------------------------------------------------------------------------- consistency
def _nav_api_modules() -> list[str]:
    return re.findall(r"^\s+- (harness\.\w+): api/\w+\.md$", (REPO / "mkdocs.yml").read_text(), re.M)


def test_home_page_and_readme_name_every_api_page() -> None:
    """The nav, the home page and the README name the same API modules: the package faces."""
    assert sorted(_nav_api_modules()) == sorted(FACES)
    for doc in (REPO / "docs" / "index.md", REPO / "README.md"):
        text = doc.read_text()
        named = set(re.findall(r"`(harness\.\w+)`", text.rsplit("API reference", 1)[1][:600]))
        assert named == set(FACES), f"{doc.name}: names {sorted(named)}, the API pages are {sorted(FACES)}"


def _samples(doc: Path) -> str:
    """The console samples of the main job in ``doc``, joined."""
    blocks = re.findall(r"```console\n(.*?)```", doc.read_text(), re.S)
    return "\n".join(b for b in blocks if "Study smoke" in b or "Verdicts: smoke" in b or "View it:" in b)


@pytest.mark.parametrize("doc", ["README.md", "docs/getting-started.md"])
def test_main_job_sample_is_what_the_code_prints(doc: str) -> None:
    """The sample output of `harness run studies/smoke.yaml` in the README and in
    getting-started: its first line is the one the runner prints for the spec, its verdict
    table ends with the reading the report writes, its link opens MLflow's model-training
    view, and the prose quotes the run's own duration."""
    from harness.report.verdict import verdict_reading
    from harness.studies.dry_run import describe_grid, describe_resources
    from harness.studies.spec.grid import expand_grid
    from harness.studies.spec.sequential_design import SequentialDesign
    from harness.studies.spec.study_spec import load_spec

    text = (REPO / doc).read_text()
    sample = _samples(REPO / doc)
    spec = load_spec(REPO / "studies" / "smoke.yaml")
    grid = describe_grid(spec, expand_grid(spec), SequentialDesign.from_spec(spec))
    first = f"Study smoke: {grid}, {describe_resources(spec)}, local Ray ("
    assert sample.startswith(first), sample[:200]
    if "How to read it:" in sample:
        reading = " ".join(sample.split("How to read it:", 1)[1].split("Study smoke finished", 1)[0].split())
        assert " ".join(verdict_reading().split()) == f"How to read it: {reading}"
    (seconds,) = re.findall(r"^Study smoke finished in (\d+) s: 8 finished$", sample, re.M)
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    assert f"{seconds} s" in prose or doc == "README.md", f"{doc}: the prose does not quote the run's {seconds} s"
    (link,) = re.findall(r"^View it: .*$", sample, re.M)
    assert link.endswith("?workflowType=machine_learning"), link


def test_quoted_dry_runs_are_what_the_dry_run_prints_now() -> None:
    """The cost docs/scorecard.md quotes for the papers' studies ("Replicating the papers on one
    GPU") is `--dry-run`'s output today: every quoted line is a line the dry run prints for that
    study on this machine, so a change to the cost model or a spec shows up here, not in a reader's
    GPU bill. (The lines quoted do not depend on the machine's CPU count: GPU studies.)"""
    from harness.studies.dry_run import dry_run_text
    from harness.studies.spec.grid import expand_grid
    from harness.studies.spec.sequential_design import SequentialDesign
    from harness.studies.spec.study_spec import load_spec

    blocks = re.findall(r"```text\n(.*?)```", (REPO / "docs" / "scorecard.md").read_text(), re.S)
    quoted = [b for b in blocks if re.search(r"^Study [\w-]+: \d+ trials", b, re.M)]
    assert quoted, "docs/scorecard.md quotes no dry run"
    for block in quoted:
        studies = re.findall(r"^Study ([\w-]+): ", block, re.M)
        printed = set()
        for name in studies:
            spec = load_spec(REPO / "studies" / f"{name}.yaml")
            design = SequentialDesign.from_spec(spec)
            text = dry_run_text(
                spec, expand_grid(spec), design=design, storage="results", tracking_uri="mlflow.db", address=None
            )
            printed |= {line.strip() for line in text.splitlines()}
        for line in filter(None, (x.strip() for x in block.splitlines())):
            assert line in printed, f"docs/scorecard.md quotes a dry-run line the code no longer prints: {line}"


def test_pages_link_previous_next_and_the_repository(site: Path) -> None:
    """Each page ends with links to the previous and the next page of the nav; the config
    names the repository (HARNESS_REPO_URL, set where the site is published)."""
    config = (REPO / "mkdocs.yml").read_text()
    assert "navigation.footer" in config and re.search(r"^repo_url: ", config, re.M)
    page = (site / "report" / "index.html").read_text()
    assert "md-footer__link--prev" in page and "md-footer__link--next" in page


# ----------------------------------------------------------------------------- in a browser
CHROMIUM = Path("/usr/bin/chromium")
#: The window the manual is read in: a laptop's browser, both sidebars shown.
WINDOW = {"width": 1280, "height": 900}
#: Where each wide-table page's key column is: (page, a column label its tables must show).
KEY_COLUMNS = {"scorecard": "verdict", "calibration": "shown in the report"}

_TABLES_JS = """() => [...document.querySelectorAll('article table')].map(table => {
  const frame = (table.closest('.md-typeset__scrollwrap') || table.parentElement).getBoundingClientRect();
  const heads = [...table.querySelectorAll('thead th')];
  const box = el => { const r = el.getBoundingClientRect(); return {left: r.left, right: r.right}; };
  return {
    labels: heads.map(th => th.innerText.trim()),
    heads: heads.map(box),
    frame: {left: frame.left, right: frame.right},
    width: table.scrollWidth,
    scrolls: [...document.querySelectorAll('.md-typeset__scrollwrap, .md-typeset__table')]
      .filter(el => el.contains(table)).some(el => el.scrollWidth > el.clientWidth + 1),
  };
})"""


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(KEY_COLUMNS))
def test_wide_tables_fit_a_1280px_window(site: Path, name: str) -> None:
    """Headless Chromium (Debian's, through Playwright) opens the built page at 1280 px: no
    table scrolls sideways, the key column (the scorecard's verdict, calibration's "shown in
    the report") is inside the content column and the window, and so is the last column of
    the page's widest table."""
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is absent (Debian package `chromium`; .ci/run installs it)")
    playwright = pytest.importorskip("playwright.sync_api", reason="playwright (the [test] extra) is not installed")
    with playwright.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport=WINDOW)
            page.goto((site / name / "index.html").as_uri())
            tables = page.evaluate(_TABLES_JS)
        finally:
            browser.close()
    assert tables, f"{name}: no tables"

    def visible(table: dict, column: int) -> bool:
        head = table["heads"][column]
        return (
            table["frame"]["left"] - 1 <= head["left"]
            and head["right"] <= min(table["frame"]["right"], WINDOW["width"]) + 1
        )

    assert not [t["labels"] for t in tables if t["scrolls"]], f"{name}: tables that scroll sideways at 1280 px"
    keyed = [t for t in tables if KEY_COLUMNS[name] in t["labels"]]
    assert keyed, f"{name}: no table with a {KEY_COLUMNS[name]!r} column"
    for table in keyed:
        assert visible(table, table["labels"].index(KEY_COLUMNS[name])), (name, table["labels"], table["frame"])
    widest = max(tables, key=lambda t: t["width"])
    assert visible(widest, len(widest["labels"]) - 1), (name, widest["labels"], widest["heads"][-1], widest["frame"])


# ----------------------------------------------------------------------------- nothing runs off the page
#: The two windows every page is read in: a laptop, and a phone (an iPhone's 390 x 844).
WINDOWS = {"desktop": {"width": 1280, "height": 800}, "phone": {"width": 390, "height": 844}}
#: The narrowest a figure may be shown on a phone: below it a plot's labels are unreadable.
MIN_PHONE_IMAGE_PX = 280

_OVERFLOW_JS = """() => {
  const doc = document.documentElement;
  const cut = el => el.scrollWidth > el.clientWidth + 1;
  return {
    page: doc.scrollWidth - doc.clientWidth,
    code: [...document.querySelectorAll('article pre > code')].filter(cut)
      .map(el => el.innerText.split('\\n').sort((a, b) => b.length - a.length)[0].slice(0, 80)),
    loose: [...document.querySelectorAll('article > *')].filter(el =>
      el.getBoundingClientRect().right > doc.clientWidth + 1).map(el => el.tagName),
    images: [...document.querySelectorAll('article img')]
      .map(img => [img.getAttribute('src').split('/').pop(), Math.round(img.getBoundingClientRect().width)]),
  };
}"""


@pytest.mark.slow
@pytest.mark.parametrize("window", sorted(WINDOWS))
def test_nothing_runs_off_any_page(site: Path, window: str) -> None:
    """Every page of the built site in headless Chromium at 1280 x 800 and 390 x 844: the page
    never scrolls sideways, no code or terminal block hides a line behind a sideways scroll
    (they wrap at the column: docs/stylesheets/extra.css), no block of the article reaches past
    the window (a wide table scrolls inside its own box), and on the phone every figure is at
    least 280 px wide."""
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is absent (Debian package `chromium`; .ci/run installs it)")
    playwright = pytest.importorskip("playwright.sync_api", reason="playwright (the [test] extra) is not installed")
    pages = sorted(site.rglob("index.html"))
    assert len(pages) >= 20, pages
    found: dict[str, dict] = {}
    with playwright.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport=WINDOWS[window])
            for html_file in pages:
                page.goto(html_file.as_uri())
                found[str(html_file.parent.relative_to(site)) or "home"] = page.evaluate(_OVERFLOW_JS)
        finally:
            browser.close()
    assert not {name: r["page"] for name, r in found.items() if r["page"] > 0}, "pages that scroll sideways"
    assert not {name: r["code"] for name, r in found.items() if r["code"]}, "code blocks cut at the column"
    assert not {name: r["loose"] for name, r in found.items() if r["loose"]}, "blocks past the window"
    if window == "phone":
        narrow = {n: [i for i in r["images"] if i[1] < MIN_PHONE_IMAGE_PX] for n, r in found.items()}
        assert not {n: i for n, i in narrow.items() if i}, f"figures under {MIN_PHONE_IMAGE_PX} px on a phone"
    assert sum(len(r["images"]) for r in found.values()) >= MIN_FIGURES


def test_no_page_shows_one_figure_twice(site: Path) -> None:
    """No page shows the same picture twice, under one name or two (the scorecard page once
    showed one card's figure as both scorecard.png and long-cpu-scorecard.png)."""
    import hashlib

    for page in site.rglob("index.html"):
        seen: dict[str, str] = {}
        for src in re.findall(r'<img[^>]+src="([^"]+)"', page.read_text()):
            if "figures/" not in src:
                continue
            name = src.rsplit("/", 1)[-1]
            digest = hashlib.sha256((site / "figures" / name).read_bytes()).hexdigest()
            assert digest not in seen or seen[digest] == name, f"{page.parent.name}: {name} is {seen.get(digest)} again"
            assert name not in seen.values(), f"{page.parent.name}: {name} shown twice"
            seen[digest] = name
