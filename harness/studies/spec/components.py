"""Before any trial starts: the variants of a study that name a user's component are imported,
constructed and checked (:func:`harness.models.checks.check_variant`).

For each such variant, at the study's smallest size and at **each of its context lengths** (a
leak that shows only beyond some length is invisible to a shorter probe): every slot's contract
on a probe batch (the shape, dtype and finiteness of what each component returns), the causality
probe in eval and in train mode (dropout active) on two random inputs, finite outputs and
gradients, the parameter count against the baseline; whether ``torch.compile`` traces it as one
graph only when the study compiles (GPU trials, or ``train.compile: true``: tracing takes seconds
on CPU and a break costs speed, not correctness; ``harness zoo check`` always reports it), at the
longest length. At every other size of the study the contracts are checked at the longest length
and the model is run on a few tokens (a component's shape rules). A component that cannot be
imported or constructed, breaks its contract, reads the future or is not finite, is an
:class:`~harness.errors.InputError` (``harness run`` exits 2), and nothing has started.

Cost: the probe runs about min(T, 128) T tokens of forward per mode and input at each length T
(:mod:`harness.models.checks`): a few seconds per variant and length for ``nano`` at T = 128.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from harness.models.variants import Variant, get_variant, make_variant
from harness.studies.spec.study_spec import StudySpec


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
    """Build ``variant`` at ``size`` for ``length`` tokens, check its contracts and run it on a
    few tokens (InputError with the reason)."""
    import torch

    from harness.errors import InputError
    from harness.models.components_contracts import check_contracts
    from harness.models.transformer import build_model

    where = f"variant {variant.name!r} ({variant.describe()}) at size {size.tag}"
    try:
        model = build_model(variant, size=size, vocab_size=13, block_size=length, component_dir=component_dir)
        breaches = check_contracts(model, length=length)
        if breaches:
            raise InputError(
                f"{where} fails its check before training at {length} tokens: contracts: "
                + "; ".join(b.describe() for b in breaches)
            )
        with torch.no_grad():
            model(torch.zeros(1, min(length, 8), dtype=torch.long))
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - a component's failure at this shape, in one message
        raise InputError(f"{where}: {type(exc).__name__}: {exc}") from None


def _tokens(lengths: Sequence[int]) -> str:
    told = [str(n) for n in lengths]
    return (", ".join(told[:-1]) + " and " + told[-1] if len(told) > 1 else told[0]) + " tokens"


def check_user_components(spec: StudySpec, component_dir: str | None, say: Callable[[str], None]) -> list:
    """The checks of the module docstring; tells ``say`` one line per variant. Returns the
    :class:`~harness.models.checks.VariantCheck` of each variant and length (empty when no
    variant names a user component)."""
    variants = user_variants(spec)
    if not variants:
        return []
    from harness.errors import InputError
    from harness.models.checks import PROBE_SEEDS, check_variant

    sizes, lengths = _sizes(spec), sorted(set(spec.context_lengths))
    compiles = spec.resources.gpus > 0 or spec.train_overrides().get("compile") is True
    where = f" (the Python path, then {component_dir})" if component_dir else ""
    say(f"Checking {len(variants)} variant(s) with a user component before any trial{where}:")
    results = []
    for variant in variants:
        for length in lengths:
            graphs = compiles and length == lengths[-1]
            result = check_variant(variant, size=sizes[0], length=length, component_dir=component_dir, graphs=graphs)
            if length == lengths[0]:
                for slot, found in result.components.items():
                    say(f"  {variant.name}: {slot} {found}")
            if not result.ok:
                raise InputError(f"{result.refusal()}; nothing was started")
            results.append(result)
        for other in sizes[1:]:
            _runs_at(variant, other, component_dir, lengths[-1])
        extra = result.parameters - result.baseline_parameters
        graph = "" if result.graphs is None else f"; torch.compile: {result.graphs.graphs} graph(s)"
        say(
            f"  {variant.name}: causal over {_tokens(lengths)} (eval and train mode, {len(PROBE_SEEDS)} random inputs) "
            f"at {sizes[0].tag}, contracts kept, finite outputs and gradients, {extra:+,} parameters against "
            f"baseline ({100.0 * extra / result.baseline_parameters:+.3f} %){graph}"
        )
    return results


__all__ = ["check_user_components", "user_variants"]
