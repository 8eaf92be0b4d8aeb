"""The data side of a run: a seeded training stream and fixed evaluation windows.

Training batches come from :func:`harness.datasets.sample_train_batch`, a pure function
of ``(seed, step)``; the stream starts at the global step a run resumes from, so an
interrupted run sees exactly the batches an uninterrupted one would (no sampler state to
save, no fast-forwarding).

Evaluation uses :func:`harness.datasets.eval_window_starts`: non-overlapping windows
fixed by the split's length and the context length alone, identical for every variant
and seed (paired comparisons). Two sets per split:

- the *periodic* set, ``config.eval_windows`` windows (evenly spaced), read at every
  evaluation: the curves over training rest on it, so every point of a curve is read on the
  same windows;
- the *final* set, ``config.final_eval_windows`` windows (``None``: the whole validation split,
  about 870 windows of 128 characters on TinyShakespeare), read once more at the last
  evaluation: the final numbers rest on it. The train split (about nine times longer) gets as
  many windows as the validation split, evenly spaced, so both halves of the generalisation gap
  rest on the same number of windows.

The validation loader yields one split and one set per batch, tagged with the split name, the
set (``"periodic"`` or ``"final"``) and the window indices, so the module can keep a loss per
window for the final artifact.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from lightning.pytorch import LightningDataModule
from torch.utils.data import DataLoader, Dataset, IterableDataset

from harness.datasets.sampling import eval_window_starts, sample_train_batch, window_batch
from harness.errors import InputError

#: Splits evaluated at every evaluation (``test`` only at the final one, where it exists).
EVAL_SPLITS = ("val", "train", "test")

#: The two window sets of a split: read at every evaluation, and at the last one only.
PERIODIC, FINAL = "periodic", "final"


@dataclass(frozen=True)
class EvalWindows:
    """The fixed evaluation windows of one split.

    ``x``/``y``: int64 ``[N, T]`` inputs and next-character targets; ``starts``: the
    window offsets in the split; ``content``: bool ``[N, T]``, whether input character
    t is a ground-truth content character (synthetic-salience only, else ``None``).
    """

    split: str
    starts: np.ndarray
    x: torch.Tensor
    y: torch.Tensor
    content: torch.Tensor | None

    def __len__(self) -> int:
        return int(self.x.shape[0])


def make_eval_windows(
    tokens: np.ndarray,
    *,
    split: str,
    block_size: int,
    max_windows: int | None,
    content_mask: np.ndarray | None = None,
) -> EvalWindows:
    """Cut ``tokens`` into the fixed windows of ``split`` (raises :class:`InputError`
    when the split is shorter than one window)."""

    starts = np.asarray(eval_window_starts(len(tokens), block_size=block_size, max_windows=max_windows), dtype=np.int64)
    if starts.size == 0:
        raise InputError(
            f"the {split} split ({len(tokens)} characters) is shorter than one evaluation window of "
            f"{block_size + 1} characters; use a shorter --context-length"
        )
    x, y = window_batch(tokens, starts, block_size=block_size)
    content = None
    if content_mask is not None:
        content = torch.from_numpy(np.stack([np.asarray(content_mask[s : s + block_size], dtype=bool) for s in starts]))
    return EvalWindows(
        split=split,
        starts=starts,
        x=torch.from_numpy(np.ascontiguousarray(x, dtype=np.int64)),
        y=torch.from_numpy(np.ascontiguousarray(y, dtype=np.int64)),
        content=content,
    )


class TrainBatchStream(IterableDataset):
    """Endless training batches ``(x, y)`` (int64 ``[B, T]``, contiguous), batch k = f(seed, start_step + k).

    x and y are cut from one (B, T + 1) array, so as views they would have a row stride of
    T + 1; they are made contiguous here (a copy of a few kB), so that a GPU run pins them
    and copies them to the device without waiting (a strided source goes through an unpinned
    temporary, which serialises every step)."""

    def __init__(self, tokens: np.ndarray, *, block_size: int, batch_size: int, seed: int, start_step: int = 0) -> None:
        super().__init__()
        self.tokens = tokens
        self.block_size = block_size
        self.batch_size = batch_size
        self.seed = seed
        self.start_step = start_step

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:

        step = self.start_step
        while True:
            x, y = sample_train_batch(
                self.tokens, block_size=self.block_size, batch_size=self.batch_size, seed=self.seed, step=step
            )
            yield (
                torch.from_numpy(np.ascontiguousarray(x, dtype=np.int64)),
                torch.from_numpy(np.ascontiguousarray(y, dtype=np.int64)),
            )
            step += 1


def final_window_count(val_tokens: int, *, block_size: int, final_eval_windows: int | None) -> int | None:
    """How many windows every split gets at the final evaluation: ``final_eval_windows``, or
    (``None``) as many as the whole validation split holds, ``(len(val) - 1) // T``."""
    if final_eval_windows is not None:
        return final_eval_windows
    return max(1, (val_tokens - 1) // block_size)


class _EvalBatches(Dataset):
    """A list of ready-made evaluation batches (dicts), one split and one window set per batch."""

    def __init__(self, windows: list[tuple[str, EvalWindows]], batch_size: int) -> None:
        self.batches: list[dict[str, Any]] = []
        for window_set, w in windows:
            for lo in range(0, len(w), batch_size):
                hi = min(lo + batch_size, len(w))
                batch: dict[str, Any] = {
                    "split": w.split,
                    "set": window_set,
                    "window": torch.arange(lo, hi),
                    "x": w.x[lo:hi],
                    "y": w.y[lo:hi],
                }
                if w.content is not None:
                    batch["content"] = w.content[lo:hi]
                self.batches.append(batch)

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self.batches[index]


class CharDataModule(LightningDataModule):
    """Training stream and evaluation windows of one corpus for one run.

    Parameters
    ----------
    corpus
        A :class:`harness.datasets.Corpus` (already loaded: loading errors surface before
        any training or tracking starts).
    block_size, batch_size, seed
        Context length, training batch size and the run's seed.
    eval_windows, eval_batch_size
        Fixed windows per split read at every evaluation (``None``: cover the split) and
        windows per eval batch.
    final_eval_windows
        Windows per split read at the final evaluation (``None``: the whole validation split,
        and as many of the train split).
    start_step
        The global step the training stream starts at (the step a run resumes from).
    pin_memory
        Pin host batches (GPU runs).
    """

    def __init__(
        self,
        corpus: Any,
        *,
        block_size: int,
        batch_size: int,
        seed: int,
        eval_windows: int | None,
        eval_batch_size: int,
        final_eval_windows: int | None = None,
        start_step: int = 0,
        pin_memory: bool = False,
    ) -> None:
        super().__init__()
        self.corpus = corpus
        self.block_size = block_size
        self.batch_size = batch_size
        self.seed = seed
        self.eval_batch_size = eval_batch_size
        self.start_step = start_step
        self.pin_memory = pin_memory
        if len(corpus.train) < block_size + 2:
            raise InputError(
                f"the train split of {corpus.name!r} ({len(corpus.train)} characters) is shorter than one "
                f"training window of {block_size + 1}; use a shorter --context-length"
            )
        masks = getattr(corpus, "content_mask", None) or {}
        n_final = final_window_count(len(corpus.val), block_size=block_size, final_eval_windows=final_eval_windows)
        self.windows: dict[str, EvalWindows] = {}  # the periodic set of each split
        self.final_windows: dict[str, EvalWindows] = {}  # the final set of each split
        for split in EVAL_SPLITS:
            tokens = getattr(corpus, split, None)
            if tokens is None:
                continue
            content = masks.get(split) if split == "val" else None
            for target, count in ((self.windows, eval_windows), (self.final_windows, n_final)):
                target[split] = make_eval_windows(
                    tokens, split=split, block_size=block_size, max_windows=count, content_mask=content
                )

    @property
    def has_content_mask(self) -> bool:
        return self.windows["val"].content is not None

    def train_dataloader(self) -> DataLoader:
        stream = TrainBatchStream(
            self.corpus.train,
            block_size=self.block_size,
            batch_size=self.batch_size,
            seed=self.seed,
            start_step=self.start_step,
        )
        # batch_size=None: the stream yields whole batches; in-process (sampling costs microseconds).
        return DataLoader(stream, batch_size=None, num_workers=0, pin_memory=self.pin_memory)

    def window_set(self, window_set: str) -> dict[str, EvalWindows]:
        """The windows of every split in ``window_set`` (:data:`PERIODIC` or :data:`FINAL`)."""
        return self.windows if window_set == PERIODIC else self.final_windows

    def val_dataloader(self) -> DataLoader:
        # The periodic set first, then the final set (read at the last evaluation only).
        sets = [(PERIODIC, self.windows[s]) for s in EVAL_SPLITS if s in self.windows]
        sets += [(FINAL, self.final_windows[s]) for s in EVAL_SPLITS if s in self.final_windows]
        batches = _EvalBatches(sets, self.eval_batch_size)
        return DataLoader(batches, batch_size=None, shuffle=False, num_workers=0, pin_memory=self.pin_memory)
