"""The Ray Tune function trainable: one trial = one call of ``harness.training.train``.

Each trial

1. looks its :class:`~harness.training.config.TrainConfig` up by trial id (the configs
   travel once through Ray's object store with ``tune.with_parameters``; every path in them
   absolute, resolved by the driver) and makes sure its corpus is on this node
   (:func:`~harness.studies.cluster.corpora.ensure_corpus`: found, or fetched
   checksum-verified, or the trial fails naming the corpus and the node);
2. sets torch's threads to the CPUs Tune gave it (Ray's workers start with one thread);
3. resumes from ``ray.tune.get_checkpoint()`` when Tune restarts it (a retry after a
   failure, or a resumed study): the harness checkpoint makes the resumed run end
   exactly where an uninterrupted one would;
4. trains with MLflow off (the driver records everything: one writer) and a Lightning
   callback that, at every evaluation, reports the metrics to Tune (``ray.tune.report``),
   with the checkpoint when the run wrote a new one since the previous report (at every
   evaluation on CPU, a few times a run on a GPU: the run's device plan);
5. reports the final :class:`~harness.training.run.TrainResult` once more with a small
   "final" checkpoint holding the per-window losses and the gate/MOPE parameter tables,
   which the driver turns into the child run's artifacts and the study's tables.

A trial restarted from its final checkpoint (the driver died between the final report
and the end of the trial) does not train again: it reports the stored result.
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.errors import InputError
from harness.studies.cluster.corpora import ensure_corpus
from harness.studies.tune.state import write_manifest
from harness.training.config import TrainConfig

if TYPE_CHECKING:  # the plan module (polars, the spec) is not needed to run a trial
    from harness.studies.plan import TrialCallbacks

# Imports that stay inside the functions that use them, for a measured start-up cost: the
# study driver imports this module (``harness run``, ``--dry-run`` and a bad spec included),
# while only the Ray worker that runs a trial needs Ray Tune and the training run (torch,
# Lightning, MLflow: ``python -X importtime -c "import harness.training.run"`` 19-23 s on the
# shared 2-CPU machine under load, against 0.2-0.7 s for this module without them).

#: Files of the final checkpoint.
FINAL_RESULT = "train_result.json"
#: Files of a trial's final checkpoint (beside :data:`FINAL_RESULT`) that become artifacts of
#: its child run (:func:`harness.training.run.write_run_tables` writes them).
FINAL_ARTIFACTS = ("window_losses.parquet", "gate_parameters.parquet", "mope_parameters.parquet")
LAST_CHECKPOINT = "last.ckpt"

#: TrainResult fields -> the metric names every layer shares (docs/contracts.md).
FINAL_METRICS = {
    "final_val_loss": "final/val_loss",
    "final_test_loss": "final/test_loss",
    "best_val_loss": "best/val_loss",
    "final_train_loss": "final/train_loss",
    "gen_gap": "final/gen_gap",
    "val_bpc": "final/val_bpc",
    "tau_mean": "final/tau_mean",
    "open_fraction": "final/open_fraction",
    "pc1_cosine": "final/pc1_cosine",
    "tokens_per_s": "final/tokens_per_s",
    "num_parameters": "num_parameters",
    "val_windows": "final/val_windows",
    "val_loss_first64": "final/val_loss_first64",
    "val_loss_after64": "final/val_loss_after64",
}


def trial_cpus(context: Any) -> int:
    """CPUs of the trial's resource bundle (at least one thread)."""
    try:
        bundle = context.get_trial_resources().required_resources
        return max(1, int(math.floor(float(bundle.get("CPU", 1)))))
    except Exception:  # noqa: BLE001 - outside Tune: one thread
        return 1


def _scalars(metrics: Any) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, value in dict(metrics).items():
        try:
            number = float(value.item() if hasattr(value, "item") else value)
        except (TypeError, ValueError, RuntimeError):
            continue  # non-scalar tensors or strings
        out[str(key)] = number
    return out


def _report_callback(checkpoint_dir: Path) -> Any:
    """A Lightning callback reporting every evaluation to Tune (built here so that
    Lightning is imported only inside the trial process)."""
    import ray.tune
    from lightning.pytorch import Callback
    from lightning.pytorch.trainer.states import TrainerFn

    class TuneReport(Callback):
        """``ray.tune.report(metrics, checkpoint=...)`` at each validation end."""

        def __init__(self) -> None:
            self.module: Any = None
            self._reported: tuple[int, int, int] | None = None  # (inode, mtime_ns, size) of the last.ckpt reported

        def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
            if trainer.sanity_checking:
                return
            self.module = pl_module
            metrics = _scalars(trainer.callback_metrics)
            metrics["step"] = int(trainer.global_step)
            last = checkpoint_dir / LAST_CHECKPOINT
            stat = last.stat() if last.is_file() else None  # each save is a new file (written, then renamed)
            written = (stat.st_ino, stat.st_mtime_ns, stat.st_size) if stat is not None else None
            if trainer.state.fn == TrainerFn.FITTING and written is not None and written != self._reported:
                # The harness's RollingCheckpoint (earlier in the callback list) has written last.ckpt
                # since the previous report (every evaluation on CPU, a few times a run on a GPU:
                # harness.training.device_plan); Tune copies the folder to the study's storage now.
                # An evaluation without a new checkpoint uploads nothing.
                ray.tune.report(metrics, checkpoint=_checkpoint(checkpoint_dir))
                self._reported = written
            else:
                ray.tune.report(metrics)

    return TuneReport()


def run_vocab_size(config: TrainConfig) -> int | None:
    """The vocabulary a run's model was built with: its corpus's, found where the run found it
    (never downloaded here); None when the corpus cannot be read."""
    from harness.datasets.corpus import load  # numpy and the token cache: read once, at the end

    try:
        return load(config.dataset, data_dir=config.data_dir, download=False, progress=False).vocab_size
    except InputError:
        return None


def final_report(result: Any) -> dict[str, Any]:
    """The last report of a trial: the TrainResult under the shared metric names, with the
    vocabulary its model was built with (``vocab_size``: :func:`run_vocab_size`)."""
    metrics: dict[str, Any] = {k: v for k, v in _scalars(result.metrics).items()}
    for field, name in FINAL_METRICS.items():
        value = getattr(result, field)
        if value is not None:
            metrics[name] = float(value)
    vocab = run_vocab_size(result.config)
    if vocab is not None:
        metrics["vocab_size"] = vocab
    metrics.update(
        step=int(result.steps), steps=int(result.steps), status=result.status, wall_time_s=float(result.wall_time_s)
    )
    return metrics


def is_final_report(report: Mapping[str, Any]) -> bool:
    """Whether ``report`` is a trial's last (:func:`final_report`: it names how the trial
    ended), not an evaluation. Its curve metrics repeat the last evaluation's at the step the
    trial stopped, which for a diverged trial is no evaluation step: the curves read the
    evaluations only."""
    return report.get("status") in ("finished", "diverged")


def _write_final(directory: Path, result: Any, module: Any) -> None:
    """Final checkpoint: the result summary and the tables ``harness train`` logs as
    artifacts (same files and columns, :func:`harness.training.run.write_run_tables`)."""
    from harness.training.run import write_run_tables  # torch and Lightning: see the note on imports

    directory.mkdir(parents=True, exist_ok=True)
    (directory / FINAL_RESULT).write_text(json.dumps(final_report(result), allow_nan=True))
    write_run_tables(directory, model=getattr(module, "model", None), window_losses=result.window_losses)


def run_trial(
    config: dict[str, Any],
    *,
    trials: dict[str, dict[str, Any]],
    compile_sharing: Mapping[str, int],
    trial_callbacks: TrialCallbacks | None = None,
) -> None:
    """Tune function trainable (wrap with ``tune.with_parameters(run_trial, trials=...,
    compile_sharing=..., trial_callbacks=...)``: the study's plan made them once,
    :attr:`~harness.studies.plan.StudyPlan.trial_configs` and
    :attr:`~harness.studies.plan.StudyPlan.compile_sharing`).

    Its callbacks: the report to Tune, and those ``trial_callbacks`` gives this trial
    (:data:`~harness.studies.plan.TrialCallbacks`; none in a real study)."""
    import ray.tune
    import torch

    from harness.models.numerics import flush_denormals
    from harness.training.run import train  # torch and Lightning: see the note on imports

    trial_id = str(config["trial"])
    context = ray.tune.get_context()
    cpus = trial_cpus(context)
    flush_denormals()  # first: the threads torch starts for this trial inherit it (harness.models.numerics)
    torch.set_num_threads(cpus)

    work = Path(tempfile.mkdtemp(prefix=f"harness-trial-{trial_id}-"))
    try:
        checkpoint_dir = work / "checkpoint"
        checkpoint_dir.mkdir()
        cfg = TrainConfig(**{**trials[trial_id], "num_threads": cpus, "checkpoint_dir": str(checkpoint_dir)})
        resume_from = None
        checkpoint = ray.tune.get_checkpoint()
        if checkpoint is not None:
            restored = Path(checkpoint.to_directory(str(work / "restored")))
            if (restored / FINAL_RESULT).is_file():
                # Finished already; only its end was not recorded: report it again, train nothing.
                metrics = json.loads((restored / FINAL_RESULT).read_text())
                ray.tune.report(metrics, checkpoint=_checkpoint(restored))
                return
            if (restored / LAST_CHECKPOINT).is_file():
                shutil.copy2(restored / LAST_CHECKPOINT, checkpoint_dir / LAST_CHECKPOINT)
                resume_from = checkpoint_dir / LAST_CHECKPOINT
        ensure_corpus(cfg.dataset, cfg.data_dir)
        reporter = _report_callback(checkpoint_dir)
        result = train(
            cfg,
            callbacks=[reporter, *(trial_callbacks(trial_id, trials) if trial_callbacks is not None else ())],
            mlflow_logging=False,
            resume_from=resume_from,
            progress_bar=False,
            compile_sharing=compile_sharing[trial_id],  # the trials with its graph share one cold compile
        )
        final_dir = work / "final"
        _write_final(final_dir, result, reporter.module)
        metrics = final_report(result)
        if resume_from is not None:
            metrics["resumed_from_step"] = _checkpoint_step(resume_from)
        ray.tune.report(metrics, checkpoint=_checkpoint(final_dir))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _checkpoint(directory: Path) -> Any:
    """The Tune checkpoint of ``directory``, its manifest written last: a copy on storage cut
    short by a dying driver is then told from a complete one on resume
    (:func:`harness.studies.tune.state.is_complete`)."""
    import ray.tune

    write_manifest(directory)
    return ray.tune.Checkpoint.from_directory(str(directory))


def _checkpoint_step(path: Path) -> int:
    from harness.training.plan import load_checkpoint_meta  # torch: see the note on imports

    try:
        return int(load_checkpoint_meta(path)[2])
    except Exception:  # noqa: BLE001 - bookkeeping only
        return -1
