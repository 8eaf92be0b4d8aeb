"""``$HARNESS_DATA_MIRROR``: the corpora from mirrors inside a cluster's network instead of
the cards' own addresses, with the same checks and atomic rename (a real HTTP server on
127.0.0.1, and a ``file://`` folder)."""

from __future__ import annotations

import hashlib

import pytest
from test_data_download import TEXT, zip_card

from harness.datasets import fetch, load_card
from harness.errors import InputError

pytestmark = pytest.mark.usefixtures("no_data_dir")


def test_the_mirror_replaces_the_cards_addresses(http_server, archives, tmp_path, monkeypatch) -> None:
    body = archives.zip({"tiny/corpus.txt": TEXT.encode()})
    own = http_server.serve("/own/tiny.zip", body)
    http_server.serve("/mirror/tiny-zip/tiny.zip", body)  # <mirror>/<card name>/<file name>
    dead = http_server.serve("/dead", b"").rsplit("/", 1)[0] + "/nothing-here"
    monkeypatch.setenv("HARNESS_DATA_MIRROR", f"{dead}, {own.rsplit('/own/', 1)[0]}/mirror/")
    found = fetch(zip_card(own, body), cache_dir=tmp_path, progress=False)
    assert found.where == "downloaded" and found.archive.read_bytes() == body
    assert http_server.hits("/nothing-here/tiny-zip/tiny.zip") == 1  # the first mirror 404s, the second serves
    assert http_server.hits("/mirror/tiny-zip/tiny.zip") == 1
    assert http_server.hits("/own/tiny.zip") == 0  # the card's own address is not waited on


def test_a_bad_mirror_saves_nothing_and_names_what_it_tried(http_server, archives, tmp_path, monkeypatch) -> None:
    body = archives.zip({"tiny/corpus.txt": TEXT.encode()})
    own = http_server.serve("/own/tiny.zip", body)
    mirrored = http_server.serve("/mirror/tiny-zip/tiny.zip", body, mode="truncate")
    monkeypatch.setenv("HARNESS_DATA_MIRROR", mirrored.rsplit("/tiny-zip/", 1)[0])
    with pytest.raises(InputError) as err:
        fetch(zip_card(own, body), cache_dir=tmp_path, progress=False)
    assert mirrored in str(err.value) and "incomplete download discarded" in str(err.value)
    assert archives.files(tmp_path) == [] and http_server.hits("/own/tiny.zip") == 0


def test_a_folder_as_mirror(archives, tmp_path, monkeypatch) -> None:
    """``file://``: a shared folder in the cache's ``data/`` layout."""
    body = archives.zip({"tiny/corpus.txt": TEXT.encode()})
    (tmp_path / "share" / "tiny-zip").mkdir(parents=True)
    (tmp_path / "share" / "tiny-zip" / "tiny.zip").write_bytes(body)
    monkeypatch.setenv("HARNESS_DATA_MIRROR", (tmp_path / "share").as_uri())
    card = zip_card("http://127.0.0.1:9/unreachable.zip", body)
    corpus = load_card(card, cache_dir=tmp_path / "cache", progress=False)
    assert corpus.decode(corpus.train) + corpus.decode(corpus.val) == TEXT
    cached = tmp_path / "cache" / "data" / "tiny-zip" / "tiny.zip"
    assert hashlib.sha256(cached.read_bytes()).hexdigest() == card.archive.sha256

    (tmp_path / "share" / "tiny-zip" / "tiny.zip").write_bytes(body[:-10])  # a damaged copy in the mirror
    with pytest.raises(InputError, match="discarded"):
        fetch(card, cache_dir=tmp_path / "other-cache", progress=False)
    assert archives.files(tmp_path / "other-cache") == []
