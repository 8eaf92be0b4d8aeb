"""What a study would do, in words: its grid, the resources of each trial, the line a study
starts with, and the dry run's text (``harness run --dry-run``: the grid, the resources and a
cost estimate).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from harness.studies.spec.cost import CostEstimate, estimate
from harness.studies.spec.grid import Trial
from harness.studies.spec.sequential_design import SequentialDesign
from harness.studies.spec.study_spec import StudySpec
from harness.studies.tune.sequential import describe_seeds, trial_range

if TYPE_CHECKING:  # the plan and Ray's connection are the runner's: a dry run needs neither
    from harness.studies.cluster.connect import RayConnection
    from harness.studies.plan import StudyPlan


def describe_grid(spec: StudySpec, trials: Sequence[Trial], design: SequentialDesign | None) -> str:
    """``4 variants x 2 seeds x nano x tinyshakespeare x T=128`` (``design``: the spec's
    sequential design, :attr:`harness.studies.plan.StudyPlan.sequential`)."""
    parts = [
        f"{len(spec.variants)} variants" if len(spec.variants) > 1 else spec.variant_names[0],
        describe_seeds(spec),
        " / ".join(spec.size_names) if len(spec.sizes) <= 3 else f"{len(spec.sizes)} sizes",
        " / ".join(spec.datasets) if len(spec.datasets) <= 3 else f"{len(spec.datasets)} datasets",
        "T=" + "/".join(map(str, spec.context_lengths)),
    ]
    if spec.tau_inits:
        parts.append("tau0=" + "/".join(f"{t:g}" for t in spec.tau_inits))
    fewest, most = trial_range(design, trials)
    count = f"{len(most)} trials" if len(fewest) == len(most) else f"{len(fewest)} to {len(most)} trials"
    return f"{count} ({' x '.join(parts)})"


def describe_resources(spec: StudySpec) -> str:
    r = spec.resources
    text = f"{r.cpus} CPU{'s' if r.cpus > 1 else ''}"
    if r.gpus:
        text += f" + {r.gpus:g} GPU"
    return text + " each"


def start_line(plan: StudyPlan, ray_conn: RayConnection, *, resuming: bool) -> str:
    """``Study tiny: 2 trials (...), 1 CPU each, local Ray (2 CPUs)``."""
    spec = plan.spec
    return (
        f"Study {spec.name}: {describe_grid(spec, plan.trials, plan.sequential)}, {describe_resources(spec)}, "
        f"{ray_conn.description} ({ray_conn.cpus:g} CPUs{f', {ray_conn.gpus:g} GPUs' if ray_conn.gpus else ''})"
        + (" - resuming" if resuming else "")
    )


def dry_run_text(
    spec: StudySpec,
    trials: Sequence[Trial],
    *,
    design: SequentialDesign | None,
    storage: str,
    tracking_uri: str,
    address: str | None,
) -> str:
    train = trials[0].config if trials else None
    lines = [f"Study {spec.name}: {describe_grid(spec, trials, design)}, {describe_resources(spec)}"]
    if train is not None:
        lines.append(
            f"training: {train.max_steps} steps x batch "
            + (f"{spec.tokens_per_batch} tokens / T" if spec.tokens_per_batch else f"{train.batch_size}")
            + f", lr {train.lr:g}, eval every "
            f"{train.eval_every} steps on {train.eval_windows or 'all'} windows, dropout {train.dropout:g}"
        )
    lines.append(
        f"concurrency: {spec.max_concurrent_trials or 'as many as the resources allow'}; retries per trial: "
        f"{spec.retries}"
    )
    lines.append(f"Ray: {address or 'embedded local Ray (' + str(os.cpu_count()) + ' CPUs)'}")
    lines.append(
        f"storage: {storage}/{spec.name}/<date-time>/    MLflow: {tracking_uri} (experiment {spec.experiment_name()!r})"
    )
    factorial = spec.factorial()
    if factorial is not None:
        lines.append(
            f"analysis: 2x2 factorial base={factorial.base} a={factorial.a} b={factorial.b} ab={factorial.ab}; "
            f"tau reference {spec.analysis.tau.reference:g} +- {spec.analysis.tau.margin:g}"
        )
    if design is not None:
        lines.append(f"sequential: {design.rule_text()}")
    lines.append("")
    lines.append(f"{'#':>4}  trial")
    for i, trial in enumerate(trials, 1):
        lines.append(f"{i:>4}  {trial.trial_id}")
    lines.append("")

    def cost(some: Sequence[Trial]) -> CostEstimate:
        return estimate(
            some,
            cpus_per_trial=spec.resources.cpus,
            gpus_per_trial=spec.resources.gpus,
            total_cpus=None if address else os.cpu_count(),
        )

    if design is None:
        lines.append(f"total: {len(trials)} trials")
        lines.extend(cost(trials).lines())
    else:
        least, most = (cost(some) for some in trial_range(design, trials))
        lines.append(
            f"total: {least.trials} trials at least (the first {design.min_seeds} seeds, if the rule holds at "
            f"once), {most.trials} at most ({design.max_seeds} seeds)"
        )
        lines.extend(f"at least: {line}" for line in least.lines())
        lines.extend(f"at most:  {line}" for line in most.lines())
    lines.append("dry run: nothing was started.")
    return "\n".join(lines)
