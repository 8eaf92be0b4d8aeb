"""Before any trial starts: the variants of a study that name a user's component are imported,
constructed and checked (:func:`harness.models.checks.check_variant`).

For each such variant, at the study's smallest size and a probe of up to
:data:`PROBE_LENGTH` tokens: the causality probe (no output before position t moves when the
token at t changes), finite outputs and gradients, the parameter count against the baseline;
whether ``torch.compile`` traces it as one graph only when the study compiles (GPU trials, or
``train.compile: true``: tracing takes seconds on CPU and a break costs speed, not
correctness; ``harness zoo check`` always reports it). At every other size of the study the
variant is built and run on a few tokens (a component's shape rules). A component that cannot
be imported or constructed, or that reads the future or is not finite, is an
:class:`~harness.errors.InputError` (``harness run`` exits 2), and nothing has started.
"""

from __future__ import annotations

from collections.abc import Callable

from harness.models.variants import Variant, get_variant, make_variant
from harness.studies.spec.study_spec import StudySpec

#: Longest sequence the pre-flight probe changes token by token.
PROBE_LENGTH = 64


def user_variants(spec: StudySpec) -> list[Variant]:
    """The study's variants that name a user component (in the spec's order)."""
    out = []
    for entry in spec.variants:
        v = (
            get_variant(entry)
            if isinstance(entry, str)
            else make_variant(entry.name, position=entry.position, gate=entry.gate, scoring=entry.scoring)
        )
        if v.user_components:
            out.append(v)
    return out


def _sizes(spec: StudySpec) -> list:
    """The study's sizes as :class:`~harness.models.ModelSize`, smallest (fewest d^2 L) first."""
    from harness.models.sizes import get_size

    sizes = [get_size(s) if isinstance(s, str) else s.model_size() for s in spec.sizes]
    return sorted(sizes, key=lambda s: s.d_model * s.d_model * s.n_layer)


def _runs_at(variant: Variant, size, component_dir: str | None, length: int) -> None:
    """Build ``variant`` at ``size`` and run it on a few tokens (InputError with the reason)."""
    import torch

    from harness.errors import InputError
    from harness.models.transformer import build_model

    try:
        model = build_model(variant, size=size, vocab_size=13, block_size=length, component_dir=component_dir)
        with torch.no_grad():
            model(torch.zeros(1, min(length, 8), dtype=torch.long))
    except InputError:
        raise
    except (ValueError, RuntimeError) as exc:
        raise InputError(f"variant {variant.name!r} at size {size.tag}: {type(exc).__name__}: {exc}") from None


def check_user_components(spec: StudySpec, component_dir: str | None, say: Callable[[str], None]) -> list:
    """The checks of the module docstring; tells ``say`` one line per variant. Returns the
    :class:`~harness.models.checks.VariantCheck` of each (empty when no variant names a user component)."""
    variants = user_variants(spec)
    if not variants:
        return []
    from harness.errors import InputError
    from harness.models.checks import check_variant

    sizes = _sizes(spec)
    length = min(PROBE_LENGTH, *spec.context_lengths)
    compiles = spec.resources.gpus > 0 or spec.train_overrides().get("compile") is True
    where = f" (the Python path, then {component_dir})" if component_dir else ""
    say(f"Checking {len(variants)} variant(s) with a user component before any trial{where}:")
    results = []
    for variant in variants:
        result = check_variant(variant, size=sizes[0], length=length, component_dir=component_dir, graphs=compiles)
        for slot, found in result.components.items():
            say(f"  {variant.name}: {slot} {found}")
        if not result.ok:
            raise InputError(f"{result.refusal()}; nothing was started")
        for other in sizes[1:]:
            _runs_at(variant, other, component_dir, length)
        extra = result.parameters - result.baseline_parameters
        graph = "" if result.graphs is None else f"; torch.compile: {result.graphs.graphs} graph(s)"
        say(
            f"  {variant.name}: causal over {length} tokens at {sizes[0].tag}, finite outputs and gradients, "
            f"{extra:+,} parameters against baseline ({100.0 * extra / result.baseline_parameters:+.3f} %){graph}"
        )
        results.append(result)
    return results


__all__ = ["PROBE_LENGTH", "check_user_components", "user_variants"]
