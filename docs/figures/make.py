"""Every figure of the manual, made from real runs, in one command.

    python docs/figures/make.py                              # runs the README's smoke study first
    python docs/figures/make.py --study results/smoke/<run>  # reads a finished study instead

With no ``--study``, the script runs ``harness run studies/smoke.yaml`` in a temporary folder
(its own MLflow store and results; 5-10 minutes on 2 cores) and draws from that. With
``--study``, it reads the study's directory and the MLflow store the study recorded in
(``harness_study.json``), and writes to neither. It never overwrites a figure with a half-drawn
one: each PNG is written whole (temporary file, then rename), and any failure stops the script.

The figures (docs/figures/), what each is drawn from, and the page that shows it:

- ``terminal-verdicts.png``: the verdict table ``harness report NAME --from STUDY --no-log``
  prints (the one ``harness run`` ends with), as a terminal shows it (getting-started);
- ``mlflow-parent-run.png``: the study's parent run in ``harness ui``, in headless Chromium
  (getting-started, report);
- ``report-page.png``: the top of ``report.html``, recomputed by ``harness report``, in
  Chromium (home, report);
- ``forest.png``, ``interaction.png``, ``tau.png``: the plots of that report (report);
- ``calibration.png``: the coverage rows of docs/calibration.md's table, which
  ``benchmarks/calibration.py`` writes (calibration);
- ``attention-cost.png``: ``harness bench attention`` JSON (``--attention``, else a sweep of
  T = 256, 1024, 4096 on 1 thread) (zoo).

``--publish SCORECARD_DIR --prefix NAME`` draws only the figures of a published real scorecard
(scorecard), from its ``scorecard.parquet`` with today's figure code: as ``NAME-scorecard.png``
:func:`scorecard_figure` and, as ``NAME-<figure>.png``, the figures :data:`PUBLISHED_FIGURES` (each
core claim over training, and predicted against parameters where the study had three sizes:
:mod:`harness.scorecard.figures`). The scorecard page shows those; the smoke study's card is
not drawn (it would show the same figure twice on one page).

Every figure is drawn at the width the manual shows it (``DISPLAY_WIDTH_IN``: the content
column at 1280 px), with no text under ``MIN_FONT_PT`` (both of ``harness.report.plots_training``).

Screenshots need Playwright (the ``test`` extra) and Debian's Chromium (``/usr/bin/chromium``,
``apt-get install chromium``). Every PNG is reduced to a 256-colour palette and must stay under
:data:`MAX_PNG_BYTES`.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # this checkout's harness, whatever an editable install points at

from harness.report.plots_training import DISPLAY_WIDTH_IN, MIN_FONT_PT  # noqa: E402

OUT = REPO / "docs" / "figures"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
#: Largest PNG the manual takes (the site serves them as they are).
MAX_PNG_BYTES = 300_000
#: The figures of a real scorecard the manual shows (those the scorecard drew; others are skipped).
PUBLISHED_FIGURES = (
    "training-superadditivity",
    "training-ega-gain-ega-paper",
    "training-mope-gain",
    "training-tau-035",
    "training-open-fraction-36",
    "predicted-superadditivity",
    "predicted-ega-gain-ega-paper",
    "predicted-mope-gain",
)
#: Width of the browser window every screenshot is taken at (the width the manual is checked at).
VIEWPORT_WIDTH = 1280
#: The attention families drawn, baseline first (``harness bench attention --families``).
ATTENTION_FAMILIES = ("baseline", "ega", "rope", "alibi", "mope-rel")
ATTENTION_SEQ_LENS = (256, 1024, 4096)
#: The scorecard's level claims (drawn on their own axis: a level, not a difference of losses).
LEVELS = ("tau_mean", "open_fraction", "pc1_cosine")
#: Verdict kinds of the scorecard, in the colours the report gives settled / undecided / untested.
SCORECARD_COLOURS = {
    "replicated": "#1b7a3a",
    "smaller": "#d08c00",
    "larger": "#7a4fb5",
    "reversed": "#c0392b",
    "absent": "#2f6fb0",
    "not resolvable": "#a0785a",
    "inconclusive": "#8a8a8a",
}


@dataclass(frozen=True)
class Study:
    """A finished study as the figures read it: its directory, name, MLflow store and parent run."""

    directory: Path
    name: str
    tracking_uri: str
    experiment_id: str
    parent_run_id: str

    @classmethod
    def read(cls, directory: Path) -> Study:
        record = directory / "harness_study.json"
        if not record.is_file():
            raise SystemExit(f"{directory}: not a study directory (no harness_study.json); pass results/<study>/<run>")
        meta = json.loads(record.read_text())
        return cls(directory, meta["study"], meta["tracking_uri"], str(meta["experiment_id"]), meta["parent_run_id"])


# ----------------------------------------------------------------------------- running
def harness(*args: str, cwd: Path | None = None, timeout: float = 1800) -> str:
    """Run ``harness ARGS`` (this checkout's, as a module) and return its stdout; a failure stops the script."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "MLFLOW_DISABLE_TELEMETRY": "true", "RAY_USAGE_STATS_ENABLED": "0"}
    done = subprocess.run(
        [sys.executable, "-m", "harness.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    if done.returncode != 0:
        tail = f"{done.stdout[-3000:]}{done.stderr[-3000:]}"
        raise SystemExit(f"harness {' '.join(args)} failed ({done.returncode}):\n{tail}")
    return done.stdout


def run_smoke_study(work: Path) -> Study:
    """The README's main job, in ``work`` (its own MLflow store and results folder)."""
    store = f"sqlite:///{work / 'mlflow.db'}"
    print(f"running studies/smoke.yaml in {work} (5-10 minutes on 2 cores) ...", flush=True)
    spec = str(REPO / "studies" / "smoke.yaml")
    harness("run", spec, "--tracking-uri", store, "--storage-path", str(work / "results"), cwd=work)
    (directory,) = (work / "results" / "smoke").glob("*/harness_study.json")
    return Study.read(directory.parent)


def recompute_report(study: Study, work: Path) -> tuple[Path, str]:
    """The study's report recomputed by this checkout (``--no-log``: nothing written to its store);
    returns the report folder and the verdict table as the terminal prints it."""
    out = work / "report"
    printed = harness("report", study.name, "--from", str(study.directory), "--out", str(out), "--no-log")
    lines = printed.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Verdicts:"))
    end = next(i for i, line in enumerate(lines) if line.startswith("Report:"))
    return out, "\n".join(lines[start:end])


def attention_sweep(work: Path) -> Path:
    """A small ``harness bench attention`` sweep (1 thread, no training step): a few minutes."""
    out = work / "attention.json"
    families = ",".join(f for f in ATTENTION_FAMILIES if f != "baseline")
    lens = ",".join(map(str, ATTENTION_SEQ_LENS))
    print(f"harness bench attention -T {lens} --families {families} --threads 1 ...", flush=True)
    options = ["--threads", "1", "--no-train-step", "--output", str(out)]
    harness("bench", "attention", "-T", lens, "--families", families, *options)
    return out


# ----------------------------------------------------------------------------- writing
def save_png(data: bytes, name: str, out: Path = OUT) -> Path:
    """``data`` as ``out``/NAME (docs/figures/ by default), reduced to a 256-colour palette,
    written whole."""
    from PIL import Image

    image = Image.open(io.BytesIO(data)).convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", optimize=True)
    size = buffer.tell()
    if size > MAX_PNG_BYTES:
        raise SystemExit(f"{name}: {size:,} bytes, over the manual's {MAX_PNG_BYTES:,}: draw it smaller")
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / f".{name}.tmp"
    tmp.write_bytes(buffer.getvalue())
    tmp.replace(out / name)
    print(f"wrote {out / name} ({size / 1000:.0f} kB)", flush=True)
    return out / name


def figure_png(fig) -> bytes:
    """The figure at its own size (drawn at the display width: no tight box to change it)."""
    from harness.report.plots_training import png_bytes

    return png_bytes(fig)


# ----------------------------------------------------------------------------- browser
@contextmanager
def browser() -> Iterator[object]:
    """A headless Chromium page, VIEWPORT_WIDTH wide (Debian's Chromium, driven by Playwright)."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        raise SystemExit('screenshots need Playwright: pip install -e ".[test]"') from None
    if not CHROMIUM.exists():
        raise SystemExit(f"screenshots need {CHROMIUM}: apt-get install chromium")
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            yield chromium.new_page(viewport={"width": VIEWPORT_WIDTH, "height": 900})
        finally:
            chromium.close()


def terminal_png(page, text: str) -> bytes:
    """``text`` as a terminal shows it: light on dark, monospace, 100 columns."""
    import html

    body = (
        "<html><body style='margin:0;background:#1e1e1e'>"
        "<pre style='margin:0;padding:14px 18px;display:inline-block;background:#1e1e1e;color:#e6e6e6;"
        "font:13px/1.35 DejaVu Sans Mono,monospace'>"
        f"{html.escape(text)}</pre></body></html>"
    )
    page.set_content(body)
    return page.locator("pre").screenshot()


def report_page_png(page, report_html: Path) -> bytes:
    """The top of the report page: its title and the verdict table with its key."""
    page.set_viewport_size({"width": VIEWPORT_WIDTH, "height": 900})
    page.goto(report_html.as_uri())
    table = page.locator("table.gt_table").first
    table.wait_for()
    bottom = table.bounding_box()["y"] + table.bounding_box()["height"] + 24
    return page.screenshot(clip={"x": 0, "y": 0, "width": VIEWPORT_WIDTH, "height": bottom})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def mlflow_ui(tracking_uri: str) -> Iterator[str]:
    """``harness ui`` on a free loopback port for the duration; yields its base URL."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO), "MLFLOW_DISABLE_TELEMETRY": "true"}
    cmd = [sys.executable, "-m", "harness.cli", "ui", "--tracking-uri", tracking_uri, "--port", str(port)]
    ui = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{base}/health", timeout=2):
                    break
            except OSError:
                if ui.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("harness ui did not come up") from None
                time.sleep(0.5)
        yield base
    finally:
        os.killpg(ui.pid, signal.SIGTERM)  # its own session: the server and its workers
        try:
            ui.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(ui.pid, signal.SIGKILL)
            ui.wait()


def mlflow_parent_png(page, study: Study) -> bytes:
    """The study's parent run in MLflow's model-training view as it first opens (the assistant
    panel closed, nothing unfolded): its name and the verdict table of its description."""
    with mlflow_ui(study.tracking_uri) as base:
        page.set_viewport_size({"width": VIEWPORT_WIDTH, "height": 800})
        page.goto(
            f"{base}/#/experiments/{study.experiment_id}/runs/{study.parent_run_id}?workflowType=machine_learning"
        )
        page.get_by_text("full report", exact=False).first.wait_for(timeout=90_000)
        close = page.get_by_role("button", name="Close")  # MLflow 3's assistant panel, when it shows
        if close.count() and close.first.is_visible():
            close.first.click(timeout=10_000)
        table = page.locator("table").filter(has_text="verdict").first
        table.wait_for(timeout=30_000)
        page.wait_for_timeout(1000)  # let the charts and fonts settle
        return page.screenshot(clip={"x": 0, "y": 0, "width": VIEWPORT_WIDTH, "height": 800})


# ----------------------------------------------------------------------------- plots
def _figure(height: float):
    """A figure :data:`DISPLAY_WIDTH_IN` wide (the manual's column), laid out by constrained layout."""
    from matplotlib.figure import Figure

    return Figure(figsize=(DISPLAY_WIDTH_IN, height), layout="constrained")


def calibration_rows(page: Path) -> tuple[list[int], dict[str, list[float]]]:
    """The coverage rows of the calibration table (between its markers) in the simplest design
    (one run per seed, normal values): the seeds and, per interval (named with where the
    report shows it), its coverage at each."""
    text = page.read_text()
    block = text.split("<!-- calibration:begin", 1)[1].split("<!-- calibration:end -->", 1)[0]
    lines = [line for line in block.splitlines() if line.startswith("|")]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in lines]
    head, body = rows[0], rows[2:]
    seeds = [int(c.removeprefix("n=")) for c in head if c.startswith("n=")]
    first = head.index(f"n={seeds[0]}")
    shown = head.index("shown in the report")
    coverage = {
        f"{r[0]} (report: {r[shown]})": [float(v) for v in r[first : first + len(seeds)]]
        for r in body
        if r[1].startswith("coverage") and r[0].endswith("95 %")  # the simplest design: one run per seed
    }
    if not coverage:
        raise SystemExit(f"{page}: no coverage rows between the calibration markers")
    return seeds, coverage


def calibration_figure(seeds: Sequence[int], coverage: dict[str, Sequence[float]], nominal: float = 0.95):
    """Coverage against the number of seeds, one line per interval, the nominal level as a line."""
    from matplotlib.ticker import NullLocator

    fig = _figure(4.4)
    ax = fig.subplots()
    for name, values in coverage.items():
        never = name.endswith("(report: never)")  # drawn thin and dashed: what the report does not use
        ax.plot(seeds, values, "s--" if never else "o-", lw=1.2 if never else 2, label=name)
    ax.axhline(nominal, color="black", lw=1, ls=":", label=f"nominal {nominal:.0%}")
    ax.set_xscale("log")
    ax.set_xticks(seeds, [str(n) for n in seeds])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_ylim(0.4, 1.0)
    ax.set_xlabel("seeds (n)")
    ax.set_ylabel("coverage of the true value")
    ax.set_title("The t-interval holds the truth about 95 % of the time from 2 seeds (simulated)", fontsize=11)
    ax.legend(fontsize=MIN_FONT_PT, loc="lower right")
    ax.grid(alpha=0.3)
    return fig


def attention_figure(payload: dict):
    """Time and peak tensor memory of one forward+backward against T, one line per family."""
    from matplotlib.ticker import NullLocator

    rows = [r for r in payload["attention"] if r["status"] == "ok"]
    settings = payload["settings"]
    fig = _figure(6.4)
    time_ax, memory_ax = fig.subplots(2, 1, sharex=True)
    families = [f for f in ATTENTION_FAMILIES if any(r["family"] == f for r in rows)]
    for family in families:
        mine = sorted((r for r in rows if r["family"] == family), key=lambda r: r["seq_len"])
        t = [r["seq_len"] for r in mine]
        style = {"lw": 2.2, "color": "black"} if family == "baseline" else {"lw": 1.3}
        time_ax.plot(t, [r["time_ms"] / 1e3 for r in mine], "o-", label=family, **style)
        memory_ax.plot(t, [r["peak_tensor_mb"] for r in mine], "o-", label=family, **style)
    lens = sorted({r["seq_len"] for r in rows})
    for ax, label in ((time_ax, "forward+backward time (s)"), (memory_ax, "peak tensor memory (MiB)")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(lens, [str(t) for t in lens])
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_yscale("log")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3, which="both")
    memory_ax.set_xlabel("context length T (tokens)")
    time_ax.legend(fontsize=MIN_FONT_PT)
    machine = payload["machine"]
    load = machine.get("load_average") or [float("nan")]
    fig.suptitle(
        f"One attention layer, B={settings['batch']} H={settings['heads']} head dim {settings['head_dim']}, "
        f"fp32, median of {settings['repeats']}; torch {machine.get('torch')}, {machine.get('torch_threads')} "
        f"thread(s), {machine.get('cpu_count')} CPUs at load average {load[0]:.0f} (times scale with the load)",
        fontsize=MIN_FONT_PT,
        wrap=True,
    )
    return fig


def scorecard_figure(parquet: Path):
    """THE SCORECARD FIGURE: each claim measured on a loss (its gain or gap, in nats) or a
    level (tau, the open fraction), one row per claim, reading and cell: the interval coloured
    by its verdict, the estimate as a dot, the paper's single-seed value as a diamond.

    Drawn from ``scorecard.parquet`` as ``harness scorecard`` writes it; the rows without an
    interval (claims not measured, trends, counts) are left out and counted in the title."""
    import polars as pl
    from matplotlib.lines import Line2D

    table = pl.read_parquet(parquet)
    shown = table.filter((pl.col("kind") == "cell") & pl.col("ci_low").is_not_null() & pl.col("ci_high").is_not_null())
    panels = [
        (
            "gain in validation loss or generalisation gap (nats)",
            shown.filter(pl.col("metric").is_in(["val_loss", "gen_gap"])),
        ),
        (
            "level: tau, open fraction, |cos| with PC1 (no unit)",
            shown.filter(pl.col("metric").is_in(LEVELS)),
        ),
    ]
    panels = [(title, rows.head(24)) for title, rows in panels if rows.height]
    heights = [max(rows.height, 2) for _, rows in panels]
    fig = _figure(2.0 + 0.42 * sum(heights))  # two-line labels: the claim, then its cell
    axes = fig.subplots(len(panels), 1, gridspec_kw={"height_ratios": heights}, squeeze=False)[:, 0]
    for ax, (title, rows) in zip(axes, panels, strict=True):
        _scorecard_panel(ax, rows, title)
    kinds = [k for k in SCORECARD_COLOURS if k in set(shown.get_column("verdict_kind"))]
    handles = [Line2D([], [], color=SCORECARD_COLOURS[k], lw=3) for k in kinds]
    diamond = Line2D([], [], color="black", marker="D", ls="", ms=5)
    labels = [*kinds, "paper (1 seed)"]
    fig.legend([*handles, diamond], labels, fontsize=MIN_FONT_PT, loc="outside lower center", ncol=4)
    # a row not measured names the study that would measure it: the studies read are the others'
    studies = sorted(set(table.filter(pl.col("kind") != "not measured").get_column("study").drop_nulls()))
    title = (
        f"Scorecard: {table.get_column('claim').n_unique()} claims against {', '.join(studies) or 'no study'}; "
        f"{shown.height} cells with an interval drawn, {table.height - shown.height} other rows (not measured, "
        "over training, trends, predictions, counts) in scorecard.html"
    )
    fig.suptitle(textwrap.fill(title, 90), fontsize=MIN_FONT_PT)
    return fig


def _scorecard_panel(ax, rows, title: str) -> None:
    n = rows.height
    for i, r in enumerate(rows.iter_rows(named=True)):
        y = n - 1 - i
        colour = SCORECARD_COLOURS.get(r["verdict_kind"], "#8a8a8a")
        ax.plot([r["ci_low"], r["ci_high"]], [y, y], color=colour, lw=3, solid_capstyle="butt")
        ax.plot([r["estimate"]], [y], "o", color=colour, ms=4)
        if r["paper_value"] is not None and math.isfinite(r["paper_value"]):
            ax.plot([r["paper_value"]], [y], "D", color="black", ms=4)
    labels = [_scorecard_label(r) for r in rows.iter_rows(named=True)]
    ax.set_yticks(range(n), labels[::-1], fontsize=MIN_FONT_PT)
    ax.tick_params(axis="x", labelsize=MIN_FONT_PT)
    ax.set_ylim(-0.7, n - 0.3)
    ax.axvline(0.0, color="black", lw=0.6, ls="--")
    ax.set_title(title, fontsize=MIN_FONT_PT + 1, loc="left")
    ax.grid(axis="x", alpha=0.3)


def _scorecard_label(row: dict) -> str:
    reading = f" ({row['reading'].split(' ', 1)[0]})" if row.get("reading") else ""
    cell = f"{row['size']}, T={row['context_length']}" if row.get("size") else ""
    group = f"  {row['group']}" if row.get("group") else ""  # e.g. tau_init=0.7: one row per initial value
    return f"{row['claim']}{reading}\n{cell}{group}  n={row['n_seeds']}"  # two lines: the label stays narrow


# ----------------------------------------------------------------------------- main
def report_figures(study: Study, work: Path, out: Path) -> None:
    """The report's plots and the three screenshots (terminal, report page, MLflow run)."""
    report_dir, terminal_text = recompute_report(study, work)
    for name in ("forest", "interaction", "tau"):
        save_png((report_dir / f"{name}.png").read_bytes(), f"{name}.png", out)
    with browser() as page:
        save_png(terminal_png(page, terminal_text), "terminal-verdicts.png", out)
        save_png(report_page_png(page, report_dir / "report.html"), "report-page.png", out)
        save_png(mlflow_parent_png(page, study), "mlflow-parent-run.png", out)


def published_figures(scorecard_dir: Path, prefix: str, out: Path) -> None:
    """``PREFIX-scorecard.png`` of a published scorecard and its figures named in
    :data:`PUBLISHED_FIGURES`, each drawn anew from its ``scorecard.parquet`` (a figure the card
    has no rows for is skipped)."""
    import polars as pl

    from harness.scorecard.figures import prediction_figure, training_figure

    parquet = scorecard_dir / "scorecard.parquet"
    save_png(figure_png(scorecard_figure(parquet)), f"{prefix}-scorecard.png", out)
    table = pl.read_parquet(parquet)
    training = table.filter((pl.col("kind") == "training") & pl.col("estimate").is_not_null())
    predicted = table.filter((pl.col("kind") == "predicted") & (pl.col("levels").fill_null(0) >= 3))
    for name in PUBLISHED_FIGURES:
        kind, claim = name.split("-", 1)
        if kind == "training" and training.filter(pl.col("claim") == claim).height:
            fig = training_figure(claim, training.filter(pl.col("claim") == claim))
        elif kind == "predicted" and predicted.filter(pl.col("claim") == claim).height:
            fig = prediction_figure(claim, table, predicted.filter(pl.col("claim") == claim))
        else:
            continue
        save_png(figure_png(fig), f"{prefix}-{name}.png", out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    add = parser.add_argument
    add("--study", type=Path, help="a finished study's directory (results/<study>/<run>); default: run the smoke study")
    add("--attention", type=Path, help="harness bench attention JSON; default: a small sweep")
    add("--calibration", type=Path, default=REPO / "docs" / "calibration.md", help="the calibration page")
    add("--out", type=Path, default=OUT, help="where the PNGs go (default: docs/figures, what the site serves)")
    add("--publish", type=Path, help="a real scorecard's --out folder: draw only its figures (with --prefix)")
    add("--prefix", default="published", help="name prefix of the published figures (e.g. the study's name)")
    args = parser.parse_args(argv)
    if args.publish:
        published_figures(args.publish.resolve(), args.prefix, args.out)
        return 0
    with tempfile.TemporaryDirectory(prefix="harness-figures-") as tmp:
        work = Path(tmp)
        study = Study.read(args.study.resolve()) if args.study else run_smoke_study(work)
        report_figures(study, work, args.out)
        calibration = calibration_figure(*calibration_rows(args.calibration))
        save_png(figure_png(calibration), "calibration.png", args.out)
        attention = attention_figure(json.loads((args.attention or attention_sweep(work)).read_text()))
        save_png(figure_png(attention), "attention-cost.png", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
