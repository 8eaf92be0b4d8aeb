"""The claims file: every claim names variants of the zoo and a study in ``studies/`` whose
variants, corpora and analysis can measure it, at the papers' setting; the core ids are there;
a bad entry is refused naming it (and ``harness scorecard --claims`` exits 2 on it)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from harness.errors import InputError
from harness.models.variants import VARIANTS, get_variant
from harness.scorecard import CORE_IDS, load_claims, parse_claims
from harness.studies.spec.study_spec import load_spec

STUDIES = Path(__file__).resolve().parents[2] / "studies"
CLAIMS = load_claims()


def _spec(name: str):
    path = STUDIES / f"{name}.yaml"
    assert path.is_file(), f"no study {path}"
    return load_spec(path)


def _variants(spec) -> set[str]:
    return {v if isinstance(v, str) else v.name for v in spec.variants}


def test_the_core_ids_are_claims_or_their_prefixes() -> None:
    ids = [c.id for c in CLAIMS]
    for core in CORE_IDS:
        assert any(i == core or i.startswith(f"{core}-") for i in ids), core
    assert {c.id for c in CLAIMS if c.core_id == "ega-gain"} == {
        "ega-gain-ega-paper",
        "ega-gain-ega-paper-ptb",
        "ega-gain-mope-paper",
    }
    readings = {m.control for m in CLAIMS.get("ega-gain-ega-paper").measures}
    assert readings == {"baseline", "learned-pe"}  # EGA's gain against both baselines


@pytest.mark.parametrize("claim", CLAIMS.claims, ids=lambda c: c.id)
def test_every_claim_is_measured_by_a_study_that_can(claim) -> None:
    at_paper = []
    for measure in claim.measures:
        spec = _spec(measure.study)
        assert all(v in VARIANTS for v in measure.names())
        missing = set(measure.names()) - _variants(spec)
        assert not missing, f"{measure.study} lacks {missing} for {claim.id} ({measure.reading})"
        assert set(claim.datasets) & set(spec.datasets), f"{measure.study} has none of {claim.datasets}"
        if claim.kind in ("level", "tail"):
            assert all(get_variant(v).gate != "none" for v in measure.variants)
        if claim.kind == "clusters":
            assert all(get_variant(v).position in ("mope", "mope-rel") for v in measure.variants)
        if claim.trend is not None:
            levels = spec.context_lengths if claim.trend == "context_length" else spec.sizes
            assert len(levels) >= 2, f"{measure.study} has one {claim.trend}: no trend"
        sizes = [s if isinstance(s, str) else s.name for s in spec.sizes]
        at_paper.append(
            claim.setting.size in sizes
            and claim.setting.context_length in spec.context_lengths
            and spec.train.max_steps == claim.setting.steps
            and claim.setting.dataset in spec.datasets
        )
    if claim.trend is None:
        assert any(at_paper), f"no study measures {claim.id} at the papers' setting"
    if claim.id == "tau-035":  # "whatever its initial value"
        assert len(_spec(claim.measures[0].study).tau_inits or []) >= 2


def _raw() -> dict:
    text = (Path(__file__).resolve().parents[2] / "harness" / "scorecard" / "claims.yaml").read_text()
    return yaml.safe_load(text)


def test_an_unknown_variant_is_refused_naming_it(tmp_path: Path, capsys) -> None:
    data = _raw()
    data["claims"][0]["measures"][0]["a"] = "ega-typo"
    with pytest.raises(InputError, match=r"claims\[0\] \(superadditivity\)\.measures\[0\]: variant 'ega-typo'"):
        parse_claims(data)
    path = tmp_path / "claims.yaml"
    path.write_text(yaml.safe_dump(data))
    from harness.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["scorecard", "--claims", str(path), "--from", str(tmp_path), "--no-log"])
    assert exit_info.value.code == 2 and "ega-typo" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["claims"][0].update(kind="vibes"), "kind 'vibes'"),
        (lambda d: d["claims"][0].update(sign="up"), "sign 'up'"),
        (lambda d: d["claims"][0].update(colour="red"), "unknown key 'colour'"),
        (lambda d: d["claims"].append(dict(d["claims"][0])), "appears twice"),
        (lambda d: d.update(claims=[c for c in d["claims"] if not c["id"].startswith("tau-035")]), "tau-035"),
    ],
)
def test_a_bad_entry_is_refused(change, message: str) -> None:
    data = _raw()
    change(data)
    with pytest.raises(InputError, match=message):
        parse_claims(data)
