"""The real corpora of ../shared/data (TinyShakespeare, PTB characters), the registry and the token cache."""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from harness.datasets import (
    REGISTRY,
    ChecksumMismatch,
    DataFile,
    DatasetCard,
    SplitRule,
    get_card,
    load,
    load_card,
    ptb_char_compact,
)
from harness.errors import InputError

# Split hashes from MANIFEST.md: the nanoGPT rule applied to input.txt.
SHAKESPEARE_TRAIN_SHA = "a9e24e23a1ec77744dad26844bfd5a09b6e041954e1eef0000e7f24cba6db735"
SHAKESPEARE_VAL_SHA = "c54f3753a4e6e3c3d1759212815a7caf826e68a33021b25312984400bed40a1f"


def test_registry_names_are_exactly_the_issue_list() -> None:
    assert set(REGISTRY) == {
        "tinyshakespeare",
        "ptb-char",
        "enwik8",
        "text8",
        "wikitext-2-raw",
        "wikitext-103-raw",
        "synthetic-salience",
    }
    for name, card in REGISTRY.items():
        assert card.name == name and card.licence
        assert card.synthetic or card.urls


def test_tinyshakespeare_acceptance(shared_data_dir: Path) -> None:
    corpus = load("tinyshakespeare")
    assert len(corpus.train) == 1_003_854 and len(corpus.val) == 111_540 and corpus.test is None
    assert corpus.vocab_size == 65
    assert corpus.decode(corpus.train[:5]) == "First"
    text = (shared_data_dir / "tinyshakespeare" / "input.txt").read_text()
    assert corpus.vocab == tuple(sorted(set(text)))
    train, val = corpus.decode(corpus.train), corpus.decode(corpus.val)
    assert hashlib.sha256(train.encode()).hexdigest() == SHAKESPEARE_TRAIN_SHA
    assert hashlib.sha256(val.encode()).hexdigest() == SHAKESPEARE_VAL_SHA
    np.testing.assert_array_equal(corpus.encode(text[:1000]), np.asarray(corpus.train[:1000], dtype=np.int64))


def test_ptb_char_acceptance(shared_data_dir: Path) -> None:
    corpus = load("ptb-char")
    assert corpus.test is not None
    assert corpus.vocab_size == 50  # 49 symbols and the line break (MANIFEST)
    assert "_" in corpus.vocab and "\n" in corpus.vocab and " " not in corpus.vocab
    for split, fname, lines in (("train", "train", 42_068), ("val", "valid", 3_370), ("test", "test", 3_761)):
        raw = (shared_data_dir / "ptb" / f"ptb.char.{fname}.txt").read_text()
        oracle = [t for t in raw.split(" ") if t]  # the format: symbols separated by single spaces
        decoded = corpus.decode(corpus.split(split))
        assert list(decoded) == oracle
        assert decoded.count("\n") == lines
    # Decoding '_' back to spaces gives the word-level file (the char files were built from it).
    words = (shared_data_dir / "ptb" / "ptb.valid.txt").read_text()
    assert corpus.decode(corpus.val).replace("_", " ").split("\n") == [ln.strip() for ln in words.split("\n")]


def test_ptb_compact_rejects_other_formats() -> None:
    assert ptb_char_compact("a b _ c \n ") == "ab_c\n"
    assert ptb_char_compact("a  b _ c \n") == "ab_c\n"  # irregular spacing: general path
    with pytest.raises(InputError, match="longer than one character"):
        ptb_char_compact("ab cd \n ")


def test_encode_rejects_unknown_characters(shared_data_dir: Path) -> None:
    corpus = load("tinyshakespeare")
    with pytest.raises(InputError, match="not in the vocabulary.*'é'"):
        corpus.encode("café")
    with pytest.raises(InputError, match="token ids must lie"):
        corpus.decode([65])


def test_unknown_dataset_lists_known_names() -> None:
    with pytest.raises(InputError) as err:
        load("shakespear")
    for name in REGISTRY:
        assert name in str(err.value)
    with pytest.raises(InputError, match="known datasets"):
        get_card("enwik9")
    with pytest.raises(InputError, match="takes no parameters"):
        load("tinyshakespeare:p=0.1")


def test_second_load_is_memory_mapped_and_reuses_the_cache(shared_data_dir: Path, tmp_path: Path) -> None:
    timings = {}
    for name in ("tinyshakespeare", "ptb-char"):
        t0 = time.perf_counter()
        first = load(name, cache_dir=tmp_path)
        t1 = time.perf_counter()
        second = load(name, cache_dir=tmp_path)
        t2 = time.perf_counter()
        timings[name] = (t1 - t0, t2 - t1)
        assert isinstance(second.train, np.memmap) and isinstance(second.val, np.memmap)
        assert second.cache_path == first.cache_path
        tokens = second.cache_path / "tokens.npy"
        assert tokens.stat().st_mtime_ns == (first.cache_path / "tokens.npy").stat().st_mtime_ns
        np.testing.assert_array_equal(first.train[:1000], second.train[:1000])
    # The figure goes to the report (benchmarks: `harness bench data-load`), never into an assertion.
    print({k: f"first {a * 1e3:.0f} ms, second {b * 1e3:.1f} ms" for k, (a, b) in timings.items()})
    leftovers = [p for p in (tmp_path / "tokens").rglob(".*") if p.name.endswith(".tmp")]
    assert leftovers == []


def _local_card(name: str) -> DatasetCard:
    """A card for a file in a local folder (no checksum, never downloaded)."""
    return DatasetCard(
        name=name,
        description="local test corpus",
        files=(DataFile(role="text", filename="text.txt", urls=("http://127.0.0.1:9/text.txt",)),),
        split=SplitRule.fraction(0.5),
        tokenizer="char",
        licence="test",
    )


def test_changed_source_never_reuses_a_stale_cache(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "local").mkdir(parents=True)
    src = data / "local" / "text.txt"
    src.write_text("abcdabcd")
    card = _local_card("local")
    first = load_card(card, data_dir=data, cache_dir=tmp_path / "cache", download=False)
    assert first.decode(first.train) == "abcd"
    src.write_text("wxyzwxyz")  # same size, new content
    second = load_card(card, data_dir=data, cache_dir=tmp_path / "cache", download=False)
    assert second.cache_path != first.cache_path
    assert second.decode(second.train) == "wxyz"
    assert first.decode(first.train) == "abcd"  # the old memmap still reads its own file


def test_corrupt_user_copy_is_an_error_naming_both_digests(shared_data_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "tinyshakespeare").mkdir()
    copy = tmp_path / "tinyshakespeare" / "input.txt"
    original = (shared_data_dir / "tinyshakespeare" / "input.txt").read_bytes()
    copy.write_bytes(original.replace(b"First Citizen", b"First citizen", 1))
    with pytest.raises(ChecksumMismatch) as err:
        load("tinyshakespeare", data_dir=tmp_path)
    msg = str(err.value)
    assert REGISTRY["tinyshakespeare"].files[0].sha256 in msg
    assert hashlib.sha256(copy.read_bytes()).hexdigest() in msg and str(copy) in msg
    assert copy.exists()  # a user's file is never deleted


def test_data_dir_argument_comes_before_the_environment(shared_data_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "ptb").mkdir()
    for split in ("train", "valid", "test"):
        shutil.copy(shared_data_dir / "ptb" / f"ptb.char.{split}.txt", tmp_path / "ptb")
    corpus = load("ptb-char", data_dir=tmp_path)
    assert str(tmp_path) in corpus.source and "sha256 ok" in corpus.source
    assert os.environ["HARNESS_DATA_DIR"] not in corpus.source


def test_cards_validate_their_roles() -> None:
    base = REGISTRY["tinyshakespeare"]
    with pytest.raises(InputError, match="needs files with roles"):
        replace(base, split=SplitRule.by_files())
    with pytest.raises(InputError, match="64 lower-case hex"):
        DataFile(role="text", filename="x", sha256="abc", urls=("http://x",))


def test_user_folder_layouts_extracted_files_or_archive(tmp_path: Path, archives) -> None:
    """WikiText extracted as `unzip` leaves it (no member checksums: said so), and an
    archive dropped into the data folder (checked by its sha256)."""
    folder = tmp_path / "data" / "wikitext-2-raw"
    folder.mkdir(parents=True)
    for split in ("train", "valid", "test"):
        (folder / f"wiki.{split}.raw").write_text(f" = {split} = \n")
    corpus = load("wikitext-2-raw", data_dir=tmp_path / "data", cache_dir=tmp_path / "cache", download=False)
    assert corpus.decode(corpus.test) == " = test = \n"
    assert "unchecked (no published checksum)" in corpus.source

    body = archives.zip({"enwik8": b"x" * 100})
    (tmp_path / "data2").mkdir()
    (tmp_path / "data2" / "enwik8.zip").write_bytes(body)
    base = REGISTRY["enwik8"]
    card = replace(
        base,
        files=(replace(base.files[0], size=100),),
        split=SplitRule.by_counts(90, 5, 5),
        archive=replace(base.archive, sha256=hashlib.sha256(body).hexdigest(), size=len(body)),
    )
    corpus = load_card(card, data_dir=tmp_path / "data2", cache_dir=tmp_path / "cache", download=False)
    assert len(corpus.train) == 90 and "sha256 ok" in corpus.source and "data2/enwik8.zip" in corpus.source
