"""The claims file: every claim names variants of the zoo and a study in ``studies/`` whose
variants, corpora and analysis can measure it, at the papers' setting; the core ids are there;
a bad entry is refused naming it (and ``harness scorecard --claims`` exits 2 on it)."""

from __future__ import annotations

import re
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


@pytest.mark.parametrize("claim", ["ega-gain-ega-paper", "ega-gain-ega-paper-ptb", "ega-parameter-count"])
def test_egas_gain_on_learned_positions_compares_a_pair_that_differs_only_in_the_gate(claim: str) -> None:
    (learned,) = [m for m in CLAIMS.get(claim).measures if m.control == "learned-pe"]
    treatment, control = get_variant(learned.treatment), get_variant(learned.control)
    assert learned.treatment == "ega-learned"
    assert (treatment.position, treatment.scoring, treatment.options) == (
        control.position,
        control.scoring,
        control.options,
    )
    assert treatment.gate == "ega" and control.gate == "none"


def test_every_claim_has_its_own_margin_below_the_papers_value() -> None:
    for claim in CLAIMS:
        if claim.kind in ("parameters", "clusters"):
            continue  # exact counts: no margin
        assert claim.margin is not None and claim.margin > 0 and claim.margin_reason, claim.id
        if claim.kind in ("contrast", "interaction") and claim.sign in ("+", "-") and claim.paper_value is not None:
            assert claim.margin < abs(claim.paper_value), claim.id


def test_every_second_reading_the_readings_study_trains_is_read_by_a_claim() -> None:
    trained = _variants(_spec("readings"))
    read = {v for c in CLAIMS for m in c.measures for v in m.names()}
    diagnostics = {v for v in trained if get_variant(v).diagnostic}  # ega-leaky: how much a leak fakes
    assert trained - diagnostics <= read, sorted(trained - diagnostics - read)
    from_readings = {v for c in CLAIMS for m in c.measures if m.study == "readings" for v in m.names()}
    for second in ("ega-qnorm", "ega-2-prod", "ega-4-prod", "ega-mope-scale-frozen", "mope-bias", "ega-mope-bias"):
        assert second in from_readings, second


def test_the_parameter_count_is_read_per_head_at_any_shape() -> None:
    claim = CLAIMS.get("ega-parameter-count")
    assert claim.per_head_constant == 2 and claim.paper_value is None
    assert "12,480" in claim.claim and "does not state" in claim.claim


@pytest.mark.parametrize("claim", CLAIMS.claims, ids=lambda c: c.id)
def test_every_claim_is_measured_by_a_study_that_can(claim) -> None:
    at_paper = []
    for measure in claim.measures:
        spec = _spec(measure.study)
        assert all(v in VARIANTS for v in measure.names())
        for name in measure.studies:  # the studies named beside it (on CPUs) hold the variants too
            other = _spec(name)
            missing = set(measure.names()) - _variants(other)
            assert not missing, f"{name} lacks {missing} for {claim.id} ({measure.reading})"
            assert set(claim.datasets) & set(other.datasets), f"{name} has none of {claim.datasets}"
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


def test_an_unknown_variant_is_refused_naming_it_in_the_papers_claims() -> None:
    """The papers' claims name zoo variants; a user's own file names its studies' variants."""
    data = _raw()
    data["claims"][0]["measures"][0]["a"] = "ega-typo"
    with pytest.raises(InputError, match=r"claims\[0\] \(superadditivity\)\.measures\[0\]: variant 'ega-typo'"):
        parse_claims(data, papers_claims=True)
    assert parse_claims(data).claims[0].measures[0].a == "ega-typo"


def test_a_users_claims_file_needs_no_core_ids_and_its_errors_name_the_line(tmp_path: Path, capsys) -> None:
    data = _raw()
    mine = {**data, "claims": [{**data["claims"][3], "id": "my-gain"}, {**data["claims"][0], "kind": "vibes"}]}
    path = tmp_path / "claims.yaml"
    path.write_text(yaml.safe_dump(mine, sort_keys=False))
    from harness.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["scorecard", "--claims", str(path), "--from", str(tmp_path), "--no-log"])
    err = capsys.readouterr().err
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if "kind: vibes" in text)
    (start,) = re.findall(r"claims\[1\] \(line (\d+)\)", err)
    assert exit_info.value.code == 2 and "kind 'vibes'" in err and int(start) < line, err
    mine["claims"].pop()
    path.write_text(yaml.safe_dump(mine, sort_keys=False))
    assert [c.id for c in load_claims(path).claims] == ["my-gain"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["claims"][0].update(kind="vibes"), "kind 'vibes'"),
        (lambda d: d["claims"][0].update(sign="up"), "sign 'up'"),
        (lambda d: d["claims"][0].update(colour="red"), "unknown key 'colour'"),
        (lambda d: d["claims"].append(dict(d["claims"][0])), "appears twice"),
        (lambda d: d.update(claims=[c for c in d["claims"] if not c["id"].startswith("tau-035")]), "tau-035"),
        (lambda d: d["claims"][0].update(margin=0.059), "not smaller than the paper's"),
        (lambda d: d["claims"][0].update(margin=-1), "margin must be a positive number"),
        (lambda d: d["claims"][0].update(start="nowhere"), "start 'nowhere'"),
        (lambda d: d["claims"][0].update(paper_count="2d"), "paper_count '2d'"),
        (lambda d: d["claims"][0].update(trend="params", kind="level"), "a trend is read of a contrast"),
    ],
)
def test_a_bad_entry_is_refused(change, message: str) -> None:
    data = _raw()
    change(data)
    with pytest.raises(InputError, match=message):
        parse_claims(data, papers_claims=True)
