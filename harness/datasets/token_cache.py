"""The corpus object and the encoded-token cache it is read from.

A token cache is one folder holding ``tokens.npy`` (all splits one after another) and a
``meta.json`` (vocabulary, split bounds, what was encoded). The folder is written under a
temporary name and renamed into place, so a crash never leaves a half-written cache that a
later run would read; two processes writing at once both succeed and one result is kept.
Reads memory-map the arrays (``np.load(mmap_mode="r")``). The registry's corpora
(:mod:`harness.datasets.corpus`) and the generated one (:mod:`harness.datasets.synthetic`)
both keep their tokens here.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.datasets.fetch import fsync_path
from harness.errors import InputError

CACHE_FORMAT = 1  # bump when the encoding or the cache layout changes


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
        cps = codepoints(text)
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


def codepoints(text: str) -> np.ndarray:
    """The Unicode code points of ``text`` (uint32, one per character)."""
    return np.frombuffer(text.encode("utf-32-le"), dtype="<u4")


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
