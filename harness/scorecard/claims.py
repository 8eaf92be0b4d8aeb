"""The papers' claims as data: ``claims.yaml`` (shipped with the package) and its typed form.

A :class:`Claim` is one statement of one paper: a stable ``id``, the paper, the section, the
statement in one sentence, the paper's number (``paper_value``) and direction (``sign``), its
smallest effect of interest (``margin``, with a one-line ``margin_reason``), the paper's
setting (corpus, size, context, steps, one seed) and one or more :class:`Measure`: the
readings of the claim the harness can measure, each naming the variants it compares and the
study in ``studies/`` that measures it at the paper's setting. The six core ids
(:data:`CORE_IDS`) are fixed; a claim both papers make with different numbers has one entry
per paper, its id starting with the core id (``ega-gain-ega-paper``, ``ega-gain-mope-paper``).

Nothing here computes: :mod:`harness.scorecard.compute` matches claims to results.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal, get_args

from harness.errors import InputError
from harness.models.variants import VARIANTS

#: The ids other tools may rely on; each is a claim id or the prefix of one or more.
CORE_IDS: tuple[str, ...] = ("superadditivity", "ega-gain", "mope-gain", "ega-mope-gain", "tau-035", "open-fraction-36")

#: What measures a claim (see ``claims.yaml``'s header).
MeasureKind = Literal["contrast", "interaction", "level", "tail", "parameters", "clusters"]
MEASURE_KINDS: tuple[str, ...] = get_args(MeasureKind)
#: The paper's direction: "+"/"-" a gain of that sign, "0" no difference, "±" a difference of
#: either sign, "<" an upper bound, "=" an exact count.
Sign = Literal["+", "-", "0", "±", "<", "="]
SIGNS: tuple[str, ...] = get_args(Sign)
#: Factors a claim's trend can be read against (results-table columns).
TREND_FACTORS: tuple[str, ...] = ("params", "context_length")
#: Where a level starts, when not a number: tau's initial value (``tau_init``), the open
#: fraction z-normalised energies give at it (``gaussian_tail``: 1 - Phi(tau_init)), or the
#: mean |cos| of a random direction with the first principal component in the gate's width d
#: (``chance_cosine``).
STARTS: tuple[str, ...] = ("tau_init", "gaussian_tail", "chance_cosine")
#: A count per head given as the model width plus a constant (the EGA paper's "d + 2").
PER_HEAD_COUNT = re.compile(r"^\s*d\s*\+\s*(\d+)\s*$")

_VARIANT_FIELDS: dict[str, tuple[str, ...]] = {
    "contrast": ("treatment", "control"),
    "interaction": ("base", "a", "b", "ab"),
    "parameters": ("treatment", "control"),
    "level": (),
    "tail": (),
    "clusters": (),
}


@dataclass(frozen=True)
class Setting:
    """Where a paper measured a claim: corpus, model size, context length, steps, seeds."""

    dataset: str
    size: str
    context_length: int
    steps: int
    seeds: int = 1


@dataclass(frozen=True)
class Measure:
    """One reading of a claim: the variants compared and the study that measures them.

    ``contrast`` and ``parameters``: ``treatment`` against ``control`` (``base``, for
    parameters, is the model the overhead is a fraction of; default ``control``).
    ``interaction``: the 2x2 factorial ``base, a, b, ab``. ``level``, ``tail`` and
    ``clusters``: the runs of ``variants``. ``study`` measures it at the paper's setting,
    ``also`` names studies that measure it elsewhere (on CPUs)."""

    reading: str
    study: str
    also: tuple[str, ...] = ()  # other studies that measure it, away from the paper's setting (CPU studies)
    treatment: str | None = None
    control: str | None = None
    base: str | None = None
    a: str | None = None
    b: str | None = None
    ab: str | None = None
    variants: tuple[str, ...] = ()

    def names(self) -> tuple[str, ...]:
        """Every variant this measure needs in a cell."""
        found = [self.treatment, self.control, self.base, self.a, self.b, self.ab, *self.variants]
        return tuple(dict.fromkeys(v for v in found if v))

    @property
    def studies(self) -> tuple[str, ...]:
        """``study`` then ``also``."""
        return (self.study, *self.also)


@dataclass(frozen=True)
class Claim:
    """One claim of one paper (see the module docstring).

    ``margin`` is the claim's smallest effect of interest delta (None: the study's, at most
    half the paper's value: :meth:`ClaimSet.margin_for`), below the paper's value, in the
    claim's metric (a level: how far from its start counts as having moved; a trend: per
    doubling). ``band`` is a level's band around the paper's value, ``start`` where the level
    starts (a number or one of :data:`STARTS`), ``runs`` whether the claim is about new runs
    (a prediction interval must then lie in the band too). ``trend`` names the factor a claim
    about a trend is read against (only from two or more of its levels). ``per_head`` is a
    parameter count per head, ``d + k`` (``paper_count``), read at any shape. ``figure`` (non-empty:
    why) makes the claim's rows numbers without a verdict: a probe of the harness's own, or a
    statement the paper gives no target for."""

    id: str
    paper: str
    section: str
    claim: str
    kind: MeasureKind
    sign: Sign
    setting: Setting
    measures: tuple[Measure, ...]
    paper_value: float | None = None
    metric: str = "val_loss"
    band: float | None = None
    start: float | str | None = None
    datasets: tuple[str, ...] = ()
    trend: str | None = None
    margin: float | None = None
    margin_reason: str = ""
    runs: bool = False
    paper_count: str | None = None
    figure: str = ""

    @property
    def per_head_constant(self) -> int | None:
        """k of a per-head count ``d + k`` (None: not a per-head count)."""
        match = PER_HEAD_COUNT.match(self.paper_count or "")
        return int(match.group(1)) if match else None

    @property
    def core_id(self) -> str | None:
        """The core id this claim belongs to (its id or the prefix of it), else None."""
        return next((c for c in CORE_IDS if self.id == c or self.id.startswith(f"{c}-")), None)

    def applies_to(self, dataset: Any) -> bool:
        """Whether a cell on ``dataset`` measures this claim (its corpora; all when none listed)."""
        return not self.datasets or dataset in self.datasets


@dataclass(frozen=True)
class ClaimSet:
    """Every claim, the papers' names, and the defaults (smallest effect, throughput margin)."""

    claims: tuple[Claim, ...]
    papers: Mapping[str, str]
    smallest_effect: float
    throughput_margin: float
    paper_setting: Setting | None
    source: str = ""
    #: The line of each claim in its file (1-based, in the claims' order; empty when not read from text).
    lines: tuple[int, ...] = ()

    def __iter__(self):
        return iter(self.claims)

    def __len__(self) -> int:
        return len(self.claims)

    def get(self, claim_id: str) -> Claim:
        for claim in self.claims:
            if claim.id == claim_id:
                return claim
        raise InputError(f"no claim {claim_id!r}; claims: {', '.join(c.id for c in self.claims)}")

    def studies(self) -> tuple[str, ...]:
        """Every study a claim names, in order."""
        return tuple(dict.fromkeys(s for c in self.claims for m in c.measures for s in m.studies))

    def margin_for(self, claim: Claim, study_margin: float | None) -> float:
        """The claim's smallest effect of interest delta: its own ``margin``; else the study's
        (``analysis.smallest_effect``, else the claims' default; for throughput the
        throughput margin), at most half the paper's value so that delta < |v|."""
        if claim.margin is not None:
            return claim.margin
        if claim.metric == "log_tokens_per_s":
            return self.throughput_margin
        base = study_margin if study_margin is not None else self.smallest_effect
        v = claim.paper_value
        if claim.kind in ("contrast", "interaction") and v is not None and v != 0.0:
            return min(base, abs(v) / 2.0)
        return base


# ----------------------------------------------------------------------------- parsing
def _require(entry: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in entry or entry[key] is None:
        raise InputError(f"{where}: missing {key!r}")
    return entry[key]


def _unknown(entry: Mapping[str, Any], known: set[str], where: str) -> None:
    extra = sorted(set(entry) - known)
    if extra:
        raise InputError(f"{where}: unknown key {extra[0]!r}; known: {', '.join(sorted(known))}")


def _number(entry: Mapping[str, Any], key: str, where: str) -> float | None:
    """``entry[key]`` as a finite float (None when absent); InputError naming the field for
    anything else (a string such as ``"0.02 nats"``, a bool, a list, inf or nan)."""
    raw = entry.get(key)
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not math.isfinite(raw):
        raise InputError(
            f"{where}: {key} {raw!r} is not a number: write the number alone, in the metric's units (e.g. {key}: 0.02)"
        )
    return float(raw)


def _integer(entry: Mapping[str, Any], key: str, where: str, default: int | None = None) -> int:
    raw = entry.get(key, default)
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
        raise InputError(f"{where}: {key} {raw!r} is not a positive whole number")
    return raw


def _setting(entry: Any, where: str) -> Setting:
    if not isinstance(entry, Mapping):
        raise InputError(f"{where}: expected a mapping of dataset, size, context_length, steps, seeds; got {entry!r}")
    _unknown(entry, {"dataset", "size", "context_length", "steps", "seeds"}, where)
    return Setting(
        dataset=str(_require(entry, "dataset", where)),
        size=str(_require(entry, "size", where)),
        context_length=_integer(entry, "context_length", where),
        steps=_integer(entry, "steps", where),
        seeds=_integer(entry, "seeds", where, default=1),
    )


def _measure(entry: Mapping[str, Any], kind: str, where: str) -> Measure:
    if not isinstance(entry, Mapping):
        raise InputError(f"{where}: expected a mapping (reading, study, and the variants), got {entry!r}")
    known = {"reading", "study", "also", "treatment", "control", "base", "a", "b", "ab", "variants"}
    _unknown(entry, known, where)
    for key in ("also", "variants"):
        if entry.get(key) is not None and not isinstance(entry[key], list):
            raise InputError(f"{where}: {key} {entry[key]!r} is not a list of names")
    measure = Measure(
        reading=str(entry.get("reading", "A")),
        study=str(_require(entry, "study", where)),
        also=tuple(str(s) for s in entry.get("also") or ()),
        **{k: str(entry[k]) for k in ("treatment", "control", "base", "a", "b", "ab") if entry.get(k) is not None},
        variants=tuple(str(v) for v in entry.get("variants") or ()),
    )
    for name in _VARIANT_FIELDS[kind]:
        _require(entry, name, f"{where} ({kind})")
    if kind in ("level", "tail", "clusters") and not measure.variants:
        raise InputError(f"{where} ({kind}): missing 'variants' (the runs to read)")
    return measure


def _choice(entry: Mapping[str, Any], key: str, choices: Sequence[str], where: str) -> str:
    value = _require(entry, key, where)
    if not isinstance(value, (str, int, float)) or str(value) not in choices:
        raise InputError(f"{where}: {key} {value!r} is not one of {', '.join(choices)}")
    return str(value)


def _values(entry: Mapping[str, Any], kind: str, sign: str, where: str) -> dict[str, Any]:
    """The claim's numbers, each type-checked: ``paper_value`` (its sign the claim's ``sign`` for a
    signed effect), ``band`` (a level's, positive), ``start``, ``margin``, ``paper_count``, ``runs``."""
    value = _number(entry, "paper_value", where)
    if kind in ("contrast", "interaction") and sign in ("+", "-") and value is not None:
        if (value > 0) != (sign == "+") or value == 0.0:
            raise InputError(
                f"{where}: sign {sign!r} contradicts paper_value {value:g}: a gain the paper reports as {value:+g} "
                f"has sign {'+' if value > 0 else '-' if value < 0 else '0'!r} (a gain is metric(control) - "
                "metric(treatment): positive when the treatment lowers the metric)"
            )
    band = _number(entry, "band", where)
    if band is not None and (kind != "level" or band <= 0.0):
        why = "a positive number" if kind == "level" else f"read of a level only, not of a {kind}"
        raise InputError(f"{where}: band {band:g} must be {why}")
    count = entry.get("paper_count")
    if count is not None and not PER_HEAD_COUNT.match(str(count)):
        raise InputError(f"{where}: paper_count {count!r} is not a per-head count 'd + k'")
    if value is None and count is None and sign in ("<", "="):
        raise InputError(f"{where}: sign {sign!r} needs a paper_value (or a paper_count 'd + k')")
    start = entry.get("start")
    if isinstance(start, str) and start not in STARTS:
        raise InputError(f"{where}: start {start!r} is not a number or one of {', '.join(STARTS)}")
    if start is not None and not isinstance(start, str):
        start = _number(entry, "start", where)
    runs = entry.get("runs", False)
    if not isinstance(runs, bool):
        raise InputError(f"{where}: runs {runs!r} is not true or false")
    return {
        "paper_value": value,
        "band": band,
        "start": start,
        "margin": _margin(entry, kind, sign, value, where),
        "paper_count": None if count is None else str(count),
        "runs": runs,
    }


def _claim(entry: Any, paper_setting: Setting | None, papers: Mapping[str, str], i: int) -> Claim:
    where = f"claims[{i}]" + (f" ({entry['id']})" if isinstance(entry, Mapping) and "id" in entry else "")
    if not isinstance(entry, Mapping):
        raise InputError(f"{where}: expected a mapping, got {entry!r}")
    known = {"id", "paper", "section", "claim", "kind", "sign", "setting", "measures", "paper_value"}
    optional = {
        "metric", "band", "start", "datasets", "trend", "margin", "margin_reason", "runs", "paper_count", "figure",
    }  # fmt: skip
    _unknown(entry, known | optional, where)
    kind = _choice(entry, "kind", MEASURE_KINDS, where)
    sign = _choice(entry, "sign", SIGNS, where)
    paper = _choice(entry, "paper", tuple(papers), where)
    trend = entry.get("trend")
    if trend is not None and trend not in TREND_FACTORS:
        raise InputError(f"{where}: trend {trend!r} is not one of {', '.join(TREND_FACTORS)}")
    if trend is not None and kind not in ("contrast", "interaction"):
        raise InputError(f"{where}: a trend is read of a contrast or an interaction, not of a {kind}")
    values = _values(entry, kind, sign, where)
    if entry.get("setting"):
        setting = _setting(entry["setting"], f"{where}.setting")
    elif paper_setting is not None:
        setting = paper_setting
    else:
        raise InputError(f"{where}: no setting, and the file has no paper_setting to fall back on: give either")
    measures = entry.get("measures") or []
    if not isinstance(measures, list) or not measures:
        raise InputError(f"{where}: no measures (which study measures this claim? a list of readings)")
    datasets = entry.get("datasets")
    if datasets is not None and not isinstance(datasets, list):
        raise InputError(f"{where}: datasets {datasets!r} is not a list of corpora")
    return Claim(
        id=str(_require(entry, "id", where)),
        paper=paper,
        section=str(_require(entry, "section", where)),
        claim=str(_require(entry, "claim", where)),
        kind=kind,
        sign=sign,
        setting=setting,
        measures=tuple(_measure(m, kind, f"{where}.measures[{j}]") for j, m in enumerate(measures)),
        metric=str(entry.get("metric", "val_loss")),
        datasets=tuple(str(d) for d in datasets or (setting.dataset,)),
        trend=trend,
        margin_reason=str(entry.get("margin_reason") or ""),
        figure=str(entry.get("figure") or ""),
        **values,
    )


def _margin(entry: Mapping[str, Any], kind: str, sign: str, value: float | None, where: str) -> float | None:
    """The claim's smallest effect of interest: positive, and below |paper value| for a
    signed effect (a margin as large as the claim would call the paper's own number negligible)."""
    margin = _number(entry, "margin", where)
    if margin is None:
        return None
    if margin <= 0.0:
        raise InputError(f"{where}: margin must be a positive number, got {entry.get('margin')!r}")
    if kind in ("contrast", "interaction") and sign in ("+", "-") and value is not None:
        if margin >= abs(value):
            raise InputError(
                f"{where}: margin {margin:g} is not smaller than the paper's |{value:g}|: "
                "the claim's own number would read as negligible"
            )
    return margin


def _zoo_variants_only(claims: Sequence[Claim]) -> None:
    """The papers' claims name zoo variants only (a user's file names its own spec variants)."""
    for i, claim in enumerate(claims):
        for j, measure in enumerate(claim.measures):
            unknown = [v for v in measure.names() if v not in VARIANTS]
            if unknown:
                raise InputError(
                    f"claims[{i}] ({claim.id}).measures[{j}]: variant {', '.join(map(repr, unknown))} is not "
                    f"in the model zoo; known: {', '.join(VARIANTS)}"
                )


def _defaults(data: Mapping[str, Any]) -> tuple[float, float]:
    defaults = data.get("defaults") or {}
    if not isinstance(defaults, Mapping):
        raise InputError(f"defaults: expected a mapping (smallest_effect, throughput_margin), got {defaults!r}")
    _unknown(defaults, {"smallest_effect", "throughput_margin"}, "defaults")
    told = [_number(defaults, key, "defaults") for key in ("smallest_effect", "throughput_margin")]
    if any(v is not None and v <= 0.0 for v in told):
        raise InputError(f"defaults: smallest_effect and throughput_margin must be positive, got {dict(defaults)}")
    return (told[0] if told[0] is not None else 0.02), (told[1] if told[1] is not None else 0.05)


def _parse(data: Mapping[str, Any], papers_claims: bool) -> tuple:
    papers = data.get("papers") or {}
    if not isinstance(papers, Mapping) or not papers:
        raise InputError("papers: expected a mapping of short key -> the paper's full name (each claim's paper)")
    paper_setting = _setting(data["paper_setting"], "paper_setting") if data.get("paper_setting") else None
    entries = data.get("claims")
    if not isinstance(entries, list) or not entries:
        raise InputError("claims: expected a list of claims")
    claims = tuple(_claim(e, paper_setting, papers, i) for i, e in enumerate(entries))
    first: dict[str, int] = {}
    for i, claim in enumerate(claims):
        if claim.id in first:
            raise InputError(
                f"claims[{i}] ({claim.id}): id {claim.id!r} appears twice (first as claims[{first[claim.id]}])"
            )
        first[claim.id] = i
    if papers_claims:
        _zoo_variants_only(claims)
        missing = [c for c in CORE_IDS if not any(cl.id == c or cl.id.startswith(f"{c}-") for cl in claims)]
        if missing:
            raise InputError(f"no claim for the core id(s) {', '.join(missing)}")
    return claims, dict(papers), paper_setting


def parse_claims(
    data: Any, *, source: str = "<claims>", papers_claims: bool = False, lines: Sequence[int] = ()
) -> ClaimSet:
    """A :class:`ClaimSet` from the parsed YAML; :class:`InputError` naming the entry and
    field at fault, once (unknown keys, kinds, signs, papers; numbers that are not numbers; a
    sign that contradicts the paper's value; a band on what is no level; a claim without a
    setting where the file has no ``paper_setting``; duplicate ids). ``papers_claims``: the file
    shipped with the package, which must also hold every core id and name zoo variants only; a
    user's own file (``harness scorecard --claims``) names the variants of its studies by their
    spec names and has no core ids (:func:`check_claims_against` checks those names against the
    studies read). ``lines``: each claim's line in the file, named in a message about it."""
    try:
        if not isinstance(data, Mapping):
            raise InputError("expected a mapping with 'papers' and 'claims'")
        _unknown(data, {"defaults", "paper_setting", "papers", "claims"}, "the file")
        claims, papers, paper_setting = _parse(data, papers_claims)
        smallest, throughput = _defaults(data)
    except InputError as exc:
        raise InputError(_with_line(f"{source}: {exc}", lines)) from None
    return ClaimSet(
        claims=claims,
        papers=papers,
        smallest_effect=smallest,
        throughput_margin=throughput,
        paper_setting=paper_setting,
        source=source,
        lines=tuple(lines),
    )


def claim_lines(text: str) -> tuple[int, ...]:
    """The 1-based line of each entry of the file's ``claims`` list (empty when it has none)."""
    import yaml

    try:
        root = yaml.compose(text)
        entries = next(v for k, v in root.value if k.value == "claims").value
        return tuple(entry.start_mark.line + 1 for entry in entries)
    except (yaml.YAMLError, AttributeError, StopIteration, TypeError):
        return ()


def load_claims(path: str | Path | None = None) -> ClaimSet:
    """The claims of ``path``, else those shipped with the package (``claims.yaml``)."""
    import yaml

    if path is None:
        return _packaged_claims()
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read the claims file {path}: {exc}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InputError(f"{path}: not valid YAML: {exc}") from None
    return parse_claims(data, source=str(path), lines=claim_lines(text))


def _with_line(message: str, lines: Sequence[int]) -> str:
    """``message`` with the line of the claim it names (``claims[3]`` -> ``claims[3] (line 41)``)."""
    match = re.search(r"claims\[(\d+)\]", message)
    if match is None or int(match.group(1)) >= len(lines):
        return message
    return message.replace(match.group(0), f"{match.group(0)} (line {lines[int(match.group(1))]})", 1)


def _unknown_name(
    where: str, field: str, name: str, what: str, known: Sequence[str], lines: Sequence[int]
) -> InputError:
    close = difflib.get_close_matches(name, list(known), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return InputError(
        _with_line(f"{where}: {field} {name!r} is {what}{hint}; known: {', '.join(known) or 'none'}", lines)
    )


def check_claims_against(
    claims: ClaimSet, studies: Mapping[str, Sequence[str]], specs: Mapping[str, Sequence[str]]
) -> None:
    """A user's claims against what is read: every study a measure names is a study read
    (``studies``: name -> its variants) or a spec found (``specs``: name -> the variants of its
    spec), and every variant a measure names is one of that study's (read or in its spec). InputError, naming the
    claim, its line, the field and the names known, for the first that is not: a typo would
    otherwise read as a silent ``not measured``."""
    known = {name: list(dict.fromkeys([*specs.get(name, ()), *studies.get(name, ())])) for name in {*specs, *studies}}
    for i, claim in enumerate(claims):
        for j, measure in enumerate(claim.measures):
            where = f"{claims.source}: claims[{i}] ({claim.id}).measures[{j}]"
            for field, name in [("study", measure.study), *(("also", s) for s in measure.also)]:
                if name not in known:
                    what = "neither a study read nor a study spec found"
                    raise _unknown_name(where, field, name, what, sorted(known), claims.lines)
            variants = list(known[measure.study])
            named = [(f, getattr(measure, f)) for f in ("treatment", "control", "base", "a", "b", "ab")]
            named += [("variants", v) for v in measure.variants]
            for field, name in named:
                if name is not None and name not in variants:
                    what = f"not a variant of study {measure.study!r}"
                    raise _unknown_name(where, field, name, what, variants, claims.lines)


@lru_cache(maxsize=1)
def _packaged_claims() -> ClaimSet:
    import yaml

    text = resources.files("harness.scorecard").joinpath("claims.yaml").read_text(encoding="utf-8")
    return parse_claims(
        yaml.safe_load(text), source="harness/scorecard/claims.yaml", papers_claims=True, lines=claim_lines(text)
    )


__all__ = [
    "CORE_IDS",
    "MEASURE_KINDS",
    "SIGNS",
    "STARTS",
    "TREND_FACTORS",
    "Claim",
    "ClaimSet",
    "Measure",
    "MeasureKind",
    "Setting",
    "Sign",
    "check_claims_against",
    "claim_lines",
    "load_claims",
    "parse_claims",
]
