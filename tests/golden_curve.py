"""The golden loss curve: ``nano`` trained for 50 steps at a fixed seed on CPU, one thread.

CPU runs are bit-identical from run to run, so the curve of a fixed configuration pins
everything that shapes it: the initialisation, the data order, the dropout masks, the
optimiser and the schedule. ``tests/training/test_golden_curve.py`` trains it again and
compares every training-batch loss and every evaluation (train and validation loss on the
fixed windows) with the stored curve, ``tests/assets/golden_nano_curve.json``.

After an *intended* change to any of those (a new initialisation, a new data order, a new
default of the recipe), regenerate the stored curve and commit it with the change::

    python tests/golden_curve.py

(from the repository root; it needs the TinyShakespeare corpus, as the tests do:
``$HARNESS_DATA_DIR`` or ``../shared/data``). The commit's diff of the asset then shows
how much the curve moved.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer

from harness.training.config import TrainConfig
from harness.training.run import train

ASSET = Path(__file__).resolve().parent / "assets" / "golden_nano_curve.json"
REGENERATE = "python tests/golden_curve.py"

#: The pinned variants: the plain baseline, and the papers' model (EGA key gate, Morlet
#: positions), whose gate and MOPE parameters have initialisations of their own.
VARIANTS = ("baseline", "ega-mope")
#: The evaluation metrics pinned at each evaluation (full precision, fixed windows).
EVAL_METRICS = ("train/loss", "val/loss")

#: The configuration of the curve: the default recipe (AdamW, warmup, cosine, dropout 0.2),
#: shortened to 50 steps at T=64 and batch 12, evaluated every 10 steps on 16 windows.
SETTINGS: dict[str, Any] = {
    "dataset": "tinyshakespeare",
    "size": "nano",
    "context_length": 64,
    "batch_size": 12,
    "max_steps": 50,
    "warmup_steps": 10,
    "eval_every": 10,
    "eval_windows": 16,
    "eval_batch_size": 16,
    "seed": 0,
    "num_threads": 1,
}


class CurveRecorder(Callback):
    """The loss of every training batch and the pinned metrics of every evaluation."""

    def __init__(self) -> None:
        self.train_batch_loss: list[float] = []
        self.evaluations: list[dict[str, float]] = []

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        self.train_batch_loss.append(float(loss.detach()))

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.sanity_checking:
            return
        metrics = pl_module.eval_metrics  # type: ignore[attr-defined]
        self.evaluations.append({"step": trainer.global_step, **{name: metrics[name] for name in EVAL_METRICS}})


def measure_curve(variant: str, data_dir: str | None = None) -> dict[str, Any]:
    """``{"train_batch_loss": [50 floats], "evaluations": [{"step", "train/loss", "val/loss"}]}``
    of ``variant`` trained with :data:`SETTINGS` (checkpoints in a temporary folder, no MLflow)."""
    recorder = CurveRecorder()
    with tempfile.TemporaryDirectory(prefix="harness-golden-") as tmp:
        # Eager always: the curve pins eager training (compiled training is checked against eager
        # in tests/training/test_compile.py).
        config = TrainConfig(variant=variant, data_dir=data_dir, checkpoint_dir=tmp, compile=False, **SETTINGS)
        result = train(config, callbacks=[recorder], mlflow_logging=False, progress_bar=False)
    if result.status != "finished" or len(recorder.train_batch_loss) != SETTINGS["max_steps"]:
        raise RuntimeError(f"{variant}: the golden run did not finish ({result.status}, {result.steps} steps)")
    return {"train_batch_loss": recorder.train_batch_loss, "evaluations": recorder.evaluations}


def measure_all(data_dir: str | None = None) -> dict[str, Any]:
    """The whole asset: the settings, the versions it was made with, one curve per variant."""
    return {
        "regenerate": REGENERATE,
        "settings": SETTINGS,
        "torch": torch.__version__,
        "curves": {variant: measure_curve(variant, data_dir) for variant in VARIANTS},
    }


def main() -> None:
    data_dir = os.environ.get("HARNESS_DATA_DIR")
    asset = measure_all(data_dir)
    ASSET.parent.mkdir(parents=True, exist_ok=True)
    ASSET.write_text(json.dumps(asset, indent=1) + "\n")
    print(f"wrote {ASSET} ({', '.join(VARIANTS)}: {SETTINGS['max_steps']} steps each)", file=sys.stderr)


if __name__ == "__main__":
    main()
