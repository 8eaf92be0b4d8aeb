"""The checks around a Ray job, without a cluster: the driver refuses destinations inside
Ray's temporary working directory, `harness submit` refuses local ones for a dashboard
elsewhere and resolves what it sends. The jobs themselves run in
`test_studies_cluster.py` (slow, on a real `ray start --head`)."""

from __future__ import annotations

import json
import os
import pty
import socket
from pathlib import Path

import pytest
from harness_support import free_port, run_harness, write_spec

from harness.errors import InputError
from harness.studies.cluster.destinations import (
    JobDriver,
    is_local_address,
    job_driver,
    locate_cluster,
    refuse_ephemeral_destinations,
    refuse_local_destinations,
)
from harness.studies.submit import ask_stop_or_detach, plan_submission

#: An address of TEST-NET-3 (RFC 5737): never this machine, never routed.
REMOTE = "http://203.0.113.7:8265"


@pytest.fixture
def ray_copy(tmp_path: Path) -> Path:
    """A folder laid out like Ray's temporary copy of a job's working directory."""
    folder = tmp_path / "ray" / "session_2026-01-01_00-00-00_1_1" / "runtime_resources" / "working_dir_files"
    folder = folder / "_ray_pkg_0123456789abcdef"
    folder.mkdir(parents=True)
    return folder


def _job_env(job_id: str = "raysubmit_abc") -> dict[str, str]:
    """What Ray's job supervisor hands a job's entrypoint (the job config with its id)."""
    return {"RAY_JOB_CONFIG_JSON_ENV_VAR": json.dumps({"runtime_env": {}, "metadata": {"job_submission_id": job_id}})}


# -- the driver side ----------------------------------------------------------------------------


def test_job_driver_is_recognised_by_its_job_id_or_its_working_directory(ray_copy: Path, tmp_path: Path) -> None:
    assert job_driver({}, tmp_path) is None
    by_copy = job_driver({}, ray_copy)
    assert by_copy is not None and by_copy.ray_copy and by_copy.job_id is None
    assert by_copy.session_dir == ray_copy.parents[2]
    by_id = job_driver(_job_env("raysubmit_xyz"), tmp_path)
    assert by_id == JobDriver(job_id="raysubmit_xyz", working_dir=tmp_path.resolve(), ray_copy=False, session_dir=None)


@pytest.mark.parametrize(
    ("tracking_uri", "storage", "named"),
    [
        ("sqlite:///{here}/mlflow.db", "{here}/results", ["--tracking-uri", "--storage-path"]),  # the defaults
        ("sqlite:///runs/mlflow.db", "s3://bucket/studies", ["--tracking-uri"]),  # a relative SQLite path
        ("file:./mlruns", "s3://bucket/studies", ["--tracking-uri"]),
        ("./mlruns", "s3://bucket/studies", ["--tracking-uri"]),
        ("http://mlflow:5000", "results", ["--storage-path"]),  # ./results, relative
        ("http://mlflow:5000", "file://{here}/results", ["--storage-path"]),
        ("http://mlflow:5000", "{session}/elsewhere", ["--storage-path"]),  # Ray's session directory
    ],
)
def test_destinations_inside_the_jobs_working_directory_are_refused(
    ray_copy: Path, tracking_uri: str, storage: str, named: list[str]
) -> None:
    driver = job_driver(_job_env(), ray_copy)
    fill = {"here": ray_copy, "session": ray_copy.parents[2]}
    with pytest.raises(InputError) as err:
        refuse_ephemeral_destinations(
            tracking_uri=tracking_uri.format(**fill), storage=storage.format(**fill), driver=driver
        )
    message = str(err.value)
    assert "raysubmit_abc" in message and "Ray's temporary copy" in message
    for flag in ("--tracking-uri", "--storage-path"):
        assert (f"  {flag} " in message) == (flag in named)
    assert "does not inherit the environment" in message


def test_persistent_destinations_pass_as_a_job_driver(ray_copy: Path, tmp_path: Path) -> None:
    driver = job_driver(_job_env(), ray_copy)
    for uri, storage in [
        ("http://mlflow:5000", "s3://bucket/studies"),
        (f"sqlite:///{tmp_path / 'mlflow.db'}", str(tmp_path / "results")),
        ("sqlite:///:memory:", "gs://bucket/x"),
    ]:
        refuse_ephemeral_destinations(tracking_uri=uri, storage=storage, driver=driver)


def test_a_job_without_working_dir_refuses_only_what_was_implied(tmp_path: Path) -> None:
    """A job submitted without a working directory runs in the head's Ray directory, which
    persists: the defaults and relative paths are refused (a folder nobody chose), an
    absolute path there is taken as meant."""
    driver = job_driver(_job_env(), tmp_path)
    assert driver is not None and not driver.ray_copy
    for uri, storage in [
        (f"sqlite:///{tmp_path / 'mlflow.db'}", "s3://b/s"),  # the default
        ("sqlite:///sub/mlflow.db", "s3://b/s"),
        ("http://mlflow:5000", "results"),
        ("http://mlflow:5000", str(tmp_path / "results")),  # the default, as run_study resolves it
    ]:
        with pytest.raises(InputError, match="not in the directory of the shell that submitted it"):
            refuse_ephemeral_destinations(tracking_uri=uri, storage=storage, driver=driver)
    refuse_ephemeral_destinations(
        tracking_uri=f"sqlite:///{tmp_path / 'kept' / 'mlflow.db'}", storage=str(tmp_path / "kept"), driver=driver
    )


def test_harness_run_as_a_job_driver_refuses_the_defaults_and_writes_nothing(
    ray_copy: Path, shared_data_dir: Path
) -> None:
    spec = write_spec(ray_copy / "spec.yaml")
    out = run_harness("run", "spec.yaml", cwd=ray_copy, env=_job_env("raysubmit_readme"), timeout=120)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "--tracking-uri" in out.stderr and "--storage-path" in out.stderr
    assert "Ray job raysubmit_readme" in out.stderr and "deletes with its session" in out.stderr
    assert sorted(p.name for p in ray_copy.iterdir()) == [spec.name]  # no mlflow.db, results, mlruns
    assert out.left_running == {}


# -- the client side ----------------------------------------------------------------------------


def test_local_addresses() -> None:
    assert is_local_address("http://127.0.0.1:8265") and is_local_address("http://localhost:8265")
    assert is_local_address(f"http://{socket.gethostname()}:8265")
    assert not is_local_address(REMOTE)
    assert not is_local_address("http://no-such-host.invalid:8265")  # does not resolve: not here


def _never_asked() -> str | None:
    raise AssertionError("the head node was asked, but the address alone tells")


def test_where_the_cluster_runs_is_one_probe() -> None:
    """An address naming another machine: elsewhere, without contact. An address naming this
    machine: the head node's IP decides (a tunnel leads elsewhere), the address when the
    dashboard cannot tell."""
    elsewhere = locate_cluster(REMOTE, _never_asked)
    assert not elsewhere.here and REMOTE in elsewhere.why
    assert locate_cluster("http://127.0.0.1:8265", lambda: None).here
    assert locate_cluster("http://127.0.0.1:8265", lambda: "127.0.0.1").here
    tunnel = locate_cluster("http://127.0.0.1:8265", lambda: "203.0.113.7")
    assert not tunnel.here and "its head node is 203.0.113.7" in tunnel.why


def test_a_cluster_elsewhere_refuses_local_destinations(tmp_path: Path) -> None:
    db, results = f"sqlite:///{tmp_path / 'mlflow.db'}", str(tmp_path / "results")
    elsewhere = locate_cluster(REMOTE, _never_asked)
    with pytest.raises(InputError) as err:
        refuse_local_destinations(place=elsewhere, tracking_uri=db, storage=results, storage_shared=False)
    message = str(err.value)
    assert REMOTE in message and "not on this machine" in message
    assert f"--tracking-uri {db}" in message and "--tracking-uri http://MLFLOW:5000" in message
    assert f"--storage-path {results}" in message and "s3://" in message and "storage_shared: true" in message
    # A network filesystem declared shared and a tracking server are what a remote cluster takes.
    refuse_local_destinations(place=elsewhere, tracking_uri="http://mlflow:5000", storage=results, storage_shared=True)
    refuse_local_destinations(place=elsewhere, tracking_uri="https://m", storage="s3://b/s", storage_shared=False)
    # On this machine, local destinations are fine.
    here = locate_cluster("http://127.0.0.1:8265", lambda: None)
    refuse_local_destinations(place=here, tracking_uri=db, storage=results, storage_shared=False)


def test_submit_to_a_remote_dashboard_with_local_destinations_is_refused_before_contact(
    tmp_path: Path, shared_data_dir: Path
) -> None:
    write_spec(tmp_path / "spec.yaml")
    out = run_harness("submit", "spec.yaml", "--address", REMOTE, cwd=tmp_path, timeout=120)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "not on this machine" in out.stderr and "--tracking-uri" in out.stderr and "--storage-path" in out.stderr
    assert "cannot reach" not in out.stderr  # refused before any connection
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml"]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--address", "127.0.0.1:6379"], "GCS address"),
        (["--address", "ray://127.0.0.1:10001"], "expected http://HEAD:8265"),
        ([], "no Ray dashboard address"),
        (["--address", "http://127.0.0.1:{port}"], "cannot reach the Ray dashboard"),
        (["--address", "http://127.0.0.1:{port}", "--working-dir", "sub"], "outside the working directory"),
    ],
)
def test_submit_bad_input_is_one_message_and_exit_2(
    tmp_path: Path, shared_data_dir: Path, args: list[str], expected: str
) -> None:
    write_spec(tmp_path / "spec.yaml")
    (tmp_path / "sub").mkdir()
    args = [a.format(port=free_port()) for a in args]
    out = run_harness("submit", "spec.yaml", *args, cwd=tmp_path, timeout=120)
    assert out.returncode == 2, out.stdout + out.stderr
    assert expected in out.stderr and "Traceback" not in out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml", "sub"]


def test_submission_passes_destinations_explicitly(
    tmp_path: Path, shared_data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Flags, else the client's environment; local paths made absolute here; settings the
    job would not inherit forwarded, this machine's data folders not."""
    (tmp_path / "studies").mkdir()
    spec = write_spec(tmp_path / "studies" / "s.yaml")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///mlflow.db")
    monkeypatch.setenv("HARNESS_STORAGE_PATH", "results")
    monkeypatch.setenv("HARNESS_DATA_MIRROR", "http://mirror.internal/corpora")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "s3cret")
    plan = plan_submission(
        "studies/s.yaml", address="127.0.0.1:8265", tracking_uri=None, storage_path=None, working_dir=None, resume=True
    )
    assert plan.dashboard == "http://127.0.0.1:8265" and plan.spec_path == "studies/s.yaml"
    assert plan.driver_args() == [
        "harness",
        "run",
        "studies/s.yaml",
        "--tracking-uri",
        f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}",
        "--storage-path",
        str(tmp_path.resolve() / "results"),
        "--resume",
    ]
    env = plan.runtime_env()
    assert env["working_dir"] == str(tmp_path.resolve())
    assert env["env_vars"] == {
        "HARNESS_DATA_MIRROR": "http://mirror.internal/corpora",
        "MLFLOW_TRACKING_PASSWORD": "s3cret",
    }
    assert "HARNESS_DATA_DIR" not in env["env_vars"] and "HARNESS_CACHE_DIR" not in env["env_vars"]
    assert {"/mlflow.db", "/results", "/mlruns/"} <= set(env["excludes"])  # outputs do not travel with the code
    assert plan.resume_command().startswith(f"harness submit {os.path.join('studies', 's.yaml')} --address ")

    flagged = plan_submission(
        spec,
        address="http://127.0.0.1:8265",
        tracking_uri="http://user:pw@mlflow:5000",
        storage_path="s3://bucket/studies",
        working_dir=None,
        resume=False,
    )
    assert flagged.driver_args()[3:] == [
        "--tracking-uri",
        "http://user:pw@mlflow:5000",
        "--storage-path",
        "s3://bucket/studies",
    ]
    assert "pw" not in flagged.resume_command() and "user:***@mlflow" in flagged.resume_command()


def test_ctrl_c_asks_on_a_terminal_and_detaches_without_one(tmp_path: Path) -> None:
    leader, follower = pty.openpty()
    with os.fdopen(follower, "r") as terminal:
        os.write(leader, b"s\n")
        assert ask_stop_or_detach(terminal) == "stop"
        os.write(leader, b"\n")
        assert ask_stop_or_detach(terminal) == "detach"  # the default keeps the job
    os.close(leader)
    with open(tmp_path / "answers", "w+") as not_a_terminal:
        not_a_terminal.write("s\n")
        not_a_terminal.seek(0)
        assert ask_stop_or_detach(not_a_terminal) == "detach"  # nobody to ask: the job goes on
