"""The papers' claims as data, and the scorecard that says which hold, where.

``claims.yaml`` (shipped with the package, loaded by :func:`load_claims`) holds one entry per
claim of either paper, with its own smallest effect of interest; :func:`scorecard_table`
matches each claim to every cell of the studies read that can measure it and reads the
report's own intervals against the paper's number (:mod:`harness.scorecard.verdicts`), one
reader per kind of measure (:mod:`harness.scorecard.readers`), each claim's rows one Holm
family (:mod:`harness.scorecard.family`). A study's curves are read at every evaluation step
with the same readers (``training`` rows: :mod:`harness.scorecard.training`), and three or
more sizes in the studies of one recipe give each effect predicted at the papers' size and
training steps, or refused with the reason (``predicted`` rows: :mod:`harness.scorecard.prediction`). Rows are
:class:`ScorecardRow`, from which the parquet schema is derived. ``harness scorecard`` writes
the table, an HTML page with a figure per claim and a markdown table, prints what was
measured, and logs them to MLflow.

Layer: above :mod:`harness.analysis` and :mod:`harness.report`, below :mod:`harness.studies`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.lazy_exports import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "claims": ["CORE_IDS", "Claim", "ClaimSet", "Measure", "Setting", "load_claims", "parse_claims"],
        "verdicts": ["CLAIM_KINDS", "KIND_MEANINGS", "TREND_KINDS", "ClaimVerdict", "Intervals"],
        "rows": ["SCORECARD_COLUMNS", "SCORECARD_SCHEMA", "ScorecardRow"],
        "compute": ["StudyResults", "scorecard_rows", "scorecard_table"],
    },
)

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs
    from harness.scorecard.claims import CORE_IDS, Claim, ClaimSet, Measure, Setting, load_claims, parse_claims
    from harness.scorecard.compute import StudyResults, scorecard_rows, scorecard_table
    from harness.scorecard.rows import SCORECARD_COLUMNS, SCORECARD_SCHEMA, ScorecardRow
    from harness.scorecard.verdicts import CLAIM_KINDS, KIND_MEANINGS, TREND_KINDS, ClaimVerdict, Intervals
