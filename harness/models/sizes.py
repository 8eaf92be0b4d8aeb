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

Besides the presets, any shape may be named for width and depth sweeps
(:func:`custom_size`, ``harness train --n-layer L --n-head H --d-model D``, or
``{name: w128, n_layer: 4, n_head: 4, d_model: 128}`` in a study spec's ``sizes``): the
heads must divide the width, and the components a variant uses may need more (an even
width for the sinusoidal and Morlet encodings, an even head dimension for RoPE and the
phase gate), which building the model checks. A custom shape accepts contexts up to
:data:`CUSTOM_MAX_CONTEXT_LENGTH`.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.errors import InputError
from harness.models.registry import Registry


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

    @property
    def shape(self) -> str:
        """``L4H4d128``: layers, heads and width in one token."""
        return shape_name(self.n_layer, self.n_head, self.d_model)

    @property
    def is_preset(self) -> bool:
        """True for a preset of :data:`SIZES` (same name, same shape)."""
        return SIZES.get(self.name) == self

    @property
    def tag(self) -> str:
        """The size as it appears in run and trial names: the preset's name (``paper``), a
        custom shape's name with its shape (``w128-L4H4d128``), or the shape alone when the
        custom shape is named after it (``L4H4d128``)."""
        if self.is_preset or self.name == self.shape:
            return self.name
        return f"{self.name}-{self.shape}"

    def config_fields(self) -> dict[str, str | int]:
        """The training-config fields naming this shape: ``size`` (the name), ``n_layer``,
        ``n_head`` and ``d_model``."""
        return {"size": self.name, "n_layer": self.n_layer, "n_head": self.n_head, "d_model": self.d_model}


#: Longest context of a custom shape (that of the presets a CPU or one GPU trains at long context).
CUSTOM_MAX_CONTEXT_LENGTH = 8192

#: The registry of size presets: ``nano`` for tests, ``paper`` (L6 H8 d256) and the larger ones of
#: the scaling studies (``harness zoo`` prints their parameter counts).
SIZE_REGISTRY: Registry[ModelSize] = Registry(
    "model size",
    plural="sizes",
    hint=" (or a custom shape: n_layer, n_head and d_model, e.g. --n-layer 4 --n-head 4 --d-model 128)",
)
for _preset in (
    ModelSize("nano", n_layer=2, n_head=2, d_model=64, max_context_length=8192),
    ModelSize("paper", n_layer=6, n_head=8, d_model=256, max_context_length=8192),
    ModelSize("small", n_layer=8, n_head=8, d_model=512, max_context_length=8192),
    ModelSize("medium", n_layer=12, n_head=12, d_model=768, max_context_length=4096),
    ModelSize("large", n_layer=24, n_head=16, d_model=1024, max_context_length=4096),
):
    SIZE_REGISTRY.add(_preset.name, _preset)
#: The size presets by name (a read-only, live view of :data:`SIZE_REGISTRY`).
SIZES = SIZE_REGISTRY.entries


def get_size(size: str | ModelSize) -> ModelSize:
    """Look up a preset by name (a :class:`ModelSize` passes through).

    Raises :class:`InputError` naming the known presets for an unknown name.
    """
    if isinstance(size, ModelSize):
        return size
    return SIZE_REGISTRY.get(size)


def shape_name(n_layer: int, n_head: int, d_model: int) -> str:
    """``shape_name(4, 4, 128) == "L4H4d128"``: the default name of a custom shape."""
    return f"L{n_layer}H{n_head}d{d_model}"


def custom_size(n_layer: int, n_head: int, d_model: int, *, name: str | None = None) -> ModelSize:
    """A :class:`ModelSize` of any shape, named ``name`` (default :func:`shape_name`).

    Raises :class:`InputError` naming the field for a non-positive field, a width the heads
    do not divide, or a preset's name given to another shape (``nano`` means one shape only).

    Examples
    --------
    >>> custom_size(4, 4, 128).tag
    'L4H4d128'
    >>> custom_size(4, 4, 128, name="w128").tag
    'w128-L4H4d128'
    """
    name = shape_name(n_layer, n_head, d_model) if name is None else name
    size = ModelSize(
        name, n_layer=n_layer, n_head=n_head, d_model=d_model, max_context_length=CUSTOM_MAX_CONTEXT_LENGTH
    )
    preset = SIZES.get(name)
    if preset is not None:
        if preset.shape != size.shape:
            raise InputError(
                f"size name {name!r} is the preset {preset.shape}, not {size.shape}; give the custom shape another name"
            )
        return preset
    return size


def resolve_size(
    size: str | ModelSize, *, n_layer: int | None = None, n_head: int | None = None, d_model: int | None = None
) -> ModelSize:
    """The preset ``size`` with any of ``n_layer`` / ``n_head`` / ``d_model`` replaced.

    Without overrides this is :func:`get_size`; with any, a custom shape named by
    :func:`shape_name` (the fields not given come from the preset), or the preset itself
    when the overrides repeat its shape. Raises :class:`InputError` (unknown preset, bad shape).
    """
    base = get_size(size)
    if n_layer is None and n_head is None and d_model is None:
        return base
    shape = (
        base.n_layer if n_layer is None else n_layer,
        base.n_head if n_head is None else n_head,
        base.d_model if d_model is None else d_model,
    )
    if shape == (base.n_layer, base.n_head, base.d_model):
        return base
    return custom_size(*shape)
