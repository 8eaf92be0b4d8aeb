"""What a finished study tells its user: the analysis's report (built from the collected
outcomes and logged to the parent run) and the closing lines (counts, the results, how to
resume, where MLflow shows the study).

The analysis (scipy, statsmodels, matplotlib: about 1.5-3 s) is imported inside
:func:`analyse`, for the start-up cost measured in :mod:`harness.studies.runner`.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from harness.mlflow_client import redact_uri
from harness.studies.plan import CollectedOutcomes, StudyLayout, StudyPlan
from harness.studies.spec.study_spec import StudySpec

if TYPE_CHECKING:  # the recorder is imported by the phase that records (harness.studies.launch)
    from harness.studies.record.recorder import StudyRecorder


def analyse(
    spec: StudySpec,
    table: Any,
    windows: Any,
    sigmas: Any,
    local_dir: Path | None,
    recorder: StudyRecorder,
    say: Any,
    *,
    sequential: Any = None,
    curves: Any = None,
) -> Any:
    """The analysis issue's report, logged to the parent run (a failure is a warning: the
    study's results are safe; `harness report` can redo it)."""
    try:
        from harness.analysis import AnalysisSettings, corpus_info_for
        from harness.report import build_report, log_report
    except ImportError:
        return None
    try:
        settings = AnalysisSettings.from_mapping(spec.analysis_settings())
        out_dir = (local_dir / "report") if local_dir is not None else Path(tempfile.mkdtemp(prefix="harness-report-"))
        try:
            corpus_info = corpus_info_for(list(spec.datasets))
        except Exception:  # noqa: BLE001 - corpus numbers are optional context
            corpus_info = None
        if windows is not None and "split" in windows.columns:
            windows = windows.filter(windows.get_column("split") == "val")
        rep = build_report(
            table,
            settings=settings,
            out_dir=out_dir,
            window_losses=windows,
            mope_sigmas=sigmas,
            corpus_info=corpus_info,
            title=spec.name,
            sequential=sequential,
            curves=curves,
            interaction_asked=spec.factorial() is not None,
            eval_windows=spec.periodic_windows(),
        )
    except Exception as exc:  # noqa: BLE001
        say(
            f"warning: the analysis failed ({type(exc).__name__}: {exc}); the results are safe; retry with "
            f"`harness report {spec.name}`"
        )
        return None
    say(rep.verdict_table)
    for note in getattr(rep, "notes", ()):
        say(f"note: {note}")
    if recorder.store.active and recorder.parent.run_id is not None:
        try:
            log_report(rep, run_id=recorder.parent.run_id, tracking_uri=recorder.store.tracking_uri)
        except Exception as exc:  # noqa: BLE001
            recorder.store.fail("logging the report", exc)
    return rep


def tell_where(
    plan: StudyPlan,
    layout: StudyLayout,
    collected: CollectedOutcomes,
    recorder: StudyRecorder,
    *,
    wall: float,
    storage_flag: str | None,
    tracking_flag: str | None,
    say: Any,
) -> str | None:
    """Tell the user: the closing lines (counts, the results, how to resume, where MLflow shows
    the study). Returns the UI link (None when MLflow did not record the study)."""
    spec, uri, study_dir = plan.spec, plan.tracking_uri, layout.study_dir
    summary = ", ".join(f"{n} {s}" for s, n in collected.counts.items() if n)
    say(f"Study {spec.name} {collected.status} in {wall:.0f} s: {summary}")
    say(f"Results: {study_dir}/results.parquet")
    if collected.status == "interrupted":
        say(
            f"Resume it with: harness run {_spec_hint(spec)} --resume"
            + (f" --storage-path {plan.storage}" if storage_flag else "")
        )
    ui_url = recorder.ui_url()
    if recorder.store.broken is not None:
        # The one warning came when the store failed; here is what to do about it.
        ui_url = None
        say(
            f"MLflow: not recorded completely (the tracking store {redact_uri(uri)} failed). Everything is kept in "
            f"{study_dir}; once the store is back, record it there with:\n"
            f"  harness report {spec.name} --from {study_dir} --tracking-uri {redact_uri(uri)}"
        )
    elif recorder.parent.run_id is not None:
        say(f'MLflow: parent run {recorder.parent.run_id} in experiment "{spec.experiment_name()}" ({redact_uri(uri)})')
        default_store = tracking_flag is None and spec.tracking.uri is None and "MLFLOW_TRACKING_URI" not in os.environ
        ui_cmd = "harness ui" if default_store else f"harness ui --tracking-uri {redact_uri(uri)}"
        # The link never holds credentials (StudyRecorder.ui_url drops them).
        say(
            f"View it: {ui_cmd}  ->  {ui_url}"
            if urlparse(uri).scheme not in ("http", "https")
            else f"View it: {ui_url}"
        )
    return ui_url


def _spec_hint(spec: StudySpec) -> str:
    return f"studies/{spec.name}.yaml" if Path(f"studies/{spec.name}.yaml").is_file() else "SPEC"
