"""The parts of a study spec: the models of its nested blocks (an inline variant, a custom
size, resources, tracking, the analysis settings, sequential seeds and their stopping
rule), the ``train:`` overrides built from :class:`~harness.training.config.TrainConfig`,
and the training fields that the grid and the runner own. :class:`~harness.studies.spec.study_spec.StudySpec`
assembles them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PositiveInt,
    Tag,
    create_model,
    field_validator,
    model_validator,
)

from harness.analysis.results_types import PAPERS_FACTORIAL
from harness.models.sizes import ModelSize, custom_size, shape_name
from harness.training.config import TrainConfig

#: Names of studies and inline variants become directory names and trial ids.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"


#: TrainConfig fields the grid sets per trial (set them through the spec's factors).
GRID_FIELDS: dict[str, str] = {
    "variant": "variants",
    "position": "variants (inline: {name, position, gate, scoring})",
    "gate": "variants (inline: {name, position, gate, scoring})",
    "scoring": "variants (inline: {name, position, gate, scoring})",
    "dataset": "datasets",
    "size": "sizes",
    "n_layer": "sizes (a custom shape: {name, n_layer, n_head, d_model})",
    "n_head": "sizes (a custom shape: {name, n_layer, n_head, d_model})",
    "d_model": "sizes (a custom shape: {name, n_layer, n_head, d_model})",
    "context_length": "context_lengths",
    "seed": "seeds",
}


#: TrainConfig fields the study runner owns (resources, tracking and checkpoints per trial).
RUNNER_FIELDS: dict[str, str] = {
    "accelerator": "resources.gpus (a trial with GPUs trains on the GPU)",
    "num_threads": "resources.cpus (torch threads = the trial's CPUs)",
    "tracking_uri": "tracking.uri or --tracking-uri",
    "experiment": "tracking.experiment",
    "checkpoint_dir": "the study's storage (Ray Tune keeps the checkpoints)",
    "component_dir": "the spec's folder (where a user component's module is looked for after the Python path)",
}


def _override_model() -> type[BaseModel]:
    """``train:`` accepts every TrainConfig field the grid and runner do not own, each with
    TrainConfig's own constraints, all optional (only the keys written in the YAML count)."""
    fields: dict[str, Any] = {}
    for name, info in TrainConfig.model_fields.items():
        if name in GRID_FIELDS or name in RUNNER_FIELDS:
            continue
        annotation = Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
        fields[name] = (Optional[annotation], None)  # noqa: UP045 - a runtime-built annotation
    return create_model(
        "TrainOverrides",
        __config__=ConfigDict(extra="forbid", frozen=True),
        __doc__="Overrides of TrainConfig fields shared by every trial of a study.",
        **fields,
    )


TrainOverrides = _override_model()


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class InlineVariant(StrictModel):
    """A combination of components the registry has no name for (e.g. rope + ega), or a user's
    component in a slot (``{name: fox, position: none, gate: "forget_gate:ForgetGate"}``: an
    import path, found on the Python path, else beside the spec). The slots not given are the
    baseline's: sinusoidal positions, no gate, dot-product scoring."""

    name: str = Field(pattern=NAME_PATTERN)
    position: str = "sinusoidal"
    gate: str = "none"
    scoring: str = "dot"


def _variant_tag(value: Any) -> str | None:
    if isinstance(value, str):
        return "name"
    if isinstance(value, (dict, InlineVariant)):
        return "inline"
    return None


VariantEntry = Annotated[
    Annotated[str, Tag("name")] | Annotated[InlineVariant, Tag("inline")],
    Discriminator(
        _variant_tag,
        custom_error_type="variant_entry",
        custom_error_message=(
            "expected a variant name (e.g. ega-mope) or an inline variant {name, position, gate, scoring}"
        ),
    ),
]


class CustomSize(StrictModel):
    """A model shape that is not a preset: ``{name: w128, n_layer: 4, n_head: 4, d_model: 128}``.

    ``name`` labels the shape in the results (column ``size``); trial ids carry the name and
    the shape (``w128-L4H4d128``). The heads must divide the width.
    """

    name: str = Field(pattern=NAME_PATTERN)
    n_layer: PositiveInt
    n_head: PositiveInt
    d_model: PositiveInt

    @model_validator(mode="after")
    def _heads_divide_width(self) -> CustomSize:
        if self.d_model % self.n_head:
            raise ValueError(
                f"d_model={self.d_model} is not divisible by n_head={self.n_head}: each head gets d_model / n_head "
                "dimensions; choose a width that is a multiple of the number of heads"
            )
        return self

    @property
    def shape(self) -> str:
        """``L4H4d128``: layers, heads and width in one token (:func:`harness.models.sizes.shape_name`)."""
        return shape_name(self.n_layer, self.n_head, self.d_model)

    def model_size(self) -> ModelSize:
        """The :class:`harness.models.ModelSize` of this shape."""
        return custom_size(self.n_layer, self.n_head, self.d_model, name=self.name)


def _size_tag(value: Any) -> str | None:
    if isinstance(value, str):
        return "preset"
    if isinstance(value, (dict, CustomSize)):
        return "custom"
    return None


SizeEntry = Annotated[
    Annotated[str, Tag("preset")] | Annotated[CustomSize, Tag("custom")],
    Discriminator(
        _size_tag,
        custom_error_type="size_entry",
        custom_error_message="expected a size preset (e.g. nano) or a custom shape {name, n_layer, n_head, d_model}",
    ),
]


class Resources(StrictModel):
    """What one trial gets. ``gpus`` below 1 packs several trials on one GPU (0.25: four)."""

    cpus: PositiveInt = 1
    gpus: float = Field(default=0.0, ge=0.0)

    @field_validator("gpus")
    @classmethod
    def _whole_gpus_above_one(cls, value: float) -> float:
        if value > 1 and not float(value).is_integer():
            raise ValueError(
                f"a fraction of a GPU must be below 1 (e.g. 0.25); above 1 ask for whole GPUs, got {value}"
            )
        return value


class Tracking(StrictModel):
    """Where MLflow records the study: URI (else $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db)
    and experiment (else the study name)."""

    uri: str | None = None
    experiment: str | None = None


class Factorial(StrictModel):
    """The four variants of the 2x2 design: interaction I = L_a + L_b - L_base - L_ab."""

    base: str
    a: str
    b: str
    ab: str


class TauSettings(StrictModel):
    """tau's reference value (the papers' 0.35) and the TOST equivalence margin around it."""

    reference: float = 0.35
    margin: float = Field(default=0.05, gt=0.0)


class PrimaryContrast(StrictModel):
    """A main effect as the primary hypothesis: the paired gain L_control - L_treatment."""

    treatment: str
    control: str


def _primary_tag(value: Any) -> str | None:
    if isinstance(value, str):
        return "interaction"
    if isinstance(value, (dict, PrimaryContrast)):
        return "contrast"
    return None


PrimaryEntry = Annotated[
    Annotated[Literal["interaction"], Tag("interaction")] | Annotated[PrimaryContrast, Tag("contrast")],
    Discriminator(
        _primary_tag,
        custom_error_type="primary_entry",
        custom_error_message="expected 'interaction' or a main effect {treatment: X, control: Y}",
    ),
]


class AnalysisSpec(StrictModel):
    """Settings of the report at the end of the study (``harness.analysis``).

    ``primary``: the study's primary hypothesis, ``interaction`` (the default when the
    study has a 2x2 factorial) or ``{treatment: X, control: Y}``; its verdict uses the
    unadjusted level, the other headline verdicts are Holm-adjusted as one family.
    ``smallest_effect``: the smallest effect of interest, in nats of validation loss;
    "seeds needed" is computed at it (with a range from the sd's uncertainty).
    """

    factorial: Factorial | None = None
    tau: TauSettings = TauSettings()
    confidence: float = Field(default=0.95, gt=0.0, lt=1.0)
    primary: PrimaryEntry | None = None
    smallest_effect: float | None = Field(default=None, gt=0.0, allow_inf_nan=False)


class SeedSchedule(StrictModel):
    """Sequential seeds (``seeds: {min: 3, max: 20, batch: 2}``): seeds 0..min-1 first,
    then ``batch`` more at a time while the stopping rule (``stop_when``) does not hold,
    up to ``max`` seeds. A batch is whole seed blocks: every variant and cell of its seeds."""

    min: int = Field(ge=2)
    max: int = Field(ge=2)
    batch: PositiveInt = 1

    @model_validator(mode="after")
    def _ordered(self) -> SeedSchedule:
        if self.min > self.max:
            raise ValueError(
                f"seeds.min ({self.min}) is larger than seeds.max ({self.max}): a sequential study runs min seeds "
                "first and never more than max"
            )
        return self


def _seeds_tag(value: Any) -> str:
    return "schedule" if isinstance(value, (dict, SeedSchedule)) else "list"


def seeds_entry(value: Any) -> list[int] | Any:
    """The spec's ``seeds`` as written -> a list of seeds (a count ``n`` is 0..n-1), or the
    mapping of a :class:`SeedSchedule` as it is (validated as one); ValueError naming what is
    expected for anything else (a bool, zero, an empty or repeating list)."""
    expected = (
        "a count of seeds (a positive integer: 10 means seeds 0..9), "
        "a non-empty list of distinct non-negative integers, "
        "or sequential seeds {min: 3, max: 20, batch: 2}"
    )
    if isinstance(value, (dict, SeedSchedule)):
        return value  # validated as a SeedSchedule
    if isinstance(value, bool):
        raise ValueError(f"expected {expected}, got {value!r}")
    if isinstance(value, int):
        if value < 1:
            raise ValueError(f"expected {expected}; {value} seeds would run nothing")
        return list(range(value))
    if isinstance(value, list):
        if not value:
            raise ValueError(f"expected {expected}, got an empty list")
        if not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in value):
            raise ValueError(f"expected {expected}, got {value!r}")
        if len(set(value)) != len(value):
            raise ValueError(f"seeds repeat in {value!r}: a repeated seed would run the same trial twice")
        return value
    raise ValueError(f"expected {expected}, got {value!r}")


SeedsEntry = Annotated[
    Annotated[list[int], Tag("list")] | Annotated[SeedSchedule, Tag("schedule")],
    Discriminator(_seeds_tag),
]


class PrecisionRule(StrictModel):
    """Stop once the primary effect's anytime-valid half-width is at most ``precision``
    (in units of the metric: nats of validation loss)."""

    precision: float = Field(gt=0.0, allow_inf_nan=False)


def _stop_tag(value: Any) -> str | None:
    if isinstance(value, str):
        return "settled"
    if isinstance(value, (dict, PrecisionRule)):
        return "precision_rule"
    return None


StopRule = Annotated[
    Annotated[Literal["settled"], Tag("settled")] | Annotated[PrecisionRule, Tag("precision_rule")],
    Discriminator(
        _stop_tag,
        custom_error_type="stop_rule",
        custom_error_message="expected 'settled' or {precision: <half-width in nats>}",
    ),
]


#: The papers' 2x2 design; used when a study runs all four and names no factorial.
DEFAULT_FACTORIAL = Factorial(**PAPERS_FACTORIAL._asdict())
