"""The configuration of one training run (one trial of a study).

A frozen pydantic model validated at the boundary (CLI, study spec, Tune trial): an
unknown key or a bad value is one error that names the field. Defaults are the papers' /
nanoGPT's ``shakespeare_char`` recipe (AdamW betas 0.9/0.99, weight decay 0.1 on
matrices, lr 1e-3, 100 warmup steps, cosine to 1e-4 at ``max_steps``, clip 1.0, batch 64,
context 256, dropout 0.2, 5,000 steps, evaluation every 250 steps).

The resume contract is marked on the fields themselves: a resumed run (``harness train
--resume``, a resumed study) must match its checkpoint or its study on every field except
those marked :data:`MAY_CHANGE_ON_RESUME` (:meth:`TrainConfig.resume_contract_fields`). A new
field is part of the contract unless it is marked: forgetting the mark refuses a resume, it
never mixes two trajectories.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, model_validator

from harness.models.sizes import ModelSize, custom_size, get_size
from harness.models.variants import LAGGED_SCORINGS, MOPE_POSITIONS, VARIANTS, Variant, get_variant, make_variant
from harness.training.config_checks import check_consistent, normalise_input


class MayChangeOnResume:
    """Field marker (in ``Annotated[...]``): a resumed run may change this field. It says
    where and how a run computes (threads, device, compilation, checkpoints, tracking, the
    corpus folder, the evaluation batch), never what: the trajectory and its evaluations
    stay those of the run it continues."""

    def __repr__(self) -> str:
        return "MAY_CHANGE_ON_RESUME"


MAY_CHANGE_ON_RESUME = MayChangeOnResume()


class TrainConfig(BaseModel):
    """Everything that determines one training run.

    ``variant`` is a registry name (``harness.models.VARIANTS``) or, when any of
    ``position``/``gate``/``scoring`` is given, the label of an inline combination of
    those components (e.g. ``variant="rope-ega", position="rope", gate="ega"``); a slot may
    name a user's component by its import path (``gate="forget_gate:ForgetGate"``), found on
    the Python path, else in ``component_dir``.
    """

    # Each field's docstring is its description: `harness train --help` shows it (harness.training.cli).
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    # -- what is trained ---------------------------------------------------------
    variant: str = "baseline"
    """Zoo variant (see `harness zoo`), or the label of an inline one with --position/--gate/--scoring."""
    position: str | None = None
    """Inline variant: positional encoding (a zoo name or package.module:Class)."""
    gate: str | None = None
    """Inline variant: key gate ('none' for no gate; a zoo name or package.module:Class)."""
    scoring: str | None = None
    """Inline variant: scoring (dot, lagged, or package.module:Class)."""
    tau_init: float | None = None
    """Initial gate threshold tau of gated variants (unset: the component's default)."""
    dataset: str = "tinyshakespeare"
    """Corpus name (see `harness data list`)."""
    size: str = Field(default="nano", pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    """Model size preset (nano, paper, ...: `harness zoo`); with n_layer, n_head and d_model all set,
    the name of that custom shape (the CLI names it L<n>H<h>d<w>; a study names it in its sizes)."""
    n_layer: PositiveInt | None = None
    """Custom shape: layers (overrides the size preset's)."""
    n_head: PositiveInt | None = None
    """Custom shape: attention heads (must divide the width)."""
    d_model: PositiveInt | None = None
    """Custom shape: width (even for sinusoidal and MOPE)."""
    context_length: PositiveInt = 256
    """Context length T."""
    train_fraction: float | None = Field(default=None, gt=0.0, le=1.0)
    """Train on the first fraction of the training split (unset: all of it), to reach an overfitting
    regime with less data; validation and test stay whole, the train loss is read on the prefix."""
    seed: int = Field(default=0, ge=0)
    """Seed: fixes initialisation, data order and dropout masks."""

    # -- optimisation (nanoGPT shakespeare_char recipe) ---------------------------
    max_steps: PositiveInt = 5000
    """Optimizer steps."""
    batch_size: PositiveInt = 64
    """Training batch size."""
    lr: PositiveFloat = 1e-3
    """Peak learning rate (linear warmup, then cosine to min_lr at max_steps)."""
    min_lr: float = Field(default=1e-4, ge=0.0)
    """Learning rate at the end of the cosine."""
    warmup_steps: int = Field(default=100, ge=0)
    """Steps of linear warmup."""
    weight_decay: float = Field(default=0.1, ge=0.0)
    """AdamW weight decay on matrices (none on biases, norms and gate parameters)."""
    beta1: float = Field(default=0.9, gt=0.0, lt=1.0)
    """AdamW beta1."""
    beta2: float = Field(default=0.99, gt=0.0, lt=1.0)
    """AdamW beta2."""
    grad_clip: float = Field(default=1.0, ge=0.0)
    """Clip the global gradient norm to this (0 disables clipping)."""
    dropout: float = Field(default=0.2, ge=0.0, lt=1.0)
    """Dropout on embeddings, residuals and MLP."""
    attention_dropout: float | None = Field(default=None, ge=0.0, lt=1.0)
    """Dropout on attention weights (unset: dropout). On CPU any value > 0 leaves SDPA's fused kernel;
    compile auto then compiles runs long enough to repay it."""

    # -- evaluation ----------------------------------------------------------------
    eval_every: PositiveInt = 250
    """Evaluate (and checkpoint, on CPU) every K steps."""
    eval_windows: PositiveInt | None = 256
    """Fixed evaluation windows per split read at every evaluation, the curves' windows (unset: the
    whole split)."""
    final_eval_windows: PositiveInt | None = None
    """Windows per split read once more at the last evaluation, where the final numbers come from
    (unset: the whole validation split, and as many windows of the train split)."""
    eval_batch_size: Annotated[PositiveInt, MAY_CHANGE_ON_RESUME] = 64
    """Windows per evaluation batch."""

    # -- hardware -------------------------------------------------------------------
    accelerator: Annotated[Literal["auto", "cpu", "gpu"], MAY_CHANGE_ON_RESUME] = "auto"
    """auto, cpu or gpu."""
    # Not in the resume contract: like the accelerator, it says how a step computes, not what (a
    # CPU checkpoint may resume on a GPU).
    precision: Annotated[Literal["auto", "32-true", "bf16-mixed", "16-mixed"], MAY_CHANGE_ON_RESUME] = "auto"
    """auto (fp32 on CPU, bf16-mixed on a GPU, 16-mixed without bf16), 32-true, bf16-mixed or 16-mixed;
    bf16-mixed on CPU runs the GPU's training plan (fused AdamW, clipping by the module, padded output
    layer)."""
    # Not in the resume contract: a compiled step computes the same function as the eager one (same
    # dropout masks), up to float rounding, like a change of threads.
    compile: Annotated[Literal["auto"] | bool, MAY_CHANGE_ON_RESUME] = "auto"
    """torch.compile the training step: auto when the run's steps repay the compile (its CPU cost model
    counts dropout on attention weights, which slows the eager step off the fused kernel)."""
    num_threads: Annotated[PositiveInt | None, MAY_CHANGE_ON_RESUME] = None
    """Torch threads on CPU (unset: the CPUs given to the process)."""

    # -- bookkeeping -----------------------------------------------------------------
    checkpoint_every: Annotated[PositiveInt | None, MAY_CHANGE_ON_RESUME] = None
    """Steps between checkpoints (unset: the device plan's: every evaluation on CPU, a few per run on a
    GPU)."""
    checkpoint_dir: Annotated[str | None, MAY_CHANGE_ON_RESUME] = None
    """Checkpoint folder (unset: ./checkpoints/<run>)."""
    tracking_uri: Annotated[str | None, MAY_CHANGE_ON_RESUME] = None
    """MLflow tracking URI (unset: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db)."""
    experiment: Annotated[str, MAY_CHANGE_ON_RESUME] = "harness"
    """MLflow experiment name."""
    data_dir: Annotated[str | None, MAY_CHANGE_ON_RESUME] = None
    """Folder of the corpora (unset: $HARNESS_DATA_DIR, then the cache)."""
    component_dir: Annotated[str | None, MAY_CHANGE_ON_RESUME] = None
    """The folder searched for a user component's module after the Python path (a study: its spec's
    folder, absolute; harness.models.components). Where the code is found, not what it is: the
    component's import path (position / gate / scoring) is in the contract."""

    @model_validator(mode="before")
    @classmethod
    def _normalise_input(cls, data: Any) -> Any:
        """Older and shorter inputs in today's form (:func:`~harness.training.config_checks.normalise_input`)."""
        return normalise_input(data)

    @model_validator(mode="after")
    def _check_consistent(self) -> TrainConfig:
        """The rules across fields (:func:`~harness.training.config_checks.check_consistent`)."""
        check_consistent(self)
        return self

    @classmethod
    def resume_contract_fields(cls) -> tuple[str, ...]:
        """The fields a resume must not change (every field not marked
        :data:`MAY_CHANGE_ON_RESUME`): what shapes the training trajectory or its evaluations."""
        return tuple(name for name, info in cls.model_fields.items() if MAY_CHANGE_ON_RESUME not in info.metadata)

    def resume_contract(self) -> dict[str, Any]:
        """This config's values of :meth:`resume_contract_fields`."""
        return {name: getattr(self, name) for name in self.resume_contract_fields()}

    def resume_mismatches(self, saved: TrainConfig) -> list[str]:
        """``field: saved value vs this value`` for each contract field that differs from
        ``saved`` (the config of the run or study being resumed); empty when it may resume."""
        return [
            f"{name}: checkpoint {getattr(saved, name)!r} vs config {getattr(self, name)!r}"
            for name in self.resume_contract_fields()
            if getattr(saved, name) != getattr(self, name)
        ]

    def model_size(self) -> ModelSize:
        """The shape this config trains: the preset ``size``, or the custom shape ``size`` names.

        Raises :class:`~harness.errors.InputError` for an unknown preset without a shape.
        """
        if self.n_layer is None:
            return get_size(self.size)
        return custom_size(self.n_layer, self.n_head, self.d_model, name=self.size)  # type: ignore[arg-type]

    @property
    def is_inline_variant(self) -> bool:
        return any(v is not None for v in (self.position, self.gate, self.scoring))

    def variant_spec(self) -> Variant:
        """The :class:`harness.models.Variant` this config names.

        A registry name, or an inline combination when ``position``/``gate``/``scoring`` is
        set: the slots not given are taken from the registry variant of the same name if there
        is one, else default to sinusoidal / no gate / dot. Raises :class:`InputError`.
        """
        if not self.is_inline_variant:
            return get_variant(self.variant)
        base = VARIANTS.get(self.variant)
        return make_variant(
            self.variant,
            position=self.position or (base.position if base else "sinusoidal"),
            gate=self.gate or (base.gate if base else "none"),
            scoring=self.scoring or (base.scoring if base else "dot"),
            **(dict(base.options) if base else {}),
        )

    def run_params(self, *, variant: Variant | None = None) -> dict[str, Any]:
        """The MLflow params of a run: every setting as the run uses it, so that MLflow can
        compare and plot runs without the harness. The config's fields, with what it leaves
        unset resolved: the variant's slots (``position``, ``gate``, ``scoring``) and options
        (``output_gate``; ``mope_init`` with a MOPE position, ``lags`` with lagged scoring), the
        shape (``n_layer``, ``n_head``, ``d_model``) and the dropout on attention weights
        (``attention_dropout``: the residual ``dropout`` when unset). ``variant`` is this config's
        :meth:`variant_spec` when the caller holds it already (a run's plan), else resolved here."""
        variant = self.variant_spec() if variant is None else variant
        return {
            **self.model_dump(),
            **self.model_size().config_fields(),  # its "size" entry is config.size: same value, same place
            "position": variant.position,
            "gate": variant.gate,
            "scoring": variant.scoring,
            "output_gate": variant.output_gate,
            **({"mope_init": variant.mope_init} if variant.position in MOPE_POSITIONS else {}),
            **({"lags": variant.lags} if variant.scoring in LAGGED_SCORINGS else {}),
            "attention_dropout": self.dropout if self.attention_dropout is None else self.attention_dropout,
        }
