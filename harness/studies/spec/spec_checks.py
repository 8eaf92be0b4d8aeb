"""A study spec's cross-field rules: what no single field can check on its own (a variant listed
twice, two ways of setting the batch, a factorial or a primary contrast naming variants the study
does not run, a stopping rule without sequential seeds). :class:`~harness.studies.spec.study_spec.StudySpec`
runs :func:`check_consistent` after its fields validate; each rule raises ``ValueError`` with the
fix, which pydantic reports against the spec (and the CLI as exit 2)."""

from __future__ import annotations

import difflib
from typing import Any

from harness.models.variants import VARIANTS
from harness.studies.spec.blocks import PrimaryContrast

#: A :class:`~harness.studies.spec.study_spec.StudySpec` whose fields have validated (typed
#: loosely: that module imports this one).
StudySpec = Any


def check_consistent(spec: StudySpec) -> None:
    """Every cross-field rule, in the order a reader of the spec meets its fields."""
    names = spec.variant_names
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"variants: {', '.join(dupes)} listed more than once")
    check_tau_sweep(spec, names)
    check_tokens_per_batch(spec)
    check_factorial(spec, names)
    check_primary(spec, names)
    check_sequential(spec)


def check_tau_sweep(spec: StudySpec, names: list[str]) -> None:
    """``tau_inits`` and ``train.tau_init`` exclude each other; ``tau_init_variants`` needs
    ``tau_inits`` and names variants the study runs."""
    if spec.tau_inits is not None and "tau_init" in spec.train.model_fields_set:
        raise ValueError(
            "train.tau_init and tau_inits both set: use tau_inits to sweep tau's initial value, or "
            "train.tau_init to fix it"
        )
    if spec.tau_init_variants is None:
        return
    if spec.tau_inits is None:
        raise ValueError("tau_init_variants names the variants tau_inits sweeps; set tau_inits too")
    unknown = [v for v in spec.tau_init_variants if v not in names]
    if unknown:
        raise ValueError(f"tau_init_variants: {', '.join(unknown)} not among the study's variants ({', '.join(names)})")


def check_tokens_per_batch(spec: StudySpec) -> None:
    """``tokens_per_batch`` replaces ``train.batch_size`` and divides every context length."""
    if spec.tokens_per_batch is None:
        return
    if "batch_size" in spec.train.model_fields_set:
        raise ValueError(
            "train.batch_size and tokens_per_batch both set: tokens_per_batch sets each trial's batch size to "
            "tokens_per_batch / context_length (equal tokens per step at every T); drop one of them"
        )
    uneven = [t for t in spec.context_lengths if spec.tokens_per_batch % t]
    if uneven:
        raise ValueError(
            f"tokens_per_batch ({spec.tokens_per_batch}) is not a multiple of context length(s) "
            f"{', '.join(map(str, uneven))}: every trial must see the same number of tokens per step"
        )


def did_you_mean(name: str, known: Any) -> str:
    """`` (did you mean 'x'?)`` with the closest of ``known`` to ``name``, or nothing."""
    close = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_run_variant(field: str, variant: str, names: list[str]) -> None:
    """``variant``, named by the analysis at ``field``, is one the study runs. A name that is no
    variant at all (a typo: neither the study's nor the zoo's) is reported as unknown, with the
    study's variant it is closest to; a zoo variant the study leaves out, as not run."""
    if variant in names:
        return
    if variant not in VARIANTS:
        raise ValueError(
            f"{field}: unknown variant {variant!r}{did_you_mean(variant, names)}; the study runs {', '.join(names)}"
        )
    raise ValueError(f"{field} is {variant!r}, which the study does not run (its variants: {', '.join(names)})")


def check_factorial(spec: StudySpec, names: list[str]) -> None:
    """Each role of ``analysis.factorial`` names a variant the study runs."""
    if spec.analysis.factorial is None:
        return
    for role, variant in spec.analysis.factorial.model_dump().items():
        check_run_variant(f"analysis.factorial.{role}", variant, names)


def check_primary(spec: StudySpec, names: list[str]) -> None:
    """The primary effect can be computed: an interaction needs a 2x2, a contrast two different
    variants the study runs."""
    primary = spec.analysis.primary
    if primary == "interaction" and spec.factorial() is None:
        raise ValueError(
            "analysis.primary is 'interaction', but the study has no 2x2 factorial: name one in "
            "analysis.factorial, or run baseline, ega, mope and ega-mope, or give {treatment: X, control: Y}"
        )
    if isinstance(primary, PrimaryContrast):
        for role in ("treatment", "control"):
            check_run_variant(f"analysis.primary.{role}", getattr(primary, role), names)
        if primary.treatment == primary.control:
            raise ValueError(f"analysis.primary: treatment and control are the same variant {primary.treatment!r}")


def check_sequential(spec: StudySpec) -> None:
    """Sequential seeds and a stopping rule come together, and the rule can be evaluated."""
    schedule = spec.seed_schedule
    if spec.stop_when is None:
        if schedule is not None:
            raise ValueError(
                "seeds: sequential seeds {min, max, batch} need a stopping rule: add stop_when: {precision: 0.01} "
                "(stop once the primary effect's anytime-valid half-width is at most 0.01) or stop_when: settled"
            )
        return
    if schedule is None:
        raise ValueError(
            "stop_when needs sequential seeds: write seeds as {min: 3, max: 20, batch: 2} (a plain count or list "
            "runs every seed)"
        )
    if spec.primary() is None:
        raise ValueError(
            "stop_when: the rule is evaluated on the study's primary effect, and this study has none: set "
            "analysis.primary ({treatment: X, control: Y}) or run a 2x2 factorial (analysis.factorial)"
        )
    if spec.stop_when == "settled" and spec.analysis.smallest_effect is None:
        raise ValueError(
            "stop_when: settled stops when the interval excludes 0 or lies within +-analysis.smallest_effect; "
            "set analysis.smallest_effect (the smallest effect of interest, in nats), or use "
            "stop_when: {precision: ...}"
        )
    if spec.tau_inits is not None:
        raise ValueError(
            "stop_when with tau_inits: the primary effect pairs one run per variant and seed in a cell, and "
            "tau_inits runs several; run the tau_inits sweep with a fixed number of seeds"
        )


__all__ = [
    "check_consistent",
    "check_factorial",
    "check_primary",
    "check_run_variant",
    "check_sequential",
    "check_tau_sweep",
    "check_tokens_per_batch",
    "did_you_mean",
]
