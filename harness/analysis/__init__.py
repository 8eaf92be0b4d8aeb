"""Statistics of a study: paired-seed contrasts with confidence intervals,
trends with size and context, tau's stability, MOPE scales. The report that reads them
is :mod:`harness.report` (a layer above this package).

Everything works on a polars results table (one row per trial; see
:mod:`harness.analysis.results`) and returns frozen result objects in the style of
``scipy.stats`` (``estimate``, ``confidence_interval.low/high``, ``pvalue``,
``n_seeds``, ``per_seed``, ``method``, ``n_dropped``, ``message``, ``verdict``). What a
verdict may say is set by ``docs/statistics.md``; ``benchmarks/calibration.py`` (with the simulations of
:mod:`harness.bench.simulate`, which only the bench imports) measures the
coverage of every interval and the false-positive rate of every test the report uses.

The names below are imported lazily (:mod:`harness.lazy_exports`) so that ``import
harness.analysis`` (and the CLI's ``--help``) stays cheap: scipy, statsmodels and matplotlib
load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.lazy_exports import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "results": [
            "results_frame",
            "curves_frame",
            "mlflow_results_frame",
            "window_losses_frame",
            "mope_sigma_frame",
            "find_study_run",
            "CELL_COLUMNS",
            "RESULT_COLUMNS",
        ],
        "contrasts": [
            "interaction_contrast",
            "main_effect",
            "linear_contrast",
            "effects_table",
            "primary_effect",
            "seed_blocks",
        ],
        "paired_tests": [
            "TTest",
            "SignFlip",
            "BCa",
            "TOST",
            "Shapiro",
            "PairedTest",
            "t_interval",
            "bootstrap_interval",
            "sign_flip_pvalue",
            "tost_pvalue",
        ],
        "trends": ["effect_trend"],
        "progress": ["matched_progress", "MatchedProgress"],
        "planning": ["seeds_needed", "sd_interval"],
        "multibootstrap": ["multi_bootstrap", "multi_bootstrap_interval"],
        "divergence": ["divergence_table"],
        "tau": [
            "prediction_interval",
            "gaussian_tails",
            "tau_stability",
            "tau_heterogeneity",
            "open_fraction_analysis",
            "tau_runs",
        ],
        "mope": ["mope_scales"],
        "sequential": ["confidence_sequence", "ConfidenceSequenceResult"],
        "corpus": ["corpus_info_for"],
        "results_types": [
            "AnalysisSettings",
            "PrimaryHypothesis",
            "ConfidenceInterval",
            "ContrastResult",
            "TestResult",
            "TrendResult",
            "SeedsNeededResult",
            "MopeScalesResult",
        ],
        "tau_types": ["TauStabilityResult", "HeterogeneityResult", "OpenFractionResult"],
    },
)

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs
    from harness.analysis.contrasts import (
        effects_table,
        interaction_contrast,
        linear_contrast,
        main_effect,
        primary_effect,
        seed_blocks,
    )
    from harness.analysis.corpus import corpus_info_for
    from harness.analysis.divergence import divergence_table
    from harness.analysis.mope import mope_scales
    from harness.analysis.multibootstrap import multi_bootstrap, multi_bootstrap_interval
    from harness.analysis.paired_tests import (
        TOST,
        BCa,
        PairedTest,
        Shapiro,
        SignFlip,
        TTest,
        bootstrap_interval,
        sign_flip_pvalue,
        t_interval,
        tost_pvalue,
    )
    from harness.analysis.planning import sd_interval, seeds_needed
    from harness.analysis.progress import MatchedProgress, matched_progress
    from harness.analysis.results import (
        CELL_COLUMNS,
        RESULT_COLUMNS,
        curves_frame,
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
        MopeScalesResult,
        PrimaryHypothesis,
        SeedsNeededResult,
        TestResult,
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
    )
    from harness.analysis.tau_types import HeterogeneityResult, OpenFractionResult, TauStabilityResult
    from harness.analysis.trends import effect_trend
