"""Study specs: one YAML file that says which trials to run and how to record them.

A spec names the factors of a full-factorial grid -- datasets x sizes x context lengths
x variants x seeds (x initial tau values) -- plus the training settings shared by every
trial, the resources each trial gets, and the settings of the analysis at the end::

    name: smoke
    datasets: [tinyshakespeare]
    variants: [baseline, ega, mope, ega-mope, {name: rope-ega, position: rope, gate: ega}]
    # a user's component by its import path, found on the Python path, else beside this spec:
    #   {name: fox, position: none, gate: "forget_gate:ForgetGate"}   (slots not given: the baseline's)
    seeds: 2                      # a count (0..n-1), an explicit list, or {min: 3, max: 20, batch: 2}
    sizes: [nano, {name: w128, n_layer: 4, n_head: 4, d_model: 128}]   # presets or custom shapes
    context_lengths: [128]
    train: {max_steps: 300, batch_size: 16}
    resources: {cpus: 1, gpus: 0}
    analysis: {factorial: {base: baseline, a: ega, b: mope, ab: ega-mope}}

Sequential seeds (``seeds: {min, max, batch}``) come with a stopping rule on the primary
effect, ``stop_when: {precision: 0.01}`` or ``stop_when: settled`` (see
:mod:`harness.studies.tune.sequential`).

Validation happens in two layers, both before anything starts:

1. structure (:class:`StudySpec`, pydantic, ``extra="forbid"``): unknown keys, wrong
   types, zero seeds, duplicates, a factorial naming variants the study does not run;
2. registries (:func:`check_registries`): variant, dataset and size names against
   ``harness.models`` / ``harness.datasets``, each context length against each size's
   maximum, each custom shape against the components of each variant (an even width
   for sinusoidal and MOPE, an even head dimension for RoPE and the phase gate: one layer
   of the shape is built and run on a few tokens), and diagnostics (variants that leak
   future tokens, e.g. ``ega-leaky``) only with ``allow_diagnostics: true``. These modules
   are imported lazily so that parsing a spec stays cheap.

Every error becomes one :class:`~harness.errors.InputError` whose message names the file,
the field (``variants[4].gate``) and what was expected.
"""

from __future__ import annotations

import difflib
import hashlib
import math
from pathlib import Path
from typing import Any

import yaml
from pydantic import (
    BaseModel,
    Field,
    PositiveInt,
    ValidationError,
    field_validator,
    model_validator,
)

from harness.datasets.cards import REGISTRY
from harness.errors import InputError
from harness.models.sizes import CUSTOM_MAX_CONTEXT_LENGTH, SIZES, custom_size, shape_name
from harness.models.variants import DIAGNOSTIC_LABEL, VARIANTS, get_variant, is_diagnostic, make_variant
from harness.studies.spec.blocks import (
    DEFAULT_FACTORIAL,
    GRID_FIELDS,
    NAME_PATTERN,
    RUNNER_FIELDS,
    AnalysisSpec,
    CustomSize,
    Factorial,
    InlineVariant,
    PrecisionRule,
    PrimaryContrast,
    Resources,
    SeedSchedule,
    SeedsEntry,
    SizeEntry,
    StopRule,
    StrictModel,
    TauSettings,
    Tracking,
    TrainOverrides,
    VariantEntry,
    seeds_entry,
)
from harness.studies.spec.spec_checks import check_consistent, did_you_mean
from harness.training.config import TrainConfig


class StudySpec(StrictModel):
    """A study: the grid's factors, shared training settings, resources, tracking, analysis."""

    name: str = Field(pattern=NAME_PATTERN)
    description: str | None = None
    datasets: list[str] = Field(min_length=1)
    variants: list[VariantEntry] = Field(min_length=1)
    seeds: SeedsEntry  # a list (an int becomes 0..n-1), or a SeedSchedule (sequential)
    sizes: list[SizeEntry] = Field(min_length=1)
    context_lengths: list[PositiveInt] = Field(min_length=1)
    train: TrainOverrides = TrainOverrides()  # type: ignore[valid-type]
    tau_inits: list[float] | None = Field(default=None, min_length=1)
    # The variants tau_inits sweeps (default: every variant with a key gate); the others run once,
    # at their components' defaults, and serve every initial value as the same controls.
    tau_init_variants: list[str] | None = Field(default=None, min_length=1)
    tokens_per_batch: PositiveInt | None = None  # batch_size = tokens_per_batch / T per trial
    resources: Resources = Resources()
    max_concurrent_trials: PositiveInt | None = None
    retries: int = Field(default=2, ge=0)
    storage_path: str | None = None
    storage_shared: bool = False
    tracking: Tracking = Tracking()
    analysis: AnalysisSpec = AnalysisSpec()
    stop_when: StopRule | None = None  # with sequential seeds: when to stop adding batches
    #: Run diagnostics (variants that leak future tokens, not models): refused unless true.
    allow_diagnostics: bool = False

    @field_validator("seeds", mode="before")
    @classmethod
    def _seeds(cls, value: Any) -> list[int] | Any:
        return seeds_entry(value)

    @field_validator("datasets", "context_lengths", "tau_inits")
    @classmethod
    def _distinct(cls, value: list | None) -> list | None:
        if value is not None and len(set(value)) != len(value):
            dupes = sorted({str(v) for v in value if value.count(v) > 1})
            raise ValueError(f"duplicate entries {', '.join(dupes)}: each would run the same trials twice")
        return value

    @field_validator("sizes")
    @classmethod
    def _distinct_sizes(cls, value: list) -> list:
        names = [v if isinstance(v, str) else v.name for v in value]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate size name(s) {', '.join(dupes)}: each size needs its own name")
        shapes = [(v.n_layer, v.n_head, v.d_model) for v in value if not isinstance(v, str)]
        same = sorted({shape_name(*s) for s in shapes if shapes.count(s) > 1})
        if same:
            raise ValueError(
                f"duplicate custom shape(s) {', '.join(same)} under different names: each would run the same "
                "trials twice"
            )
        return value

    @model_validator(mode="after")
    def _consistent(self) -> StudySpec:
        """The cross-field rules (:mod:`harness.studies.spec.spec_checks`), then TrainConfig's own
        (e.g. min_lr <= lr) on the merged settings."""
        check_consistent(self)
        try:
            TrainConfig(**self.train_overrides())
        except ValidationError as exc:
            raise ValueError("train: " + "; ".join(_clean_msg(e["msg"]) for e in exc.errors())) from None
        return self

    def tau_swept_variants(self) -> list[str]:
        """The variants ``tau_inits`` crosses: ``tau_init_variants``, else every variant with a key
        gate (an ungated variant has no tau: it runs once per cell). Empty without ``tau_inits``."""
        if self.tau_inits is None:
            return []
        if self.tau_init_variants is not None:
            return list(self.tau_init_variants)
        gates = {v.name: v.gate for v in self.variants if not isinstance(v, str)}
        return [n for n in self.variant_names if gates.get(n, getattr(VARIANTS.get(n), "gate", "none")) != "none"]

    def tau_levels(self, variant: str) -> list[float | None]:
        """The initial tau values ``variant`` runs at: ``tau_inits`` when swept, else [None] (its default)."""
        return list(self.tau_inits or []) if variant in self.tau_swept_variants() else [None]

    # -- derived views ---------------------------------------------------------------
    @property
    def seed_schedule(self) -> SeedSchedule | None:
        """The sequential seeds ``{min, max, batch}``; None for a fixed list of seeds."""
        return self.seeds if isinstance(self.seeds, SeedSchedule) else None

    def grid_seeds(self) -> list[int]:
        """Every seed the study may run: the list, or 0..max-1 of sequential seeds."""
        schedule = self.seed_schedule
        return list(range(schedule.max)) if schedule is not None else list(self.seeds)  # type: ignore[arg-type]

    @property
    def variant_names(self) -> list[str]:
        return [v if isinstance(v, str) else v.name for v in self.variants]

    @property
    def size_names(self) -> list[str]:
        """The names of the sizes: presets and custom shapes alike."""
        return [s if isinstance(s, str) else s.name for s in self.sizes]

    def train_overrides(self) -> dict[str, Any]:
        """Only the training settings the spec wrote (the rest keep TrainConfig's defaults)."""
        return self.train.model_dump(exclude_unset=True)

    def periodic_windows(self) -> int | None:
        """How many windows of each split every periodic evaluation reads, what the training curves
        rest on: ``train.eval_windows`` as written, else TrainConfig's default (None: the whole split)."""
        return self.train_overrides().get("eval_windows", TrainConfig.model_fields["eval_windows"].default)

    def factorial(self) -> Factorial | None:
        """The 2x2 design to analyse: the spec's, else the papers' when all four are run."""
        if self.analysis.factorial is not None:
            return self.analysis.factorial
        if set(DEFAULT_FACTORIAL.model_dump().values()) <= set(self.variant_names):
            return DEFAULT_FACTORIAL
        return None

    def primary(self) -> str | dict[str, str] | None:
        """The primary hypothesis: the spec's, else the interaction when there is a factorial."""
        if isinstance(self.analysis.primary, PrimaryContrast):
            return self.analysis.primary.model_dump()
        if self.analysis.primary is not None:
            return self.analysis.primary
        return "interaction" if self.factorial() is not None else None

    def analysis_settings(self) -> dict[str, Any]:
        """The ``analysis`` block as :meth:`harness.analysis.AnalysisSettings.from_mapping`
        takes it, with the factorial and the primary hypothesis resolved."""
        block: dict[str, Any] = {"tau": self.analysis.tau.model_dump(), "confidence": self.analysis.confidence}
        factorial = self.factorial()
        if factorial is not None:
            block["factorial"] = factorial.model_dump()
        block["primary"] = self.primary()
        block["smallest_effect"] = self.analysis.smallest_effect
        return block

    def experiment_name(self) -> str:
        return self.tracking.experiment or self.name

    def canonical_yaml(self) -> str:
        """The spec as validated (defaults filled in), stable across formatting changes
        (a spec without ``stop_when``, or with ``allow_diagnostics`` false, hashes as it did
        before those fields existed, so that studies started then still resume)."""
        data = self.model_dump(mode="json")
        if data.get("stop_when") is None:
            data.pop("stop_when", None)
        if not data.get("allow_diagnostics"):
            data.pop("allow_diagnostics", None)
        return yaml.safe_dump(data, sort_keys=True)

    def sha256(self) -> str:
        """Identity of the study's content: same grid and settings <=> same hash."""
        return hashlib.sha256(self.canonical_yaml().encode()).hexdigest()


# -- loading --------------------------------------------------------------------------

_NESTED_MODELS: dict[str, type[BaseModel]] = {
    "resources": Resources,
    "tracking": Tracking,
    "analysis": AnalysisSpec,
    "primary": PrimaryContrast,
    "factorial": Factorial,
    "tau": TauSettings,
    "train": TrainOverrides,
    "variants": InlineVariant,
    "seeds": SeedSchedule,
    "stop_when": PrecisionRule,
    "sizes": CustomSize,
}


def _clean_msg(msg: str) -> str:
    return msg.removeprefix("Value error, ").removeprefix("Assertion failed, ")


def _loc(loc: tuple) -> str:
    """('variants', 4, 'inline', 'gate') -> 'variants[4].gate' (dropping union tags)."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("name", "inline") and out.endswith("]") and out.startswith("variants"):
            continue  # discriminator tag of a variant entry
        elif part in ("interaction", "contrast") and out == "analysis.primary":
            continue  # discriminator tag of the primary hypothesis
        elif part in ("list", "schedule") and out == "seeds":
            continue  # discriminator tag of the seeds
        elif part in ("settled", "precision_rule") and out == "stop_when":
            continue  # discriminator tag of the stopping rule
        elif part in ("preset", "custom") and out.endswith("]") and out.startswith("sizes"):
            continue  # discriminator tag of a size entry
        else:
            out += f".{part}" if out else str(part)
    return out


def _unknown_key_message(loc: tuple) -> str:
    key = str(loc[-1])
    parents = [p for p in loc[:-1] if isinstance(p, str) and p in _NESTED_MODELS]
    model = _NESTED_MODELS[parents[-1]] if parents else StudySpec
    known = list(model.model_fields)
    msg = f"unknown key {key!r}"
    if model is TrainOverrides and key in GRID_FIELDS:
        return f"{msg}: {key} is a factor of the grid, set it with the top-level '{GRID_FIELDS[key]}'"
    if model is TrainOverrides and key in RUNNER_FIELDS:
        return f"{msg}: the study sets {key} from {RUNNER_FIELDS[key]}"
    close = difflib.get_close_matches(key, known, n=1)
    if close:
        msg += f" (did you mean {close[0]!r}?)"
    return f"{msg}; expected one of: {', '.join(known)}"


def format_validation_error(exc: ValidationError, source: str) -> str:
    """One readable message: the file, then each field and what was expected."""
    lines = [f"invalid study spec {source}:"]
    for err in exc.errors():
        loc = tuple(err["loc"])
        where = _loc(loc)
        if err["type"] == "extra_forbidden":
            what = _unknown_key_message(loc)
        elif err["type"] == "missing":
            what = "required field is missing"
        else:
            what = _clean_msg(err["msg"])
            if err["type"] not in ("value_error", "assertion_error") and "input" in err:
                shown = repr(err["input"])
                what += f" (got {shown if len(shown) < 60 else shown[:57] + '...'})"
        lines.append(f"  {where}: {what}" if where else f"  {what}")
    return "\n".join(lines)


def parse_spec(text: str, *, source: str = "<spec>") -> StudySpec:
    """Parse and validate the structure of a spec (no registry look-ups)."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise InputError(f"study spec {source} is not valid YAML{where}: {problem}") from None
    if not isinstance(data, dict):
        raise InputError(
            f"study spec {source} must be a YAML mapping with keys such as name, datasets, variants, seeds, "
            f"sizes, context_lengths; got {type(data).__name__}"
        )
    try:
        return StudySpec.model_validate(data)
    except ValidationError as exc:
        raise InputError(format_validation_error(exc, source)) from None


def read_spec_text(path: str | Path) -> str:
    """The text of a spec file, which must be UTF-8; InputError naming the file and, for
    bytes that are not UTF-8, the offset of the first one."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InputError(
            f"study spec {path} does not exist (ready specs are in studies/, e.g. studies/smoke.yaml)"
        ) from None
    except (IsADirectoryError, PermissionError) as exc:
        raise InputError(f"cannot read study spec {path}: {exc}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"study spec {path} is not UTF-8 text: byte 0x{data[exc.start]:02x} at offset {exc.start} cannot be "
            f"decoded ({exc.reason}); a spec is a YAML file saved as UTF-8"
        ) from None


def load_spec(path: str | Path, *, check: bool = True) -> StudySpec:
    """Read, parse and validate a spec file.

    Parameters
    ----------
    path : str or Path
        The spec (YAML), e.g. ``studies/smoke.yaml``.
    check : bool
        Also check its names against the model zoo and the dataset registry, and its
        context lengths against the sizes (:func:`check_registries`).

    Returns
    -------
    StudySpec
        Frozen and validated; :func:`~harness.studies.spec.grid.expand_grid` turns it into trials.

    Raises
    ------
    InputError
        A file that cannot be read, bad YAML, an unknown key or a bad value: one error that
        names the file, each field and what was expected (with a "did you mean").

    Examples
    --------
    >>> spec = load_spec("studies/smoke.yaml")  # doctest: +SKIP
    >>> spec.name, spec.seeds  # doctest: +SKIP
    ('smoke', [0, 1])
    """
    path = Path(path)
    text = read_spec_text(path)
    spec = parse_spec(text, source=str(path))
    if check:
        check_registries(spec, source=str(path), component_dir=spec_folder(path))
    return spec


def spec_folder(path: str | Path) -> str:
    """The absolute folder of a spec file: where a user component's module is looked for after
    the Python path (every trial gets it, resolved here, on the driver)."""
    return str(Path(path).expanduser().resolve().parent)


def check_registries(spec: StudySpec, *, source: str = "<spec>", component_dir: str | None = None) -> None:
    """Names against the model zoo and the dataset registry (a user component by the form of
    its name: it is imported and checked before the study starts, in
    :mod:`harness.studies.spec.components`); context lengths against sizes.

    Raises one InputError listing every problem (so a user fixes a spec in one go)."""

    problems: list[str] = []
    for i, dataset in enumerate(spec.datasets):
        if dataset.split(":", 1)[0] not in REGISTRY:  # parameterised names: synthetic-salience:p=0.2,seed=1
            problems.append(
                f"datasets[{i}]: unknown dataset {dataset!r}{did_you_mean(dataset, REGISTRY)}; "
                f"known: {', '.join(REGISTRY)}"
            )
    for i, size in enumerate(spec.sizes):
        if isinstance(size, str) and size not in SIZES:
            problems.append(
                f"sizes[{i}]: unknown size {size!r}{did_you_mean(size, SIZES)}; known: {', '.join(SIZES)} "
                "(or a custom shape {name, n_layer, n_head, d_model})"
            )
        elif not isinstance(size, str) and size.name in SIZES:
            preset = SIZES[size.name]
            problems.append(
                f"sizes[{i}].name: {size.name!r} is the preset {preset.shape}; write the preset as the plain name "
                f"{size.name!r}"
                if preset.shape == size.shape
                else f"sizes[{i}].name: {size.name!r} is the preset {preset.shape}; give the custom shape "
                f"{size.shape} another name (e.g. {size.shape!r})"
            )
    for i, entry in enumerate(spec.variants):
        if isinstance(entry, str):
            if entry not in VARIANTS:
                problems.append(
                    f"variants[{i}]: unknown variant {entry!r}{did_you_mean(entry, VARIANTS)}; known: "
                    f"{', '.join(VARIANTS)} "
                    "(or an inline combination {name, position, gate, scoring})"
                )
            continue
        if entry.name in VARIANTS:
            problems.append(
                f"variants[{i}].name: {entry.name!r} is a registry variant already; give the inline "
                "combination another name"
            )
        try:
            make_variant(entry.name, position=entry.position, gate=entry.gate, scoring=entry.scoring)
        except ValueError as exc:  # InputError included: unknown component names
            problems.append(f"variants[{i}] ({entry.name}): {exc}")
    problems += _diagnostic_problems(spec)
    for size in spec.sizes:
        if isinstance(size, str) and size not in SIZES:
            continue
        limit = SIZES[size].max_context_length if isinstance(size, str) else CUSTOM_MAX_CONTEXT_LENGTH
        name = size if isinstance(size, str) else size.name
        too_long = [t for t in spec.context_lengths if t > limit]
        if too_long:
            problems.append(
                f"context_lengths: {', '.join(map(str, too_long))} exceed the maximum context length of size "
                f"{name!r} ({limit}); "
                "drop them or choose a size that allows them"
            )
    if not problems:
        problems += _shape_problems(spec, component_dir)
    if problems:
        raise InputError(f"invalid study spec {source}:\n" + "\n".join(f"  {p}" for p in problems))


def _diagnostic_problems(spec: StudySpec) -> list[str]:
    """Diagnostics (variants that leak future tokens) are refused unless ``allow_diagnostics: true``."""

    if spec.allow_diagnostics:
        return []
    return [
        f"variants[{i}]: {name!r} is a diagnostic, not a model ({DIAGNOSTIC_LABEL}); set "
        "allow_diagnostics: true to run it, or drop it"
        for i, entry in enumerate(spec.variants)
        for name, gate in [(entry, None) if isinstance(entry, str) else (entry.name, entry.gate)]
        if is_diagnostic(name, gate)
    ]


def _shape_problems(spec: StudySpec, component_dir: str | None = None) -> list[str]:
    """Each custom shape against the components of each variant: one layer of that width and
    heads is built and run on a few tokens (on CPU; a layer's shape rules are those of the
    model), so whatever a component needs of the shape (an even width, an even head
    dimension) is checked by the component itself, in its own words."""
    custom = [(i, size) for i, size in enumerate(spec.sizes) if not isinstance(size, str)]
    if not custom:
        return []
    # torch only when the spec has a custom shape: a spec is checked (`harness run --dry-run`,
    # a bad spec) without paying for it otherwise.
    import torch

    from harness.models.transformer import build_model

    variants = [
        get_variant(entry)
        if isinstance(entry, str)
        else make_variant(entry.name, position=entry.position, gate=entry.gate, scoring=entry.scoring)
        for entry in spec.variants
    ]
    T = min(8, *spec.context_lengths)
    problems = []
    for i, size in custom:
        one_layer = custom_size(1, size.n_head, size.d_model)
        for variant in variants:
            try:
                model = build_model(variant, size=one_layer, vocab_size=2, block_size=T, component_dir=component_dir)
                with torch.no_grad():
                    model(torch.zeros(1, T, dtype=torch.long))
            except (ValueError, RuntimeError) as exc:  # InputError included: a user component's reason
                problems.append(f"sizes[{i}] ({size.name}, {size.shape}) with variant {variant.name!r}: {exc}")
    return problems


def grid_size(spec: StudySpec) -> int:
    """Number of trials the spec expands to (a sequential study: at its maximum seeds)."""
    seeds = spec.grid_seeds()
    runs_per_cell_and_seed = sum(len(spec.tau_levels(v)) for v in spec.variant_names)
    factors = [spec.datasets, spec.sizes, spec.context_lengths, seeds]
    return runs_per_cell_and_seed * math.prod(len(f) for f in factors)
