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
    paper_setting: Setting
    source: str = ""

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


def _setting(entry: Mapping[str, Any], where: str) -> Setting:
    _unknown(entry, {"dataset", "size", "context_length", "steps", "seeds"}, where)
    try:
        return Setting(
            dataset=str(_require(entry, "dataset", where)),
            size=str(_require(entry, "size", where)),
            context_length=int(_require(entry, "context_length", where)),
            steps=int(_require(entry, "steps", where)),
            seeds=int(entry.get("seeds", 1)),
        )
    except (TypeError, ValueError) as exc:
        raise InputError(f"{where}: {exc}") from exc


def _measure(entry: Mapping[str, Any], kind: str, where: str) -> Measure:
    known = {"reading", "study", "also", "treatment", "control", "base", "a", "b", "ab", "variants"}
    _unknown(entry, known, where)
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


def _claim(entry: Mapping[str, Any], paper_setting: Setting, papers: Mapping[str, str], i: int) -> Claim:
    where = f"claims[{i}]" + (f" ({entry['id']})" if isinstance(entry, Mapping) and "id" in entry else "")
    if not isinstance(entry, Mapping):
        raise InputError(f"{where}: expected a mapping, got {entry!r}")
    known = {"id", "paper", "section", "claim", "kind", "sign", "setting", "measures", "paper_value"}
    optional = {
        "metric", "band", "start", "datasets", "trend", "margin", "margin_reason", "runs", "paper_count", "figure",
    }  # fmt: skip
    _unknown(entry, known | optional, where)
    kind = _require(entry, "kind", where)
    if kind not in MEASURE_KINDS:
        raise InputError(f"{where}: kind {kind!r} is not one of {', '.join(MEASURE_KINDS)}")
    sign = str(_require(entry, "sign", where))
    if sign not in SIGNS:
        raise InputError(f"{where}: sign {sign!r} is not one of {', '.join(SIGNS)}")
    paper = str(_require(entry, "paper", where))
    if paper not in papers:
        raise InputError(f"{where}: paper {paper!r} is not one of {', '.join(papers)}")
    trend = entry.get("trend")
    if trend is not None and trend not in TREND_FACTORS:
        raise InputError(f"{where}: trend {trend!r} is not one of {', '.join(TREND_FACTORS)}")
    if trend is not None and kind not in ("contrast", "interaction"):
        raise InputError(f"{where}: a trend is read of a contrast or an interaction, not of a {kind}")
    value = entry.get("paper_value")
    count = entry.get("paper_count")
    if count is not None and not PER_HEAD_COUNT.match(str(count)):
        raise InputError(f"{where}: paper_count {count!r} is not a per-head count 'd + k'")
    if value is None and count is None and sign in ("<", "="):
        raise InputError(f"{where}: sign {sign!r} needs a paper_value (or a paper_count 'd + k')")
    margin = _margin(entry, kind, sign, value, where)
    start = entry.get("start")
    if isinstance(start, str) and start not in STARTS:
        raise InputError(f"{where}: start {start!r} is not a number or one of {', '.join(STARTS)}")
    setting = _setting(entry.get("setting") or {}, f"{where}.setting") if entry.get("setting") else paper_setting
    measures = entry.get("measures") or []
    if not measures:
        raise InputError(f"{where}: no measures (which study measures this claim?)")
    return Claim(
        id=str(entry["id"]),
        paper=paper,
        section=str(_require(entry, "section", where)),
        claim=str(_require(entry, "claim", where)),
        kind=kind,
        sign=sign,
        setting=setting,
        measures=tuple(_measure(m, kind, f"{where}.measures[{j}]") for j, m in enumerate(measures)),
        paper_value=None if value is None else float(value),
        metric=str(entry.get("metric", "val_loss")),
        band=None if entry.get("band") is None else float(entry["band"]),
        start=start,
        datasets=tuple(str(d) for d in entry.get("datasets") or (setting.dataset,)),
        trend=trend,
        margin=margin,
        margin_reason=str(entry.get("margin_reason") or ""),
        runs=bool(entry.get("runs", False)),
        paper_count=None if count is None else str(count),
        figure=str(entry.get("figure") or ""),
    )


def _margin(entry: Mapping[str, Any], kind: str, sign: str, value: Any, where: str) -> float | None:
    """The claim's smallest effect of interest: positive, and below |paper value| for a
    signed effect (a margin as large as the claim would call the paper's own number negligible)."""
    raw = entry.get("margin")
    if raw is None:
        return None
    try:
        margin = float(raw)
    except (TypeError, ValueError):
        raise InputError(f"{where}: margin {raw!r} is not a number") from None
    if not (math.isfinite(margin) and margin > 0.0):
        raise InputError(f"{where}: margin must be a positive number, got {raw!r}")
    if kind in ("contrast", "interaction") and sign in ("+", "-") and value is not None:
        if margin >= abs(float(value)):
            raise InputError(
                f"{where}: margin {margin:g} is not smaller than the paper's |{float(value):g}|: "
                "the claim's own number would read as negligible"
            )
    return margin


def _zoo_variants_only(claims: Sequence[Claim], source: str) -> None:
    """The papers' claims name zoo variants only (a user's file names its own spec variants)."""
    for i, claim in enumerate(claims):
        for j, measure in enumerate(claim.measures):
            unknown = [v for v in measure.names() if v not in VARIANTS]
            if unknown:
                raise InputError(
                    f"{source}: claims[{i}] ({claim.id}).measures[{j}]: variant {', '.join(map(repr, unknown))} is not "
                    f"in the model zoo; known: {', '.join(VARIANTS)}"
                )


def parse_claims(data: Mapping[str, Any], *, source: str = "<claims>", papers_claims: bool = False) -> ClaimSet:
    """A :class:`ClaimSet` from the parsed YAML; :class:`InputError` naming the entry and
    field at fault (unknown keys, kinds, signs, papers; duplicate ids). ``papers_claims``: the
    file shipped with the package, which must also hold every core id and name zoo variants
    only; a user's own file (``harness scorecard --claims``) names the variants of its studies
    by their spec names and has no core ids."""
    if not isinstance(data, Mapping):
        raise InputError(f"{source}: expected a mapping with 'claims'")
    defaults = data.get("defaults") or {}
    papers = dict(data.get("papers") or {})
    paper_setting = _setting(data.get("paper_setting") or {}, f"{source}: paper_setting")
    claims = tuple(_claim(e, paper_setting, papers, i) for i, e in enumerate(data.get("claims") or []))
    seen: set[str] = set()
    for claim in claims:
        if claim.id in seen:
            raise InputError(f"{source}: claim id {claim.id!r} appears twice")
        seen.add(claim.id)
    if papers_claims:
        _zoo_variants_only(claims, source)
        missing = [c for c in CORE_IDS if not any(cl.id == c or cl.id.startswith(f"{c}-") for cl in claims)]
        if missing:
            raise InputError(f"{source}: no claim for the core id(s) {', '.join(missing)}")
    return ClaimSet(
        claims=claims,
        papers=papers,
        smallest_effect=float(defaults.get("smallest_effect", 0.02)),
        throughput_margin=float(defaults.get("throughput_margin", 0.05)),
        paper_setting=paper_setting,
        source=source,
    )


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
    try:
        return parse_claims(data, source=str(path))
    except InputError as exc:
        raise InputError(_with_line(str(exc), text)) from None


def _with_line(message: str, text: str) -> str:
    """``message`` with the line of the claim it names (``claims[3]`` -> ``line 41``)."""
    import yaml

    match = re.search(r"claims\[(\d+)\]", message)
    if match is None:
        return message
    try:
        root = yaml.compose(text)
        entries = next(v for k, v in root.value if k.value == "claims").value
        line = entries[int(match.group(1))].start_mark.line + 1
    except (yaml.YAMLError, AttributeError, StopIteration, IndexError, TypeError):
        return message
    return message.replace(match.group(0), f"{match.group(0)} (line {line})", 1)


@lru_cache(maxsize=1)
def _packaged_claims() -> ClaimSet:
    import yaml

    text = resources.files("harness.scorecard").joinpath("claims.yaml").read_text(encoding="utf-8")
    return parse_claims(yaml.safe_load(text), source="harness/scorecard/claims.yaml", papers_claims=True)


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
    "load_claims",
    "parse_claims",
]
