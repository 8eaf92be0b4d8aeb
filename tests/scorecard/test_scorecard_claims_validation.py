"""A user's claims file checked against what is read (issue 43): unknown studies and variants
refused with the claim, its line and the names known; numbers type-checked; a sign that
contradicts the paper's value refused; a level's band honoured, never replaced; no
``paper_setting`` needed when every claim has its own ``setting``; one clean message per error
(exit 2 from ``harness scorecard``, the file named once)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import yaml
from harness_support import REPO
from scipy import stats
from scorecard_sim import row_of, simulated_study, with_columns

from harness.errors import InputError
from harness.scorecard.claims import check_claims_against, load_claims, parse_claims
from harness.scorecard.compute import scorecard_table

EXAMPLE = REPO / "examples" / "forgetting-transformer"


def _example() -> dict:
    return yaml.safe_load((EXAMPLE / "claims.yaml").read_text())


def _write(folder: Path, data: dict) -> Path:
    path = folder / "claims.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _line_of(path: Path, claim_id: str) -> int:
    return next(i for i, text in enumerate(path.read_text().splitlines(), 1) if f"id: {claim_id}" in text)


def _results(folder: Path) -> Path:
    """A finished study's results table as ``--from`` reads it: the example's four variants."""
    rows = [
        {"study": "forgetting-transformer", "variant": v, "seed": s, "val_loss": 2.3 + 0.01 * s, "status": "finished"}
        for v in ("rope", "nope", "fox", "rope-fox")
        for s in range(3)
    ]
    path = folder / "results.parquet"
    pl.DataFrame(rows).write_parquet(path)
    return path


def _scorecard(capsys, claims: Path, results: Path) -> tuple[int, str]:
    from harness.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["scorecard", "--claims", str(claims), "--from", str(results), "--no-log", "--out", str(claims.parent)])
    return exit_info.value.code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("field", "typo", "told"),
    [
        (
            "treatment",
            "foxx",
            "treatment 'foxx' is not a variant of study 'forgetting-transformer' (did you mean 'fox'?)",
        ),
        ("study", "forgeting-transformer", "study 'forgeting-transformer' is neither a study read nor a study spec"),
    ],
)
def test_a_typo_in_a_variant_or_a_study_exits_2_naming_the_claim_its_line_and_the_names_known(
    tmp_path: Path, capsys, field: str, typo: str, told: str
) -> None:
    data = _example()
    data["claims"][1]["measures"][0][field] = typo
    path = _write(tmp_path, data)
    code, err = _scorecard(capsys, path, _results(tmp_path))
    claim = data["claims"][1]["id"]
    assert code == 2, err
    (message,) = err.strip().splitlines()  # one line, no traceback
    where = f"error: {path}: claims[1] (line {_line_of(path, claim)}) ({claim}).measures[0]: "
    assert message.startswith(where) and told in message, message
    assert "known: " in message and "forgetting-transformer" in message or "fox, rope-fox" in message
    assert message.count(str(path)) == 1


def test_the_examples_own_claims_pass_against_its_study_and_its_spec(tmp_path: Path) -> None:
    claims = load_claims(EXAMPLE / "claims.yaml")
    check_claims_against(claims, {"forgetting-transformer": ["rope", "nope", "fox", "rope-fox"]}, {})
    check_claims_against(claims, {}, {"forgetting-transformer": ["rope", "nope", "fox", "rope-fox"]})
    # a variant the spec has but the study read did not run: not a typo (a "not measured" row)
    check_claims_against(
        claims, {"forgetting-transformer": ["rope", "fox"]}, {"forgetting-transformer": ["nope", "rope-fox"]}
    )
    with pytest.raises(InputError, match=r"control 'nope' is not a variant of study 'forgetting-transformer'"):
        check_claims_against(claims, {"forgetting-transformer": ["rope", "fox", "rope-fox"]}, {})


@pytest.mark.parametrize(
    ("change", "told"),
    [
        (
            lambda c: c.update(paper_value="0.02 nats"),
            "paper_value '0.02 nats' is not a number: write the number alone, in the metric's units",
        ),
        (lambda c: c.update(sign="-"), "sign '-' contradicts paper_value 0.033"),
        (lambda c: c.update(paper_value=-0.033), "sign '+' contradicts paper_value -0.033"),
        (lambda c: c.update(margin="small"), "margin 'small' is not a number"),
        (lambda c: c.update(band=0.3), "band 0.3 must be read of a level only, not of a contrast"),
        (lambda c: c.update(runs="yes"), "runs 'yes' is not true or false"),
        (lambda c: c["setting"].update(context_length="16k"), "context_length '16k' is not a positive whole number"),
        (lambda c: c.update(measures=[{"study": "x", "treatment": "fox"}]), "missing 'control'"),
    ],
)
def test_a_bad_number_or_sign_is_one_message_naming_the_file_the_claim_its_line_and_the_field(
    tmp_path: Path, change, told: str
) -> None:
    data = _example()
    data["claims"][0]["setting"] = dict(data["paper_setting"])
    change(data["claims"][0])
    path = _write(tmp_path, data)
    with pytest.raises(InputError) as raised:
        load_claims(path)
    message = str(raised.value)
    claim = data["claims"][0]["id"]
    assert message.startswith(f"{path}: claims[0] (line {_line_of(path, claim)}) ({claim})"), message
    assert told in message and message.count(str(path)) == 1 and message.count("claims[0]") == 1, message


def test_paper_setting_is_optional_when_every_claim_has_its_own_setting(tmp_path: Path) -> None:
    data = _example()
    setting = data.pop("paper_setting")
    for claim in data["claims"]:
        claim["setting"] = dict(setting)
    claims = load_claims(_write(tmp_path, data))
    assert claims.paper_setting is None and all(c.setting.context_length == 16384 for c in claims)
    data["claims"][2].pop("setting")
    path = _write(tmp_path, data)
    with pytest.raises(
        InputError, match=r"claims\[2\] \(line \d+\) \(forget-gate-on-rope\): no setting, and the file "
    ):
        load_claims(path)


def test_a_levels_own_band_is_what_the_card_prints_and_judges() -> None:
    """A user's level claim on tau with band 0.3 around 0.35 and a study whose tau ends near
    0.55 (the study's own tau margin 0.05): judged against 0.05 to 0.65, as printed, not against
    0.3 to 0.4."""
    seeds = 8
    study = simulated_study({"ega": 0.05}, seeds=seeds)
    normal = stats.norm.ppf((np.arange(seeds) + 0.5) / seeds)  # symmetric per-seed values: no shape check trips
    tau = pl.col("seed").map_elements(lambda s: 0.55 + 0.01 * float(normal[s]), return_dtype=pl.Float64)
    study = with_columns(study, tau_mean=pl.when(pl.col("variant") == "ega").then(tau).otherwise(None), tau_init=0.0)
    claim = {
        "id": "my-tau",
        "paper": "me",
        "section": "s",
        "claim": "tau ends near 0.35, give or take 0.3",
        "kind": "level",
        "metric": "tau_mean",
        "paper_value": 0.35,
        "band": 0.3,
        "sign": "+",
        "start": "tau_init",
        "margin": 0.05,
        "setting": {"dataset": "tinyshakespeare", "size": "paper", "context_length": 256, "steps": 5000},
        "measures": [{"study": "sim", "variants": ["ega"]}],
    }
    claims = parse_claims({"papers": {"me": "My paper"}, "claims": [claim]})
    row = row_of(scorecard_table([study], claims), "my-tau")
    assert row["band"] == 0.3 and "0.05 to 0.65" in row["verdict"], row["verdict"]
    assert row["verdict_kind"] == "replicated", row["verdict"]
    assert not re.search(r"0\.3 to 0\.4", row["verdict"])
