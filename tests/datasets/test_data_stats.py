"""corpus_stats against hand computation and against PTB's word-level file."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from harness.datasets import FUNCTION_WORDS, corpus_stats, corpus_stats_for
from harness.datasets.words import TEMPLATE_FUNCTION_WORDS


def test_hand_computed_example() -> None:
    text = "The cat sat on the mat. It ran, and then it slept.\n\nDon't stop: go!"
    s = corpus_stats(text)
    # words: The cat sat on the mat | It ran and then it slept | Don't stop go
    # function: the on the it and then it don't (Don't has 4 letters: the apostrophe is no letter)
    # content letters: cat sat mat ran slept stop go = 3+3+3+3+5+4+2 = 23
    # all letters: 36 (first two sentences) + 4 + 4 + 2 = 46
    assert (s.n_words, s.n_letters, s.n_content_words) == (15, 46, 7)
    assert s.content_letter_fraction == pytest.approx(23 / 46)
    assert s.content_word_fraction == pytest.approx(7 / 15)
    assert s.mean_word_length == pytest.approx((36 + 5 + 4 + 2) / 15)  # characters incl. the apostrophe
    # sentences: "The cat sat on the mat." (23) "It ran, and then it slept." (26) "Don't stop: go!" (15)
    assert s.n_sentences == 3 and s.mean_sentence_length == pytest.approx((23 + 26 + 15) / 3)
    # clauses: 23 | "It ran," 7 + "and then it slept." 18 | "Don't stop:" 11 + "go!" 3
    assert s.n_clauses == 5 and s.mean_clause_length == pytest.approx((23 + 7 + 18 + 11 + 3) / 5)


def test_lines_as_sentences_and_case() -> None:
    s = corpus_stats("THE MARKET FELL\nit rose , then fell\n", lines_are_sentences=True)
    assert s.n_sentences == 2 and s.mean_sentence_length == pytest.approx((15 + 19) / 2)
    assert s.n_clauses == 3 and s.mean_clause_length == pytest.approx((15 + 9 + 9) / 3)  # "it rose ," "then fell"
    assert s.content_letter_fraction == pytest.approx((6 + 4 + 4 + 4) / (3 + 6 + 4 + 2 + 4 + 4 + 4))


def test_empty_text_gives_nan() -> None:
    s = corpus_stats("... 123 !!!")
    assert s.n_words == 0 and math.isnan(s.content_letter_fraction) and math.isnan(s.mean_sentence_length)


def test_function_word_list() -> None:
    assert all(w == w.lower() for w in FUNCTION_WORDS)
    assert set(TEMPLATE_FUNCTION_WORDS) <= FUNCTION_WORDS
    assert {"the", "of", "thou", "hath", "n't"} <= FUNCTION_WORDS
    assert not {"king", "market", "love"} & FUNCTION_WORDS


def test_ptb_char_stats_equal_the_word_level_file(shared_data_dir: Path) -> None:
    """PTB's characters decoded back to words give the statistics of ptb.valid.txt
    (all but n_chars: the word file has a space at both ends of every line)."""
    from_chars = corpus_stats_for("ptb-char", split="val").as_dict()
    words = (shared_data_dir / "ptb" / "ptb.valid.txt").read_text()
    from_words = corpus_stats(words, lines_are_sentences=True).as_dict()
    assert from_chars.pop("n_chars") < from_words.pop("n_chars")
    assert from_chars == from_words
    assert from_chars["n_sentences"] == 3_370
