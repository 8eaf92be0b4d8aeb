"""``synthetic-salience``: English-like text with a planted content fraction.

Why: the gate-threshold claim (tau ~ 0.35, so about 36 % of keys open) needs a corpus
where the "right" fraction of salient characters is known. Here it is a parameter.

The generator:

- a *content vocabulary* of ``n_content_words`` random pronounceable words (syllables
  of consonant + vowel [+ consonant], 3-11 letters), drawn uniformly at random for every
  content slot: ~log2(n_content_words) bits per word, hard to predict;
- a *function vocabulary* of the ``n_function_words`` most frequent English function
  words (:data:`~harness.datasets.words.TEMPLATE_FUNCTION_WORDS`);
- ``n_templates`` sentence templates fixed by the seed: template t has 4-9 slots, each a
  content slot with probability q_t = t / (n_templates - 1) or else a *fixed* function
  word (so the function words are predictable from the template), with an occasional
  comma. Template 0 is all function words, the last all content slots.
- sentences are rendered one after another (capitalised, ending in ``.``, a line break
  after every 3-7 sentences). Before each sentence a controller picks a random template
  among those whose expected content fraction is >= p when the running fraction is
  below p, else among those below p. The running fraction therefore stays within one
  sentence of p, and any stretch of ~20,000 letters or more (every split at the default
  size) is within 0.01 of p.

Ground truth: a boolean per character, True on the letters of content words, so the
realised content fraction ``mask.sum() / letters`` is the quantity
:func:`~harness.datasets.stats.corpus_stats` calls ``content_letter_fraction`` (content
words never collide with :data:`~harness.datasets.words.FUNCTION_WORDS`, so both agree).

Studies choose p through the dataset name, which is all a ``TrainConfig`` carries:
``dataset: "synthetic-salience:p=0.2"`` (also ``seed``, ``n_chars``, ``n_content_words``,
``n_function_words``, ``n_templates``); a sweep over p is a grid over such names.
The corpus seed is part of the name, independent of the trial seed.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

from harness.datasets.fetch import cache_root
from harness.datasets.token_cache import Corpus, cache_key, corpus_from_cache, read_cache_dir, write_cache_dir
from harness.datasets.words import FUNCTION_WORDS, TEMPLATE_FUNCTION_WORDS
from harness.errors import InputError

NAME = "synthetic-salience"
GENERATOR_VERSION = 1
# Every character the generator can emit, sorted: the vocabulary is the same for every
# parameter setting, so one model can be evaluated across values of p.
ALPHABET: tuple[str, ...] = tuple(sorted("\n ,." + "ABCDEFGHIJKLMNOPQRSTUVWXYZ" + "abcdefghijklmnopqrstuvwxyz"))
_CONSONANTS = "bcdfghjklmnprstvwz"
_VOWELS = "aeiou"


@dataclass(frozen=True)
class SalienceParams:
    """Parameters of the generator (see the module docstring).

    p: target fraction of letters that belong to content words, in (0, 1). The default
    0.5 lies away from the 36 % that a Gaussian tail above tau = 0.35 would give, so a
    gate that opens on content can be told from one that opens on a fixed quantile.
    """

    p: float = 0.5
    n_chars: int = 1_000_000
    seed: int = 0
    n_content_words: int = 5000
    n_function_words: int = 24
    n_templates: int = 16

    def __post_init__(self) -> None:
        if not 0.0 < self.p < 1.0:
            raise InputError(f"synthetic-salience: p must lie in (0, 1), got {self.p}")
        if self.n_chars < 1000:
            raise InputError(f"synthetic-salience: n_chars must be at least 1000, got {self.n_chars}")
        if self.seed < 0:
            raise InputError(f"synthetic-salience: seed must be >= 0, got {self.seed}")
        if self.n_content_words < 10:
            raise InputError(f"synthetic-salience: n_content_words must be at least 10, got {self.n_content_words}")
        if not 1 <= self.n_function_words <= len(TEMPLATE_FUNCTION_WORDS):
            raise InputError(
                f"synthetic-salience: n_function_words must lie in [1, {len(TEMPLATE_FUNCTION_WORDS)}], "
                f"got {self.n_function_words}"
            )
        if self.n_templates < 2:
            raise InputError(f"synthetic-salience: n_templates must be at least 2, got {self.n_templates}")

    def name(self) -> str:
        """Canonical dataset name: only the non-default parameters, sorted."""
        default = SalienceParams()
        changed = [f"{k}={v}" for k, v in sorted(asdict(self).items()) if v != getattr(default, k)]
        return NAME + (":" + ",".join(changed) if changed else "")


@dataclass(frozen=True, eq=False)
class SalienceText:
    """Generated text and its ground truth."""

    text: str
    content_mask: np.ndarray  # bool [len(text)]: True on letters of content words
    params: SalienceParams
    templates: tuple[str, ...]  # each rendered with "C" for a content slot
    content_vocab: tuple[str, ...]
    function_vocab: tuple[str, ...]

    @property
    def content_fraction(self) -> float:
        """Realised fraction of letters that belong to content words."""
        return content_fraction(self.text, self.content_mask)


def content_fraction(text: str, mask: np.ndarray) -> float:
    """``mask.sum() / (number of letters in text)`` (the ground-truth content fraction)."""
    letters = sum(1 for c in text if c.isalpha())
    return float(np.count_nonzero(mask)) / letters if letters else float("nan")


def _content_vocab(rng: np.random.Generator, n: int) -> list[str]:
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < n:
        n_syll = int(rng.integers(1, 4))
        parts = []
        for _ in range(n_syll):
            parts.append(_CONSONANTS[rng.integers(len(_CONSONANTS))] + _VOWELS[rng.integers(len(_VOWELS))])
            if rng.random() < 0.35:
                parts.append(_CONSONANTS[rng.integers(len(_CONSONANTS))])
        word = "".join(parts)
        if len(word) < 3 or word in seen or word in FUNCTION_WORDS:
            continue
        seen.add(word)
        words.append(word)
    return words


def generate_salience_text(
    p: float = 0.5,
    *,
    n_chars: int = 1_000_000,
    seed: int = 0,
    n_content_words: int = 5000,
    n_function_words: int = 24,
    n_templates: int = 16,
) -> SalienceText:
    """Generate ``n_chars`` characters with content-letter fraction ~ ``p`` (deterministic in the parameters).

    Examples
    --------
    >>> s = generate_salience_text(0.3, n_chars=50_000, seed=1)
    >>> abs(s.content_fraction - 0.3) < 0.01
    True
    """
    params = SalienceParams(p, n_chars, seed, n_content_words, n_function_words, n_templates)
    rng = np.random.default_rng([GENERATOR_VERSION, seed])
    content_vocab = _content_vocab(rng, n_content_words)
    function_vocab = list(TEMPLATE_FUNCTION_WORDS[:n_function_words])
    mean_content_len = float(np.mean([len(w) for w in content_vocab]))
    templates, commas, expected = _templates(rng, n_templates, function_vocab, mean_content_len)
    rich = [t for t in range(n_templates) if expected[t] >= p]
    poor = [t for t in range(n_templates) if expected[t] < p]
    assert rich and poor  # template 0 has fraction 0, the last fraction 1
    pieces, is_content = _render(rng, templates, commas, (rich, poor), content_vocab, n_chars, p)
    text = "".join(pieces)[:n_chars]
    lengths = np.fromiter((len(x) for x in pieces), dtype=np.int64, count=len(pieces))
    mask = np.repeat(np.array(is_content, dtype=bool), lengths)[:n_chars]
    rendered = tuple(" ".join("C" if s is None else s for s in slots) for slots in templates)
    return SalienceText(text, mask, params, rendered, tuple(content_vocab), tuple(function_vocab))


def _templates(
    rng: np.random.Generator, n_templates: int, function_vocab: list[str], mean_content_len: float
) -> tuple[list[list[str | None]], list[list[bool]], list[float]]:
    """The sentence templates, their commas and expected content fractions: template t has 4-9 slots,
    each a content slot (None) with probability q_t = t / (n_templates - 1), else a fixed function
    word; a comma follows a slot (not the last) with probability 0.12. The expected fraction counts
    a content slot as ``mean_content_len`` letters."""
    templates: list[list[str | None]] = []
    commas: list[list[bool]] = []
    expected: list[float] = []
    for t in range(n_templates):
        q = t / (n_templates - 1)
        length = int(rng.integers(4, 10))
        slots = [None if rng.random() < q else function_vocab[rng.integers(len(function_vocab))] for _ in range(length)]
        templates.append(slots)
        commas.append([bool(rng.random() < 0.12) and i < length - 1 for i in range(length)])
        content = sum(mean_content_len for s in slots if s is None)
        function = sum(len(s) for s in slots if s is not None)
        expected.append(content / (content + function))
    return templates, commas, expected


def _render(
    rng: np.random.Generator,
    templates: list[list[str | None]],
    commas: list[list[bool]],
    pools: tuple[list[int], list[int]],
    content_vocab: list[str],
    n_chars: int,
    p: float,
) -> tuple[list[str], list[bool]]:
    """Sentences one after another until ``n_chars`` characters: pieces of text and, per piece,
    whether it is a content word. Each sentence's template comes from the rich pool (expected
    content fraction >= p) while the running content fraction is below p, else from the poor one;
    a line break ends every 3-7 sentences."""
    rich, poor = pools
    n_content_words = len(content_vocab)
    pieces: list[str] = []
    is_content: list[bool] = []
    letters = content_letters = chars = 0
    sentences_left = int(rng.integers(3, 8))
    # Random numbers drawn in blocks (deterministic for a given seed).
    block = 4096
    picks = rng.integers(0, n_content_words, size=block)
    coins = rng.random(block)
    i_pick = i_coin = 0
    while chars < n_chars:
        if i_coin >= block:
            coins, i_coin = rng.random(block), 0
        pool = rich if letters == 0 or content_letters < p * letters else poor
        t = pool[int(coins[i_coin] * len(pool))]
        i_coin += 1
        slots, comma = templates[t], commas[t]
        for k, slot in enumerate(slots):
            if slot is None:
                if i_pick >= block:
                    picks, i_pick = rng.integers(0, n_content_words, size=block), 0
                word = content_vocab[picks[i_pick]]
                i_pick += 1
                content_letters += len(word)
            else:
                word = slot
            if k == 0:
                word = word[0].upper() + word[1:]
            letters += len(word)
            pieces.append(word)
            is_content.append(slot is None)
            sep = "." if k == len(slots) - 1 else ("," if comma[k] else "") + " "
            pieces.append(sep)
            is_content.append(False)
            chars += len(word) + len(sep)
        sentences_left -= 1
        if sentences_left == 0:
            pieces.append("\n")
            sentences_left = int(rng.integers(3, 8))
        else:
            pieces.append(" ")
        is_content.append(False)
        chars += 1
    return pieces, is_content


# --------------------------------------------------------------------------------------
# as a corpus
# --------------------------------------------------------------------------------------
_INT_FIELDS = {f.name for f in fields(SalienceParams)} - {"p"}


def parse_salience_name(name: str) -> dict[str, Any]:
    """``"synthetic-salience:p=0.2,seed=3"`` -> ``{"p": 0.2, "seed": 3}`` (InputError on bad keys/values)."""
    base, _, rest = name.partition(":")
    if base != NAME:
        raise InputError(f"not a {NAME} name: {name!r}")
    out: dict[str, Any] = {}
    known = [f.name for f in fields(SalienceParams)]
    for item in filter(None, (s.strip() for s in rest.split(","))):
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or key not in known:
            raise InputError(
                f"{name!r}: bad parameter {item!r}; parameters: {', '.join(known)} (e.g. {NAME}:p=0.2,seed=1)"
            )
        try:
            out[key] = int(value) if key in _INT_FIELDS else float(value)
        except ValueError:
            raise InputError(
                f"{name!r}: {key} must be {'an integer' if key in _INT_FIELDS else 'a number'}, got {value!r}"
            ) from None
    return out


def salience_cache_key(params: SalienceParams) -> str:
    """The token cache key of a parameter setting: what identifies the generated text (the
    generator's version and every parameter), without generating it."""

    return cache_key({"generator": GENERATOR_VERSION, **asdict(params)})


def make_salience_corpus(
    p: float = 0.5,
    *,
    n_chars: int = 1_000_000,
    seed: int = 0,
    n_content_words: int = 5000,
    n_function_words: int = 24,
    n_templates: int = 16,
    cache_dir: str | os.PathLike[str] | None = None,
) -> Corpus:
    """The synthetic-salience :class:`~harness.datasets.token_cache.Corpus`: 90 % / 5 % / 5 %
    of the generated characters as train / val / test, with ``content_mask`` per split.
    Generated once per parameter setting and cached (memory-mapped) like real corpora."""

    params = SalienceParams(p, n_chars, seed, n_content_words, n_function_words, n_templates)
    key = salience_cache_key(params)
    path = cache_root(cache_dir) / "tokens" / NAME / key

    def build(tmp):
        gen = generate_salience_text(**asdict(params))
        table = np.array([ord(c) for c in ALPHABET], dtype=np.uint32)
        cps = np.frombuffer(gen.text.encode("utf-32-le"), dtype="<u4")
        ids = np.searchsorted(table, cps).astype(np.uint8)
        np.save(tmp / "tokens.npy", ids)
        np.save(tmp / "mask.npy", gen.content_mask)
        n = len(ids)
        a, b = int(0.9 * n), int(0.95 * n)
        return {
            "name": params.name(),
            "vocab": list(ALPHABET),
            "splits": {"train": [0, a], "val": [a, b], "test": [b, n]},
            "params": asdict(params),
            "content_fraction": gen.content_fraction,
            "templates": list(gen.templates),
        }

    cached = read_cache_dir(path)
    if cached is None:
        write_cache_dir(path, build)
        cached = read_cache_dir(path)
        assert cached is not None
    meta, tokens = cached
    mask = np.load(path / "mask.npy", mmap_mode="r")
    return corpus_from_cache(params.name(), "char", meta, tokens, path, source="generated", mask=mask)
