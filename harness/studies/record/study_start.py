"""The start of a study's record: its parent run in MLflow (created, or continued on resume,
with the spec's hash, the grid and its factors as params) and the study's files on storage
(``harness_study.json`` with the design a resume must find unchanged, and ``spec.yaml``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from harness.mlflow_client import harness_git_commit, redact_uri
from harness.studies.cluster.destinations import RAY_JOB_TAG, job_driver
from harness.studies.plan import StudyLayout, StudyPlan
from harness.studies.spec.grid import Trial
from harness.studies.spec.study_spec import StudySpec
from harness.studies.storage import STUDY_FILE, write_bytes

if TYPE_CHECKING:  # the recorder is imported by the phase that records (harness.studies.launch)
    from harness.studies.cluster.connect import RayConnection
    from harness.studies.record.recorder import StudyRecorder


def parent_params(spec: StudySpec, trials: Sequence[Trial]) -> dict[str, Any]:
    """Params of the study's parent run: the spec's hash, the grid and its factors."""
    return {
        "spec_sha256": spec.sha256(),
        "grid_size": len(trials),
        "datasets": ",".join(spec.datasets),
        "sizes": ",".join(spec.size_names),
        "context_lengths": ",".join(map(str, spec.context_lengths)),
        "variants": ",".join(spec.variant_names),
        "seeds": ",".join(map(str, spec.grid_seeds())),
        "tau_inits": ",".join(f"{t:g}" for t in spec.tau_inits) if spec.tau_inits else "None",
        "tokens_per_batch": spec.tokens_per_batch,
        "cpus_per_trial": spec.resources.cpus,
        "gpus_per_trial": spec.resources.gpus,
        **{f"train.{k}": v for k, v in spec.train_overrides().items()},
    }


def study_design(trials: Sequence[Trial]) -> dict[str, dict[str, Any]]:
    """What must not change between a study and its resume: each trial's resume contract
    (:meth:`~harness.training.config.TrainConfig.resume_contract`), as JSON keeps it in
    ``harness_study.json``."""
    return json.loads(json.dumps({t.trial_id: t.config.resume_contract() for t in trials}))


def design_changes(stored: dict[str, dict[str, Any]], current: dict[str, dict[str, Any]]) -> list[str]:
    """How ``current`` (the spec's :func:`study_design`) differs from the design a study was
    started with: trials added or removed, and contract fields whose value changed. A field
    the stored design lacks, or holds beyond today's contract (a study started by another
    version of the harness), is not compared."""
    changes = [f"trial {tid} {'added' if tid in current else 'removed'}" for tid in sorted(set(stored) ^ set(current))]
    for tid in sorted(set(stored) & set(current)):
        was, now = stored[tid], current[tid]
        changes += [
            f"{tid}: {key} {was[key]!r} -> {value!r}" for key, value in now.items() if key in was and was[key] != value
        ]
    return changes


def start_parent_run(
    recorder: StudyRecorder,
    plan: StudyPlan,
    layout: StudyLayout,
    ray_conn: RayConnection,
    previous: tuple[str, dict[str, Any]] | None,
) -> str:
    """Open the record: the study's parent run in MLflow (created, or continued on resume).
    Returns the git commit the study is recorded with (a resumed study keeps its own)."""
    git_commit = (previous[1].get("git_commit") if previous else None) or harness_git_commit()
    recorder.start_parent(
        study=plan.spec.name,
        study_run=layout.study_run,
        spec_text=plan.spec_text,
        spec_sha256=plan.spec.sha256(),
        params=parent_params(plan.spec, plan.trials),
        tags={
            "harness.git_commit": git_commit,
            "harness.study_dir": layout.study_dir,
            "ray": ray_conn.description,
            **({"harness.component_dir": plan.component_dir} if plan.names_user_components else {}),
        },
        previous_run_id=(previous[1].get("parent_run_id") if previous else None),
        datasets=plan.spec.datasets,
        data_dir=plan.data_dir,
    )
    job = job_driver()
    if job is not None and job.job_id:  # the run `harness submit` looks for when the job ends
        recorder.parent.set_tags({RAY_JOB_TAG: job.job_id})
    return git_commit


def write_study_files(
    plan: StudyPlan,
    layout: StudyLayout,
    recorder: StudyRecorder,
    previous: tuple[str, dict[str, Any]] | None,
    git_commit: str,
) -> None:
    """``harness_study.json`` (what a resume and ``harness report --from`` need) and the
    ``spec.yaml`` the study runs, in the study's folder."""
    spec = plan.spec
    meta = {
        "study": spec.name,
        "study_run": layout.study_run,
        "spec_sha256": spec.sha256(),
        "tracking_uri": redact_uri(plan.tracking_uri),
        "experiment_id": recorder.store.experiment_id,
        "parent_run_id": recorder.parent.run_id,
        "trial_ids": [t.trial_id for t in plan.trials],
        "sequential": plan.sequential.record() if plan.sequential is not None else None,
        "design": study_design(plan.trials),
        "created": (previous[1].get("created") if previous else time.strftime("%Y-%m-%dT%H:%M:%S%z")),
        "git_commit": git_commit,
    }
    write_bytes(layout.fs, f"{layout.study_root}/{STUDY_FILE}", json.dumps(meta, indent=1).encode())
    write_bytes(layout.fs, f"{layout.study_root}/spec.yaml", plan.spec_text.encode())
