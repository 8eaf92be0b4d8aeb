"""``train_fraction``: training on a prefix of the training split (the regime study's data
option): the prefix, the refusal of one too small for a batch, and the run and study that use it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from harness_support import run_harness

from harness.datasets import Corpus, check_train_fraction, train_prefix_length, with_train_prefix
from harness.errors import InputError
from harness.training.config import TrainConfig


def _corpus(n_train: int = 10_000) -> Corpus:
    rng = np.random.default_rng(0)
    return Corpus(
        name="toy",
        train=rng.integers(0, 5, n_train).astype(np.uint8),
        val=rng.integers(0, 5, 2_000).astype(np.uint8),
        test=None,
        vocab=tuple("abcde"),
    )


def test_the_prefix_is_the_first_fraction_and_a_view() -> None:
    corpus = _corpus()
    half = with_train_prefix(corpus, 0.25)
    assert len(half.train) == train_prefix_length(10_000, 0.25) == 2_500
    np.testing.assert_array_equal(half.train, corpus.train[:2_500])
    assert np.shares_memory(half.train, corpus.train)
    assert half.val is corpus.val  # validation stays whole
    assert with_train_prefix(corpus, None) is corpus and with_train_prefix(corpus, 1.0) is corpus


def test_a_prefix_smaller_than_one_batch_is_refused_with_a_fraction_that_would_do() -> None:
    check_train_fraction(10_000, 0.21, block_size=128, batch_size=16)  # 2,100 tokens: 16 windows
    with pytest.raises(InputError, match=r"15 windows of 128 characters, fewer than one batch of 16") as err:
        check_train_fraction(10_000, 0.2, block_size=128, batch_size=16)
    needed = float(str(err.value).split("train_fraction >= ")[1].split(" ")[0])
    check_train_fraction(10_000, needed, block_size=128, batch_size=16)


def test_the_config_checks_the_range_and_the_fraction_is_in_the_resume_contract() -> None:
    assert TrainConfig(train_fraction=0.3).train_fraction == 0.3
    for bad in (0.0, 1.5, -0.1):
        with pytest.raises(ValueError, match="train_fraction"):
            TrainConfig(train_fraction=bad)
    assert "train_fraction" in TrainConfig.resume_contract_fields()
    assert TrainConfig(train_fraction=0.3).run_params()["train_fraction"] == 0.3  # an MLflow param


def test_harness_train_refuses_a_tiny_fraction_with_exit_2(tmp_path: Path) -> None:
    out = run_harness(
        "train", "--variant", "baseline", "--context-length", "128", "--batch-size", "16", "--max-steps", "2",
        "--train-fraction", "0.0005", "--tracking-uri", f"sqlite:///{tmp_path}/m.db", cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    assert "fewer than one batch of 16" in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "m.db").exists()
