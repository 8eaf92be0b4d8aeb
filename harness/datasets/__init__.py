"""Corpora for the harness: registry, verified downloads, token caches, samplers,
the synthetic salience corpus and corpus statistics.

Examples
--------
>>> from harness.datasets import load, sample_train_batch, eval_window_starts, window_batch
>>> corpus = load("tinyshakespeare")                                   # doctest: +SKIP
>>> x, y = sample_train_batch(corpus.train, block_size=256, batch_size=64, seed=0, step=0)  # doctest: +SKIP
>>> starts = eval_window_starts(len(corpus.val), block_size=256, max_windows=256)           # doctest: +SKIP
>>> xv, yv = window_batch(corpus.val, starts, block_size=256)          # doctest: +SKIP

Importing this package reads no file, touches no network and imports no numpy (the
``harness`` CLI imports it for ``--help``): the names below load their module on first use
(:mod:`harness.lazy_exports`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.lazy_exports import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "cards": ["REGISTRY", "Archive", "DataFile", "DatasetCard", "SplitRule", "get_card"],
        "corpus": ["load", "load_card", "ptb_char_compact"],
        "fetch": ["ChecksumMismatch", "FileCheck", "Located", "cache_root", "fetch", "locate"],
        "sampling": ["eval_window_starts", "sample_train_batch", "window_batch"],
        "stats": ["CorpusStats", "corpus_stats", "corpus_stats_for"],
        "subset": ["check_train_fraction", "train_prefix_length", "with_train_prefix"],
        "token_cache": ["Corpus"],
        "words": ["FUNCTION_WORDS"],
        "synthetic": ["SalienceParams", "SalienceText", "generate_salience_text", "make_salience_corpus"],
    },
)

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs
    from harness.datasets.cards import REGISTRY, Archive, DataFile, DatasetCard, SplitRule, get_card
    from harness.datasets.corpus import load, load_card, ptb_char_compact
    from harness.datasets.fetch import ChecksumMismatch, FileCheck, Located, cache_root, fetch, locate
    from harness.datasets.sampling import eval_window_starts, sample_train_batch, window_batch
    from harness.datasets.stats import CorpusStats, corpus_stats, corpus_stats_for
    from harness.datasets.subset import check_train_fraction, train_prefix_length, with_train_prefix
    from harness.datasets.synthetic import SalienceParams, SalienceText, generate_salience_text, make_salience_corpus
    from harness.datasets.token_cache import Corpus
    from harness.datasets.words import FUNCTION_WORDS
