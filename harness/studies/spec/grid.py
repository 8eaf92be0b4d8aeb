"""Grid expansion: a study spec -> one :class:`Trial` (one TrainConfig) per combination.

The grid is the full product datasets x sizes x context lengths x variants x seeds, and
(tau inits) for the variants a tau sweep crosses (every gated variant by default: an ungated
variant has no tau and runs once per cell). Trials are ordered seed-major: all cells and
variants of seed 0, then seed 1, ... so that, as trials finish in order, complete paired
blocks (every variant at one seed) become available early and a partial study can already
be analysed.

Trial ids are stable, readable and unique within a study; they name the Tune trial
directories and the MLflow child runs, and a resumed study finds its trials by them::

    ega-mope_s3_nano_T128_tinyshakespeare          # variant_s{seed}_{size}_T{T}_{dataset}
    ega_s0_paper_T256_ptb-char_tau0.1              # with a tau_inits factor
    baseline_s1_w128-L4H4d128_T64_tinyshakespeare  # a custom shape: its name and its shape

A custom size sets the trial's ``size`` to its name and ``n_layer``, ``n_head``,
``d_model`` to its shape, so the shape is in the trial's config, its MLflow params and its id.

A variant naming a user's component (``gate: "forget_gate:ForgetGate"``) keeps that import path
in its trial's config, tags and params; its trials also get ``component_dir``, the spec's
folder, where the trial looks for the module after the Python path.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harness.models.component_names import is_import_path, registered_components
from harness.models.variants import GATES, POSITIONS, SCORINGS, VARIANTS
from harness.studies.spec.study_spec import StudySpec
from harness.training.config import TrainConfig


@dataclass(frozen=True)
class Trial:
    """One training run of a study: its id, its config and its variant's components."""

    trial_id: str
    config: TrainConfig
    position: str  # a zoo name or a user component's import path (as the spec names it)
    gate: str
    scoring: str

    def tags(self) -> dict[str, str]:
        """The factors of the trial as MLflow tags (docs/contracts.md: one tag per factor)."""
        c = self.config
        tags = {
            "harness.trial_id": self.trial_id,
            "variant": c.variant,
            "position": self.position,
            "gate": self.gate,
            "scoring": self.scoring,
            "dataset": c.dataset,
            "size": c.size,
            "context_length": str(c.context_length),
            "seed": str(c.seed),
        }
        if c.tau_init is not None:
            tags["tau_init"] = f"{c.tau_init:g}"
        return tags


def trial_id(
    *, variant: str, seed: int, size: str, context_length: int, dataset: str, tau_init: float | None = None
) -> str:
    """``{variant}_s{seed}_{size}_T{context_length}_{dataset}[_tau{tau_init}]``."""
    tid = f"{variant}_s{seed}_{size}_T{context_length}_{dataset}"
    return tid if tau_init is None else f"{tid}_tau{tau_init:g}"


def _size_fields(size: Any) -> dict[str, Any]:
    """TrainConfig fields of a size entry: a preset's name, or a custom shape's name and shape."""
    if isinstance(size, str):
        return {"size": size}
    return size.model_size().config_fields()


def resolve_components(spec: StudySpec) -> dict[str, tuple[str, str, str]]:
    """variant name -> (position, gate, scoring), from the registry or the inline entry."""

    out: dict[str, tuple[str, str, str]] = {}
    for entry in spec.variants:
        if isinstance(entry, str):
            v = VARIANTS[entry]
            out[entry] = (v.position, v.gate, v.scoring)
        else:
            out[entry.name] = (entry.position, entry.gate, entry.scoring)
    return out


def names_user_component(components: tuple[str, str, str], registered: Mapping[str, str] | None = None) -> bool:
    """Whether (position, gate, scoring) names a component the zoo does not have: an import path
    ``package.module:Class``, or a name only an installed package registers (``registered``:
    :func:`~harness.models.component_names.registered_components`, read here when not given).
    The zoo's own names win, and are read (loading torch) only for a registered name, so that a
    spec's bad destination or address is refused before torch loads."""
    registered = registered_components() if registered is None else registered
    return any(
        is_import_path(name) or (name in registered and name not in zoo)
        for name, zoo in zip(components, (POSITIONS, GATES, SCORINGS), strict=True)
    )


def expand_grid(
    spec: StudySpec,
    *,
    components: dict[str, tuple[str, str, str]] | None = None,
    component_dir: str | None = None,
) -> list[Trial]:
    """Every trial of the study, seed-major (see module docstring).

    Parameters
    ----------
    spec : StudySpec
        A validated spec (:func:`~harness.studies.spec.study_spec.load_spec`).
    components : mapping variant -> (position, gate, scoring), optional
        The slots of each variant; by default looked up in ``harness.models.VARIANTS``
        (inline variants carry their own).
    component_dir : str, optional
        The spec's folder: it goes to the trials of the variants naming a user component
        (where they look for its module after the Python path).

    Returns
    -------
    list of Trial
        One per combination of seed, dataset, size, context length and variant (and initial
        tau, where a tau sweep crosses the variant), seed-major: each seed's block is
        complete before the next starts.
    """
    components = components if components is not None else resolve_components(spec)
    # the variants whose trials look for a user's module in the spec's folder
    from_user: set[str] = set()
    if component_dir is not None:
        registered = registered_components()
        from_user = {v for v, slots in components.items() if names_user_component(slots, registered)}
    inline = {v.name: v for v in spec.variants if not isinstance(v, str)}
    shared: dict[str, Any] = spec.train_overrides()
    shared["num_threads"] = spec.resources.cpus
    shared["accelerator"] = "gpu" if spec.resources.gpus > 0 else "cpu"
    trials: list[Trial] = []
    for seed in spec.grid_seeds():
        for dataset in spec.datasets:
            for size in spec.sizes:
                size_fields = _size_fields(size)
                size_tag = size if isinstance(size, str) else size.model_size().tag
                for context_length in spec.context_lengths:
                    for variant in spec.variant_names:
                        for tau_init in spec.tau_levels(variant):
                            fields: dict[str, Any] = dict(
                                shared,
                                variant=variant,
                                dataset=dataset,
                                context_length=context_length,
                                seed=seed,
                                **size_fields,
                            )
                            if tau_init is not None:
                                fields["tau_init"] = tau_init
                            if spec.tokens_per_batch is not None:  # equal tokens per step at every T
                                fields["batch_size"] = spec.tokens_per_batch // context_length
                            if variant in inline:
                                v = inline[variant]
                                fields.update(position=v.position, gate=v.gate, scoring=v.scoring)
                            if variant in from_user:
                                fields["component_dir"] = component_dir
                            position, gate, scoring = components[variant]
                            trials.append(
                                Trial(
                                    trial_id=trial_id(
                                        variant=variant,
                                        seed=seed,
                                        size=size_tag,
                                        context_length=context_length,
                                        dataset=dataset,
                                        tau_init=tau_init,
                                    ),
                                    config=TrainConfig(**fields),
                                    position=position,
                                    gate=gate,
                                    scoring=scoring,
                                )
                            )
    return trials
