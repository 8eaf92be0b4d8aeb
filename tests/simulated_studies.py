"""Synthetic study tables with known effects, and a populated MLflow study record."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import polars as pl
import pytest
from scipy import stats

FACTORIAL = ("baseline", "ega", "mope", "ega-mope")


def simulate_study(
    *,
    seeds: int = 6,
    means: dict[str, float] | None = None,
    seed_sd: float = 0.03,
    noise_sd: float = 0.01,
    contexts: tuple[int, ...] = (128,),
    sizes: tuple[tuple[str, int], ...] = (("nano", 100_000),),
    ega_context_slope: float = 0.0,
    tau_mean: float = 0.35,
    tau_sd: float = 0.02,
    rng: int = 0,
) -> pl.DataFrame:
    """One row per trial. L = mean_v + u_s (shared by the seed's variants) + noise;
    EGA variants gain ``ega_context_slope * log(T / T0)`` more with context; gated runs
    get tau ~ N(tau_mean, tau_sd) and open_fraction = 1 - Phi(tau) + N(0, 0.005)."""
    gen = np.random.default_rng(rng)
    means = means or {"baseline": 1.4742, "ega": 1.3821, "mope": 1.5060, "ega-mope": 1.3550}
    rows = []
    for size, params in sizes:
        for ctx in contexts:
            for s in range(seeds):
                u = gen.normal(0.0, seed_sd)
                for variant, mean in means.items():
                    gated = "ega" in variant
                    loss = mean + u + gen.normal(0.0, noise_sd)
                    if gated:
                        loss -= ega_context_slope * np.log(ctx / contexts[0])
                    tau = gen.normal(tau_mean, tau_sd) if gated else None
                    rows.append(
                        {
                            "study": "synthetic",
                            "trial_id": f"{variant}-{size}-{ctx}-{s}",
                            "dataset": "tinyshakespeare",
                            "size": size,
                            "params": params + (1000 if gated else 0),
                            "context_length": ctx,
                            "variant": variant,
                            "seed": s,
                            "val_loss": loss,
                            "test_loss": loss + 0.01,
                            "tau_mean": tau,
                            "open_fraction": None if tau is None else float(stats.norm.sf(tau) + gen.normal(0, 0.005)),
                            "status": "finished",
                        }
                    )
    return pl.DataFrame(rows)


@pytest.fixture
def make_study() -> Callable[..., pl.DataFrame]:
    return simulate_study


def populate_mlflow_study(
    tracking_uri: str,
    df: pl.DataFrame,
    *,
    study: str = "synthetic",
    windows: bool = False,
    spec_yaml: str | None = None,
) -> str:
    """Write ``df`` as a study's MLflow record (docs/contracts.md): a parent run tagged
    harness.role=study and one child run per row. Returns the parent run id."""
    from mlflow import MlflowClient
    from mlflow.entities import Metric, Param, RunTag

    from harness.mlflow_client import ensure_experiment

    client = MlflowClient(tracking_uri=tracking_uri)
    exp_id = ensure_experiment(
        client, tracking_uri, study, deleted_hint=""
    )  # artifacts beside the database, not ./mlruns
    parent = client.create_run(
        exp_id,
        tags={
            "harness.role": "study",
            "harness.study": study,
            "harness.spec_sha256": "0" * 64,
            "harness.git_commit": "test",
        },
        run_name=study,
    )
    pid = parent.info.run_id
    if spec_yaml is not None:
        import tempfile
        from pathlib import Path

        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "spec.yaml"
            path.write_text(spec_yaml)
            client.log_artifact(pid, str(path))
    gen = np.random.default_rng(5)
    for row in df.iter_rows(named=True):
        tags = {
            "harness.role": "trial",
            "harness.study": study,
            "harness.trial_id": row["trial_id"],
            "mlflow.parentRunId": pid,
            "position": "x",
            "gate": "x",
            "scoring": "dot",
        }
        for key in ("variant", "dataset", "size", "context_length", "seed", "status"):
            tags[key] = str(row[key])
        child = client.create_run(exp_id, tags=tags, run_name=row["trial_id"])
        cid = child.info.run_id
        params = [
            Param("variant", row["variant"]),
            Param("seed", str(row["seed"])),
            Param("max_steps", "300"),
            Param("tau_init", "None"),
        ]
        metrics = []
        if row["status"] == "finished":
            values = {
                "final/val_loss": row["val_loss"],
                "final/test_loss": row["test_loss"],
                "num_parameters": row["params"],
            }
            if row["tau_mean"] is not None:
                values["final/tau_mean"] = row["tau_mean"]
                values["final/open_fraction"] = row["open_fraction"]
                # two layers x two heads whose mean is tau_mean
                for i, off in enumerate((-0.03, -0.01, 0.01, 0.03)):
                    values[f"gate/tau/l{i // 2}h{i % 2}"] = row["tau_mean"] + off
            metrics = [Metric(k, float(v), 0, 300) for k, v in values.items()]
        client.log_batch(cid, metrics=metrics, params=params, tags=[RunTag("mlflow.runName", row["trial_id"])])
        if windows and row["status"] == "finished":
            import tempfile
            from pathlib import Path

            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "window_losses.parquet"
                n = 16
                pl.DataFrame(
                    {
                        "split": ["val"] * n,
                        "window": list(range(n)),
                        "loss": (row["val_loss"] + gen.normal(0, 0.05, n)).tolist(),
                    }
                ).write_parquet(path)
                client.log_artifact(cid, str(path))
        client.set_terminated(cid, "FINISHED" if row["status"] == "finished" else "FAILED")
    client.set_terminated(pid, "FINISHED")
    return pid


@pytest.fixture
def mlflow_study() -> Callable[..., str]:
    return populate_mlflow_study


SPEC_YAML = "name: synthetic\nanalysis:\n  factorial: {base: baseline, a: ega, b: mope, ab: ega-mope}\n"


@pytest.fixture(scope="module")
def shared_mlflow_study(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, pl.DataFrame]:
    """One real SQLite MLflow store per test module (creating a store takes seconds):
    study "synthetic", 3 seeds x 4 variants, seed 1's mope trial failed, window losses,
    spec.yaml. Returns (tracking_uri, parent_run_id, the results table written)."""
    df = simulate_study(seeds=3).with_columns(
        pl.when((pl.col("variant") == "mope") & (pl.col("seed") == 1))
        .then(pl.lit("failed"))
        .otherwise(pl.col("status"))
        .alias("status")
    )
    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"
    pid = populate_mlflow_study(uri, df, windows=True, spec_yaml=SPEC_YAML)
    return uri, pid, df
