"""``harness train``: the acceptance command, bad input (exit 2, no RUNNING MLflow run)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow import MlflowClient

from harness.cli import main

ACCEPTANCE = [
    "train",
    "--variant",
    "ega-mope",
    "--dataset",
    "tinyshakespeare",
    "--size",
    "nano",
    "--context-length",
    "64",
    "--batch-size",
    "8",
    "--max-steps",
    "20",
    "--seed",
    "3",
]


def _runs(uri: str) -> list:
    client = MlflowClient(uri)
    return [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])]


# The documented command whole: a subprocess, 20 steps and the whole-split final evaluation
# (14 s alone, 50 s beside the other worker).
@pytest.mark.slow
def test_acceptance_command(tmp_path: Path, sqlite_tracking_uri: str, shared_data_dir: Path) -> None:
    out = subprocess.run(
        # --data-dir relative to the folder the command starts in: recorded as the folder it names
        [
            *[sys.executable, "-m", "harness.cli", *ACCEPTANCE, "--tracking-uri", sqlite_tracking_uri],
            "--data-dir",
            os.path.relpath(shared_data_dir, tmp_path),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "final val loss" in out.stdout and "MLflow run" in out.stdout
    (run,) = _runs(sqlite_tracking_uri)
    assert run.info.status == "FINISHED" and run.data.tags["status"] == "finished"
    assert run.info.run_id in out.stdout
    assert run.data.params["data_dir"] == str(shared_data_dir.resolve())
    metrics = run.data.metrics
    for name in (
        "val/loss",
        "val/bpc",
        "train/loss",
        "gen_gap",
        "throughput/tokens_per_s",
        "gate/tau/l0h0",
        "gate/alpha/l1h1",
        "gate/open_fraction",
        "mope/omega_mean",
        "mope/sigma_min",
        "final_val_loss",  # end-of-run numbers: slash-less in MLflow (after the curves)
        "best/val_loss",
        "final_train_loss",
        "final_gen_gap",
        "final_tau_mean",
        "final_open_fraction",
        "final_tokens_per_s",
        "num_parameters",
    ):
        assert name in metrics, name
    artifacts = {a.path for a in MlflowClient(sqlite_tracking_uri).list_artifacts(run.info.run_id)}
    assert {"window_losses.parquet", "gate_parameters.parquet", "mope_parameters.parquet"} <= artifacts
    assert (tmp_path / "checkpoints").is_dir()  # default checkpoint folder: ./checkpoints/<run>


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--variant", "no-such-variant"], "no-such-variant"),
        (["--variant", "baseline", "--dataset", "no-such-corpus"], "no-such-corpus"),
        (["--variant", "baseline", "--size", "gigantic"], "gigantic"),
        (["--variant", "baseline", "--context-length", "9000"], "context length 9000"),
        (["--variant", "baseline", "--accelerator", "tpu"], "accelerator"),
        (["--variant", "baseline", "--max-steps", "0"], "max_steps"),
        (["--variant", "baseline", "--position", "fourier"], "fourier"),
        (["--variant", "baseline", "--tau-init", "0.3"], "tau_init"),
        (["--variant", "baseline", "--attention-dropout", "1.5"], "attention_dropout"),
        (["--dataset", "tinyshakespeare"], "--variant is required"),
    ],
)
def test_bad_input_exits_2_before_any_run(args, message, sqlite_tracking_uri, capsys, shared_data_dir) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--max-steps", "2", "--tracking-uri", sqlite_tracking_uri, *args])  # later options win
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    db = Path(sqlite_tracking_uri.removeprefix("sqlite:///"))
    assert not db.exists() or not _runs(sqlite_tracking_uri)  # validated before the store is touched


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="a GPU is present")
def test_gpu_without_cuda_exits_2(sqlite_tracking_uri, capsys, shared_data_dir) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--variant", "baseline", "--accelerator", "gpu", "--tracking-uri", sqlite_tracking_uri])
    assert exit_info.value.code == 2
    assert "no CUDA device" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("sqlite:///{tmp}/missing-dir/mlflow.db", "does not exist"),
        ("sqlite:///{tmp}/a-file/mlflow.db", "does not exist"),
        ("file:///{tmp}/mlruns", "file store"),
        ("{tmp}/mlruns", "file store"),
        ("sqlite:///{tmp}/not-a-db", "cannot use tracking URI"),
    ],
)
def test_unusable_tracking_uri_exits_2(uri, message, tmp_path, capsys, shared_data_dir) -> None:
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "not-a-db").write_text("this is not an SQLite database" * 100)
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "train",
                "--variant",
                "baseline",
                "--max-steps",
                "2",
                "--checkpoint-dir",
                str(tmp_path / "ck"),
                "--tracking-uri",
                uri.format(tmp=tmp_path),
            ]
        )
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "ck").exists()  # nothing trained, nothing written


def test_resume_from_the_cli(tiny_config, sqlite_tracking_uri) -> None:
    from lightning.pytorch import Callback

    from harness.training import train

    class Crash(Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
            if trainer.global_step == 6:
                raise RuntimeError("simulated crash")

    config = tiny_config(max_steps=8, eval_every=4, tracking_uri=sqlite_tracking_uri)
    with pytest.raises(RuntimeError, match="simulated crash"):
        train(config, callbacks=[Crash()], progress_bar=False)

    with pytest.raises(SystemExit) as exit_info:  # a different seed is another run
        main(["train", "--resume", config.checkpoint_dir, "--seed", "4"])
    assert exit_info.value.code == 2

    with pytest.raises(SystemExit) as exit_info:  # everything else comes from the checkpoint
        main(["train", "--resume", config.checkpoint_dir])
    assert exit_info.value.code == 0
    (run,) = _runs(sqlite_tracking_uri)
    assert run.info.status == "FINISHED" and "final_val_loss" in run.data.metrics
