"""synthetic-salience: planted content fraction, ground truth, determinism, the corpus."""

from __future__ import annotations

import numpy as np
import pytest

from harness.datasets import (
    FUNCTION_WORDS,
    corpus_stats,
    corpus_stats_for,
    generate_salience_text,
    load,
    make_salience_corpus,
)
from harness.datasets.stats import WORD_RE
from harness.datasets.synthetic import ALPHABET, content_fraction
from harness.datasets.words import TEMPLATE_FUNCTION_WORDS
from harness.errors import InputError


@pytest.mark.parametrize("p", [0.1, 0.36, 0.5, 0.8])
def test_realised_content_fraction_within_001_of_p(p: float) -> None:
    gen = generate_salience_text(p, n_chars=100_000, seed=2)
    assert len(gen.text) == len(gen.content_mask) == 100_000
    assert abs(gen.content_fraction - p) < 0.01
    # The same quantity computed independently from the text (function-word list).
    end = gen.text.rfind(".") + 1  # the last word may be cut at n_chars
    stats = corpus_stats(gen.text[:end])
    assert stats.content_letter_fraction == pytest.approx(
        content_fraction(gen.text[:end], gen.content_mask[:end]), abs=1e-12
    )


def test_ground_truth_marks_exactly_the_letters_of_content_words() -> None:
    gen = generate_salience_text(0.4, n_chars=20_000, seed=5, n_function_words=12)
    mask = np.asarray(gen.content_mask)
    oracle = np.zeros(len(gen.text), dtype=bool)
    allowed_function = set(TEMPLATE_FUNCTION_WORDS[:12])
    content_vocab = set(gen.content_vocab)
    for m in WORD_RE.finditer(gen.text):
        word = m.group().lower()
        if word in allowed_function:
            continue
        # a content word (the last one may be cut at n_chars)
        assert word in content_vocab or m.end() == len(gen.text)
        oracle[m.start() : m.end()] = True
    np.testing.assert_array_equal(mask, oracle)
    assert not (set(gen.content_vocab) & FUNCTION_WORDS)
    assert set(gen.text) <= set(ALPHABET)


def test_generator_is_deterministic_in_its_parameters() -> None:
    a = generate_salience_text(0.3, n_chars=5_000, seed=1)
    b = generate_salience_text(0.3, n_chars=5_000, seed=1)
    c = generate_salience_text(0.3, n_chars=5_000, seed=2)
    assert a.text == b.text and np.array_equal(a.content_mask, b.content_mask)
    assert a.text != c.text


def test_function_words_follow_fixed_templates() -> None:
    """Function words are predictable: every sentence is one of n_templates fixed patterns."""
    gen = generate_salience_text(0.5, n_chars=30_000, seed=0, n_templates=8)
    patterns = set()
    content = set(gen.content_vocab)
    for sentence in gen.text.replace("\n", " ").split(". ")[:-1]:
        words = [w.lower() for w in WORD_RE.findall(sentence)]
        patterns.add(" ".join("C" if w in content else w for w in words))
    assert patterns <= set(gen.templates) and len(patterns) >= 4


def test_default_corpus_has_masks_per_split_and_hits_p() -> None:
    corpus = load("synthetic-salience")
    again = load("synthetic-salience")
    assert corpus.name == "synthetic-salience" and corpus.vocab == ALPHABET
    assert (len(corpus.train), len(corpus.val), len(corpus.test)) == (900_000, 50_000, 50_000)
    for split, tokens in corpus.splits.items():
        mask = corpus.content_mask[split]
        assert mask.dtype == bool and len(mask) == len(tokens)
        assert abs(content_fraction(corpus.decode(tokens), mask) - 0.5) < 0.01
    np.testing.assert_array_equal(corpus.val, again.val)
    assert isinstance(again.train, np.memmap)
    stats = corpus_stats_for(corpus, split="val")
    assert abs(stats.content_letter_fraction - 0.5) < 0.01


def test_parameters_through_the_name_and_the_function() -> None:
    corpus = load("synthetic-salience:p=0.2,seed=3,n_chars=40000")
    assert corpus.name == "synthetic-salience:n_chars=40000,p=0.2,seed=3"
    direct = make_salience_corpus(0.2, seed=3, n_chars=40_000)
    np.testing.assert_array_equal(corpus.train, direct.train)
    assert abs(content_fraction(corpus.decode(corpus.train), corpus.content_mask["train"]) - 0.2) < 0.01
    with pytest.raises(InputError, match="bad parameter 'q=1'.*n_chars"):
        load("synthetic-salience:q=1")
    with pytest.raises(InputError, match="p must lie in"):
        load("synthetic-salience:p=1.5")
    with pytest.raises(InputError, match="seed must be an integer"):
        load("synthetic-salience:seed=x")
