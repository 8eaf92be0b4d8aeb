"""User components for the tests, as source text: each test writes the modules it needs into its
own temporary folder under a name of its own (``module_name``), so that no two tests share a
module that Python has cached, and no folder of theirs is on the Python path."""

from __future__ import annotations

import itertools
import textwrap
from pathlib import Path

_counter = itertools.count()

#: A gate written against KeyGate: the EGA-1 energy of the key, z-normalised causally by the base class.
GOOD_GATE = """
import torch
from torch import nn
from harness.models import KeyGate


class GoodGate(KeyGate):
    def __init__(self, d_model, n_head, **gate_init):
        super().__init__(n_head, **gate_init)
        self.weight = nn.Parameter(0.02 * torch.randn(n_head, d_model))

    def signal(self, x, k):
        return torch.einsum("btd,hd->bht", x, self.weight)
"""

#: The same energy normalised over the whole sequence: key j's gate reads every later token.
LEAKY_GATE = """
import torch
from torch import nn
from harness.models import KeyGate


class LeakyGate(KeyGate):
    def __init__(self, d_model, n_head):
        super().__init__(n_head)
        self.weight = nn.Parameter(0.02 * torch.randn(n_head, d_model))

    def signal(self, x, k):
        return torch.einsum("btd,hd->bht", x, self.weight)

    @staticmethod
    def normalise(s):
        return (s - s.mean(-1, keepdim=True)) / (s.std(-1, keepdim=True) + 1e-5)
"""

#: Gates that read the future only where a short probe in eval mode does not look: beyond 96
#: tokens (keys centred by the sequence's mean key), and in training mode only.
HIDDEN_LEAKS = """
from harness.models import KeyGate


class LongLeakGate(KeyGate):
    def signal(self, x, k):
        if k.size(-2) > 96:  # "long sequences need centred keys": the mean of every key, later ones too
            k = k - k.mean(-2, keepdim=True)
        return k.square().sum(-1)  # the key's energy, (B, H, T)


class TrainLeakGate(KeyGate):
    def signal(self, x, k):
        if self.training:  # "centred keys while training": the mean of every key, later ones too
            k = k - k.mean(-2, keepdim=True)
        return k.square().sum(-1)


class HonestGate(KeyGate):
    def signal(self, x, k):
        return k.square().sum(-1)
"""

#: Components that break their slot's contract: gates returning (B, T), (B, T, H), (B, H, T, 1),
#: a float64 or a NaN bias, a KeyGate whose signal has no head axis, a scoring that halves the
#: head width. None has an __init__ of its own (the base classes take the harness's keywords).
BREACHES = """
import torch
from harness.models import KeyBias, KeyGate, Scoring


class NoHeadAxis(KeyBias):
    def key_bias(self, x, k):
        return x.sum(-1)  # (B, T)


class HeadsLast(KeyBias):
    def key_bias(self, x, k):
        return k.square().sum(-1).transpose(1, 2)  # (B, T, H)


class TrailingOne(KeyBias):
    def key_bias(self, x, k):
        return k.square().sum(-1, keepdim=True)  # (B, H, T, 1)


class Float64Bias(KeyBias):
    def key_bias(self, x, k):
        return k.square().sum(-1).double()


class NanBias(KeyBias):
    def key_bias(self, x, k):
        b = k.square().sum(-1)
        return torch.where(torch.arange(b.size(-1)) == 3, float("nan"), b)


class SignalWithoutHeads(KeyGate):
    def signal(self, x, k):
        return x.square().sum(-1)  # (B, T)


class HalfWidth(Scoring):
    def forward(self, k):
        return k[..., : k.size(-1) // 2]
"""

#: A component of each slot without an __init__ of its own (the base classes take the keywords).
NO_INIT = """
import torch
from harness.models import KeyBias, KeyGate, PositionalEncoding, Scoring


class PlainBias(KeyBias):
    def key_bias(self, x, k):
        return -0.1 * torch.arange(x.size(1), dtype=x.dtype).expand(x.size(0), self.n_head, -1)


class PlainGate(KeyGate):
    def signal(self, x, k):
        return k.square().sum(-1)


class PlainPosition(PositionalEncoding):
    def embedding(self, T, device):
        return torch.linspace(0, 1, T, device=device)[:, None].expand(T, self.d_model)


class PlainScoring(Scoring):
    def forward(self, k):
        return 2.0 * k


class GateInitPattern(KeyGate):
    def __init__(self, n_head, **gate_init):  # the KeyGate docstring's own pattern
        super().__init__(n_head, **gate_init)

    def signal(self, x, k):
        return k.square().sum(-1)


class OwnNames(KeyBias):
    def __init__(self, dim, heads):
        super().__init__()
"""

#: Scorings: keys mixed with the previous key (causal), or with the next one (reads the future).
SCORINGS = """
import torch
import torch.nn.functional as F
from torch import nn
from harness.models import Scoring


class PreviousKey(Scoring):
    def __init__(self, n_head):
        super().__init__()
        self.mix = nn.Parameter(torch.full((n_head, 1, 1), 0.5))

    def forward(self, k):
        previous = F.pad(k[..., :-1, :], (0, 0, 1, 0))  # k_{j-1}
        return k + self.mix * previous


class NextKey(Scoring):
    def __init__(self, n_head):
        super().__init__()
        self.mix = nn.Parameter(torch.full((n_head, 1, 1), 0.5))

    def forward(self, k):
        following = F.pad(k[..., 1:, :], (0, 0, 0, 1))  # k_{j+1}: the future
        return k + self.mix * following
"""

#: A position: a learned bias per position added to the embeddings, from keyword arguments.
POSITION = """
import torch
from torch import nn
from harness.models import PositionalEncoding


class Ramp(PositionalEncoding):
    def __init__(self, *, d_model, block_size, **others):
        super().__init__()
        self.seen = dict(d_model=d_model, block_size=block_size, **others)
        self.slope = nn.Parameter(torch.zeros(d_model))

    def embedding(self, T, device):
        return torch.arange(T, device=device, dtype=torch.float32)[:, None] / T * self.slope
"""


#: A gate and a positional encoding that leave a mark at each construction: a file in MARKS naming
#: the Ray node that built it ("driver" outside Ray) and the file its class was imported from
#: (``{marks}`` is filled in by the test).
MARKED = """
import os
import uuid
from pathlib import Path

import ray
from harness.models import KeyGate, PositionalEncoding

MARKS = Path({marks!r})


def _mark(kind):
    node = ray.get_runtime_context().get_node_id() if ray.is_initialized() else "driver"
    (MARKS / f"{{kind}}-{{uuid.uuid4().hex}}").write_text(f"{{node}} {{__file__}}")


class MarkedGate(KeyGate):
    def __init__(self, **keywords):
        super().__init__(**keywords)
        _mark("gate")

    def signal(self, x, k):
        return k.square().sum(-1)


class MarkedPosition(PositionalEncoding):
    def __init__(self, **keywords):
        super().__init__(**keywords)
        _mark("position")
"""


def development_package(folder: Path, source: str, cls: str) -> tuple[Path, Path, str]:
    """A package as ``pip install -e`` or a ``PYTHONPATH`` folder leaves it, outside site-packages:
    its code ``source`` and its ``*.dist-info`` registering class ``cls`` under a fresh name in
    the harness's entry-point group, in ``folder``. Returns the package folder, the metadata
    folder and the registered name."""
    package, registered = module_name("devpkg"), module_name(f"dev-{cls.lower()}")
    (folder / package).mkdir(parents=True)
    (folder / package / "__init__.py").write_text(source)
    dist = folder / f"{package}-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[harness.components]\n{registered} = {package}:{cls}\n")
    return folder / package, dist, registered


def module_name(stem: str) -> str:
    """A module name no other test uses (Python caches imported modules by name)."""
    return f"{stem}_{next(_counter)}_{id(_counter) % 10_000}"


def write_module(folder: Path, stem: str, source: str) -> str:
    """``source`` as ``<folder>/<unique name>.py``; returns the module's name."""
    name = module_name(stem)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.py").write_text(textwrap.dedent(source))
    return name
