"""Custom model shapes in training: ``TrainConfig`` fields, ``harness train --n-layer/--n-head/--d-model``
(valid: the run name and MLflow params carry the shape; invalid: exit 2 naming the field, no MLflow run)."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow import MlflowClient
from pydantic import ValidationError

from harness.cli import main
from harness.training.config import TrainConfig


def _runs(uri: str) -> list:
    client = MlflowClient(uri)
    return [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])]


def test_config_shape_fields() -> None:
    assert TrainConfig().model_size().name == "nano"  # a preset by default
    named = TrainConfig(n_layer=4, n_head=4, d_model=128)  # no size: named after the shape
    assert named.size == "L4H4d128" and named.model_size().shape == "L4H4d128"
    w128 = TrainConfig(size="w128", n_layer=4, n_head=4, d_model=128)
    assert w128.model_size().tag == "w128-L4H4d128"
    assert TrainConfig(size="nano", n_layer=2, n_head=2, d_model=64).model_size().is_preset
    with pytest.raises(ValidationError, match="n_layer, n_head and d_model together; d_model set without n_layer"):
        TrainConfig(d_model=128)
    with pytest.raises(ValidationError, match="d_model=100 is not divisible by n_head=8"):
        TrainConfig(n_layer=2, n_head=8, d_model=100)
    with pytest.raises(ValidationError, match="'paper' is the preset L6H8d256"):
        TrainConfig(size="paper", n_layer=2, n_head=8, d_model=128)
    with pytest.raises(ValidationError, match="greater than 0"):
        TrainConfig(n_layer=0, n_head=1, d_model=8)


def test_train_cli_custom_shape(tmp_path: Path, sqlite_tracking_uri: str, shared_data_dir: Path) -> None:
    args = ["--variant", "ega", "--context-length", "16", "--batch-size", "4", "--max-steps", "4"]
    args += ["--eval-every", "2", "--eval-windows", "4", "--final-eval-windows", "4", "--num-threads", "1"]
    args += ["--checkpoint-dir", str(tmp_path / "c")]
    with pytest.raises(SystemExit) as exit_info:
        main(["train", *args, "--n-layer", "3", "--d-model", "32", "--tracking-uri", sqlite_tracking_uri])
    assert exit_info.value.code == 0
    (run,) = _runs(sqlite_tracking_uri)
    assert run.info.run_name == "ega-tinyshakespeare-L3H2d32-T16-s0"  # heads from the nano preset
    params = run.data.params
    assert (params["size"], params["n_layer"], params["n_head"], params["d_model"]) == ("L3H2d32", "3", "2", "32")
    assert run.data.tags["size"] == "L3H2d32"
    history = MlflowClient(sqlite_tracking_uri).get_metric_history(run.info.run_id, "gate/tau_grad_norm")
    assert sorted(m.step for m in history) == [2, 4] and all(m.value > 0 for m in history)  # at each evaluation
    for name in ("gate/alpha_grad_norm", "gate/tau_grad_mean_norm", "gate/tau_grad_norm/l2"):
        assert name in run.data.metrics, name
    assert run.data.metrics["gate/tau_grad_mean_norm"] <= run.data.metrics["gate/tau_grad_norm"] + 1e-12


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--variant", "baseline", "--n-head", "3"], "d_model=64 is not divisible by n_head=3"),
        (["--variant", "baseline", "--n-layer", "0"], "--n-layer must be a positive integer"),
        (["--variant", "baseline", "--n-head", "3", "--d-model", "33"], "needs an even width d_model"),
        (["--variant", "rope", "--n-head", "2", "--d-model", "66"], "needs an even head dimension"),
        (["--variant", "phase-mope", "--n-head", "2", "--d-model", "66"], "phase-coherence gate needs an even head"),
        (["--variant", "baseline", "--size", "huge", "--n-layer", "2"], "unknown model size 'huge'"),
    ],
)
def test_bad_shape_exits_2_before_any_run(args, message, sqlite_tracking_uri, capsys, shared_data_dir) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--max-steps", "2", "--tracking-uri", sqlite_tracking_uri, *args])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    db = Path(sqlite_tracking_uri.removeprefix("sqlite:///"))
    assert not db.exists() or not _runs(sqlite_tracking_uri)


def test_shape_flags_on_resume_change_the_checkpoints_shape(tiny_config, tmp_path: Path, capsys, monkeypatch) -> None:
    import harness.training.plan as run
    from harness.training import train

    config = tiny_config(max_steps=2, eval_every=2)
    train(config, mlflow_logging=False, progress_bar=False)
    opened = []
    load = run.load_checkpoint_meta
    monkeypatch.setattr(run, "load_checkpoint_meta", lambda path: opened.append(path) or load(path))
    with pytest.raises(SystemExit) as exit_info:  # the base is the checkpoint's nano shape (width 64)
        main(["train", "--resume", config.checkpoint_dir, "--n-head", "3"])
    assert exit_info.value.code == 2
    assert "d_model=64 is not divisible by n_head=3" in capsys.readouterr().err
    assert opened == [Path(config.checkpoint_dir)]  # opened once
    with pytest.raises(SystemExit) as exit_info:  # with --size the flags are checked before the checkpoint
        main(["train", "--resume", str(tmp_path / "missing"), "--size", "nano", "--n-layer", "0"])
    assert exit_info.value.code == 2
    assert "--n-layer must be a positive integer" in capsys.readouterr().err
