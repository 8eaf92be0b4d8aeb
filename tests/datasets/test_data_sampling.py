"""Training batches depend only on (seed, step); evaluation windows only on (split length, block size)."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from harness.datasets import eval_window_starts, load, sample_train_batch, window_batch
from harness.errors import InputError

TOKENS = np.arange(10_000, dtype=np.uint16) % 251  # distinct enough to locate windows


def test_training_batch_matches_the_rule() -> None:
    x, y = sample_train_batch(TOKENS, block_size=16, batch_size=8, seed=3, step=11)
    starts = np.random.default_rng([3, 11]).integers(0, len(TOKENS) - 16, size=8)  # the documented rule
    assert x.dtype == np.int64 and x.shape == (8, 16) and y.shape == (8, 16)
    for b, s in enumerate(starts):
        np.testing.assert_array_equal(x[b], TOKENS[s : s + 16])
        np.testing.assert_array_equal(y[b], TOKENS[s + 1 : s + 17])


def test_same_seed_same_windows_and_exact_resume() -> None:
    run_a = [sample_train_batch(TOKENS, block_size=32, batch_size=4, seed=7, step=s) for s in range(6)]
    resumed = sample_train_batch(TOKENS, block_size=32, batch_size=4, seed=7, step=5)  # no earlier draws
    for (xa, ya), (xb, yb) in zip(
        run_a, [sample_train_batch(TOKENS, block_size=32, batch_size=4, seed=7, step=s) for s in range(6)], strict=False
    ):
        np.testing.assert_array_equal(xa, xb)
        np.testing.assert_array_equal(ya, yb)
    np.testing.assert_array_equal(resumed[0], run_a[5][0])
    other_seed = sample_train_batch(TOKENS, block_size=32, batch_size=4, seed=8, step=5)
    assert not np.array_equal(other_seed[0], run_a[5][0])
    assert not np.array_equal(run_a[4][0], run_a[5][0])


def test_evaluation_windows_are_fixed_by_length_and_block_alone() -> None:
    assert "seed" not in inspect.signature(eval_window_starts).parameters
    n, T = 1001, 100
    starts = eval_window_starts(n, block_size=T)
    np.testing.assert_array_equal(starts, np.arange(10) * 100)
    x, y = window_batch(TOKENS[:n], starts, block_size=T)
    # Target spans are disjoint and cover tokens[1 : 1 + 10 * T] in order.
    np.testing.assert_array_equal(y.reshape(-1), TOKENS[1:1001])
    np.testing.assert_array_equal(x.reshape(-1), TOKENS[:1000])
    assert len(eval_window_starts(n - 1, block_size=T)) == 9  # 1000 tokens: 9 full windows of 101

    # Two "trials" with different seeds train on different windows but score the same ones.
    def trial(seed: int) -> tuple[np.ndarray, np.ndarray]:
        train_x, _ = sample_train_batch(TOKENS, block_size=T, batch_size=2, seed=seed, step=0)
        eval_x, _ = window_batch(TOKENS, eval_window_starts(len(TOKENS), block_size=T, max_windows=7), block_size=T)
        return train_x, eval_x

    (train0, eval0), (train1, eval1) = trial(0), trial(1)
    assert not np.array_equal(train0, train1)
    np.testing.assert_array_equal(eval0, eval1)


def test_max_windows_is_an_evenly_spaced_subset() -> None:
    full = eval_window_starts(100_001, block_size=64)
    sub = eval_window_starts(100_001, block_size=64, max_windows=10)
    n = len(full)
    np.testing.assert_array_equal(sub, full[(np.arange(10) * n) // 10])
    assert len(np.unique(sub)) == 10 and set(sub) <= set(full)
    np.testing.assert_array_equal(eval_window_starts(100_001, block_size=64, max_windows=10**6), full)
    gaps = np.diff(sub) // 64
    assert gaps.max() - gaps.min() <= 1


def test_bad_arguments_raise_input_errors() -> None:
    with pytest.raises(InputError, match="too short"):
        sample_train_batch(TOKENS[:10], block_size=10, batch_size=1, seed=0, step=0)
    with pytest.raises(InputError, match="seed and step"):
        sample_train_batch(TOKENS, block_size=8, batch_size=1, seed=-1, step=0)
    with pytest.raises(InputError, match="max_windows"):
        eval_window_starts(1000, block_size=8, max_windows=0)
    with pytest.raises(InputError, match="window starts"):
        window_batch(TOKENS[:100], np.array([90]), block_size=10)


def test_sampling_reads_a_memory_mapped_corpus(shared_data_dir) -> None:
    corpus = load("tinyshakespeare")
    x, y = sample_train_batch(corpus.train, block_size=64, batch_size=4, seed=0, step=0)
    assert x.shape == (4, 64) and x.dtype == np.int64 and 0 <= x.min() and x.max() < corpus.vocab_size
    starts = eval_window_starts(len(corpus.val), block_size=256, max_windows=16)
    xv, yv = window_batch(corpus.val, starts, block_size=256)
    assert corpus.decode(xv[0]) == corpus.decode(corpus.val[:256])
