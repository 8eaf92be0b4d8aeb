"""A corpus file that is not UTF-8: one InputError naming the file and the offset of its
first bad byte, wherever that byte falls among the pieces the encoder reads (a character
cut by a piece's end included), and no cache left behind. Python's own decoder of the
whole file is the oracle for the offset."""

from __future__ import annotations

from pathlib import Path

import pytest

import harness.datasets.corpus as corpus_module
from harness.datasets import DataFile, DatasetCard, SplitRule, load_card
from harness.errors import InputError


def _card(name: str, tokenizer: str = "char") -> DatasetCard:
    """A one-file corpus without a published checksum (as a user's own card would be)."""
    return DatasetCard(
        name=name,
        description="test corpus",
        files=(DataFile(role="text", filename="text.txt", urls=("http://127.0.0.1:9/text.txt",)),),
        split=SplitRule.fraction(0.9),
        tokenizer=tokenizer,  # type: ignore[arg-type]
        licence="test",
    )


def _first_bad_offset(data: bytes) -> int:
    with pytest.raises(UnicodeDecodeError) as info:
        data.decode("utf-8")
    return info.value.start


TEXTS = {
    # a bad byte after several pieces, behind a multi-byte character cut by a piece's end
    "bad-byte-in-a-later-piece": ("na\u00efve caf\u00e9 \u2014 " * 5).encode() + b"\xfe" + b"rest",
    # a multi-byte character whose continuation byte is wrong, across a piece boundary
    "broken-sequence": b"abcdef" + "\u00e9".encode()[:1] + b"Zmore text",
    # the file ends in the middle of a character: caught by the final decode
    "truncated-at-the-end": "text \u20ac".encode()[:-1],
}


@pytest.mark.parametrize("case", list(TEXTS))
def test_offset_of_the_first_bad_byte_names_the_file(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(corpus_module, "_READ_CHUNK", 7)  # many pieces; characters cut at their ends
    data = TEXTS[case]
    name = f"bad-{case}"
    folder = tmp_path / "data" / name
    folder.mkdir(parents=True)
    path = folder / "text.txt"
    path.write_bytes(data)
    offset = _first_bad_offset(data)
    cache = tmp_path / "cache"
    with pytest.raises(InputError) as info:
        load_card(_card(name), data_dir=tmp_path / "data", download=False, cache_dir=cache, progress=False)
    message = str(info.value)
    assert f"{path} is not UTF-8 text: byte 0x{data[offset]:02x} at offset {offset} cannot be decoded" in message
    assert not [p for p in cache.rglob("*") if p.is_file()]  # no half-written token cache


def test_ptb_format_file_reports_the_offset_in_the_raw_file(tmp_path: Path) -> None:
    data = b"a b _ c \n d \x80 e \n"
    folder = tmp_path / "data" / "bad-ptb"
    folder.mkdir(parents=True)
    (folder / "text.txt").write_bytes(data)
    with pytest.raises(InputError, match=r"text\.txt is not UTF-8 text: byte 0x80 at offset 12 cannot be decoded"):
        load_card(_card("bad-ptb", "ptb-char"), data_dir=tmp_path / "data", download=False, cache_dir=tmp_path / "c")
