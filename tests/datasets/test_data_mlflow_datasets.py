"""Every corpus of the registry as MLflow datasets: one per distinct checksum, the digest a
prefix of the dataset card's sha256 (or of the generated corpus's token cache key), the
splits it holds, and a declaration MLflow accepts (written to a real SQLite store)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mlflow import MlflowClient

from harness.datasets import REGISTRY, make_salience_corpus
from harness.datasets.mlflow_datasets import DIGEST_CHARS, corpus_datasets, corpus_inputs


def _declared(name: str) -> dict[tuple[str, ...], dict]:
    return {d.splits: {**d.dataset.to_dict(), "profile": d.dataset.profile} for d in corpus_datasets(name)}


def test_one_file_corpora_are_one_dataset_with_the_card_checksum() -> None:
    for name in ("tinyshakespeare", "enwik8"):
        card = REGISTRY[name]
        sha = card.files[0].sha256 or card.archive.sha256
        ((splits, declared),) = _declared(name).items()
        assert splits == (("train", "val") if name == "tinyshakespeare" else ("train", "val", "test"))
        assert declared["name"] == name and declared["digest"] == sha[:DIGEST_CHARS]
        assert declared["profile"]["sha256"] == sha and declared["source_type"] == "http"


def test_split_files_are_one_dataset_each_unless_only_their_archive_has_a_checksum() -> None:
    ptb = _declared("ptb-char")
    assert sorted(ptb) == [("test",), ("train",), ("val",)]
    for f in REGISTRY["ptb-char"].files:
        assert ptb[(f.role,)]["digest"] == f.sha256[:DIGEST_CHARS]
        assert ptb[(f.role,)]["profile"]["files"] == [f.member]
    (wikitext,) = _declared("wikitext-2-raw").values()  # members unchecked: the archive's sha256
    assert wikitext["digest"] == REGISTRY["wikitext-2-raw"].archive.sha256[:DIGEST_CHARS]
    assert len(wikitext["profile"]["files"]) == 3


def test_generated_corpus_digest_is_its_token_cache_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    name = "synthetic-salience:p=0.2,n_chars=20000,seed=1"
    ((splits, declared),) = _declared(name).items()
    corpus = make_salience_corpus(p=0.2, n_chars=20000, seed=1)
    assert declared["digest"] == corpus.cache_path.name[:DIGEST_CHARS]
    assert splits == ("train", "val", "test") and declared["source_type"] == "code"


def test_declarations_are_accepted_by_mlflow(sqlite_tracking_uri: str) -> None:
    client = MlflowClient(sqlite_tracking_uri)
    run = client.create_run(client.create_experiment("datasets"))
    names = [name for name in REGISTRY if name != "synthetic-salience"]
    client.log_inputs(run.info.run_id, datasets=corpus_inputs(names))
    client.log_inputs(run.info.run_id, datasets=corpus_inputs(names))  # declaring twice adds nothing
    logged = client.get_run(run.info.run_id).inputs.dataset_inputs
    expected = sum(len(corpus_datasets(name)) for name in names)
    assert len(logged) == expected
    for item in logged:
        profile = json.loads(item.dataset.profile)
        assert profile["sha256"] is None or item.dataset.digest == profile["sha256"][:DIGEST_CHARS]
