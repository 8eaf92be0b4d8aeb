"""Whole cards of the published designs, simulated and read by the scorecard itself, for
``benchmarks/calibration.py`` and the tests only (nothing in the package imports this module at
run time; a test checks it).

:mod:`harness.bench.simulate.scorecard` measures the rules one row or one abstract card at a time. Here
a card is what ``harness scorecard`` reads: a results table of one of the published studies'
designs (``published/long-cpu-2026-12-02``: the 2x2, learned positions and tau started at three
values at ``nano``; ``published/ladder-cpu-2026-12-02``: the 2x2 at three sizes), with the
published runs' own noise, read by :func:`~harness.scorecard.compute.claim_rows` and the card's
procedure (:func:`~harness.scorecard.family.adjust_card`). Three truths:

- ``null``: nothing is true anywhere: every variant's loss and gap are the baseline's, tau stays
  at its initial value, the open fraction at 1 - Phi(tau_init), the energy direction at chance,
  throughput equal;
- ``papers``: the papers' values: EGA +0.092, MOPE -0.032, EGA + MOPE +0.119 against the baseline,
  EGA on learned positions +0.103 against them, the gap 12.7 % narrower, tau at 0.35 and the open
  fraction at 0.36 from every start;
- either with normal per-seed noise or strongly skewed noise of the same sd
  (:func:`~harness.bench.simulate.scorecard.skewed_values`).

:func:`card_rates` gives, over many cards, the share with any signed verdict after the procedure,
the share of contrast rows signed before it and after it, and, per claim, how often its rows are
signed in the paper's direction (its power).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from scipy import stats

from harness.analysis.results_types import AnalysisSettings
from harness.results_schema import SHAPE_COLUMNS
from harness.scorecard.cells import StudyResults, with_derived
from harness.scorecard.claims import ClaimSet, load_claims
from harness.scorecard.family import adjust_card
from harness.scorecard.model_shape import spec_shapes, with_model_shape
from harness.scorecard.rows import ScorecardRow

#: What a published design's template keeps of each run (one seed's worth of rows).
_KEEP = ("dataset", "size", "params", *SHAPE_COLUMNS, "context_length", "variant", "tau_init", "steps")
#: The metrics a simulated card carries, with how each is simulated.
_METRICS = ("val_loss", "gen_gap", "tau_mean", "open_fraction", "pc1_cosine")
#: The papers' values as per-variant shifts of the baseline's loss (a gain lowers it).
PAPERS_GAINS: Mapping[str, float] = {"ega": 0.092, "mope": -0.032, "ega-mope": 0.119, "ega-learned": 0.103}
PAPERS_GAP_RATIO = 0.289 / 0.331
PAPERS_TAU, PAPERS_OPEN = 0.35, 0.36


@dataclass(frozen=True)
class Design:
    """A published study's design: one seed's runs (``template``: cell, variant, tau_init,
    parameter count, steps), the seed-to-seed sd of each metric per size (``sd``: the residual
    of variant x seed for the losses, the sd over seeds per run for the levels), the baseline's
    mean loss and gap per size, and the name the card's rows carry."""

    name: str
    template: pl.DataFrame
    sd: Mapping[tuple[str, str], float]
    base: Mapping[tuple[str, str], float]


def _residual_sd(frame: pl.DataFrame, metric: str) -> float:
    """The residual sd of a two-way (variant x seed) table: the paired noise of one run."""
    wide = frame.filter(pl.col("tau_init").is_null() | (pl.col("tau_init") == 0.0)).pivot(
        on="variant", index="seed", values=metric, aggregate_function="mean"
    )
    y = wide.drop("seed").to_numpy().astype(float)  # (seeds, variants)
    r = y - y.mean(axis=0) - y.mean(axis=1, keepdims=True) + y.mean()
    dof = (y.shape[0] - 1) * (y.shape[1] - 1)
    return float(np.sqrt((r**2).sum() / dof))


def design_from_published(folder: Path) -> Design:
    """The design and noise of a published study (its ``results.parquet``, its models' shape
    resolved with its ``spec.yaml``'s sizes as a card's load resolves it)."""
    spec = folder / "spec.yaml"
    shapes = spec_shapes(spec.read_text() if spec.is_file() else None)
    frame = with_model_shape(pl.read_parquet(folder / "results.parquet"), shapes)
    first = frame.get_column("seed").min()
    template = frame.filter(pl.col("seed") == first).select([c for c in _KEEP if c in frame.columns])
    sd, base = {}, {}
    for (size,), part in frame.partition_by("size", as_dict=True).items():
        for metric in ("val_loss", "gen_gap"):
            sd[str(size), metric] = _residual_sd(part, metric)
            base[str(size), metric] = float(part.filter(pl.col("variant") == "baseline").get_column(metric).mean())
        for metric in ("tau_mean", "open_fraction", "pc1_cosine"):
            if metric in part.columns and part.get_column(metric).drop_nulls().len():
                runs = part.drop_nulls(metric).group_by("variant", "tau_init").agg(pl.col(metric).std())
                sd[str(size), metric] = float(np.sqrt(np.nanmean(runs.get_column(metric).to_numpy() ** 2)))
    return Design(str(frame.get_column("study")[0]), template, sd, base)


def _truth(design: Design, run: Mapping[str, Any], metric: str, truth: str) -> float | None:
    """The mean of ``metric`` for one run of the template under ``truth`` ("null" or "papers")."""
    size, variant = str(run["size"]), str(run["variant"])
    gated = "ega" in variant
    tau0 = 0.0 if run.get("tau_init") is None else float(run["tau_init"])
    if metric == "val_loss":
        shift = PAPERS_GAINS.get(variant, 0.0) if truth == "papers" else 0.0
        return design.base[size, "val_loss"] - shift
    if metric == "gen_gap":
        ratio = PAPERS_GAP_RATIO if truth == "papers" and variant == "ega" else 1.0
        return design.base[size, "gen_gap"] * ratio
    if not gated or (size, metric) not in design.sd:
        return None
    if metric == "tau_mean":
        return PAPERS_TAU if truth == "papers" else tau0
    if metric == "open_fraction":
        return PAPERS_OPEN if truth == "papers" else float(stats.norm.sf(tau0))
    from harness.training.energy_probe import chance_cosine

    return chance_cosine(int(run["d_model"]))


def simulated_card(design: Design, seeds: int, gen: np.random.Generator, *, truth: str, noise: str) -> pl.DataFrame:
    """One simulated results table of ``design`` at ``seeds`` seeds: each run's metric is its
    truth plus the seed's shared level (losses) plus its own noise at the published sd, normal
    or strongly skewed (``noise`` "lognormal")."""
    from harness.bench.simulate.scorecard import skewed_values

    runs = design.template.to_dicts()
    rows = []
    for seed in range(seeds):
        shared = gen.normal(0.0, 0.05)  # the seed's own level: paired away in a contrast
        for run in runs:
            row = {**run, "study": design.name, "seed": seed, "status": "finished", "tokens_per_s": 1e5}
            for metric in _METRICS:
                mean = _truth(design, run, metric, truth)
                sd = design.sd.get((str(run["size"]), metric), 0.0)
                draw = skewed_values(gen, (), sd) if noise == "lognormal" else gen.normal(0.0, sd)
                row[metric] = None if mean is None else mean + float(draw) + (shared if metric == "val_loss" else 0.0)
            rows.append(row)
    return pl.DataFrame(rows, infer_schema_length=None)


@contextlib.contextmanager
def quick_cards() -> Iterator[None]:
    """What a simulated card does not need, skipped for thousands of them: a ``not resolvable``
    row's seeds-needed words (a power search, a third of a card's time) are not computed (the
    kinds and rates do not read them). The zoo's parameter counts at the papers' size are built
    once anyway (:func:`~harness.scorecard.readers.papers_parameters` caches them by variant and
    vocabulary)."""
    import harness.analysis.planning as planning

    plan = planning.seeds_needed

    def no_plan(**_: Any) -> _NoPlan:
        return _NoPlan()

    planning.seeds_needed = no_plan
    try:
        yield
    finally:
        planning.seeds_needed = plan


class _NoPlan:
    """What :func:`quick_cards` gives in place of the seeds-needed search."""

    def range_text(self) -> str:
        return "(not computed in a simulation)"


def card_rows(frame: pl.DataFrame, name: str, claims: ClaimSet) -> tuple[list[ScorecardRow], list[ScorecardRow]]:
    """A simulated card's rows before and after the card's procedure (no curves: no training rows)."""
    from harness.scorecard.compute import claim_rows
    from harness.scorecard.skew import card_skew

    sigma = card_skew([frame]).sigma
    study = StudyResults(name, with_derived(frame), AnalysisSettings(n_resamples=199), skew_sigma=sigma)
    rows = [row for claim in claims for row in claim_rows(claim, [study], claims)]
    adjusted, _ = adjust_card(rows)
    return rows, adjusted


# ----------------------------------------------------------------------------- the combined card
#: The combined card's sources, as published (``published/combined-2026-12-03/sources.txt``).
COMBINED = "combined-2026-12-03"
#: The truths a combined card is simulated under: each variant's gain in every cell.
COMBINED_TRUTHS: Mapping[str, Mapping[str, float]] = {
    "null": {},
    "EGA +0.012 everywhere": {"ega": 0.012, "ega-mope": 0.012},
    "EGA at the papers' +0.103": {"ega": 0.103, "ega-mope": 0.103},
}
#: The claim and reading whose row as a whole the combined cards are read on.
EGA_CLAIM, EGA_READING = "ega-gain-ega-paper", "A (sinusoidal positions)"


def combined_card(
    studies: Sequence[StudyResults], gen: np.random.Generator, *, gains: Mapping[str, float], noise: str,
    sd: float = 0.007, sigma: float = 0.5, seeds: int = 4,
) -> list[StudyResults]:  # fmt: skip
    """One simulated combined card: each study's design at ``seeds`` seeds, its validation loss the
    published baseline's mean in the cell minus the variant's gain, plus the seed's shared level,
    plus per-run noise of sd ``sd`` (normal, or lognormal of shape ``sigma``); its other metrics at
    the null (:func:`simulated_card`'s)."""
    from harness.bench.simulate.scorecard import skewed_values

    out = []
    for study in studies:
        frame = study.frame
        cells = [c for c in ("dataset", "size", "context_length", "steps") if c in frame.columns]
        base = frame.filter(pl.col("variant") == "baseline").group_by(cells).agg(pl.col("val_loss").mean().alias("b"))
        template = frame.filter(pl.col("seed") == frame.get_column("seed").min()).join(base, on=cells, how="left")
        parts = []
        for seed in range(seeds):
            n = template.height
            draw = skewed_values(gen, n, sd, sigma) if noise == "lognormal" else gen.normal(0.0, sd, n)
            gain = template.get_column("variant").replace_strict(dict(gains), default=0.0, return_dtype=pl.Float64)
            loss = template.get_column("b") - gain + gen.normal(0.0, 0.05) + draw
            parts.append(template.with_columns(pl.lit(seed).alias("seed"), loss.alias("val_loss")).drop("b"))
        out.append(replace(study, frame=pl.concat(parts), settings=replace(study.settings, n_resamples=199)))
    return out


def combined_counts(
    studies: Sequence[StudyResults], *, truth: str, noise: str, cards: int, rng: Any = 0, sd: float = 0.007,
    sigma: float = 0.5,
) -> dict[str, Any]:  # fmt: skip
    """Over ``cards`` simulated combined cards read by :func:`~harness.scorecard.compute.scorecard_rows`
    itself (``studies``: the combined card's sources as ``harness scorecard`` reads them, without
    curves): how often the EGA claim's row as a whole excludes the papers' value, shows the positive
    sign, reads ``replicated``, and how often any row of the card asserts a direction against 0."""
    from harness.scorecard.compute import scorecard_rows

    gen = np.random.default_rng(rng)
    counts = {"cards": cards, "excluded": 0, "positive": 0, "replicated": 0, "any_signed": 0}
    with quick_cards():
        for _ in range(cards):
            rows = scorecard_rows(combined_card(studies, gen, gains=COMBINED_TRUTHS[truth], noise=noise, sd=sd,
                                                sigma=sigma))  # fmt: skip
            ega = next(r for r in rows if r.kind == "claim" and r.claim == EGA_CLAIM and r.reading == EGA_READING)
            counts["excluded"] += ega.verdict_kind in ("smaller", "below", "larger", "above", "reversed")
            counts["positive"] += bool(ega.signed) and (ega.estimate or 0.0) > 0
            counts["replicated"] += ega.verdict_kind == "replicated"
            counts["any_signed"] += any(r.signed for r in rows)
    return counts


def _contrast(row: ScorecardRow) -> bool:
    return row.kind == "cell" and row.metric == "val_loss" and row.pvalue is not None


def _towards(row: ScorecardRow) -> bool:
    """A signed verdict in the paper's direction (not reversed)."""
    return bool(row.signed) and row.verdict_kind in ("replicated", "smaller", "larger", "grows")


def card_counts(
    design: Design, seeds: int, *, cards: int, truth: str = "null", noise: str = "normal", rng: Any = 0
) -> dict[str, Any]:
    """What :func:`card_rates` divides, summed over ``cards`` simulated cards (so that chunks of
    cards run apart add up: :func:`merged_rates`)."""
    gen, claims = np.random.default_rng(rng), load_claims()
    counts: dict[str, Any] = {"cards": cards, "any": 0, "before": 0, "after": 0, "contrasts": 0, "towards": {}}
    with quick_cards():
        for _ in range(cards):
            frame = simulated_card(design, seeds, gen, truth=truth, noise=noise)
            rows, adjusted = card_rows(frame, design.name, claims)
            counts["any"] += any(r.signed for r in adjusted)
            counts["before"] += sum(bool(r.signed) for r in rows if _contrast(r))
            counts["after"] += sum(bool(r.signed) for r in adjusted if _contrast(r))
            counts["contrasts"] += sum(_contrast(r) for r in rows)
            for r in adjusted:
                if r.kind == "cell" and r.pvalue is not None and r.verdict_kind != "figure":
                    hit = counts["towards"].setdefault(r.claim, [0, 0])
                    hit[0], hit[1] = hit[0] + _towards(r), hit[1] + 1
    return counts


def merged_rates(name: str, seeds: int, truth: str, noise: str, parts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The rates of :func:`card_rates` from the counts of one or more chunks of cards."""
    total = {k: sum(p[k] for p in parts) for k in ("cards", "any", "before", "after", "contrasts")}
    towards: dict[str, list[int]] = {}
    for part in parts:
        for claim, (hit, n) in part["towards"].items():
            both = towards.setdefault(claim, [0, 0])
            both[0], both[1] = both[0] + hit, both[1] + n
    return {
        "design": name,
        "seeds": seeds,
        "cards": total["cards"],
        "truth": truth,
        "noise": noise,
        "any_signed": total["any"] / total["cards"],
        "contrast_rows_signed_before": total["before"] / max(total["contrasts"], 1),
        "contrast_rows_signed_after": total["after"] / max(total["contrasts"], 1),
        "towards_paper": {c: hit / n for c, (hit, n) in sorted(towards.items())},
    }


def card_rates(
    design: Design, seeds: int, *, cards: int, truth: str = "null", noise: str = "normal", rng: Any = 0
) -> dict[str, Any]:
    """Over ``cards`` simulated cards: the share with any signed verdict after the procedure, the
    share of contrast rows (the losses' cells) signed before and after it, and per claim the
    share of its cell rows signed in the paper's direction after it."""
    counts = card_counts(design, seeds, cards=cards, truth=truth, noise=noise, rng=rng)
    return merged_rates(design.name, seeds, truth, noise, [counts])


#: The published designs the calibration simulates, by folder.
DESIGNS: tuple[str, ...] = ("long-cpu-2026-12-02", "ladder-cpu-2026-12-02")
#: The most cards one process simulates (a larger count is split into chunks run apart).
CHUNK_CARDS = 75


def _chunk(root: Path, folder: str, n: int, truth: str, noise: str, cards: int, rng: list) -> dict[str, Any]:
    return card_counts(design_from_published(root / folder), n, cards=cards, truth=truth, noise=noise, rng=rng)


def _tasks(root: Path, cards: int, more: int, power_cards: int, seeds: Sequence[int], rng: int) -> list[tuple]:
    """(root, folder, seeds, truth, noise, cards, rng) chunks: null cards (``cards`` at the fewest
    seeds, ``more`` at more), null cards on skewed noise at the fewest and cards at the papers'
    values (``power_cards`` each)."""
    units = []
    for folder in DESIGNS:
        for n in seeds:
            fewest = n == min(seeds)
            units.append((folder, n, "null", "normal", cards if fewest else more))
            if fewest:
                units.append((folder, n, "null", "lognormal", power_cards))
            units.append((folder, n, "papers", "normal", power_cards))
    tasks = []
    for j, (folder, n, truth, noise, count) in enumerate(units):
        for k, start in enumerate(range(0, count, CHUNK_CARDS)):
            tasks.append((root, folder, n, truth, noise, min(CHUNK_CARDS, count - start), [rng, j, k]))
    return tasks


def _chunk_key(task: tuple) -> str:
    """A chunk's identity in the cache: design folder, seeds, truth, noise, cards and its rng."""
    return json.dumps([str(x) if isinstance(x, Path) else x for x in task[1:]])


def _cached_chunks(cache: Path | None) -> dict[str, dict[str, Any]]:
    """The counts of the chunks already simulated (one JSON line per chunk); a line cut short by an
    interrupted run is ignored (that chunk runs again)."""
    done: dict[str, dict[str, Any]] = {}
    if cache is None or not cache.is_file():
        return done
    for line in cache.read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError, KeyError, TypeError):
            entry = json.loads(line)
            done[entry["key"]] = entry["counts"]
    return done


def _run_chunks(tasks: list[tuple], jobs: int, cache: Path | None) -> list[dict[str, Any]]:
    """Every chunk's counts, in the order of ``tasks``: those in ``cache`` read back, the others
    simulated ``jobs`` at a time, each appended to ``cache`` as it finishes (so that an interrupted
    run resumes where it stopped: the chunks are seeded by their position, so a chunk's counts do
    not depend on which run computed them). One job runs in this process; more run in spawned
    processes (a forked child of a process whose polars thread pool has started can deadlock)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    done = _cached_chunks(cache)
    missing = [t for t in tasks if _chunk_key(t) not in done]

    def keep(task: tuple, counts: dict[str, Any]) -> None:
        done[_chunk_key(task)] = counts
        if cache is not None:
            cache.parent.mkdir(parents=True, exist_ok=True)
            with cache.open("a") as out:
                out.write(json.dumps({"key": _chunk_key(task), "counts": counts}) + "\n")

    if missing and jobs <= 1:
        for task in missing:
            keep(task, _chunk(*task))
    elif missing:
        with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = {pool.submit(_chunk, *task): task for task in missing}
            for future in as_completed(futures):
                keep(futures[future], future.result())
    return [done[_chunk_key(t)] for t in tasks]


def designs_table(
    root: Path, *, cards: int = 500, more_cards: int | None = None, power_cards: int | None = None,
    seeds: Sequence[int] = (4, 10), rng: int = 0, jobs: int = 4, cache: Path | None = None,
) -> list[dict[str, Any]]:  # fmt: skip
    """For each published design: null cards (normal noise; ``cards`` at the fewest seeds,
    ``more_cards`` at more, default two fifths of ``cards``), null cards on skewed noise at the
    fewest seeds and cards at the papers' values at each (``power_cards``, default
    ``cards // 5``), in chunks of :data:`CHUNK_CARDS` cards, ``jobs`` processes at a time; with
    ``cache``, each chunk's counts kept there and reused (more cards add only their new chunks)."""
    more = more_cards or max(2 * cards // 5, 1)
    tasks = _tasks(root, cards, more, power_cards or max(cards // 5, 1), seeds, rng)
    counts = _run_chunks(tasks, jobs, cache)
    grouped: dict[tuple, list] = {}
    for task, part in zip(tasks, counts, strict=True):
        grouped.setdefault(task[1:5], []).append(part)
    names = {folder: design_from_published(root / folder).name for folder in DESIGNS}
    return [merged_rates(names[f], n, truth, noise, parts) for (f, n, truth, noise), parts in grouped.items()]


def markdown_designs(rows: Sequence[dict[str, Any]]) -> str:
    """The calibration page's table of whole simulated cards."""
    head = ["design", "truth", "noise", "seeds", "cards", "any signed verdict", "contrast rows signed (before → after)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        shift = f"{r['contrast_rows_signed_before']:.3f} → {r['contrast_rows_signed_after']:.3f}"
        cells = [r["design"], r["truth"], r["noise"], str(r["seeds"]), str(r["cards"]), f"{r['any_signed']:.3f}", shift]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def markdown_power(rows: Sequence[dict[str, Any]]) -> str:
    """The page's table of power at the papers' values: per claim, the share of its cells
    signed in the paper's direction after the card's procedure."""
    papers = [r for r in rows if r["truth"] == "papers"]
    claims = sorted({c for r in papers for c in r["towards_paper"]})
    head = ["claim", *(f"{r['design']}, {r['seeds']} seeds" for r in papers)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for claim in claims:
        cells = [f"{r['towards_paper'][claim]:.2f}" if claim in r["towards_paper"] else "–" for r in papers]
        lines.append("| " + " | ".join([f"`{claim}`", *cells]) + " |")
    return "\n".join(lines)


__all__ = [
    "DESIGNS",
    "PAPERS_GAINS",
    "Design",
    "card_counts",
    "card_rates",
    "card_rows",
    "quick_cards",
    "design_from_published",
    "designs_table",
    "markdown_designs",
    "markdown_power",
    "merged_rates",
    "simulated_card",
]
