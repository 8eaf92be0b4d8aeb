"""One evaluation of a :class:`~harness.training.module.CharLMModule` (one validation loop), from
its start to what it read: the loss of every window of the sets it reads, the gate readings
(:class:`~harness.training.gate_readings.GateReadings`) and the energy-direction probe
(:class:`~harness.training.energy_probe.EnergyDirectionProbe`).

The periodic set of the validation and training splits is read at every evaluation; the final
set of every split (the test split included) at the last one only. The losses are per window,
the mean per-character cross-entropy of the window,

    loss(w) = -(1/T) sum_t log p(y_t | x_{<=t})       (nats),

kept in float64 on the host, NaN until the window is read; the module turns them into the
evaluation's metrics (:meth:`~harness.training.module.CharLMModule.on_validation_epoch_end`).

The final evaluation also keeps the loss by position over its windows W, so that runs of
different context lengths can be compared on the same positions: for a bucket B of positions,

    loss_B = (1/(|W| |B|)) sum_{w in W} sum_{t in B} -log p(y_t | x_{<=t})

with B = positions 0..63 and positions 64..T-1 (:data:`POSITION_BUCKET`; the second is empty
when T <= 64). A T = 512 model's loss averages positions a T = 64 model never sees; its first
bucket does not.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from harness.training.data import FINAL, PERIODIC
from harness.training.energy_probe import EnergyDirectionProbe
from harness.training.gate_readings import GateReadings

#: The edge of the position buckets of the final evaluation: positions below it, and the rest.
POSITION_BUCKET = 64


class EvaluationPass:
    """What one evaluation has read so far; made at ``on_validation_start``.

    Parameters
    ----------
    model
        The :class:`harness.models.CharTransformer` evaluated (eager: evaluation never runs the
        compiled forward).
    datamodule
        The run's :class:`~harness.training.data.CharDataModule`, whose window sets say how many
        windows each split has (None: no windows).
    final
        Whether this is the final evaluation (it also reads the final set of every split).
    has_gate
        Whether the model has sigmoid key gates to read (open fractions, content precision, the
        energy direction).
    """

    def __init__(self, model: torch.nn.Module, datamodule: Any, *, final: bool, has_gate: bool) -> None:
        self.model = model
        self.final = final
        self.has_gate = has_gate
        sets = (PERIODIC, FINAL) if final else (PERIODIC,)
        L, H = model.size.n_layer, model.size.n_head
        # losses[set][split]: one loss per window of that set, NaN until read
        self.losses: dict[str, dict[str, Tensor]] = {
            window_set: {
                split: torch.full((len(w),), math.nan, dtype=torch.float64)
                for split, w in (datamodule.window_set(window_set) if datamodule is not None else {}).items()
            }
            for window_set in sets
        }
        # position_sums[split]: (T,) the final set's per-position loss summed over its windows
        self.position_sums: dict[str, Tensor] = {}
        self.position_windows: dict[str, int] = {}
        self.gates = GateReadings(L, H)
        self.energy_probe = EnergyDirectionProbe(model) if has_gate else None

    def reads(self, split: str, window_set: str) -> bool:
        """Whether this evaluation reads ``split``'s ``window_set``: the periodic set of val and
        train at every evaluation, the final set of every split at the last one only (the test
        split is looked at once, at the end)."""
        if window_set == FINAL:
            return self.final
        return split != "test"

    def read_batch(self, batch: dict[str, Any]) -> None:
        """Read one evaluation batch (``x``, ``y``, its ``split``, ``set`` and ``window`` indices,
        ``content`` labels where the corpus has them): the loss of each of its windows and, on the
        set the final numbers rest on, the gates."""
        split, window_set = batch["split"], batch.get("set", PERIODIC)
        if not self.reads(split, window_set):
            return
        x, y = batch["x"], batch["y"]
        # The gate readings of an evaluation come from the set its final numbers rest on.
        read_gates = split == "val" and window_set == (FINAL if self.final else PERIODIC)
        gates = None
        if self.energy_probe is not None:
            self.energy_probe.active = read_gates
        if read_gates and self.has_gate:
            logits, gates = self.model.forward_with_gates(x)  # gates: (L, N, H, T)
        else:
            logits = self.model(x)  # (N, T, V)
        per_char = F.cross_entropy(logits.float().transpose(1, 2), y, reduction="none")  # (N, T)
        self.losses[window_set][split][batch["window"].cpu()] = per_char.mean(dim=1).double().cpu()
        if window_set == FINAL:
            sums = per_char.double().sum(dim=0).cpu()  # (T,)
            self.position_sums[split] = self.position_sums.get(split, 0) + sums
            self.position_windows[split] = self.position_windows.get(split, 0) + per_char.shape[0]
        if gates is not None:
            self.gates.add(gates.float(), batch.get("content"))

    def read_losses(self) -> dict[str, dict[str, Tensor]]:
        """``{window_set: {split: per-window losses}}`` of the splits this evaluation read (a
        split none of whose windows was read is left out)."""
        return {
            window_set: {s: v for s, v in by_split.items() if not torch.isnan(v).all()}
            for window_set, by_split in self.losses.items()
        }

    def position_losses(self, split: str) -> dict[str, float]:
        """The final set's loss of ``split`` by position bucket (see the module docstring):
        ``first64`` (positions 0..63) and ``after64`` (positions 64..T-1, when T > 64)."""
        if split not in self.position_sums:
            return {}
        per_position = self.position_sums[split] / self.position_windows[split]  # (T,)
        edge = POSITION_BUCKET
        buckets = {f"first{edge}": per_position[:edge]}
        if per_position.numel() > edge:
            buckets[f"after{edge}"] = per_position[edge:]
        return {name: float(values.mean()) for name, values in buckets.items()}

    def gate_summary(self) -> dict[str, float]:
        """The ``gate/*`` metrics of the evaluation: the gate readings' summary, then the energy
        probe's (which this closes: its hooks leave the model)."""
        summary = self.gates.summary()
        if self.energy_probe is not None:
            summary.update(self.energy_probe.metrics())
            self.energy_probe.close()
            self.energy_probe = None
        return summary
