"""CPU float settings every run of the zoo shares.

Denormal (subnormal) floats, |x| < 1.2e-38 in fp32, are computed in microcode on x86, 10 to
100 times slower than normal floats. Attention with a lag penalty makes many of them: ALiBi's
slope and relative MOPE's Gaussian envelope push far keys' logits to -87 .. -104 below the
row's maximum, where exp() is denormal, and the flash kernel's backward pass then spent most
of its time on them (``harness bench attention``, one thread, T = 4096: ALiBi x3.45 of plain
attention with denormals, x1.17 without; docs/zoo.md). Flushing them to zero changes a weight
of at most 1.2e-38 to 0, far below fp32's resolution of any loss or gradient the run reports.
"""

from __future__ import annotations


def flush_denormals() -> bool:
    """Flush denormal floats to zero (FTZ and DAZ) on this CPU thread; returns whether the CPU
    supports it (x86 with SSE3: yes).

    The flag lives in each thread's float control register: threads created after the call
    inherit it (torch's OpenMP workers, when the call comes before the first parallel
    operation), threads already running do not. Call it first in a process that trains: the
    training runtime (:func:`harness.training.run.train`), the trial process and every
    benchmark do. torch has no getter for it; ``torch.set_flush_denormal(False)`` undoes it.
    """
    import torch

    return torch.set_flush_denormal(True)
