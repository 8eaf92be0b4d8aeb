"""The zoo overview behind ``harness zoo``: every registry variant with its slots,
parameter count and overhead against ``baseline`` at one size, and each reading B of the
papers' vague points (:data:`~harness.models.variants.READINGS`) against its reading A."""

from __future__ import annotations

from dataclasses import dataclass

from harness.models.sizes import ModelSize, get_size
from harness.models.transformer import build_model
from harness.models.variants import READINGS, VARIANTS, Variant


@dataclass(frozen=True)
class ZooRow:
    """One line of the zoo table."""

    variant: Variant
    parameters: int
    extra_parameters: int  # against baseline at the same size, vocabulary and block size
    overhead_percent: float


@dataclass(frozen=True)
class ReadingRow:
    """Reading B of one vague point against its reading A: parameters and overheads."""

    point: str
    variant_a: str
    variant_b: str
    parameters_b: int
    overhead_percent: float  # reading B against baseline
    extra_over_a: int  # reading B minus reading A
    diagnostic: bool


def zoo_rows(size: str | ModelSize = "paper", *, vocab_size: int = 65, block_size: int = 256) -> list[ZooRow]:
    """Parameter counts of every variant in :data:`VARIANTS` (built on the meta device:
    no memory, no initialisation cost, so the largest presets are instant)."""
    import torch

    s = get_size(size)
    counts = {}
    with torch.device("meta"):
        for name, variant in VARIANTS.items():
            counts[name] = build_model(variant, size=s, vocab_size=vocab_size, block_size=block_size).num_parameters()
    base = counts["baseline"]
    return [
        ZooRow(variant, counts[name], counts[name] - base, 100.0 * (counts[name] - base) / base)
        for name, variant in VARIANTS.items()
    ]


def reading_rows(rows: list[ZooRow]) -> list[ReadingRow]:
    """Each (reading A, reading B) variant pair of :data:`READINGS`, from :func:`zoo_rows`' counts."""
    by_name = {row.variant.name: row for row in rows}
    return [
        ReadingRow(
            reading.point,
            a,
            b,
            by_name[b].parameters,
            by_name[b].overhead_percent,
            by_name[b].parameters - by_name[a].parameters,
            VARIANTS[b].diagnostic,
        )
        for reading in READINGS
        for a, b in zip(reading.variants_a, reading.variants_b, strict=True)
    ]
