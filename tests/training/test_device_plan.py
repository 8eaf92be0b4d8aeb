"""The device plan (harness.training.device_plan): chosen in one place, and the GPU's mixed
plan exercised on CPU (bf16 autocast, fused AdamW, clipping by the module, padded output)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch import Callback

from harness.cli import main
from harness.errors import InputError
from harness.models import build_model
from harness.training.config import TrainConfig
from harness.training.device_plan import CHECKPOINTS_PER_RUN_GPU, VOCAB_MULTIPLE, choose_device_plan
from harness.training.run import train


def _plan(cuda: bool = False, bf16: bool = True, **fields: Any):
    return choose_device_plan(TrainConfig(**fields), cuda_available=cuda, bf16_supported=bf16, cpus=3)


def test_the_cpu_plan_is_the_fp32_reference() -> None:
    plan = _plan()
    assert (plan.accelerator, plan.precision, plan.fused_optimizer) == ("cpu", "32-true", False)
    assert plan.clip_grad_norm == 1.0 and plan.checkpoint_every is None and plan.loss_check_every == 1
    assert plan.vocab_multiple == 1 and not plan.pin_memory and plan.matmul_precision == "highest"
    assert plan.threads == 3 and _plan(num_threads=1).threads == 1


def test_the_gpu_plan_mixes_precision_fuses_the_optimizer_and_checkpoints_a_few_times() -> None:
    plan = _plan(cuda=True, max_steps=5000, eval_every=250)
    assert (plan.accelerator, plan.precision, plan.fused_optimizer) == ("gpu", "bf16-mixed", True)
    assert plan.clip_grad_norm == 1.0 and plan.vocab_multiple == VOCAB_MULTIPLE and plan.loss_check_every > 1
    assert plan.pin_memory and plan.matmul_precision == "high"
    # 5000 steps: every 1250, a multiple of eval_every, so each checkpoint goes out with an evaluation.
    assert plan.checkpoint_every == 1250 and plan.checkpoint_every % 250 == 0
    assert math.ceil(5000 / plan.checkpoint_every) == CHECKPOINTS_PER_RUN_GPU
    assert _plan(cuda=True, max_steps=300, eval_every=100).checkpoint_every == 100  # never between evaluations
    assert _plan(cuda=True, checkpoint_every=7).checkpoint_every == 7  # the config wins
    old = _plan(cuda=True, bf16=False)  # no bf16: fp16 with a scaler, which must unscale before clipping
    assert old.precision == "16-mixed" and not old.fused_optimizer


def test_bf16_on_cpu_is_the_mixed_plan_and_bad_choices_are_input_errors() -> None:
    plan = _plan(precision="bf16-mixed")
    assert (plan.accelerator, plan.precision, plan.fused_optimizer, plan.vocab_multiple) == (
        "cpu",
        "bf16-mixed",
        True,
        VOCAB_MULTIPLE,
    )
    assert plan.checkpoint_every is None  # the device, not the precision, sets the cadence
    with pytest.raises(InputError, match="16-mixed' needs a GPU"):
        _plan(precision="16-mixed")
    with pytest.raises(InputError, match="no CUDA device"):
        _plan(accelerator="gpu")
    with pytest.raises(InputError, match="no bf16"):
        _plan(cuda=True, bf16=False, precision="bf16-mixed")


def test_the_padded_output_layer_gives_the_same_loss_and_gradients() -> None:
    """Logits padded to a multiple of 64 with -inf: cross-entropy and its gradients equal the
    unpadded ones (the padding's probabilities are exactly 0)."""
    torch.manual_seed(0)
    model = build_model("ega-mope", size="nano", vocab_size=65, block_size=32)
    x, y = torch.randint(65, (3, 32)), torch.randint(65, (3, 32))
    losses, grads = [], []
    for multiple in (1, VOCAB_MULTIPLE):
        logits = model(x, vocab_multiple=multiple)
        assert logits.shape == (3, 32, 65 if multiple == 1 else 128)
        if multiple > 1:
            assert torch.isneginf(logits[..., 65:]).all() and torch.isfinite(logits[..., :65]).all()
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))
        losses.append(loss)
        grads.append(torch.autograd.grad(loss, model.wte.weight)[0])
    torch.testing.assert_close(losses[1], losses[0], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-5, atol=1e-7)


class GradientsAfterClipping(Callback):
    """The global gradient norm each optimizer step used (the gradients stay until the next step's zero_grad)."""

    def __init__(self) -> None:
        self.norms: list[float] = []
        self.fused: bool | None = None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        grads = [p.grad for p in pl_module.parameters() if p.grad is not None]
        self.norms.append(float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))))
        self.fused = bool(trainer.optimizers[0].defaults.get("fused"))


def test_the_mixed_plan_trains_with_the_fused_optimizer_and_clips(tiny_config) -> None:
    """bf16-mixed on CPU: Lightning's own clipping would refuse the fused AdamW ("does not allow
    for gradient clipping"); the module clips every step to grad_clip."""
    seen = GradientsAfterClipping()
    config = tiny_config(precision="bf16-mixed", grad_clip=1e-3, max_steps=8)
    result = train(config, callbacks=[seen], mlflow_logging=False, progress_bar=False)
    assert result.status == "finished" and math.isfinite(result.final_val_loss)
    assert "bf16-mixed" in result.device_plan and "fused" in result.device_plan
    assert seen.fused is True and len(seen.norms) == 8
    assert all(norm <= 1e-3 * (1 + 1e-4) for norm in seen.norms), seen.norms


def test_harness_train_runs_the_gpu_plan_on_cpu(
    tmp_path: Path, sqlite_tracking_uri: str, shared_data_dir: Path, capsys, monkeypatch
) -> None:
    """The acceptance check of the mixed plan: ``harness train --precision bf16-mixed`` of ega-mope."""
    monkeypatch.setenv("COLUMNS", "250")  # the summary table on one line per row
    args = ["train", "--variant", "ega-mope", "--size", "nano", "--precision", "bf16-mixed", "--accelerator", "cpu"]
    args += ["--context-length", "32", "--batch-size", "8", "--max-steps", "30", "--eval-every", "10"]
    args += ["--eval-windows", "8", "--final-eval-windows", "8", "--num-threads", "1"]
    args += ["--checkpoint-dir", str(tmp_path / "ck")]  # 8 final windows: the whole split in bf16 takes seconds
    with pytest.raises(SystemExit) as exit_info:
        main([*args, "--tracking-uri", sqlite_tracking_uri])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "finished" in out and "bf16-mixed" in out and "AdamW (fused)" in out and "clip 1" in out
    assert (tmp_path / "ck" / "last.ckpt").is_file()


def test_the_cli_rejects_fp16_on_cpu(sqlite_tracking_uri: str, shared_data_dir: Path, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--variant", "baseline", "--precision", "16-mixed", "--tracking-uri", sqlite_tracking_uri])
    assert exit_info.value.code == 2
    assert "needs a GPU" in capsys.readouterr().err
