"""Corpus numbers the analysis sets beside the learned gates and scales: the content-word
fraction (beside the open-gate fraction), the true salient fraction of the synthetic
corpus, and the mean word, clause and sentence lengths (beside the MOPE scales).

Read through :mod:`harness.datasets` (``load`` and ``corpus_stats_for``); a dataset that
cannot be loaded here (offline, not cached) is left out with no error:
the report then shows the measured numbers without that reference.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable
from typing import Any

import numpy as np

from harness.datasets.corpus import load
from harness.datasets.stats import corpus_stats_for

log = logging.getLogger(__name__)

# CorpusStats field -> key of the report's corpus_info. The papers compare the open
# fraction with the fraction of content *words*; the share of letters in content words is
# kept beside it (a character-level gate sees letters).
_FIELDS = {
    "content_word_fraction": "content_fraction",
    "content_letter_fraction": "content_letter_fraction",
    "mean_word_length": "mean_word_length",
    "mean_clause_length": "mean_clause_length",
    "mean_sentence_length": "mean_sentence_length",
}


def _stats_dict(stats: Any) -> dict[str, float]:
    if dataclasses.is_dataclass(stats):
        raw = dataclasses.asdict(stats)
    elif hasattr(stats, "model_dump"):
        raw = stats.model_dump()
    elif isinstance(stats, dict):
        raw = stats
    else:
        raw = {k: getattr(stats, k) for k in _FIELDS if hasattr(stats, k)}
    return {_FIELDS[k]: float(v) for k, v in raw.items() if k in _FIELDS and v is not None}


def corpus_info_for(
    datasets: Iterable[str],
    *,
    data_dir: str | None = None,
    split: str = "val",
    download: bool = False,
    max_chars: int | None = 2_000_000,
) -> dict[str, dict[str, float]]:
    """``{dataset: {"content_fraction", "content_letter_fraction", "mean_word_length",
    "mean_clause_length", "mean_sentence_length", "salient_fraction"}}`` for the datasets
    that can be read (statistics of the ``split``, at most ``max_chars`` characters)."""
    out: dict[str, dict[str, float]] = {}
    for name in dict.fromkeys(datasets):
        try:
            corpus = load(name, data_dir=data_dir, download=download, progress=False)
            info = _stats_dict(corpus_stats_for(corpus, split=split, max_chars=max_chars))
            mask = (getattr(corpus, "content_mask", None) or {}).get(split)
            if mask is not None and len(mask):
                info["salient_fraction"] = float(np.mean(mask))
        except Exception as exc:  # noqa: BLE001 - a reference we cannot compute is left out, not fatal
            log.info("corpus numbers of %s unavailable: %s", name, exc)
            continue
        if info:
            out[name] = info
    return out


__all__ = ["corpus_info_for"]
