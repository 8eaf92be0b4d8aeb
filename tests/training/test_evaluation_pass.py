"""One evaluation's reading (harness.training.evaluation_pass): the per-window losses against
cross-entropy computed directly, which sets and splits an evaluation reads, and the gate
summary with the energy probe closed after it."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from harness.models import build_model
from harness.training.data import FINAL, PERIODIC
from harness.training.evaluation_pass import EvaluationPass

VOCAB, T = 11, 16


class _Windows:
    """A stand-in for the data module: ``n`` windows per split of each set."""

    def __init__(self, periodic: dict[str, int], final: dict[str, int]) -> None:
        self.sets = {PERIODIC: periodic, FINAL: final}

    def window_set(self, window_set: str) -> dict[str, list[int]]:
        return {split: list(range(n)) for split, n in self.sets[window_set].items()}


def _batch(split: str, window_set: str, windows: list[int], *, seed: int) -> dict[str, Any]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(VOCAB, (len(windows), T), generator=g)
    y = torch.randint(VOCAB, (len(windows), T), generator=g)
    return {"x": x, "y": y, "split": split, "set": window_set, "window": torch.tensor(windows)}


def test_the_losses_are_the_mean_cross_entropy_of_each_window_read() -> None:
    torch.manual_seed(0)
    model = build_model("baseline", size="nano", vocab_size=VOCAB, block_size=T).eval()
    windows = _Windows({"val": 3, "train": 2, "test": 2}, {"val": 4, "train": 4, "test": 2})
    evaluation = EvaluationPass(model, windows, final=False, has_gate=False)
    assert set(evaluation.losses) == {PERIODIC}
    assert [evaluation.reads(s, PERIODIC) for s in ("val", "train", "test")] == [True, True, False]
    assert not evaluation.reads("val", FINAL)
    batch = _batch("val", PERIODIC, [2, 0], seed=1)
    with torch.no_grad():
        evaluation.read_batch(batch)
        evaluation.read_batch(_batch("test", PERIODIC, [0, 1], seed=2))  # not read before the end
        logits = model(batch["x"])  # (N, T, V)
    expected = torch.stack([F.cross_entropy(logits[i], batch["y"][i]) for i in range(2)]).double()
    val = evaluation.losses[PERIODIC]["val"]
    torch.testing.assert_close(val[[2, 0]], expected, rtol=1e-6, atol=1e-9)
    assert math.isnan(val[1]) and torch.isnan(evaluation.losses[PERIODIC]["test"]).all()
    assert set(evaluation.read_losses()[PERIODIC]) == {"val"}  # splits with no window read are left out
    assert evaluation.gate_summary() == evaluation.gates.summary()


def test_the_final_evaluation_reads_every_split_of_the_final_set_and_closes_the_probe() -> None:
    torch.manual_seed(0)
    model = build_model("ega", size="nano", vocab_size=VOCAB, block_size=T).eval()
    windows = _Windows({"val": 2, "train": 2}, {"val": 2, "train": 2, "test": 2})
    evaluation = EvaluationPass(model, windows, final=True, has_gate=True)
    assert set(evaluation.losses) == {PERIODIC, FINAL} and evaluation.reads("test", FINAL)
    with torch.no_grad():
        for split in ("val", "train", "test"):
            evaluation.read_batch(_batch(split, FINAL, [0, 1], seed=3))
    assert set(evaluation.read_losses()[FINAL]) == {"val", "train", "test"}
    summary = evaluation.gate_summary()
    assert "gate/open_fraction" in summary and "gate/pc1_cosine" in summary
    assert evaluation.energy_probe is None
    assert not any(g._forward_pre_hooks for g in model.key_gates())
