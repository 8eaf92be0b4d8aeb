"""Corpora as token arrays: tokenisation, the encoded-token cache, ``load``.

The first ``load`` of a corpus encodes its files into one ``tokens.npy`` (all splits one
after another) plus a ``meta.json`` (vocabulary, split bounds, source sha256s) under

    <cache>/tokens/<card name>/<key>/

where ``key`` hashes the sha256 of every source file read, the tokenizer (and its
version) and the split rule: a changed or replaced source file gets a new key, so a
stale cache is never reused. The folder is written under a temporary name and renamed
into place, so a crash never leaves a half-written cache that a later run would read;
two processes encoding at once both succeed and one result is kept. Later loads only
hash the sources and memory-map the arrays (``np.load(mmap_mode="r")``).

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
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.datasets.cards import SPLITS, DatasetCard, get_card
from harness.datasets.fetch import Located, cache_root, fetch, fsync_path
from harness.errors import InputError

CACHE_FORMAT = 1  # bump when the encoding or the cache layout changes
_READ_CHUNK = 1 << 24  # 16 MiB of bytes per piece while encoding


# --------------------------------------------------------------------------------------
# the corpus object
# --------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class Corpus:
    """Token arrays of one corpus and its vocabulary.

    ``train``/``val``/``test`` are 1-D unsigned integer arrays (memory-mapped when they
    come from the cache); ``test`` is None where the corpus has none (TinyShakespeare).
    ``content_mask`` (synthetic-salience only) holds per split a boolean array that is
    True on the letters of content words (the ground truth of the generator).
    """

    name: str
    train: np.ndarray
    val: np.ndarray
    test: np.ndarray | None
    vocab: tuple[str, ...]
    tokenizer: str = "char"
    content_mask: dict[str, np.ndarray] | None = None
    source: str = ""  # where the files were found and how they were checked
    cache_path: Path | None = None

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    @property
    def splits(self) -> dict[str, np.ndarray]:
        """The splits that exist, by name (``train``, ``val`` and, where present, ``test``)."""
        out = {"train": self.train, "val": self.val}
        if self.test is not None:
            out["test"] = self.test
        return out

    def split(self, name: str) -> np.ndarray:
        """A split by name (``valid``/``validation`` mean ``val``); InputError if absent."""
        key = {"valid": "val", "validation": "val"}.get(name, name)
        arr = self.splits.get(key)
        if arr is None:
            raise InputError(f"{self.name} has no split {name!r}; splits: {', '.join(self.splits)}")
        return arr

    def encode(self, text: str) -> np.ndarray:
        """Token ids (int64) of ``text`` (in the form ``decode`` returns); InputError naming
        any character outside the vocabulary."""
        if self.tokenizer == "byte":
            return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int64)
        cps = _codepoints(text)
        table = _vocab_codepoints(self.vocab)
        pos = np.searchsorted(table, cps)
        pos_clipped = np.minimum(pos, len(table) - 1)
        bad = table[pos_clipped] != cps
        if bad.any():
            unknown = sorted({chr(c) for c in cps[bad][:1000]})
            raise InputError(f"{self.name}: characters not in the vocabulary: {unknown!r}")
        return pos.astype(np.int64)

    def decode(self, ids: Any) -> str:
        """Text of token ids (any integer sequence)."""
        arr = np.asarray(ids, dtype=np.int64).reshape(-1)
        if arr.size and (arr.min() < 0 or arr.max() >= self.vocab_size):
            raise InputError(f"{self.name}: token ids must lie in [0, {self.vocab_size}), got {arr.min()}..{arr.max()}")
        if self.tokenizer == "byte":
            return arr.astype(np.uint8).tobytes().decode("utf-8", errors="replace")
        table = _vocab_codepoints(self.vocab)
        return table[arr].astype("<u4").tobytes().decode("utf-32-le")

    def __repr__(self) -> str:
        sizes = ", ".join(f"{k}={len(v):,}" for k, v in self.splits.items())
        return f"Corpus({self.name!r}, {sizes}, vocab_size={self.vocab_size}, tokenizer={self.tokenizer!r})"


_VOCAB_TABLES: dict[tuple[str, ...], np.ndarray] = {}


def _vocab_codepoints(vocab: tuple[str, ...]) -> np.ndarray:
    table = _VOCAB_TABLES.get(vocab)
    if table is None:
        table = np.array([ord(c) for c in vocab], dtype=np.uint32)
        _VOCAB_TABLES[vocab] = table
    return table


def _codepoints(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-32-le"), dtype="<u4")


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
            yield _codepoints(ptb_char_compact(text))
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
                yield _codepoints(text)
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


# --------------------------------------------------------------------------------------
# the token cache
# --------------------------------------------------------------------------------------
def cache_key(payload: dict[str, Any]) -> str:
    """Short hex digest of a JSON payload (sources' sha256s, tokenizer, split rule...)."""
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:24]


def write_cache_dir(final: Path, build) -> Path:
    """Create ``final`` atomically: ``build(tmp_dir) -> meta`` writes the arrays into a
    temporary sibling folder, then ``meta.json`` is written and the folder renamed.
    If another process got there first, its folder is kept and ours removed."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}.", suffix=".tmp"))
    try:
        meta = build(tmp)
        meta = {"format": CACHE_FORMAT, **meta}
        for f in tmp.iterdir():
            fsync_path(f)
        with open(tmp / "meta.json", "w", encoding="utf-8") as fh:
            json.dump(meta, fh)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.rename(tmp, final)
        except OSError:
            if not (final / "meta.json").is_file():
                raise
            shutil.rmtree(tmp, ignore_errors=True)  # lost a race: the other copy is complete
        else:
            fsync_path(final.parent)
        tmp = None  # type: ignore[assignment]
        return final
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def read_cache_dir(path: Path) -> tuple[dict[str, Any], np.ndarray] | None:
    """``(meta, tokens memmap)`` of a complete cache folder, or None."""
    try:
        with open(path / "meta.json", encoding="utf-8") as fh:
            meta = json.load(fh)
        if meta.get("format") != CACHE_FORMAT:
            return None
        tokens = np.load(path / "tokens.npy", mmap_mode="r")
    except (OSError, ValueError, KeyError):
        return None
    return meta, tokens


def corpus_from_cache(
    name: str,
    tokenizer: str,
    meta: dict[str, Any],
    tokens: np.ndarray,
    path: Path,
    *,
    source: str = "",
    mask: np.ndarray | None = None,
) -> Corpus:
    """The :class:`Corpus` of a token cache: ``tokens`` cut into the splits its ``meta``
    names (``{"splits": {"train": (start, stop), ...}}``, plus the vocabulary), ``mask``
    (content positions, the synthetic corpus) cut the same way. Shared by the registry's
    corpora and the generated ones (:mod:`harness.datasets.synthetic`)."""
    arrays = {k: tokens[a:b] for k, (a, b) in meta["splits"].items()}
    masks = None if mask is None else {k: mask[a:b] for k, (a, b) in meta["splits"].items()}
    return Corpus(
        name=name,
        train=arrays["train"],
        val=arrays["val"],
        test=arrays.get("test"),
        vocab=tuple(meta["vocab"]),
        tokenizer=tokenizer,
        content_mask=masks,
        source=source,
        cache_path=path,
    )


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
        # synthetic builds on this module (Corpus, the cache): imported here to keep one direction.
        from harness.datasets.synthetic import make_salience_corpus

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
        # synthetic builds on this module (Corpus, the cache): imported here to keep one direction.
        from harness.datasets.synthetic import make_salience_corpus, parse_salience_name

        return make_salience_corpus(**parse_salience_name(name), cache_dir=cache_dir)
    if ":" in name:
        raise InputError(f"dataset {card.name!r} takes no parameters (got {name!r}); only synthetic-salience does")
    return load_card(card, data_dir=data_dir, download=download, cache_dir=cache_dir, progress=progress)
