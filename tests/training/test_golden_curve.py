"""The golden loss curve (tests/golden_curve.py): ``nano`` trained for 50 steps at a fixed
seed on CPU gives the stored training-batch losses and evaluations, to float tolerance.

A failure means the initialisation, the data order, the dropout masks, the optimiser or
the schedule changed. If that change was intended, regenerate the curve
(``python tests/golden_curve.py``) and commit the asset with the change (docs/training.md,
"The golden loss curve")."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from golden_curve import ASSET, EVAL_METRICS, REGENERATE, SETTINGS, VARIANTS, measure_curve

#: float32 losses on one thread: bit-identical from run to run on one machine; the
#: tolerance (a few hundred float32 ulps) leaves room for another CPU's kernels only. A
#: change of initialisation, data order or schedule moves the losses by far more (1e-3 and up).
RTOL = 1e-5


@pytest.fixture(scope="module")
def stored() -> dict:
    if not ASSET.is_file():
        pytest.fail(f"{ASSET} is missing: create it with `{REGENERATE}`")
    return json.loads(ASSET.read_text())


def test_the_stored_curve_is_of_these_settings(stored: dict) -> None:
    assert stored["settings"] == SETTINGS, f"the settings changed: regenerate the curve (`{REGENERATE}`)"
    assert sorted(stored["curves"]) == sorted(VARIANTS)


@pytest.mark.parametrize("variant", VARIANTS)
def test_nano_trains_along_the_golden_curve(variant: str, stored: dict, shared_data_dir: Path) -> None:
    expected = stored["curves"][variant]
    curve = measure_curve(variant, str(shared_data_dir))
    hint = f"{variant}: the loss curve moved; if the change was intended, run `{REGENERATE}`"
    assert len(curve["train_batch_loss"]) == SETTINGS["max_steps"] == len(expected["train_batch_loss"])
    np.testing.assert_allclose(curve["train_batch_loss"], expected["train_batch_loss"], rtol=RTOL, err_msg=hint)
    assert (
        [e["step"] for e in curve["evaluations"]]
        == [e["step"] for e in expected["evaluations"]]
        == [
            10,
            20,
            30,
            40,
            50,
        ]
    )
    for name in EVAL_METRICS:
        np.testing.assert_allclose(
            [e[name] for e in curve["evaluations"]],
            [e[name] for e in expected["evaluations"]],
            rtol=RTOL,
            err_msg=f"{hint} ({name})",
        )
    # The curve is a training curve, not a constant: the loss falls from about ln(65).
    assert expected["train_batch_loss"][0] > expected["evaluations"][-1]["train/loss"] + 0.5
