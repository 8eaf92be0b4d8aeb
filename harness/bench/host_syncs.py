"""Counting the host's waits for the device inside training steps.

On a GPU a read of a tensor's values on the host (``.item()``, ``.tolist()``, ``.cpu()``,
``float(t)``, ``if t:``), an op whose output shape depends on the values (``nonzero``, a
boolean mask) or a tensor built from Python data makes the host wait for the device (or copy
from pageable memory): inside a training step it drains the queue of kernels the host had
run ahead with. Two counters of the same thing:

- on CUDA, torch's own: ``torch.cuda.set_sync_debug_mode("warn")`` warns at every
  synchronising call (:class:`SyncWindow` counts the warnings);
- anywhere, the operations themselves: :class:`HostReads`, a ``TorchFunctionMode`` that
  counts (or refuses) each of them. A CPU has no device to wait for, so this is how the fast
  tests and ``gpu_check.py --cpu-smoke`` see what a GPU would wait on.
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from lightning.pytorch import Callback
from torch.overrides import TorchFunctionMode

#: Reads of a tensor's values on the host (each waits for the device), by the name torch gives them.
HOST_READS = frozenset({"tolist", "item", "cpu", "numpy", "__bool__", "__float__", "__int__", "__index__"})
#: Ops whose output shape depends on the values (the host waits to size the output).
DATA_DEPENDENT = frozenset({"nonzero", "argwhere", "masked_select", "unique", "unique_consecutive"})
#: Tensors built from Python data (a copy from host memory on a GPU).
FROM_PYTHON_DATA = frozenset({"tensor", "as_tensor", "from_numpy", "asarray"})


class HostReadRefused(AssertionError):
    """A host read inside a block that refuses them (:class:`HostReads` with ``refuse=True``)."""


class HostReads(TorchFunctionMode):
    """Counts (``counts``: name -> calls) or, with ``refuse``, raises :class:`HostReadRefused`
    on every host read, data-dependent shape and tensor from Python data in the block, and on
    indexing with a Python list or a boolean mask."""

    def __init__(self, *, refuse: bool = False) -> None:
        super().__init__()
        self.refuse = refuse
        self.counts: Counter[str] = Counter()

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        name = getattr(func, "__name__", str(func))
        if name in HOST_READS | DATA_DEPENDENT | FROM_PYTHON_DATA:
            self._found(name)
        elif name == "__getitem__" and _python_or_mask_index(args[1]):
            self._found(f"__getitem__[{type(args[1]).__name__}]")
        return func(*args, **(kwargs or {}))

    def _found(self, name: str) -> None:
        if self.refuse:
            raise HostReadRefused(f"{name} where no host read may happen")
        self.counts[name] += 1

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def _python_or_mask_index(index: Any) -> bool:
    parts = index if isinstance(index, tuple) else (index,)
    return any(
        isinstance(p, list) or (isinstance(p, torch.Tensor) and p.dtype == torch.bool and p.dim() > 0) for p in parts
    )


@contextmanager
def cuda_syncs() -> Iterator[Counter[str]]:
    """The synchronising CUDA calls in the block (``torch.cuda.set_sync_debug_mode("warn")``),
    counted by their warning's first line."""
    counts: Counter[str] = Counter()
    previous = torch.cuda.get_sync_debug_mode()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            yield counts
        finally:
            torch.cuda.set_sync_debug_mode(previous)
    for w in caught:
        if "synchroniz" in str(w.message):
            counts[str(w.message).splitlines()[0][:120]] += 1


class SyncWindow(Callback):
    """Host waits per training step for the global steps in ``steps`` of a real run: CUDA's sync
    debug mode on a GPU, :class:`HostReads` on CPU. ``per_step``: step -> {what: count}."""

    def __init__(self, steps: range) -> None:
        self.steps = steps
        self.per_step: dict[int, dict[str, int]] = {}
        self._open: Any = None
        self._counts: Any = None

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if trainer.global_step + 1 not in self.steps:  # the step this batch completes
            return
        if pl_module.device.type == "cuda":
            self._open = cuda_syncs()
            self._counts = self._open.__enter__()
        else:
            self._open = self._counts = HostReads()
            self._open.__enter__()

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self._open is None:
            return
        self._open.__exit__(None, None, None)
        counts = self._counts.counts if isinstance(self._counts, HostReads) else self._counts
        self.per_step[trainer.global_step] = dict(counts)
        self._open = self._counts = None

    @property
    def total(self) -> int:
        return sum(sum(c.values()) for c in self.per_step.values())
