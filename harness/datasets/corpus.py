"""Corpora as token arrays: tokenisation of the registry's files and ``load``.

The first ``load`` of a corpus encodes its files into a token cache
(:mod:`harness.datasets.token_cache`: one ``tokens.npy``, all splits one after another, plus
a ``meta.json`` with the vocabulary, split bounds and source sha256s) under

    <cache>/tokens/<card name>/<key>/

where ``key`` hashes the sha256 of every source file read, the tokenizer (and its
version) and the split rule: a changed or replaced source file gets a new key, so a
stale cache is never reused. Later loads only hash the sources and memory-map the arrays.
The generated ``synthetic-salience`` corpus is made by :mod:`harness.datasets.synthetic`.

Tokenisation (the vocabulary is always the sorted set of symbols of *all* splits, so
encoding any split's text never fails):

- ``char``: one token per Unicode character of the UTF-8 text.
- ``ptb-char``: Mikolov's character files spell every symbol followed by one space
  (``a e r _ b a n k \\n ...``); the symbols are the tokens: the 49 printable symbols,
  ``_`` (word boundary) and the line break; the separating spaces carry no information
  and are dropped. ``decode`` gives the compact form ``aer_bank\\n...``.
- ``byte``: one token per byte (vocabulary 256; enwik8). ``vocab[i]`` is ``chr(i)``
  (a label); ``decode`` turns bytes back into UTF-8 text.
"""

from __future__ import annotations

import codecs
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from harness.datasets.cards import SPLITS, DatasetCard, get_card
from harness.datasets.fetch import Located, cache_root, fetch
from harness.datasets.synthetic import make_salience_corpus, parse_salience_name
from harness.datasets.token_cache import (
    CACHE_FORMAT,
    Corpus,
    cache_key,
    codepoints,
    corpus_from_cache,
    read_cache_dir,
    write_cache_dir,
)
from harness.errors import InputError

_READ_CHUNK = 1 << 24  # 16 MiB of bytes per piece while encoding


# --------------------------------------------------------------------------------------
# reading sources as code points
# --------------------------------------------------------------------------------------
def ptb_char_compact(text: str) -> str:
    """Mikolov's ``a e r _ b a n k \\n `` -> ``aer_bank\\n``: drop the separating spaces.

    Every symbol is one character followed by one space, so the symbols sit at even
    offsets; anything else is a malformed file (InputError).
    """
    if len(text) % 2 == 0 and text[1::2].strip(" ") == "":
        return text[0::2]
    tokens = [t for t in text.split(" ") if t]
    long = [t for t in tokens if len(t) != 1]
    if long:
        raise InputError(f"not Mikolov's character format: tokens longer than one character, e.g. {long[:5]!r}")
    return "".join(tokens)


def _pieces(located: Located, role: str, tokenizer: str) -> Iterator[np.ndarray]:
    """The file of ``role`` as arrays of code points (bytes for ``byte``), piece by piece."""
    with located.open(role) as fh:
        if tokenizer == "byte":
            while chunk := fh.read(_READ_CHUNK):
                yield np.frombuffer(chunk, dtype=np.uint8)
            return
        if tokenizer == "ptb-char":  # PTB files are ~10 MB: one piece
            data = fh.read()
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise _not_utf8(located, role, exc, exc.start) from None
            yield codepoints(ptb_char_compact(text))
            return
        decoder = codecs.getincrementaldecoder("utf-8")(errors="strict")
        read = 0  # bytes read so far; the decoder holds back an incomplete character at a piece's end
        while True:
            chunk = fh.read(_READ_CHUNK)
            held = len(decoder.getstate()[0])
            try:
                text = decoder.decode(chunk, final=not chunk)
            except UnicodeDecodeError as exc:  # exc.start counts from the first held-back byte
                raise _not_utf8(located, role, exc, read - held + exc.start) from None
            read += len(chunk)
            if text:
                yield codepoints(text)
            if not chunk:
                return


def _not_utf8(located: Located, role: str, exc: UnicodeDecodeError, offset: int) -> InputError:
    """One message naming the file and the offset of its first byte that is not UTF-8."""
    byte = exc.object[exc.start]
    return InputError(
        f"{located.card.name}: {located.file_label(role)} is not UTF-8 text: byte 0x{byte:02x} at offset {offset} "
        f"cannot be decoded ({exc.reason}); replace it with the corpus's original file (`harness data info "
        f"{located.card.name}` says where it comes from)"
    )


def _token_dtype(vocab_size: int) -> np.dtype:
    if vocab_size <= 256:
        return np.dtype(np.uint8)
    if vocab_size <= 65536:
        return np.dtype(np.uint16)
    return np.dtype(np.int32)


def _split_bounds(card: DatasetCard, lengths: dict[str, int]) -> dict[str, tuple[int, int]]:
    rule = card.split
    if rule.kind == "files":
        bounds, start = {}, 0
        for role in SPLITS:
            bounds[role] = (start, start + lengths[role])
            start += lengths[role]
        return bounds
    n = lengths["text"]
    if rule.kind == "fraction":
        cut = int(rule.train_fraction * n)  # nanoGPT: data[:int(n*0.9)]
        return {"train": (0, cut), "val": (cut, n)}
    a, b, c = rule.counts  # type: ignore[misc]
    if a + b + c != n:
        raise InputError(
            f"{card.name}: split counts {a:,} + {b:,} + {c:,} = {a + b + c:,} tokens, but the file has {n:,}"
        )
    return {"train": (0, a), "val": (a, a + b), "test": (a + b, n)}


def _encode_into(located: Located, out_dir: Path) -> dict[str, Any]:
    """Two passes over the sources: (1) lengths and vocabulary, (2) token ids into a
    memory-mapped ``tokens.npy``. Memory stays at one piece (16 MiB of text)."""
    card = located.card
    roles = card.roles
    lengths: dict[str, int] = {}
    if card.tokenizer == "byte":
        vocab_cps = np.arange(256, dtype=np.uint32)
        for role in roles:
            lengths[role] = sum(len(p) for p in _pieces(located, role, "byte"))
    else:
        counts = np.zeros(65536, dtype=np.int64)
        astral: set[int] = set()
        for role in roles:
            n = 0
            for cps in _pieces(located, role, card.tokenizer):
                n += len(cps)
                low = cps[cps < 65536]
                counts += np.bincount(low, minlength=65536)
                if len(low) != len(cps):
                    astral.update(np.unique(cps[cps >= 65536]).tolist())
            lengths[role] = n
        vocab_cps = np.array(sorted(set(np.flatnonzero(counts).tolist()) | astral), dtype=np.uint32)
    bounds = _split_bounds(card, lengths)
    total = sum(lengths.values())
    dtype = _token_dtype(len(vocab_cps))
    lut = np.full(int(vocab_cps.max()) + 1 if len(vocab_cps) else 1, -1, dtype=np.int64)
    lut[vocab_cps] = np.arange(len(vocab_cps))
    tokens = np.lib.format.open_memmap(out_dir / "tokens.npy", mode="w+", dtype=dtype, shape=(total,))
    pos = 0
    for role in roles:
        for cps in _pieces(located, role, card.tokenizer):
            tokens[pos : pos + len(cps)] = lut[cps]
            pos += len(cps)
    assert pos == total, (pos, total)
    tokens.flush()
    del tokens
    vocab = [chr(int(c)) for c in vocab_cps]
    return {"vocab": vocab, "splits": {k: list(v) for k, v in bounds.items()}, "n_tokens": total}


def token_cache_path(located: Located, cache_dir: str | os.PathLike[str] | None = None) -> Path:
    card = located.card
    payload = {
        "format": CACHE_FORMAT,
        "tokenizer": card.tokenizer,
        "split": [card.split.kind, card.split.train_fraction, card.split.counts],
        "files": [[f.role, f.member or f.filename] for f in card.files],
        "sources": located.fingerprint,
        "from_archive": located.archive is not None,
    }
    return cache_root(cache_dir) / "tokens" / card.name / cache_key(payload)


def load_card(
    card: DatasetCard,
    *,
    data_dir: str | os.PathLike[str] | None = None,
    download: bool = True,
    cache_dir: str | os.PathLike[str] | None = None,
    progress: bool = True,
) -> Corpus:
    """:func:`load` for a card object (e.g. a card with another download address)."""
    if card.synthetic:
        return make_salience_corpus(cache_dir=cache_dir)
    located = fetch(card, data_dir=data_dir, download=download, cache_dir=cache_dir, progress=progress)
    path = token_cache_path(located, cache_dir)
    cached = read_cache_dir(path)
    if cached is None:
        if path.exists():  # unreadable leftovers (e.g. an older format): rebuild
            shutil.rmtree(path, ignore_errors=True)
        write_cache_dir(
            path,
            lambda tmp: {
                **_encode_into(located, tmp),
                "sources": located.fingerprint,
                "tokenizer": card.tokenizer,
                "name": card.name,
            },
        )
        cached = read_cache_dir(path)
        if cached is None:
            raise InputError(f"could not read the token cache just written at {path}")
    meta, tokens = cached
    where = ", ".join(str(p) for p in located.paths)
    return corpus_from_cache(card.name, card.tokenizer, meta, tokens, path, source=f"{where} ({located.status})")


def load(
    name: str,
    *,
    data_dir: str | os.PathLike[str] | None = None,
    download: bool = True,
    cache_dir: str | os.PathLike[str] | None = None,
    progress: bool = True,
) -> Corpus:
    """Load a corpus by registry name (``harness.datasets.REGISTRY``).

    Files are looked for in ``data_dir``, ``$HARNESS_DATA_DIR``, the cache, and otherwise
    downloaded (unless ``download=False``) with a checksum check. The generated
    ``synthetic-salience`` corpus takes parameters in the name, e.g.
    ``load("synthetic-salience:p=0.2,seed=3")`` (see :func:`make_salience_corpus`).

    Examples
    --------
    >>> corpus = load("tinyshakespeare")          # doctest: +SKIP
    >>> corpus.decode(corpus.train[:5])            # doctest: +SKIP
    'First'
    """
    card = get_card(name)
    if card.synthetic:
        return make_salience_corpus(**parse_salience_name(name), cache_dir=cache_dir)
    if ":" in name:
        raise InputError(f"dataset {card.name!r} takes no parameters (got {name!r}); only synthetic-salience does")
    return load_card(card, data_dir=data_dir, download=download, cache_dir=cache_dir, progress=progress)
