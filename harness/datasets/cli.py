"""``harness data list | fetch NAME | verify [NAME] | stats NAME``.

Imports stay light (typer only); numpy and the datasets modules load inside the commands.
Bad input (unknown name, missing files offline, a checksum mismatch) raises
:class:`~harness.errors.InputError`, which ``harness`` turns into exit code 2.
"""

from __future__ import annotations

import json

import typer

from harness.errors import InputError

data_app = typer.Typer(
    help="Corpora: list what is available, fetch and verify files, print corpus statistics.",
    no_args_is_help=True,
)

_DATA_DIR_HELP = "Folder searched first (before $HARNESS_DATA_DIR and the cache)."


def _human(n: int | None) -> str:
    if n is None:
        return "?"
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000  # type: ignore[assignment]
    return str(n)


def _row(card, data_dir: str | None) -> tuple[str, str, str, str]:
    """``(name, size, where, verified)`` of one card, without downloading."""
    from harness.datasets.fetch import ChecksumMismatch, locate

    if card.synthetic:
        return card.name, "generated", "generated on load", "n/a (generated)"
    try:
        found = locate(card, data_dir=data_dir)
    except ChecksumMismatch as exc:
        return card.name, "?", str(exc.path), "MISMATCH"
    except InputError as exc:  # e.g. a file that is no archive
        return card.name, "?", "unreadable", f"error: {str(exc).splitlines()[0]}"
    if found is None:
        return card.name, f"{_human(card.download_size)} (download)", "not found", "-"
    paths = found.paths
    if len(paths) == 1:
        where = f"{found.where}: {paths[0]}"
    else:
        parent = paths[0].parent
        same = all(p.parent == parent for p in paths)
        where = (
            f"{found.where}: {parent}/ ({len(paths)} files)"
            if same
            else f"{found.where}: " + ", ".join(map(str, paths))
        )
    return card.name, _human(found.size), where, found.status


def text_table(rows: list[tuple[str, ...]], header: tuple[str, ...]) -> str:
    """Rows under a header, columns padded to their widest cell, a dashed rule between."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(header, widths, strict=False)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)).rstrip() for r in rows]
    return "\n".join(lines)


@data_app.command("list")
def list_command(
    data_dir: str | None = typer.Option(None, "--data-dir", help=_DATA_DIR_HELP),
) -> None:
    """Every registered corpus: size, where its files were found, and whether they verify."""
    from harness.datasets.cards import REGISTRY
    from harness.datasets.fetch import search_roots

    rows = [_row(card, data_dir) for card in REGISTRY.values()]
    typer.echo(text_table(rows, ("name", "size", "where found", "verified")))
    typer.echo("searched, in order: " + ", ".join(f"{label} {folder}" for label, folder in search_roots(data_dir)))


@data_app.command("info")
def info_command(name: str = typer.Argument(..., help="Corpus name (see `harness data list`).")) -> None:
    """The dataset card: source URLs, checksums, split rule, tokenisation, licence."""
    from harness.datasets.cards import get_card
    from harness.datasets.fetch import archive_candidates, file_candidates

    card = get_card(name)
    rows = [
        ("name", card.name),
        ("description", card.description),
        ("tokenisation", f"{card.tokenizer} (bits per {card.unit})"),
        ("split", card.split.describe()),
        ("licence", card.licence),
        ("checksum", card.checksum_kind),
    ]
    if card.archive is not None:
        a = card.archive
        rows += [
            ("archive", a.filename),
            ("archive urls", " ".join(a.urls)),
            ("archive sha256", a.sha256 or "not published"),
            ("archive bytes", f"{a.size:,}" if a.size else "unknown"),
            ("archive looked for at", ", ".join(archive_candidates(card))),
        ]
    for f in card.files:
        rows += [
            (f"{f.role} file", f"{f.filename}" + (f" (archive member {f.member})" if f.member else "")),
            (f"{f.role} sha256", f.sha256 or "not published"),
            (f"{f.role} bytes", f"{f.size:,}" if f.size else "unknown"),
            (f"{f.role} looked for at", ", ".join(file_candidates(card, f))),
        ]
        if f.urls:
            rows.append((f"{f.role} urls", " ".join(f.urls)))
    if card.notes:
        rows.append(("notes", card.notes))
    width = max(len(k) for k, _ in rows)
    typer.echo("\n".join(f"{k:<{width}}  {v}" for k, v in rows))


@data_app.command("fetch")
def fetch_command(
    name: str = typer.Argument(..., help="Corpus name (see `harness data list`)."),
    data_dir: str | None = typer.Option(None, "--data-dir", help=_DATA_DIR_HELP),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a download progress bar."),
) -> None:
    """Find or download a corpus (checksum-verified), then build its token cache."""
    from harness.datasets.cards import get_card
    from harness.datasets.corpus import load
    from harness.datasets.fetch import fetch

    card = get_card(name)
    if not card.synthetic:
        found = fetch(card, data_dir=data_dir, progress=progress)
        typer.echo(f"{card.name}: {found.where}: {', '.join(str(p) for p in found.paths)} ({found.status})")
    corpus = load(name, data_dir=data_dir, progress=progress)
    sizes = ", ".join(f"{k} {len(v):,}" for k, v in corpus.splits.items())
    typer.echo(f"{corpus.name}: {sizes} tokens, vocabulary {corpus.vocab_size}; token cache {corpus.cache_path}")


@data_app.command("verify")
def verify_command(
    name: str | None = typer.Argument(None, help="Corpus name; all corpora when omitted."),
    data_dir: str | None = typer.Option(None, "--data-dir", help=_DATA_DIR_HELP),
) -> None:
    """Check the files found (sha256, or byte size where none is published); never downloads.

    Exit code 2 when a file does not match its card, or when the named corpus is missing.
    """
    from harness.datasets.cards import REGISTRY, get_card
    from harness.datasets.fetch import where_to_put

    cards = [get_card(name)] if name else list(REGISTRY.values())
    rows = [_row(card, data_dir) for card in cards]
    typer.echo(text_table(rows, ("name", "size", "where found", "verified")))
    bad = [r[0] for r in rows if r[3] == "MISMATCH" or r[3].startswith("error")]
    if bad:
        raise InputError(
            f"files do not match their dataset cards: {', '.join(bad)} (see above; replace or remove them)"
        )
    if name and rows[0][2] == "not found":
        raise InputError(
            f"{name}: no copy found. Run `harness data fetch {name}`, or {where_to_put(cards[0], data_dir)}"
        )


@data_app.command("stats")
def stats_command(
    name: str = typer.Argument(..., help="Corpus name (see `harness data list`)."),
    split: str = typer.Option("train", "--split", help="train, val or test."),
    max_chars: int | None = typer.Option(None, "--max-chars", min=1, help="Only the first N tokens of the split."),
    data_dir: str | None = typer.Option(None, "--data-dir", help=_DATA_DIR_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Content-letter fraction and mean word / clause / sentence lengths (characters)."""
    from harness.datasets.corpus import load
    from harness.datasets.stats import corpus_stats_for

    corpus = load(name, data_dir=data_dir)
    stats = corpus_stats_for(corpus, split=split, max_chars=max_chars)
    if as_json:
        typer.echo(json.dumps({"dataset": corpus.name, "split": split, **stats.as_dict()}, indent=2))
        return
    typer.echo(f"{corpus.name} ({split} split{'' if max_chars is None else f', first {max_chars:,} tokens'})")
    typer.echo(stats.format())


def register(app: typer.Typer) -> None:
    """Add ``harness data ...``."""
    app.add_typer(data_app, name="data")
