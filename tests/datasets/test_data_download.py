"""The download path, for real, against an HTTP server on 127.0.0.1 that the test starts.

No network code is patched: a card is pointed at the local server by giving it another
URL (cards are data), and the real ``urllib`` download, checks and atomic rename run.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace

import numpy as np
import pytest

from harness.datasets import REGISTRY, Archive, DataFile, DatasetCard, SplitRule, fetch, load_card
from harness.errors import InputError

pytestmark = pytest.mark.usefixtures("no_data_dir")

TEXT = (
    "It is a truth universally acknowledged, that a single man in possession of a good fortune,\n"
    "must be in want of a wife.\n"
) * 200


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def zip_card(url: str, body: bytes, **archive_overrides) -> DatasetCard:
    archive = Archive(filename="tiny.zip", urls=(url,), sha256=sha(body), size=len(body))
    return DatasetCard(
        name="tiny-zip",
        description="test corpus",
        files=(DataFile(role="text", filename="corpus.txt", member="tiny/corpus.txt"),),
        split=SplitRule.fraction(0.9),
        tokenizer="char",
        licence="test",
        archive=replace(archive, **archive_overrides),
    )


@pytest.fixture
def tiny_zip(archives) -> bytes:
    return archives.zip({"tiny/corpus.txt": TEXT.encode()})


def test_download_success_then_cache_hit(http_server, tiny_zip, tmp_path, archives) -> None:
    url = http_server.serve("/tiny.zip", tiny_zip)
    card = zip_card(url, tiny_zip)
    found = fetch(card, cache_dir=tmp_path, progress=True)
    assert found.where == "downloaded"
    assert found.archive == tmp_path / "data" / "tiny-zip" / "tiny.zip"
    assert found.archive.read_bytes() == tiny_zip
    assert found.status == "sha256 ok"
    assert [p.name for p in archives.files(tmp_path)] == ["tiny.zip"]  # no temporary left

    again = fetch(card, cache_dir=tmp_path)
    assert again.where == "cache" and http_server.hits("/tiny.zip") == 1

    corpus = load_card(card, cache_dir=tmp_path)
    n = len(TEXT)
    assert (len(corpus.train), len(corpus.val), corpus.test) == (int(0.9 * n), n - int(0.9 * n), None)
    assert corpus.decode(corpus.train) + corpus.decode(corpus.val) == TEXT
    assert corpus.vocab == tuple(sorted(set(TEXT)))
    assert http_server.hits("/tiny.zip") == 1


def test_checksum_mismatch_shows_both_digests_and_caches_nothing(http_server, tiny_zip, tmp_path, archives) -> None:
    url = http_server.serve("/tiny.zip", tiny_zip)
    wrong = "0" * 64
    card = zip_card(url, tiny_zip, sha256=wrong, size=None)
    with pytest.raises(InputError) as err:
        fetch(card, cache_dir=tmp_path, progress=False)
    msg = str(err.value)
    assert wrong in msg and sha(tiny_zip) in msg and url in msg
    assert "expected" in msg and "actual" in msg
    assert archives.files(tmp_path) == []
    with pytest.raises(InputError):  # and a second attempt does not trust anything either
        load_card(card, cache_dir=tmp_path, progress=False)
    assert archives.files(tmp_path) == []


@pytest.mark.parametrize("published", [True, False], ids=["with-sha256", "no-checksum"])
def test_connection_dropped_mid_file_caches_nothing(http_server, tiny_zip, tmp_path, archives, published) -> None:
    url = http_server.serve("/tiny.zip", tiny_zip, mode="truncate")
    # Without a published checksum only the announced Content-Length can reveal the loss.
    card = zip_card(url, tiny_zip) if published else zip_card(url, tiny_zip, sha256=None, size=None)
    with pytest.raises(InputError) as err:
        fetch(card, cache_dir=tmp_path, progress=False)
    msg = str(err.value)
    assert url in msg
    assert f"connection closed after {len(tiny_zip) // 2:,} of {len(tiny_zip):,}" in msg
    assert "Nothing was saved" in msg
    assert archives.files(tmp_path) == []


def test_offline_error_names_url_and_where_to_put_the_file(unused_port_url, tmp_path, archives) -> None:
    card = zip_card(unused_port_url, b"")
    with pytest.raises(InputError) as err:
        fetch(card, cache_dir=tmp_path, progress=False)
    msg = str(err.value)
    assert unused_port_url in msg and "cannot connect" in msg
    assert "tiny.zip" in msg and str(tmp_path / "data" / "tiny-zip") in msg
    assert "HARNESS_DATA_DIR" in msg
    assert archives.files(tmp_path) == []


def test_download_off_and_missing_says_where_to_put(tmp_path) -> None:
    card = REGISTRY["enwik8"]
    with pytest.raises(InputError) as err:
        load_card(card, cache_dir=tmp_path, download=False)
    msg = str(err.value)
    assert "http://mattmahoney.net/dc/enwik8.zip" in msg and str(tmp_path / "data" / "enwik8") in msg


def test_second_mirror_used_when_first_fails(http_server, tiny_zip, tmp_path, unused_port_url) -> None:
    url = http_server.serve("/tiny.zip", tiny_zip)
    not_there = url.rsplit("/", 1)[0] + "/404.zip"  # the server answers 404
    card = zip_card(url, tiny_zip, urls=(unused_port_url, not_there, url))
    found = fetch(card, cache_dir=tmp_path, progress=False)
    assert found.where == "downloaded" and found.archive.read_bytes() == tiny_zip
    assert http_server.hits("/404.zip") == 1


def test_corrupt_cached_file_is_fetched_again(http_server, tiny_zip, tmp_path) -> None:
    url = http_server.serve("/tiny.zip", tiny_zip)
    card = zip_card(url, tiny_zip)
    found = fetch(card, cache_dir=tmp_path, progress=False)
    found.archive.write_bytes(tiny_zip[:100])  # e.g. a disk problem after the download
    again = fetch(card, cache_dir=tmp_path, progress=False)
    assert again.where == "downloaded" and http_server.hits("/tiny.zip") == 2
    assert again.archive.read_bytes() == tiny_zip


def test_size_only_card_checks_size_and_says_so(http_server, tiny_zip, tmp_path, archives) -> None:
    """text8: no published sha256, so the byte size is checked and the status says so."""
    url = http_server.serve("/text8.zip", tiny_zip)
    card = replace(
        REGISTRY["text8"],
        name="text8-test",
        files=(DataFile(role="text", filename="corpus.txt", size=len(TEXT), member="tiny/corpus.txt"),),
        split=SplitRule.by_counts(len(TEXT) - 400, 200, 200),
        archive=Archive("text8.zip", (url,), sha256=None, size=len(tiny_zip)),
    )
    found = fetch(card, cache_dir=tmp_path, progress=False)
    assert found.status == "size ok (no published sha256)"
    assert card.checksum_kind == "size" and REGISTRY["text8"].checksum_kind == "size"
    corpus = load_card(card, cache_dir=tmp_path)
    assert [len(corpus.train), len(corpus.val), len(corpus.test)] == [len(TEXT) - 400, 200, 200]

    wrong_size = replace(card, name="text8-test-2", archive=replace(card.archive, size=len(tiny_zip) + 1))
    with pytest.raises(InputError, match=f"expected {len(tiny_zip) + 1:,} bytes, received {len(tiny_zip):,}"):
        fetch(wrong_size, cache_dir=tmp_path, progress=False)
    assert not (tmp_path / "data" / "text8-test-2").exists()


def test_wikitext_card_file_splits_and_unicode_vocabulary(http_server, tmp_path, archives) -> None:
    """The real wikitext-2-raw card (members, split by files), served locally."""
    parts = {
        "train": " = Valkyria Chronicles = \n Senjō no Valkyria — a game.\n",
        "valid": " = Homarus = \n The lobster (ロブスター) is large.\n",
        "test": " = Robert Boulter = \n An English actor: “café” 😀\n",
    }
    body = archives.zip({f"wikitext-2-raw/wiki.{k}.raw": v.encode("utf-8") for k, v in parts.items()})
    url = http_server.serve("/wikitext-2-raw-v1.zip", body)
    card = replace(
        REGISTRY["wikitext-2-raw"],
        archive=replace(REGISTRY["wikitext-2-raw"].archive, urls=(url,), sha256=sha(body), size=len(body)),
    )
    corpus = load_card(card, cache_dir=tmp_path, progress=False)
    assert corpus.vocab == tuple(sorted(set("".join(parts.values()))))  # all splits' characters, sorted
    assert [corpus.decode(corpus.split(s)) for s in ("train", "val", "test")] == list(parts.values())
    np.testing.assert_array_equal(corpus.encode(parts["test"]), np.asarray(corpus.test, dtype=np.int64))
    assert "😀" in corpus.vocab and "ロ" in corpus.vocab


def test_enwik8_card_is_byte_level(http_server, tmp_path, archives) -> None:
    raw = bytes(range(256)) * 3 + "<page>Zürich</page>".encode()
    body = archives.zip({"enwik8": raw})
    url = http_server.serve("/enwik8.zip", body)
    base = REGISTRY["enwik8"]
    card = replace(
        base,
        files=(replace(base.files[0], size=len(raw)),),
        split=SplitRule.by_counts(len(raw) - 40, 20, 20),
        archive=replace(base.archive, urls=(url,), sha256=sha(body), size=len(body)),
    )
    corpus = load_card(card, cache_dir=tmp_path, progress=False)
    assert corpus.vocab_size == 256
    tokens = np.concatenate([corpus.train, corpus.val, corpus.test])
    np.testing.assert_array_equal(tokens, np.frombuffer(raw, dtype=np.uint8))
    assert corpus.decode(corpus.test) == raw[-20:].decode("utf-8", errors="replace")


def test_wrong_split_counts_leave_no_token_cache(http_server, tmp_path, archives) -> None:
    raw = b"abcdefghij" * 10
    body = archives.zip({"enwik8": raw})
    url = http_server.serve("/enwik8.zip", body)
    base = REGISTRY["enwik8"]
    card = replace(
        base,
        files=(replace(base.files[0], size=len(raw)),),
        split=SplitRule.by_counts(50, 20, 20),  # 90 != 100 bytes
        archive=replace(base.archive, urls=(url,), sha256=sha(body), size=len(body)),
    )
    with pytest.raises(InputError, match="split counts"):
        load_card(card, cache_dir=tmp_path, progress=False)
    assert archives.files(tmp_path / "tokens") == []


def test_ptb_tgz_members_checked_by_sha256(http_server, tmp_path, archives) -> None:
    """simple-examples.tgz has no published checksum: its members' sha256s protect it."""
    members = {
        "./simple-examples/data/ptb.char.train.txt": b"a b _ c \n d _ e \n ",
        "./simple-examples/data/ptb.char.valid.txt": b"a _ b \n ",
        "./simple-examples/data/ptb.char.test.txt": b"c _ d \n ",
    }
    base = REGISTRY["ptb-char"]
    files = tuple(
        replace(f, sha256=sha(members["./" + f.member]), size=len(members["./" + f.member])) for f in base.files
    )
    good = archives.tgz(members)
    url = http_server.serve("/simple-examples.tgz", good)
    card = replace(base, name="ptb-test", files=files, archive=replace(base.archive, urls=(url,)))
    found = fetch(card, cache_dir=tmp_path, progress=False)
    assert found.status == "sha256 ok (members)"
    corpus = load_card(card, cache_dir=tmp_path)
    assert corpus.decode(corpus.train) == "ab_c\nd_e\n"
    assert corpus.vocab == ("\n", "_", "a", "b", "c", "d", "e")

    bad = archives.tgz({**members, "./simple-examples/data/ptb.char.test.txt": b"x _ y \n "})
    url2 = http_server.serve("/bad.tgz", bad)
    card2 = replace(card, name="ptb-test-bad", archive=replace(base.archive, urls=(url2,)))
    with pytest.raises(InputError, match="ptb.char.test.txt.*sha256 mismatch"):
        fetch(card2, cache_dir=tmp_path, progress=False)
    assert not (tmp_path / "data" / "ptb-test-bad").exists()


def test_direct_file_download(http_server, tmp_path) -> None:
    """A card without archive (like tinyshakespeare) downloads its file directly."""
    data = TEXT.encode()
    url = http_server.serve("/input.txt", data)
    base = REGISTRY["tinyshakespeare"]
    card = replace(
        base,
        name="shakespeare-test",
        files=(replace(base.files[0], urls=(url,), sha256=sha(data), size=len(data), search_paths=()),),
    )
    corpus = load_card(card, cache_dir=tmp_path, progress=False)
    assert (tmp_path / "data" / "shakespeare-test" / "input.txt").read_bytes() == data
    assert corpus.decode(corpus.train[:2]) == "It"
