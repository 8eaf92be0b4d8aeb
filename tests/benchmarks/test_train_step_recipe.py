"""``harness bench train`` times the step the CPU studies run: their dropout (residual and on
the attention weights, which on CPU decides SDPA's kernel) is the benchmark's."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from harness.bench.train_step import STUDY_DROPOUT

STUDIES = Path(__file__).resolve().parents[2] / "studies"
CPU_SPECS = sorted([*STUDIES.glob("*-cpu.yaml"), STUDIES / "smoke.yaml"])


@pytest.mark.parametrize("spec", CPU_SPECS, ids=lambda p: p.stem)
def test_the_benchmarked_step_has_the_cpu_studies_dropout(spec: Path) -> None:
    train = yaml.safe_load(spec.read_text())["train"]
    residual = float(train.get("dropout", 0.2))
    assert {"dropout": residual, "attention_dropout": float(train.get("attention_dropout", residual))} == STUDY_DROPOUT
