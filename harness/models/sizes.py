"""Model size presets (data, no torch import).

``SIZES`` maps a preset name to a :class:`ModelSize`. Approximate parameter counts at a
character vocabulary of 65 (``harness zoo --size S`` prints the exact ones per variant):

| name   | layers | heads | width | head dim | parameters |
| ------ | ------ | ----- | ----- | -------- | ---------- |
| nano   | 2      | 2     | 64    | 32       | 0.1 M      |
| paper  | 6      | 8     | 256   | 32       | 4.8 M (the papers' L=6, H=8, d=256) |
| small  | 8      | 8     | 512   | 64       | 25 M       |
| medium | 12     | 12    | 768   | 64       | 85 M       |
| large  | 24     | 16    | 1024  | 64       | 302 M      |

``max_context_length`` is the longest ``block_size`` a preset accepts: 8192 for the
sizes a CPU or one GPU trains at long context, 4096 for the two largest (their
activations at 8192 do not fit one accelerator at useful batch sizes).
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.errors import InputError


@dataclass(frozen=True)
class ModelSize:
    """Shape of a transformer: depth, heads, width and the longest allowed context."""

    name: str
    n_layer: int
    n_head: int
    d_model: int
    max_context_length: int

    def __post_init__(self) -> None:
        for field_name in ("n_layer", "n_head", "d_model", "max_context_length"):
            value = getattr(self, field_name)
            if not isinstance(value, int) or value < 1:
                raise InputError(f"size {self.name!r}: {field_name} must be a positive integer, got {value!r}")
        if self.d_model % self.n_head:
            raise InputError(
                f"size {self.name!r}: width d_model={self.d_model} is not divisible by n_head={self.n_head}; "
                "choose a width that is a multiple of the number of heads"
            )

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head


SIZES: dict[str, ModelSize] = {
    size.name: size
    for size in (
        ModelSize("nano", n_layer=2, n_head=2, d_model=64, max_context_length=8192),
        ModelSize("paper", n_layer=6, n_head=8, d_model=256, max_context_length=8192),
        ModelSize("small", n_layer=8, n_head=8, d_model=512, max_context_length=8192),
        ModelSize("medium", n_layer=12, n_head=12, d_model=768, max_context_length=4096),
        ModelSize("large", n_layer=24, n_head=16, d_model=1024, max_context_length=4096),
    )
}


def get_size(size: str | ModelSize) -> ModelSize:
    """Look up a preset by name (a :class:`ModelSize` passes through).

    Raises :class:`InputError` naming the known presets for an unknown name.
    """
    if isinstance(size, ModelSize):
        return size
    try:
        return SIZES[size]
    except (KeyError, TypeError):
        raise InputError(f"unknown model size {size!r}; known sizes: {', '.join(SIZES)}") from None
