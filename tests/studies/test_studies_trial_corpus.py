"""A trial's corpus on its node (``harness.studies.cluster.corpora.ensure_corpus``): found or
fetched checksum-verified, else one error naming the corpus and the node."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from harness.studies.cluster.corpora import CorpusUnavailable, ensure_corpus


def test_a_corpus_present_on_the_node_is_used(shared_data_dir: Path) -> None:
    ensure_corpus("tinyshakespeare", None)


def test_a_damaged_copy_fails_the_trial_naming_corpus_and_node(tmp_path: Path, shared_data_dir: Path) -> None:
    source = (shared_data_dir / "tinyshakespeare" / "input.txt").read_bytes()
    (tmp_path / "tinyshakespeare").mkdir()
    (tmp_path / "tinyshakespeare" / "input.txt").write_bytes(source[: len(source) // 2])  # a partial copy
    with pytest.raises(CorpusUnavailable) as err:
        ensure_corpus("tinyshakespeare", str(tmp_path))
    message = str(err.value)
    assert message.startswith(f"corpus 'tinyshakespeare' is not available on node {socket.gethostname()}")
    assert "expected 1,115,394 bytes" in message  # never trained on: the check caught it
