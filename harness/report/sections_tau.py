"""The study report's sections on the mechanisms' readings: tau's stability (mean, new
runs, heterogeneity across groups), the open fraction of the gates against the Gaussian
tail, and the MOPE widths' scales. Each returns its
:class:`~harness.report.sections.SectionOutput` (its section of the document, its tables, figures,
headline metrics and verdicts)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import polars as pl

from harness.analysis.mope import mope_scales
from harness.analysis.results_types import AnalysisSettings, format_interval, format_pvalue
from harness.analysis.tau import tau_runs, tau_stability
from harness.analysis.tau_types import OpenFractionResult, TauStabilityResult
from harness.errors import InputError
from harness.models.variants import GATES
from harness.report.document import Block, Figure, Paragraph
from harness.report.plots import mope_plot, open_fraction_plot, tau_plot
from harness.report.sections import SectionDraft, SectionOutput, frame_table, section_rng
from harness.report.verdict import Verdict, finite


def user_gated_variants(df: pl.DataFrame) -> list[str]:
    """The variants of ``df`` whose gate is a user's (an import path or a registered name, not
    one of the zoo's :data:`~harness.models.variants.GATES`), in the table's order. Their tau is
    no EGA threshold: the report sets none of them against the papers' reference (a user's
    claims file may, ``harness scorecard --claims``, with a level claim on ``tau_mean``)."""
    if "gate" not in df.columns or "variant" not in df.columns:
        return []
    user = pl.col("gate").is_not_null() & ~pl.col("gate").is_in([*GATES, "none"])
    return df.filter(user).get_column("variant").unique(maintain_order=True).to_list()


def _user_gates_note(left_out: list[str], settings: AnalysisSettings) -> str:
    return (
        f"tau of {', '.join(left_out)} (a user's gate) is not set against the papers' {settings.tau_reference:g} ± "
        f"{settings.tau_margin:g}, a reference for EGA's gate; a claims file can ask for it (harness scorecard "
        "--claims, a level claim on tau_mean)"
    )


def tau_section(
    df: pl.DataFrame, settings: AnalysisSettings, corpus_info: Mapping[str, Mapping[str, float]]
) -> SectionOutput:
    """tau's stability (mean and new runs), its heterogeneity, the open fraction: of the runs of
    the zoo's gates only (:func:`user_gated_variants`)."""
    parts = SectionDraft()
    column = "tau_mean"
    left_out = user_gated_variants(df)
    if left_out:
        parts.notes.append(_user_gates_note(left_out, settings))
        df = df.filter(~pl.col("variant").is_in(left_out))
    if column not in df.columns or df.get_column(column).drop_nulls().len() == 0:
        parts.notes.append("tau section skipped: no learned tau in the table (no gated variant, or no tau_mean column)")
        return parts.done()
    content = {d: v["content_fraction"] for d, v in corpus_info.items() if "content_fraction" in v} or None
    truth = {d: v["salient_fraction"] for d, v in corpus_info.items() if "salient_fraction" in v} or None
    try:
        tau = tau_stability(
            df,
            reference=settings.tau_reference,
            margin=settings.tau_margin,
            confidence=settings.confidence,
            content_fraction=content,
            ground_truth=truth,
        )
    except InputError as exc:
        parts.notes.append(f"tau: {exc}")
        return parts.done()
    parts.results["tau"] = tau
    parts.headline.update(_tau_headline(tau))
    parts.verdicts.append(
        Verdict(
            "tau",
            tau.estimate,
            tau.confidence_interval,
            tau.tost_pvalue,
            tau.n_seeds,
            tau.verdict,
            signed=False,
            test="TOST",
            claim=tau.equivalent,
            kind=tau.verdict_kind,
        )
    )
    runs = tau_runs(df)
    parts.tables["tau_runs"] = runs
    parts.pngs["tau"] = tau_plot(runs, tau, column)
    text = _tau_text(tau)
    blocks: list[Block] = [Paragraph(f"**{tau.verdict}**. {text}")]
    if tau.heterogeneity:
        het = _heterogeneity_table(tau)
        parts.tables["tau_heterogeneity"] = het
        convergence = _convergence_text(tau)
        blocks += [
            Paragraph(f"Heterogeneity of tau across groups, the seed as the unit. {convergence}"),
            frame_table(het, confidence=settings.confidence),
        ]
    of = tau.open_fraction
    if of is not None:
        blocks.append(_open_fraction_part(of, tau, runs, column, corpus_info, parts))
    blocks += [Figure(n, parts.pngs[n]) for n in ("tau", "open_fraction") if n in parts.pngs]
    parts.add("tau", "tau: the learned EGA threshold", blocks)
    return parts.done()


def _tau_headline(tau: TauStabilityResult) -> dict[str, float]:
    out: dict[str, Any] = {"tau/mean": tau.estimate, "tau/n_seeds": float(tau.n_seeds)}
    if tau.mean_tau_init is not None:
        out["tau/mean_tau_init"] = tau.mean_tau_init
    for name, ci in (
        ("ci", tau.confidence_interval),
        ("tost_ci", tau.equivalence_interval),
        ("pi", tau.prediction_interval),
    ):
        if ci is not None:
            out[f"tau/{name}_low"], out[f"tau/{name}_high"] = ci
    if tau.tost_pvalue is not None:
        out["tau/tost_pvalue"] = tau.tost_pvalue
        out["tau/equivalent"] = float(tau.equivalent)
        out["tau/stable"] = float(tau.stable)
    out["tau/pvalue"] = tau.pvalue
    out["tau/within_band_fraction"] = tau.within_band_fraction
    out["tau/head_sd"] = tau.head_spread
    return {k: v for k, v in out.items() if v is not None}


def _tau_text(tau: TauStabilityResult) -> str:
    level, eq_level = f"{tau.confidence:.0%}", f"{1.0 - 2.0 * (1.0 - tau.confidence):.0%}"
    band = format_interval(tau.band, False, 3)
    at_init = (
        f" of the runs started at tau = {tau.mean_tau_init:g} (the contrasts' reference; every initial value is in "
        "the cells and the heterogeneity table)"
        if tau.mean_tau_init is not None
        else ""
    )
    text = (
        f"Mean {tau.estimate:.4f}{at_init} over {tau.n_seeds} seeds ({tau.n_runs} runs), {level} CI "
        f"{format_interval(tau.confidence_interval, False, 4)}; t-test against {tau.reference:g}: "
        f"p={format_pvalue(tau.pvalue)}. Equivalence of the mean to the band {band}: TOST "
        f"p={format_pvalue(tau.tost_pvalue)}, {eq_level} CI {format_interval(tau.equivalence_interval, False, 4)}. "
        f"Stability (where a new seed's run lands, {level} prediction interval"
        f"{' per cell' if tau.cells else ''}): {tau.new_seed_words}; stable only if inside the band."
    )
    if tau.within_band_text:
        text += f" {tau.within_band_text}."
    if tau.head_spread is not None:
        text += f" Spread over heads (mean sd): {tau.head_spread:.3f}."
    return text + (f" ({tau.message}.)" if tau.message else "")


def _heterogeneity_table(tau: TauStabilityResult) -> pl.DataFrame:
    return pl.DataFrame(
        [
            {
                "factor": r.factor,
                "design": r.design,
                "levels": ", ".join(map(str, r.levels)),
                "means": ", ".join(f"{x:.3f}" for x in r.group_means),
                "seeds": r.n_seeds,
                "test": r.test,
                "pvalue": r.pvalue,
                "pvalue_holm": r.pvalue_holm,
                "rank_test": r.rank_test,
                "rank_pvalue": r.rank_pvalue,
                "tost_max_pvalue": r.equivalence_pvalue,
                "tost_max_pvalue_holm": r.equivalence_pvalue_holm,
                "verdict": r.verdict,
                "verdict_kind": r.verdict_kind,
            }
            for r in tau.heterogeneity
        ],
        infer_schema_length=None,
    )


def _convergence_text(tau: TauStabilityResult) -> str:
    """What was and was not shown about "tau converges to the reference whatever X"."""
    band = f"{tau.reference:g} ± {tau.margin:g}"
    tested = [r for r in tau.heterogeneity if r.pvalue is not None or r.equivalence_pvalue is not None]
    shown = [r.factor for r in tested if r.equivalent_at_every_level]
    differs = [r.factor for r in tested if r.differs]
    open_ = [r.factor for r in tested if r.factor not in shown and r.factor not in differs]
    out = []
    if shown:
        out.append(
            f"Mean tau lies within {band} at every level of {', '.join(shown)} (TOST per level, Holm across "
            f"factors): the data support 'converges to {band} whatever {', '.join(shown)}'."
        )
    if differs:
        out.append(f"tau differs across {', '.join(differs)} (seed-level test, Holm across factors).")
    if open_:
        out.append(
            f"Across {', '.join(open_)} neither a difference nor the mean inside {band} at every level was shown: "
            "no claim either way."
        )
    untestable = [r.factor for r in tau.heterogeneity if r not in tested]
    if untestable:
        out.append(f"Not testable: {', '.join(untestable)}.")
    return " ".join(out)


def _open_fraction_part(
    of: OpenFractionResult,
    tau: TauStabilityResult,
    runs: pl.DataFrame,
    column: str,
    corpus_info: Mapping[str, Mapping[str, float]],
    parts: SectionDraft,
) -> Paragraph:
    parts.pngs["open_fraction"] = open_fraction_plot(runs, tau, column)
    parts.headline["open_fraction/mean"] = of.estimate
    parts.headline["open_fraction/gaussian_tail"] = of.gaussian_tail
    parts.headline["open_fraction/minus_tail"] = of.difference
    if of.difference_interval is not None:
        low, high = of.difference_interval
        parts.headline["open_fraction/minus_tail_ci_low"], parts.headline["open_fraction/minus_tail_ci_high"] = (
            low,
            high,
        )
    if of.content_fraction is not None:
        parts.headline["open_fraction/content_fraction"] = of.content_fraction
    claim = of.difference_interval is not None and of.difference_interval.excludes(0.0)
    parts.verdicts.append(
        Verdict(
            "open fraction",
            of.estimate,
            of.confidence_interval,
            of.difference_pvalue,
            of.n_seeds or None,
            _open_verdict_short(of),
            signed=False,
            test="diff t",
            claim=claim,
            kind=of.verdict_kind,
        )
    )
    letters = [v["content_letter_fraction"] for v in corpus_info.values() if finite(v.get("content_letter_fraction"))]
    text = _open_fraction_discussion(of, tau, float(np.mean(letters)) if letters else None)
    return Paragraph(text)


def mope_section(
    mope_sigmas: Any, settings: AnalysisSettings, corpus_info: Mapping[str, Mapping[str, float]]
) -> SectionOutput:
    """The learned MOPE widths clustered into scales, beside the corpus's word, clause and
    sentence lengths (the clustering draws from the section's own generator)."""
    parts = SectionDraft()
    sigmas = _to_numpy_sigmas(mope_sigmas)
    if sigmas is None or sigmas.size < 2:
        return parts.done()
    rng = section_rng(settings.seed, "mope")
    try:
        scales = mope_scales(sigmas, corpus_lengths=_corpus_lengths(corpus_info), rng=rng)
    except InputError as exc:
        parts.notes.append(f"MOPE scales: {exc}")
        return parts.done()
    parts.results["mope_scales"] = scales
    parts.headline["mope/n_clusters"] = float(scales.k)
    tab = pl.DataFrame(
        {
            "centre_sigma": scales.centres.tolist(),
            "weight": scales.weights.tolist(),
            "nearest_scale": list(scales.nearest_scale) or [None] * scales.k,
        }
    )
    parts.tables["mope_scales"] = tab
    parts.pngs["mope_scales"] = mope_plot(sigmas, scales)
    blocks = [
        Paragraph(f"{scales.method}: k = {scales.k}. {scales.message}"),
        frame_table(tab, units={"centre_sigma": "characters"}, percent=("weight",)),
        Figure("mope_scales", parts.pngs["mope_scales"]),
    ]
    parts.add("mope", "MOPE scales", blocks)
    return parts.done()


def _to_numpy_sigmas(mope_sigmas: Any) -> np.ndarray | None:
    if mope_sigmas is None:
        return None
    if isinstance(mope_sigmas, pl.DataFrame):
        if "sigma" not in mope_sigmas.columns or mope_sigmas.height == 0:
            return None
        return mope_sigmas.get_column("sigma").drop_nulls().cast(pl.Float64).to_numpy()
    arr = np.asarray(mope_sigmas, dtype=float).ravel()
    return arr if arr.size else None


def _corpus_lengths(corpus_info: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    keys = {"word": "mean_word_length", "clause": "mean_clause_length", "sentence": "mean_sentence_length"}
    out = {"character": 1.0}
    for name, key in keys.items():
        vals = [v[key] for v in corpus_info.values() if key in v and finite(v[key])]
        if vals:
            out[name] = float(np.mean(vals))
    return out if len(out) > 1 else {}


def _open_verdict_short(of: OpenFractionResult) -> str:
    tail = f"Gaussian tail {of.gaussian_tail:.3f}"
    if of.difference_interval is None:
        reason = of.message.split(";")[0] if of.message.startswith("no test possible") else "no test possible"
        return f"{reason} against the {tail}"
    if of.difference_interval.excludes(0.0):
        return f"differs from the {tail} by {of.difference:+.3f} ({of.confidence:.0%} CI excludes 0)"
    return f"consistent with the {tail} ({of.confidence:.0%} CI of the difference covers 0)"


def _open_fraction_discussion(
    of: OpenFractionResult, tau: TauStabilityResult, letter_fraction: float | None = None
) -> str:
    ci = format_interval(of.confidence_interval, False, 3)
    text = (
        f"Measured open fraction {of.estimate:.3f} {ci} over {of.n_runs} runs. If the z-normalised energies "
        f"were standard normal, head h would open for a fraction 1 - Phi(tau_h) of the keys whatever the text "
        f"(1 - Phi(0.35) = 0.363); the reference is {of.reference_method}: {of.gaussian_tail:.3f}. "
        f"Difference open - tail: {of.difference:+.3f} {format_interval(of.difference_interval)}; "
    )
    if of.difference_interval is None:
        text += "no test possible. "
    elif of.difference_interval.excludes(0.0):
        text += "the measured fraction differs from the Gaussian tail. "
    else:
        text += (
            "the measured fraction is consistent with the Gaussian tail (not distinguishable from it); that "
            "does not show the tail is its cause, and a text-driven gate with the same fraction would read alike. "
        )
    if of.message:
        text += f"({of.message}.) "
    if of.content_fraction is not None:
        text += (
            f"The corpus's content-word fraction is {of.content_fraction:.3f} "
            f"({'close to' if abs(of.content_fraction - of.estimate) < 0.03 else 'away from'} the measured "
            "fraction, by eye: no test); "
        )
        if abs(of.content_fraction - of.gaussian_tail) < 0.03:
            text += "it is also close to the tail, so this corpus cannot separate the two readings. "
    if letter_fraction is not None:
        text += f"Letters inside content words make up {letter_fraction:.3f} of the letters. "
    if of.ground_truth is not None:
        text += (
            f"On the synthetic corpus the true salient fraction is {of.ground_truth:.3f}: a gate that tracks "
            f"content would open for about that fraction, the Gaussian tail predicts {of.gaussian_tail:.3f}."
        )
    return text.strip()


__all__ = ["mope_section", "tau_section", "user_gated_variants"]
