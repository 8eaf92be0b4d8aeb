"""Statistics and reports of a study: paired-seed contrasts with confidence intervals,
trends with size and context, tau's stability, MOPE scales, and the report logged to
MLflow.

Everything works on a polars results table (one row per trial; see
:mod:`harness.analysis.results`) and returns frozen result objects in the style of
``scipy.stats`` (``estimate``, ``confidence_interval.low/high``, ``pvalue``,
``n_seeds``, ``per_seed``, ``method``, ``n_dropped``, ``message``, ``verdict``). What a
verdict may say is set by ``STATISTICS.md``; ``benchmarks/calibration.py`` measures the
coverage of every interval and the false-positive rate of every test the report uses.

The names below are imported lazily so that ``import harness.analysis`` (and the CLI's
``--help``) stays cheap: scipy, statsmodels and matplotlib load on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "results_frame": "results",
    "mlflow_results_frame": "results",
    "window_losses_frame": "results",
    "mope_sigma_frame": "results",
    "find_study_run": "results",
    "CELL_COLUMNS": "results",
    "RESULT_COLUMNS": "results",
    "interaction_contrast": "contrasts",
    "main_effect": "contrasts",
    "linear_contrast": "contrasts",
    "multi_bootstrap": "contrasts",
    "effects_table": "contrasts",
    "effect_trend": "contrasts",
    "seeds_needed": "contrasts",
    "primary_effect": "contrasts",
    "seed_blocks": "contrasts",
    "sd_interval": "contrasts",
    "t_interval": "contrasts",
    "bootstrap_interval": "contrasts",
    "sign_flip_pvalue": "contrasts",
    "multi_bootstrap_interval": "contrasts",
    "divergence_table": "divergence",
    "prediction_interval": "tau",
    "gaussian_tails": "tau",
    "tau_stability": "tau",
    "tau_heterogeneity": "tau",
    "open_fraction_analysis": "tau",
    "tost_pvalue": "tau",
    "tau_runs": "tau",
    "mope_scales": "mope",
    "build_report": "report",
    "log_report": "report",
    "format_verdict_table": "report",
    "headline_family": "report",
    "Report": "report",
    "Verdict": "report",
    "corpus_info_for": "corpus",
    "confidence_sequence": "sequential",
    "ConfidenceSequenceResult": "sequential",
    "AnalysisSettings": "results_types",
    "PrimaryHypothesis": "results_types",
    "ConfidenceInterval": "results_types",
    "ContrastResult": "results_types",
    "TrendResult": "results_types",
    "SeedsNeededResult": "results_types",
    "TauStabilityResult": "results_types",
    "HeterogeneityResult": "results_types",
    "OpenFractionResult": "results_types",
    "MopeScalesResult": "results_types",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'harness.analysis' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"harness.analysis.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs
    from harness.analysis.contrasts import (
        bootstrap_interval,
        effect_trend,
        effects_table,
        interaction_contrast,
        linear_contrast,
        main_effect,
        multi_bootstrap,
        multi_bootstrap_interval,
        primary_effect,
        sd_interval,
        seed_blocks,
        seeds_needed,
        sign_flip_pvalue,
        t_interval,
    )
    from harness.analysis.corpus import corpus_info_for
    from harness.analysis.divergence import divergence_table
    from harness.analysis.mope import mope_scales
    from harness.analysis.report import (
        Report,
        Verdict,
        build_report,
        format_verdict_table,
        headline_family,
        log_report,
    )
    from harness.analysis.results import (
        CELL_COLUMNS,
        RESULT_COLUMNS,
        find_study_run,
        mlflow_results_frame,
        mope_sigma_frame,
        results_frame,
        window_losses_frame,
    )
    from harness.analysis.results_types import (
        AnalysisSettings,
        ConfidenceInterval,
        ContrastResult,
        HeterogeneityResult,
        MopeScalesResult,
        OpenFractionResult,
        PrimaryHypothesis,
        SeedsNeededResult,
        TauStabilityResult,
        TrendResult,
    )
    from harness.analysis.sequential import ConfidenceSequenceResult, confidence_sequence
    from harness.analysis.tau import (
        gaussian_tails,
        open_fraction_analysis,
        prediction_interval,
        tau_heterogeneity,
        tau_runs,
        tau_stability,
        tost_pvalue,
    )
