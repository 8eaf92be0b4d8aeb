"""Training batches and evaluation windows.

Training: the batch of step ``s`` of a trial with seed ``seed`` is drawn by
``np.random.default_rng([seed, s])``: it depends on nothing else (not on earlier draws),
so a run resumed at step s sees exactly the batches an uninterrupted run would.

Evaluation: windows are fixed by the split's length and the block size alone, never by
the trial seed, so every variant and seed is scored on the same characters and the
per-window losses of two runs can be compared pairwise. Window k starts at
``k * block_size`` and spans ``block_size + 1`` tokens (inputs ``x = t[s : s+T]``,
targets ``y = t[s+1 : s+T+1]``); consecutive windows share one boundary token, so their
*target* spans are disjoint and together cover the split (all but its first token and a
tail shorter than a block): the mean loss over all windows is the split's loss.
"""

from __future__ import annotations

import numpy as np

from harness.errors import InputError


def _check_block(n_tokens: int, block_size: int) -> None:
    if block_size < 1:
        raise InputError(f"block_size must be >= 1, got {block_size}")
    if n_tokens < block_size + 1:
        raise InputError(
            f"a split of {n_tokens:,} tokens is too short for block_size={block_size} (needs {block_size + 1})"
        )


def sample_train_batch(
    tokens: np.ndarray, *, block_size: int, batch_size: int, seed: int, step: int
) -> tuple[np.ndarray, np.ndarray]:
    """Random training windows: ``(x, y)`` int64 arrays of shape ``[batch_size, block_size]``
    with ``y[b, t] = x[b, t+1]``-shifted targets (``y = tokens[s+1 : s+T+1]``).

    Start offsets are uniform on ``[0, len(tokens) - block_size - 1]`` from
    ``np.random.default_rng([seed, step])``: the batch depends only on (seed, step).
    """
    if batch_size < 1:
        raise InputError(f"batch_size must be >= 1, got {batch_size}")
    if seed < 0 or step < 0:
        raise InputError(f"seed and step must be >= 0, got seed={seed}, step={step}")
    n = len(tokens)
    _check_block(n, block_size)
    rng = np.random.default_rng([seed, step])
    starts = rng.integers(0, n - block_size, size=batch_size)  # high exclusive: s + T + 1 <= n
    return window_batch(tokens, starts, block_size=block_size)


def eval_window_starts(n_tokens: int, *, block_size: int, max_windows: int | None = None) -> np.ndarray:
    """Start offsets (int64) of the evaluation windows of a split of ``n_tokens`` tokens.

    All windows: ``k * block_size`` for ``k = 0 .. (n_tokens - 1) // block_size - 1``.
    With ``max_windows`` smaller than that count ``n``, the evenly spaced subset
    ``k_i = floor(i * n / max_windows)``, ``i = 0 .. max_windows - 1`` (deterministic).
    """
    _check_block(n_tokens, block_size)
    if max_windows is not None and max_windows < 1:
        raise InputError(f"max_windows must be >= 1 or None, got {max_windows}")
    n_windows = (n_tokens - 1) // block_size
    k = np.arange(n_windows, dtype=np.int64)
    if max_windows is not None and max_windows < n_windows:
        k = (np.arange(max_windows, dtype=np.int64) * n_windows) // max_windows
    return k * block_size


def window_batch(tokens: np.ndarray, starts: np.ndarray, *, block_size: int) -> tuple[np.ndarray, np.ndarray]:
    """``x[i] = tokens[s_i : s_i + T]``, ``y[i] = tokens[s_i + 1 : s_i + T + 1]`` as int64 ``[N, T]``."""
    starts = np.asarray(starts, dtype=np.int64).reshape(-1)
    _check_block(len(tokens), block_size)
    if starts.size and (starts.min() < 0 or starts.max() + block_size + 1 > len(tokens)):
        raise InputError(
            f"window starts must lie in [0, {len(tokens) - block_size - 1}] for block_size={block_size}, "
            f"got {starts.min()}..{starts.max()}"
        )
    idx = starts[:, None] + np.arange(block_size + 1, dtype=np.int64)  # (N, T+1)
    chunk = np.asarray(tokens[idx], dtype=np.int64)  # fancy indexing reads only these tokens of a memmap
    return chunk[:, :-1], chunk[:, 1:]
