"""Safety: untrusted files run no code (checkpoints load with ``weights_only=True``, specs
with ``yaml.safe_load``), and no secret of the environment or of a URI ever reaches MLflow.

(That the servers the harness starts bind to 127.0.0.1 unless told otherwise is tested
where they start: ``harness ui`` in tests/studies/test_studies_cli.py and in the end-to-end
test tests/e2e/test_user_journey.py; the MLflow servers of these tests bind 127.0.0.1 too.)"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from harness_support import all_runs, run_harness, sqlite_runs, write_spec


class _RunsCode:
    """Unpickling this creates a directory: the stand-in for any code a pickle can run."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def _malicious_checkpoint(path: Path, marker: Path) -> Path:
    """A checkpoint shaped like the harness's own (config, weights, step) that also holds a
    pickled object: loading it without ``weights_only`` runs code."""
    import torch

    from harness.training.config import TrainConfig

    config = TrainConfig(variant="baseline", context_length=32, batch_size=4, max_steps=4, eval_every=2).model_dump()
    checkpoint = {
        "state_dict": {"model.w": torch.zeros(2, 2)},
        "global_step": 2,
        "harness": {"config": config, "payload": _RunsCode(marker)},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(checkpoint, path)
    return path


def test_checkpoint_holding_a_pickled_object_is_refused(tmp_path: Path, shared_data_dir: Path) -> None:
    import torch

    from harness.errors import InputError
    from harness.training import train
    from harness.training.plan import config_from_checkpoint, load_checkpoint_meta

    marker = tmp_path / "code-ran"
    evil = _malicious_checkpoint(tmp_path / "ckpt" / "last.ckpt", marker)

    # The control: an unsafe load of this file does run code (so the test can fail).
    torch.load(evil, map_location="cpu", weights_only=False)
    assert marker.is_dir()
    marker.rmdir()

    # The CLI: exit 2, one message, no code run, no MLflow run, nothing trained.
    work = tmp_path / "work"
    work.mkdir()
    out = run_harness("train", "--resume", str(evil), cwd=work, env={"HARNESS_CACHE_DIR": str(tmp_path / "cache")})
    assert out.returncode == 2, out.stderr
    assert "cannot be read (corrupt or not a checkpoint)" in out.stderr and "Traceback" not in out.stderr
    assert not marker.exists()
    assert list(work.iterdir()) == [] and sqlite_runs(work / "mlflow.db") == 0

    # The library paths a resumed trial takes (the Tune trainable calls train(resume_from=...)).
    for load in (load_checkpoint_meta, config_from_checkpoint):
        with pytest.raises(InputError, match="cannot be read"):
            load(evil)
    with pytest.raises(InputError, match="cannot be read"):
        train(
            {
                "variant": "baseline",
                "context_length": 32,
                "batch_size": 4,
                "max_steps": 4,
                "eval_every": 2,
                "checkpoint_dir": str(tmp_path / "ckpt2"),
            },
            resume_from=evil,
            mlflow_logging=False,
            progress_bar=False,
        )
    assert not marker.exists()


def test_spec_with_a_python_yaml_tag_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "code-ran"
    spec = tmp_path / "evil.yaml"
    spec.write_text(
        f"name: !!python/object/apply:os.mkdir [{str(marker)!r}]\n"
        "datasets: [tinyshakespeare]\nvariants: [baseline]\nseeds: 1\nsizes: [nano]\ncontext_lengths: [32]\n"
    )
    work = tmp_path / "work"
    work.mkdir()
    for argv in (["run", str(spec)], ["run", str(spec), "--dry-run"]):
        out = run_harness(*argv, cwd=work, timeout=120)
        assert out.returncode == 2, out.stderr
        assert "evil.yaml is not valid YAML at line 1" in out.stderr and "python/object/apply:os.mkdir" in out.stderr
        assert "Traceback" not in out.stderr and out.left_running == {}
        assert not marker.exists()
        assert list(work.iterdir()) == []  # no mlflow.db, no results/


SECRETS = {
    "AWS_SECRET_ACCESS_KEY": "aws-SECRET-7f3a9c",
    "MLFLOW_TRACKING_PASSWORD": "mlflow-SECRET-51d2",
    "RAY_AUTH_TOKEN": "ray-SECRET-token-8e4b0c",
    "HF_TOKEN": "hf-SECRET-2c9e",
    "GITHUB_TOKEN": "gh-SECRET-77aa",
    "DATABASE_URL": "postgresql://harness:db-SECRET-91f0@db.internal:5432/mlflow",
}
URI_PASSWORD = "uri-SECRET-3b6d"


def _strings_of(path: Path) -> str:
    """The text a file holds, parquet cells included (compressed: a byte scan would miss them)."""
    if path.suffix == ".parquet":
        import polars as pl

        return str(pl.read_parquet(path).rows())
    return path.read_bytes().decode("latin-1")


@pytest.mark.slow
def test_no_secret_reaches_mlflow(tmp_path: Path, shared_data_dir: Path, mlflow_server) -> None:
    """A study and a `harness train` run, against an MLflow server reached through a URI
    with a password, with secrets in the environment: no secret appears in any param, tag,
    metric name or artifact of any run, in the server's database, in the study's storage
    directory, in the training run's checkpoints or in what the commands print."""
    server = mlflow_server()
    uri = f"http://harness:{URI_PASSWORD}@127.0.0.1:{server.port}"
    env = {**SECRETS, "MLFLOW_TRACKING_USERNAME": "harness", "HARNESS_CACHE_DIR": str(tmp_path / "cache")}
    secrets = [*(v for k, v in SECRETS.items() if k != "DATABASE_URL"), "db-SECRET-91f0", URI_PASSWORD]

    spec = write_spec(tmp_path / "spec.yaml", variants=["baseline", "ega"], seeds=1)
    study = run_harness(
        "run", str(spec), "--tracking-uri", uri, "--storage-path", str(tmp_path / "results"), cwd=tmp_path, env=env
    )
    assert study.returncode == 0, study.stdout[-3000:] + study.stderr[-3000:]
    train = run_harness(
        "train",
        "--variant",
        "ega",
        "--context-length",
        "32",
        "--batch-size",
        "4",
        "--max-steps",
        "4",
        "--eval-every",
        "2",
        "--eval-windows",
        "4",
        "--final-eval-windows",
        "4",
        "--tracking-uri",
        uri,
        "--experiment",
        "secrets",
        "--checkpoint-dir",
        str(tmp_path / "ckpt"),
        cwd=tmp_path,
        env=env,
    )
    assert train.returncode == 0, train.stderr[-3000:]

    from mlflow import MlflowClient

    client = MlflowClient(server.uri)
    runs = all_runs(server.uri)
    assert len(runs) == 4  # the study's parent and 2 children, the training run
    texts: dict[str, str] = {}
    for run in runs:
        rid = run.info.run_id
        texts[f"{rid} params"] = repr(sorted(run.data.params.items()))
        texts[f"{rid} tags"] = repr(sorted(run.data.tags.items()))
        texts[f"{rid} metrics"] = repr(sorted(run.data.metrics))
        local = Path(client.download_artifacts(rid, "", str(tmp_path / "artifacts" / rid)))
        for path in local.rglob("*"):
            if path.is_file():
                texts[f"{rid} artifact {path.relative_to(local)}"] = _strings_of(path)
    assert any("tracking_uri" in t for t in texts.values())  # the URI is logged (redacted) ...
    assert any("harness:***@127.0.0.1" in t for t in texts.values())  # ... without its password
    assert any(k.endswith("report/report.html") for k in texts) and any(k.endswith("results.parquet") for k in texts)
    for root in (server.db, server.artifacts, tmp_path / "results", tmp_path / "ckpt"):
        for path in [root] if root.is_file() else root.rglob("*"):
            if path.is_file():
                texts[str(path)] = _strings_of(path)
    texts["printed"] = study.stdout + study.stderr + train.stdout + train.stderr
    leaks = [f"{s} in {where}" for where, text in texts.items() for s in secrets if s in text]
    assert leaks == [], "\n".join(leaks)
