"""End-to-end training runs (nano model, a few steps): determinism, resume, evaluation,
divergence, callback metrics, MLflow contents. Real MLflow SQLite stores, no mocks."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch import Callback
from mlflow import MlflowClient

from harness.errors import InputError
from harness.models import get_variant
from harness.training import train
from harness.training.run import result_row


class RecordMetrics(Callback):
    """What a Ray Tune report callback would see at each ``on_validation_end``."""

    def __init__(self) -> None:
        self.reports: list[dict[str, Any]] = []

    def on_validation_end(self, trainer, pl_module) -> None:
        self.reports.append(dict(trainer.callback_metrics))


class CrashAt(Callback):
    """Simulates a machine failure: raises at the start of training step ``step``."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            raise RuntimeError(f"simulated crash at step {self.step}")


def _runs(uri: str) -> list[Any]:
    client = MlflowClient(uri)
    return [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])]


def test_same_seed_same_result_and_callback_metrics(tiny_config) -> None:
    recorder = RecordMetrics()
    config = tiny_config(max_steps=12, eval_every=4)
    a = train(config, callbacks=[recorder], mlflow_logging=False, progress_bar=False)
    b = train(config, mlflow_logging=False, progress_bar=False)
    c = train(tiny_config(seed=4), mlflow_logging=False, progress_bar=False)

    assert a.status == "finished" and a.steps == 12
    assert a.final_val_loss == b.final_val_loss  # bit-identical on CPU
    np.testing.assert_array_equal(a.window_losses["val"], b.window_losses["val"])
    assert c.final_val_loss != a.final_val_loss
    assert math.isfinite(a.final_val_loss) and a.final_test_loss is None  # tinyshakespeare has no test split
    assert a.val_bpc == pytest.approx(a.final_val_loss / math.log(2))
    assert a.gen_gap == pytest.approx(a.final_val_loss - a.final_train_loss)
    assert a.best_val_loss <= a.final_val_loss
    assert a.tau_mean is not None and 0.0 <= a.open_fraction <= 1.0

    # Evaluations at steps 4, 8, 12: what a Tune callback sees, the last one with final metrics.
    assert [float(r["step"]) for r in recorder.reports] == [4.0, 8.0, 12.0]
    first, last = recorder.reports[0], recorder.reports[-1]
    for name in (
        "train/loss",
        "val/loss",
        "val/bpc",
        "gen_gap",
        "best/val_loss",
        "throughput/tokens_per_s",
        "gate/tau/l0h0",
        "gate/alpha/l1h1",
        "gate/open_fraction",
        "mope/omega_mean",
        "mope/sigma_max",
    ):
        assert name in first and torch.as_tensor(first[name]).ndim == 0, name
    for name in (
        "final/val_loss",
        "final/train_loss",
        "final/gen_gap",
        "final/tau_mean",
        "final/open_fraction",
        "final/tokens_per_s",
        "num_parameters",
        "best/val_loss",
    ):
        assert name in last, name
    assert "final/val_loss" not in first
    assert float(last["final/val_loss"]) == pytest.approx(a.final_val_loss, rel=1e-6)
    assert float(last["best/val_loss"]) == pytest.approx(min(float(r["val/loss"]) for r in recorder.reports), rel=1e-6)


def test_evaluation_matches_a_direct_computation(tiny_config) -> None:
    """Per-window losses, open-gate fraction and gate/content agreement (synthetic corpus with
    ground truth), recomputed by hand from the final checkpoint."""
    from scipy import stats

    from harness.datasets import eval_window_starts, load, window_batch
    from harness.models import build_model

    dataset = "synthetic-salience:n_chars=30000"
    result = train(
        tiny_config(dataset=dataset, max_steps=6, eval_every=3, eval_windows=5, final_eval_windows=None),
        mlflow_logging=False,
        progress_bar=False,
    )
    state = torch.load(result.checkpoint_path, weights_only=True)["state_dict"]
    corpus = load(dataset)
    model = build_model("ega-mope", size="nano", vocab_size=corpus.vocab_size, block_size=32)
    model.load_state_dict({k.removeprefix("model."): v for k, v in state.items()})
    model.eval()
    assert set(result.window_losses) == {"val", "train", "test"}
    # The final numbers rest on the whole validation split, and as many windows of the others.
    whole_val = (len(corpus.val) - 1) // 32
    assert result.val_windows == whole_val == len(result.window_losses["val"])
    for split in ("val", "train", "test"):
        tokens = getattr(corpus, split)
        starts = eval_window_starts(len(tokens), block_size=32, max_windows=whole_val)
        x, y = (torch.from_numpy(a) for a in window_batch(tokens, starts, block_size=32))
        with torch.no_grad():
            logits, gates = model.forward_with_gates(x)  # gates: (L, N, H, T)
        expected = torch.stack([F.cross_entropy(logits[i], y[i]) for i in range(len(x))]).double()
        torch.testing.assert_close(torch.from_numpy(result.window_losses[split]), expected, rtol=1e-5, atol=1e-6)
        if split != "val":
            continue
        is_open = gates > 0.5
        assert result.open_fraction == pytest.approx(float(is_open.double().mean()))
        content = torch.from_numpy(np.stack([corpus.content_mask["val"][s : s + 32] for s in starts]))
        c = content[None, :, None, :].expand_as(gates)
        m = result.metrics
        assert m["gate/content_precision"] == pytest.approx(float((is_open & c).sum() / is_open.sum()))
        assert m["gate/content_recall"] == pytest.approx(float((is_open & c).sum() / c.sum()))
        binned = (gates * 1024).long().clamp(0, 1023).numpy()  # the module's histogram resolution
        u = stats.mannwhitneyu(binned[c.numpy()], binned[~c.numpy()]).statistic
        assert m["gate/content_auc"] == pytest.approx(u / (c.sum().item() * (~c).sum().item()))
        assert 0.0 <= m["gate/content_auc_best_head"] <= 1.0
    assert result.final_val_loss == pytest.approx(float(np.mean(result.window_losses["val"])))
    assert result.final_test_loss == pytest.approx(float(np.mean(result.window_losses["test"])))


def test_curves_stay_on_the_periodic_windows_and_the_final_numbers_on_the_final_set(tiny_config) -> None:
    """The last evaluation reads both sets: ``val/loss`` (the curve's last point) on the
    ``eval_windows`` set, as every earlier point; ``final/val_loss`` on ``final_eval_windows``."""
    from harness.datasets import eval_window_starts, load, window_batch
    from harness.models import build_model

    dataset = "synthetic-salience:n_chars=30000"
    result = train(
        tiny_config(dataset=dataset, max_steps=4, eval_every=4, eval_windows=5, final_eval_windows=9),
        mlflow_logging=False,
        progress_bar=False,
    )
    assert result.val_windows == 9 and len(result.window_losses["val"]) == 9
    state = torch.load(result.checkpoint_path, weights_only=True)["state_dict"]
    corpus = load(dataset)
    model = build_model("ega-mope", size="nano", vocab_size=corpus.vocab_size, block_size=32)
    model.load_state_dict({k.removeprefix("model."): v for k, v in state.items()})
    model.eval()

    def mean_loss(windows: int) -> float:
        starts = eval_window_starts(len(corpus.val), block_size=32, max_windows=windows)
        x, y = (torch.from_numpy(a) for a in window_batch(corpus.val, starts, block_size=32))
        with torch.no_grad():
            logits = model(x)  # (N, T, V)
        return float(torch.stack([F.cross_entropy(logits[i], y[i]) for i in range(len(x))]).double().mean())

    assert result.metrics["val/loss"] == pytest.approx(mean_loss(5), rel=1e-5)
    assert result.final_val_loss == pytest.approx(mean_loss(9), rel=1e-5)
    assert result.metrics["final/val_windows"] == 9


@pytest.mark.parametrize("checkpoint_every", [None, 3])
def test_resumed_run_ends_where_an_uninterrupted_one_does(tiny_config, sqlite_tracking_uri, checkpoint_every) -> None:
    config = tiny_config(
        max_steps=12, eval_every=4, checkpoint_every=checkpoint_every, tracking_uri=sqlite_tracking_uri
    )
    uninterrupted = train(
        config.model_copy(update={"checkpoint_dir": config.checkpoint_dir + "-u"}),
        mlflow_logging=False,
        progress_bar=False,
    )

    with pytest.raises(RuntimeError, match="simulated crash"):
        train(config, callbacks=[CrashAt(10)], progress_bar=False)
    (crashed,) = _runs(sqlite_tracking_uri)
    assert crashed.info.status == "FAILED" and crashed.data.tags["status"] == "failed"
    meta = torch.load(Path(config.checkpoint_dir) / "last.ckpt", weights_only=True)
    assert meta["global_step"] == (8 if checkpoint_every is None else 9)

    resumed = train(config, resume_from=config.checkpoint_dir, progress_bar=False)
    assert resumed.final_val_loss == uninterrupted.final_val_loss
    np.testing.assert_array_equal(resumed.window_losses["val"], uninterrupted.window_losses["val"])
    assert resumed.best_val_loss == uninterrupted.best_val_loss
    assert resumed.steps == 12

    # The resumed run continues the same MLflow run; no evaluation is repeated.
    (run,) = _runs(sqlite_tracking_uri)
    assert run.info.run_id == crashed.info.run_id == resumed.mlflow_run_id
    assert run.info.status == "FINISHED" and run.data.tags["status"] == "finished"
    history = MlflowClient(sqlite_tracking_uri).get_metric_history(run.info.run_id, "val/loss")
    assert sorted(m.step for m in history) == [4, 8, 12]


def test_checkpoint_is_weights_only_and_guarded(tiny_config, tmp_path) -> None:
    config = tiny_config(max_steps=4, eval_every=4)
    result = train(config, mlflow_logging=False, progress_bar=False)
    checkpoint = torch.load(result.checkpoint_path, weights_only=True)
    assert checkpoint["harness"]["config"] == config.model_dump(mode="json")
    assert checkpoint["global_step"] == 4

    corrupt = tmp_path / "corrupt.ckpt"
    corrupt.write_bytes(b"not a checkpoint at all")
    with pytest.raises(InputError, match="cannot be read"):
        train(config, resume_from=corrupt, mlflow_logging=False, progress_bar=False)
    with pytest.raises(InputError, match="seed"):
        train(tiny_config(seed=99), resume_from=result.checkpoint_path, mlflow_logging=False, progress_bar=False)
    with pytest.raises(InputError, match="does not exist"):
        train(config, resume_from=tmp_path / "nowhere.ckpt", mlflow_logging=False, progress_bar=False)


def test_checkpoint_keeps_no_tracking_password(tiny_config, monkeypatch) -> None:
    from harness.training.plan import config_from_checkpoint

    uri = "http://harness:pw-SECRET-51c2@127.0.0.1:5999"
    config = tiny_config(max_steps=2, eval_every=2, tracking_uri=uri)
    result = train(config, mlflow_logging=False, progress_bar=False)
    assert b"pw-SECRET-51c2" not in Path(result.checkpoint_path).read_bytes()
    saved = torch.load(result.checkpoint_path, weights_only=True)["harness"]["config"]
    assert saved["tracking_uri"] == "http://harness:***@127.0.0.1:5999"

    # Resuming needs the password back: from the environment when it names the same
    # server, from --tracking-uri, else a clear error.
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with pytest.raises(InputError, match="pass --tracking-uri with the password"):
        config_from_checkpoint(result.checkpoint_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://harness:other@127.0.0.1:6000")
    with pytest.raises(InputError, match="pass --tracking-uri"):
        config_from_checkpoint(result.checkpoint_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    assert config_from_checkpoint(result.checkpoint_path).tracking_uri == uri
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    assert config_from_checkpoint(result.checkpoint_path, tracking_uri=uri).tracking_uri == uri


def test_divergence_is_a_status_not_an_exception(tiny_config, sqlite_tracking_uri) -> None:
    config = tiny_config(
        lr=1e6,
        min_lr=0.0,
        warmup_steps=0,
        grad_clip=0.0,
        max_steps=30,
        checkpoint_every=1,
        tracking_uri=sqlite_tracking_uri,
    )
    result = train(config, progress_bar=False)
    assert result.status == "diverged"
    assert result.steps < 30 and math.isnan(result.final_val_loss) and result.window_losses == {}
    (run,) = _runs(sqlite_tracking_uri)
    assert run.data.tags["status"] == "diverged" and "diverged_at_step" in run.data.tags
    assert run.info.status == "FINISHED"
    assert "window_losses.parquet" not in {
        a.path for a in MlflowClient(sqlite_tracking_uri).list_artifacts(run.info.run_id)
    }
    # Checkpoints stop before the bad step: the last one holds a finite model.
    last = Path(config.checkpoint_dir) / "last.ckpt"
    if last.exists():
        state = torch.load(last, weights_only=True)
        assert state["global_step"] < int(run.data.tags["diverged_at_step"])
        assert all(torch.isfinite(v).all() for v in state["state_dict"].values() if v.is_floating_point())


def test_ungated_variant_and_mlflow_record(tiny_config, sqlite_tracking_uri) -> None:
    import polars as pl

    result = train(
        tiny_config(variant="baseline", max_steps=5, eval_every=4, tracking_uri=sqlite_tracking_uri, experiment="unit"),
        progress_bar=False,
    )
    assert result.tau_mean is None and result.open_fraction is None
    assert not any(k.startswith(("gate/", "mope/")) for k in result.metrics)
    (run,) = _runs(sqlite_tracking_uri)
    tags, params, metrics = run.data.tags, run.data.params, run.data.metrics
    assert {
        k: tags[k] for k in ("variant", "position", "gate", "scoring", "dataset", "size", "context_length", "seed")
    } == {
        "variant": "baseline",
        "position": "sinusoidal",
        "gate": "none",
        "scoring": "dot",
        "dataset": "tinyshakespeare",
        "size": "nano",
        "context_length": "32",
        "seed": "3",
    }
    assert tags["status"] == "finished" and tags["harness.git_commit"]
    assert params["lr"] == "0.001" and params["max_steps"] == "5" and params["tau_init"] == "None"
    assert metrics["final_val_loss"] == pytest.approx(result.final_val_loss)  # MLflow's name for final/val_loss
    # Evaluated at 4 (in the loop) and 5 (final, off the evaluation grid).
    steps = [m.step for m in MlflowClient(sqlite_tracking_uri).get_metric_history(run.info.run_id, "val/loss")]
    assert sorted(steps) == [4, 5]
    local = MlflowClient(sqlite_tracking_uri).download_artifacts(run.info.run_id, "window_losses.parquet")
    frame = pl.read_parquet(local)
    assert frame.columns == ["split", "window", "loss"]
    assert frame.filter(pl.col("split") == "val")["loss"].to_numpy().tolist() == result.window_losses["val"].tolist()


def test_a_diagnostic_variant_trains_with_a_warning_and_a_tag(tiny_config, sqlite_tracking_uri) -> None:
    """``ega-leaky`` reads future tokens: it may be trained (to measure what the leak fakes),
    never silently: a warning on the console and a tag on its MLflow run."""
    from mlflow import MlflowClient

    from harness.training.plan import DiagnosticVariantWarning

    config = tiny_config(variant="ega-leaky", max_steps=2, eval_every=2, tracking_uri=sqlite_tracking_uri)
    with pytest.warns(DiagnosticVariantWarning, match="'ega-leaky' is a diagnostic, not a model"):
        result = train(config, progress_bar=False)
    run = MlflowClient(sqlite_tracking_uri).get_run(result.mlflow_run_id)
    assert run.data.tags["harness.diagnostic"] == "leaks future tokens"
    # a model carries no such tag
    plain = train(
        tiny_config(variant="ega", max_steps=2, eval_every=2, tracking_uri=sqlite_tracking_uri), progress_bar=False
    )
    assert "harness.diagnostic" not in MlflowClient(sqlite_tracking_uri).get_run(plain.mlflow_run_id).data.tags


def test_the_final_evaluation_reports_the_loss_by_position_bucket(tiny_config) -> None:
    """``final/val_loss_first64`` is the final set's loss over positions 0..63 and
    ``final/val_loss_after64`` over 64..T-1, recomputed here from the checkpoint's model; with
    64 and T - 64 positions they average to ``final/val_loss``. At T <= 64 there is no second
    bucket (and the first is the whole window)."""
    from harness.datasets import eval_window_starts, load, window_batch
    from harness.models import build_model

    result = train(tiny_config(context_length=96, max_steps=2, eval_every=2), mlflow_logging=False, progress_bar=False)
    first, after = result.val_loss_first64, result.val_loss_after64
    assert first is not None and after is not None
    assert (64 * first + 32 * after) / 96 == pytest.approx(result.final_val_loss, rel=1e-6)  # float32 window means
    state = torch.load(result.checkpoint_path, weights_only=True)["state_dict"]
    corpus = load("tinyshakespeare")
    model = build_model("ega-mope", size="nano", vocab_size=corpus.vocab_size, block_size=96)
    model.load_state_dict({k.removeprefix("model."): v for k, v in state.items()})
    model.eval()
    starts = eval_window_starts(len(corpus.val), block_size=96, max_windows=8)
    x, y = (torch.from_numpy(a) for a in window_batch(corpus.val, starts, block_size=96))
    with torch.no_grad():
        per_char = F.cross_entropy(model(x).transpose(1, 2), y, reduction="none").double()  # (N, T)
    assert first == pytest.approx(float(per_char[:, :64].mean()), rel=1e-5)
    assert after == pytest.approx(float(per_char[:, 64:].mean()), rel=1e-5)
    assert result_row(result, get_variant("ega-mope"))["val_loss_after64"] == after

    short = train(tiny_config(context_length=32, max_steps=2, eval_every=2), mlflow_logging=False, progress_bar=False)
    assert short.val_loss_after64 is None
    assert short.val_loss_first64 == pytest.approx(short.final_val_loss, rel=1e-6)
