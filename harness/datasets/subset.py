"""Training on a prefix of the training split (``train_fraction``): the papers' overfitting regime
reached with less data.

A model that sees a small training set many times overfits it as hard as a larger model trained
longer overfits the whole split. The prefix is the first ``floor(fraction * len(train))`` tokens,
so every seed and variant of a study trains on the same characters; the validation and test
splits stay whole, and the train half of the generalisation gap is read on the prefix (what the
model trained on).
"""

from __future__ import annotations

import dataclasses
import math

from harness.datasets.token_cache import Corpus
from harness.errors import InputError


def train_prefix_length(n_train: int, fraction: float | None) -> int:
    """Tokens kept by ``fraction``: ``floor(fraction * n_train)`` (None: all ``n_train``)."""
    if fraction is None:
        return n_train
    if not 0.0 < fraction <= 1.0:
        raise InputError(f"train_fraction must lie in (0, 1], got {fraction}")
    return int(math.floor(fraction * n_train))


def check_train_fraction(n_train: int, fraction: float | None, *, block_size: int, batch_size: int) -> None:
    """Refuse a prefix that holds fewer non-overlapping windows of ``block_size + 1`` tokens,
    ``(n - 1) // block_size``, than one batch (InputError naming both numbers and a fraction
    that would do)."""
    if fraction is None:
        return
    n = train_prefix_length(n_train, fraction)
    windows = max(0, (n - 1) // block_size)
    if windows < batch_size:
        needed = (batch_size * block_size + 1) / n_train
        raise InputError(
            f"train_fraction {fraction} keeps {n:,} of {n_train:,} training tokens: {windows} windows of "
            f"{block_size} characters, fewer than one batch of {batch_size}; use train_fraction >= "
            f"{math.ceil(needed * 1000) / 1000:g} or a smaller batch or context length"
        )


def with_train_prefix(corpus: Corpus, fraction: float | None) -> Corpus:
    """``corpus`` training on the first ``fraction`` of its training split (a view, no copy);
    the corpus itself when ``fraction`` is None or 1."""
    n = train_prefix_length(len(corpus.train), fraction)
    if n == len(corpus.train):
        return corpus
    return dataclasses.replace(corpus, train=corpus.train[:n])
