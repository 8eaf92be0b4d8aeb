"""Corpus statistics: how much of a text is content, and how long its units are.

The content statistic answers "what fraction of the text a salience gate *should* open
on": the fraction of letters that belong to content words, where a content word is any
word not in :data:`FUNCTION_WORDS` (a closed-class list written for this project). The
lengths of words, clauses and sentences in characters are the natural scales to compare
with the scales sigma that a Morlet positional encoding learns.

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

# Closed-class English words: articles and determiners, pronouns, prepositions,
# conjunctions, auxiliaries and modals, negation and common particles/adverbs of degree,
# time and place, contractions and clitics (as PTB splits them: 's n't 're 've 'll 'd 'm),
# and the Early Modern forms of Shakespeare (thou, hath, doth, 'tis, o'er ...).
FUNCTION_WORDS: frozenset[str] = frozenset(
    """
    a an the this that these those each every either neither some any no all both half
    several many much more most few fewer less least little other another such what
    whatever which whichever whose own same enough
    i me my mine myself you your yours yourself yourselves he him his himself she her hers
    herself it its itself we us our ours ourselves they them their theirs themselves one
    oneself who whom whoever whomever someone somebody something anyone anybody anything
    everyone everybody everything nobody nothing none
    about above across after against along amid among amongst around as at before behind
    below beneath beside besides between beyond by despite down during except for from in
    inside into like near of off on onto out outside over past per since than through
    throughout till to toward towards under underneath unlike until unto up upon via with
    within without
    and but or nor so yet if unless because although though while whilst whereas whether
    when whenever where wherever whereby wherein how why once lest then therefore thus
    hence however
    be am is are was were been being have has had having do does did doing done will would
    shall should can could may might must ought
    not very too also just only even still again ever never always here there now quite
    rather almost already perhaps else indeed
    s t d ll re ve m n't
    don't doesn't didn't isn't aren't wasn't weren't can't cannot couldn't won't wouldn't
    shouldn't haven't hasn't hadn't mustn't i'm i've i'll i'd you're you've you'll you'd
    he's he'll he'd she's she'll she'd it's it'll we're we've we'll we'd they're they've
    they'll they'd that's there's here's what's who's let's
    thou thee thy thine thyself ye art hast hath doth dost didst shalt wilt wouldst
    shouldst couldst canst mayst ere hither thither whither thence whence wherefore nay ay
    aye yea o oh ah tis twas o'er ne'er e'er gainst em
    """.split()
)

# Function words the synthetic generator draws its templates from (most frequent first);
# every one is in FUNCTION_WORDS, so corpus_stats recognises them.
TEMPLATE_FUNCTION_WORDS: tuple[str, ...] = (
    "the",
    "of",
    "and",
    "a",
    "to",
    "in",
    "is",
    "it",
    "that",
    "was",
    "for",
    "on",
    "with",
    "as",
    "he",
    "by",
    "at",
    "this",
    "from",
    "but",
    "not",
    "or",
    "they",
    "which",
    "be",
    "had",
    "are",
    "his",
    "her",
    "we",
    "an",
    "their",
    "there",
    "will",
    "would",
    "can",
    "all",
    "so",
    "if",
    "when",
)

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
