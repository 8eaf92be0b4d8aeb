"""Corpus statistics: how much of a text is content, and how long its units are.

The content statistic answers "what fraction of the text a salience gate *should* open
on": the fraction of letters that belong to content words, where a content word is any
word not in :data:`~harness.datasets.words.FUNCTION_WORDS` (a closed-class list written for
this project). The lengths of words, clauses and sentences in characters are the natural
scales to compare with the scales sigma that a Morlet positional encoding learns.

Definitions (:func:`corpus_stats`):

- word: a maximal run of letters, with inner apostrophes (``don't``, ``o'er``); its
  length counts its characters; matched case-insensitively against the list.
- content_letter_fraction = (letters in content words) / (letters in all words).
- sentence: text between sentence ends, a run of ``.``, ``!`` or ``?`` (optionally closed
  by a quote or bracket) followed by white space, and blank lines; with
  ``lines_are_sentences=True`` (Penn Treebank: one sentence per line, no final
  punctuation) each line is a sentence instead.
- clause: a sentence cut after ``,``, ``;`` or ``:`` followed by white space.
- a sentence's or clause's length is the number of characters of its span as the model
  sees them (line breaks inside count one each), without surrounding white space;
  spans without a letter are not counted.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass

from harness.datasets.corpus import load
from harness.datasets.words import FUNCTION_WORDS

WORD_RE = re.compile(r"[^\W\d_]+(?:['\u2019][^\W\d_]+)*")
_LETTER_RE = re.compile(r"[^\W\d_]")
_SENTENCE_BREAK_RE = re.compile(r"(?<=[.!?])\s+|(?<=[.!?][\"')\]])\s+|\n[ \t]*\n")
_CLAUSE_BREAK_RE = re.compile(r"(?<=[,;:])\s+|(?<=[,;:][\"')\]])\s+")


@dataclass(frozen=True)
class CorpusStats:
    """Content fraction and unit lengths of a text (see the module docstring)."""

    n_chars: int
    n_letters: int
    n_words: int
    n_content_words: int
    content_letter_fraction: float  # letters in content words / letters in words
    content_word_fraction: float  # content words / words
    mean_word_length: float  # characters
    mean_clause_length: float  # characters
    mean_sentence_length: float  # characters
    n_clauses: int
    n_sentences: int

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)

    def format(self) -> str:
        """Aligned ``name  value`` lines for the terminal."""
        rows = []
        for key, value in self.as_dict().items():
            text = f"{value:,}" if isinstance(value, int) else f"{value:.4f}"
            rows.append(f"{key:<26}{text:>16}")
        return "\n".join(rows)


def _letters(word: str) -> int:
    return len(word) - word.count("'") - word.count("\u2019")


def _span_lengths(pieces: list[str]) -> list[int]:
    out = []
    for piece in pieces:
        piece = piece.strip()
        if piece and _LETTER_RE.search(piece):
            out.append(len(piece))
    return out


def _mean(values: list[int]) -> float:
    return sum(values) / len(values) if values else math.nan


def sentences(text: str, *, lines_are_sentences: bool = False) -> list[str]:
    """The sentence spans of ``text`` (stripped, only those with a letter)."""
    pieces = text.split("\n") if lines_are_sentences else _SENTENCE_BREAK_RE.split(text)
    return [p.strip() for p in pieces if p.strip() and _LETTER_RE.search(p)]


def corpus_stats(
    text: str,
    *,
    lines_are_sentences: bool = False,
    function_words: frozenset[str] = FUNCTION_WORDS,
) -> CorpusStats:
    """Content-letter fraction and mean word, clause and sentence lengths of ``text``.

    Examples
    --------
    >>> s = corpus_stats("The cat sat on the mat. It ran, and then it slept.")
    >>> s.n_letters, round(s.content_letter_fraction, 4)   # cat sat mat ran slept: 17 of 36 letters
    (36, 0.4722)
    >>> s.n_sentences, s.n_clauses
    (2, 3)
    """
    words = WORD_RE.findall(text)
    n_letters = 0
    content_letters = 0
    n_content = 0
    total_len = 0
    for w in words:
        k = _letters(w)
        n_letters += k
        total_len += len(w)
        if w.lower() not in function_words:
            content_letters += k
            n_content += 1
    sents = sentences(text, lines_are_sentences=lines_are_sentences)
    clause_lengths: list[int] = []
    for s in sents:
        clause_lengths += _span_lengths(_CLAUSE_BREAK_RE.split(s))
    return CorpusStats(
        n_chars=len(text),
        n_letters=n_letters,
        n_words=len(words),
        n_content_words=n_content,
        content_letter_fraction=content_letters / n_letters if n_letters else math.nan,
        content_word_fraction=n_content / len(words) if words else math.nan,
        mean_word_length=total_len / len(words) if words else math.nan,
        mean_clause_length=_mean(clause_lengths),
        mean_sentence_length=_mean([len(s) for s in sents]),
        n_clauses=len(clause_lengths),
        n_sentences=len(sents),
    )


def stats_text(corpus, split: str = "train", *, max_chars: int | None = None) -> tuple[str, bool]:
    """The text of a corpus split as words, and whether its lines are sentences.

    Penn Treebank's character format is decoded back to words (``_`` -> space); its
    lines are sentences.
    """
    ids = corpus.split(split)
    if max_chars is not None:
        ids = ids[:max_chars]
    text = corpus.decode(ids)
    if corpus.tokenizer == "ptb-char":
        return text.replace("_", " "), True
    return text, False


def corpus_stats_for(
    name_or_corpus,
    *,
    split: str = "train",
    max_chars: int | None = None,
    data_dir=None,
    download: bool = True,
) -> CorpusStats:
    """:func:`corpus_stats` of a registered corpus (or a loaded :class:`Corpus`) split,
    decoding formats such as PTB's characters back to words first."""
    if isinstance(name_or_corpus, str):
        corpus = load(name_or_corpus, data_dir=data_dir, download=download)
    else:
        corpus = name_or_corpus
    text, lines = stats_text(corpus, split, max_chars=max_chars)
    return corpus_stats(text, lines_are_sentences=lines)
