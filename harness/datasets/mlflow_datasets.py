"""Corpora as MLflow datasets: what a run read, in the "Datasets" panel of its page.

Every run (a trial, a ``harness train`` run) declares its corpus as MLflow dataset inputs,
and a study's parent run declares the set of its corpora. A declaration is metadata only
(MLflow's :class:`~mlflow.data.meta_dataset.MetaDataset`, no copy of the text):

- **name**: the corpus, as the registry names it (``tinyshakespeare``, ``ptb-char``);
- **digest**: the sha256 of the bytes the split comes from, as the dataset card publishes
  it (the harness verifies every copy against it before reading): the file's, else the
  archive's, else the one of the copy on this machine; a generated corpus: its token
  cache key. MLflow stores at most 36 characters, so the digest is the first
  :data:`DIGEST_CHARS` hex digits; the profile holds the full sha256;
- **source**: the card's download URL (``HTTPDatasetSource``), a local path where the card
  has none, or the generator (``CodeDatasetSource``) for a generated corpus;
- **context** (input tag ``mlflow.data.context``): the split, ``training``, ``validation``
  or ``test``. MLflow keeps one input per name and digest, so splits cut from the same
  bytes (TinyShakespeare's one file: 90 % train, 10 % val) are one dataset whose context
  is the first split's; its input tag ``harness.splits`` lists them all;
- **profile** (JSON): the full sha256, what it is the checksum of, the split rule, the
  tokenizer.

Build the inputs with :func:`corpus_inputs` and write them with
``TrackingClient.log_inputs(run_id, datasets)`` (:mod:`harness.mlflow_client`).
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from mlflow.data.code_dataset_source import CodeDatasetSource
from mlflow.data.dataset_source import DatasetSource
from mlflow.data.dataset_source_registry import resolve_dataset_source
from mlflow.data.http_dataset_source import HTTPDatasetSource
from mlflow.data.meta_dataset import MetaDataset
from mlflow.entities import Dataset as DatasetEntity
from mlflow.entities import DatasetInput, InputTag
from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT

from harness.datasets.cards import DataFile, DatasetCard, get_card
from harness.datasets.fetch import locate
from harness.datasets.synthetic import SalienceParams, parse_salience_name, salience_cache_key

#: Hex digits of the sha256 kept as the digest (MLflow's limit is 36 characters).
DIGEST_CHARS = 32

#: Split of the harness -> MLflow's dataset context.
CONTEXTS = {"train": "training", "val": "validation", "test": "test"}

#: Input tag listing the splits a declared dataset holds.
SPLITS_TAG = "harness.splits"


class CorpusDataset(MetaDataset):
    """A corpus (or the part of it one file holds) as an MLflow dataset, with a profile."""

    def __init__(self, source: DatasetSource, *, name: str, digest: str, profile: dict[str, Any]) -> None:
        self._profile = profile
        super().__init__(source=source, name=name, digest=digest)

    @property
    def profile(self) -> dict[str, Any]:
        return self._profile

    def to_dict(self) -> dict[str, str]:
        return {**super().to_dict(), "profile": json.dumps(self._profile)}


@dataclass(frozen=True)
class DeclaredSplits:
    """One MLflow dataset and the splits (train / val / test) read from it."""

    dataset: CorpusDataset
    splits: tuple[str, ...]

    def to_input(self) -> DatasetInput:
        """The ``mlflow.entities.DatasetInput`` that ``TrackingClient.log_inputs`` writes."""
        d = self.dataset.to_dict()
        entity = DatasetEntity(
            name=d["name"],
            digest=d["digest"],
            source_type=d["source_type"],
            source=d["source"],
            schema=d.get("schema"),
            profile=d.get("profile"),
        )
        tags = [InputTag(MLFLOW_DATASET_CONTEXT, CONTEXTS[self.splits[0]])]
        tags.append(InputTag(SPLITS_TAG, ",".join(self.splits)))
        return DatasetInput(entity, tags=tags)


@dataclass(frozen=True)
class _Checksum:
    sha256: str | None
    of: str  # the file or archive it is the checksum of
    how: str  # "published in the dataset card" | "of the copy on this machine" | ...


def _checksum(card: DatasetCard, f: DataFile, local: Any) -> _Checksum:
    """The sha256 that identifies the bytes of ``f`` (see the module docstring for the order)."""
    if f.sha256:
        return _Checksum(f.sha256, f.filename, "published in the dataset card")
    if card.archive is not None and card.archive.sha256:
        return _Checksum(card.archive.sha256, card.archive.filename, "published in the dataset card")
    if local is not None:
        if local.archive is not None:
            return _Checksum(local.checks[0].sha256, local.archive.name, "of the copy on this machine")
        for check in local.checks:
            if check.path == local.files.get(f.role):
                return _Checksum(check.sha256, check.path.name, "of the copy on this machine")
    return _Checksum(None, f.filename, "none: no published checksum and no copy on this machine")


def _source(card: DatasetCard, f: DataFile, local: Any) -> DatasetSource:
    """Where the bytes come from: the card's URL, else the local copy's path."""
    urls = card.archive.urls if card.archive is not None else f.urls
    if urls:
        return HTTPDatasetSource(urls[0])
    path = local.archive if local is not None and local.archive is not None else None
    if path is None and local is not None:
        path = local.files.get(f.role)
    with warnings.catch_warnings():  # MLflow registers the local source twice and says so
        warnings.simplefilter("ignore")
        return resolve_dataset_source(str(path) if path is not None else f.filename)


def _locate_quietly(card: DatasetCard, data_dir: str | None) -> Any:
    """The checked local copy when the card alone cannot name a checksum (None if absent)."""
    if all(f.sha256 for f in card.files) or (card.archive is not None and card.archive.sha256):
        return None
    try:
        return locate(card, data_dir=data_dir)
    except Exception:  # noqa: BLE001 - a bad copy is reported when the corpus is loaded, not here
        return None


def _generated(name: str, card: DatasetCard) -> list[DeclaredSplits]:
    """A generated corpus: one dataset, digest = its token cache key, source = the generator."""
    params = SalienceParams(**parse_salience_name(name))
    key = salience_cache_key(params)
    profile = {"token_cache_key": key, "generator": "harness.datasets.synthetic", "split": card.split.describe()}
    source = CodeDatasetSource({"generator": "harness.datasets.synthetic", "corpus": name})
    dataset = CorpusDataset(source, name=name, digest=key[:DIGEST_CHARS], profile=profile)
    return [DeclaredSplits(dataset, ("train", "val", "test"))]


def corpus_datasets(name: str, *, data_dir: str | None = None) -> list[DeclaredSplits]:
    """The MLflow datasets of corpus ``name``: one per distinct checksum, with its splits.

    Reads no corpus file when the card publishes the checksums (TinyShakespeare, PTB,
    enwik8, WikiText); otherwise the checked copy in ``data_dir`` / ``$HARNESS_DATA_DIR`` /
    the cache is hashed. Downloads nothing.
    """
    card = get_card(name)
    if card.synthetic:
        return _generated(name, card)
    local = _locate_quietly(card, data_dir)
    grouped: dict[tuple[str, str], tuple[_Checksum, list[DataFile]]] = {}
    for f in card.files:
        checksum = _checksum(card, f, local)
        grouped.setdefault((checksum.sha256 or f.filename, checksum.of), (checksum, []))[1].append(f)
    out = []
    for checksum, files in grouped.values():
        profile = {
            "sha256": checksum.sha256,
            "checksum_of": checksum.of,
            "checksum": checksum.how,
            "files": [f.member or f.filename for f in files],
            "bytes": sum(f.size for f in files) if all(f.size for f in files) else None,
            "split": card.split.describe(),
            "tokenizer": card.tokenizer,
        }
        digest = checksum.sha256[:DIGEST_CHARS] if checksum.sha256 else "unknown"
        dataset = CorpusDataset(_source(card, files[0], local), name=card.name, digest=digest, profile=profile)
        read = {split for f in files for split in _splits_of(card, f)}
        out.append(DeclaredSplits(dataset, tuple(s for s in ("train", "val", "test") if s in read)))
    return out


def _splits_of(card: DatasetCard, f: DataFile) -> tuple[str, ...]:
    """The splits cut from file ``f``: its own (one file per split), else what the split
    rule cuts from the one text (``fraction``: train and val; ``counts``: all three)."""
    if f.role != "text":
        return (f.role,)
    return ("train", "val", "test") if card.split.kind == "counts" else ("train", "val")


def corpus_inputs(names: Iterable[str], *, data_dir: str | None = None) -> list[DatasetInput]:
    """The dataset inputs of every corpus in ``names`` (each once), ready for
    ``TrackingClient.log_inputs``."""
    inputs: list[DatasetInput] = []
    for name in dict.fromkeys(names):
        inputs.extend(declared.to_input() for declared in corpus_datasets(name, data_dir=data_dir))
    return inputs
