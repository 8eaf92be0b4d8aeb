"""Studies on a real Ray cluster started on loopback (`ray start --head`, token
authentication on): by address, as a Ray job (`harness submit`, and the raw `ray job
submit`), and on a second node that lacks the corpus. Slow: each starts Ray processes.

The clusters are stopped by ending exactly the processes their `ray start --block` started
(never `ray stop`, which would end every Ray instance on the machine)."""

from __future__ import annotations

import hashlib
import os
import pty
import re
import shutil
import signal
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from components_support import GOOD_GATE, MARKED, development_package, write_module
from harness_support import (
    REPO,
    LocalCluster,
    cli_env,
    cluster_env,
    end_session,
    harness_cmd,
    result_reports,
    run_harness,
    stop_workers,
    tune_trial_states,
    wait_until,
)
from mlflow import MlflowClient

from harness.datasets import REGISTRY

pytestmark = pytest.mark.slow

#: Generous: a study of two 10-step trials takes 1-2 minutes when other work shares the 2 cores.
JOB_TIMEOUT = 600
#: What a job run in Ray's temporary working directory would leave there.
OUTPUTS = ("mlflow.db", "mlruns", "mlartifacts", "results")


@pytest.fixture(scope="module")
def cluster(_private_cache: Path) -> Iterator[LocalCluster]:
    c = LocalCluster(cluster_env())
    try:
        c.start_head()
        yield c
    finally:
        c.stop()


def _client_env(cluster: LocalCluster, **extra: str) -> dict[str, str]:
    """A client's environment: the token, but no RAY_AUTH_MODE (the harness enables token
    mode itself when a token is available, as Ray does for ray.init())."""
    env = {k: v for k, v in cluster.env.items() if k != "RAY_AUTH_MODE"}
    env.update(extra)
    return env


def _spec(folder: Path, tiny: dict, **overrides) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump({**tiny, **overrides}))
    return path


def _study_runs(tracking_uri: str, experiment: str) -> tuple[list, list]:
    client = MlflowClient(tracking_uri)
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    return (
        [r for r in runs if r.data.tags.get("harness.role") == "study"],
        [r for r in runs if r.data.tags.get("harness.role") == "trial"],
    )


def _ray_job(
    cluster: LocalCluster, command: str, *args: str, timeout: float = JOB_TIMEOUT
) -> subprocess.CompletedProcess:
    """``ray job COMMAND --address DASHBOARD ARGS`` (the job CLI needs token mode spelled out)."""
    return subprocess.run(
        [shutil.which("ray") or "ray", "job", command, "--address", cluster.dashboard, *args],
        env=_client_env(cluster, RAY_AUTH_MODE="token"),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _outputs_in_ray_temp(cluster: LocalCluster) -> list[str]:
    """Study outputs anywhere under the cluster's temporary directory (its sessions, the
    jobs' working directory copies)."""
    return sorted(str(p) for name in OUTPUTS for p in Path(cluster.temp_dir).rglob(name))


def _job_id(text: str) -> str:
    found = re.search(r"Ray job (raysubmit_\w+)", text)
    assert found, text[-3000:]
    return found.group(1)


# -- by address, and the raw job form --------------------------------------------------------


def test_study_on_a_cluster_by_address(
    cluster: LocalCluster, tmp_path: Path, tiny: dict, shared_data_dir: Path
) -> None:
    spec = _spec(tmp_path, tiny)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    args = ["run", str(spec), "--address", cluster.address, "--tracking-uri", uri]
    out = run_harness(*args, "--storage-path", str(tmp_path / "results"), cwd=tmp_path, env=_client_env(cluster))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert f"Ray cluster at {cluster.address}" in out.stdout
    parents, children = _study_runs(uri, "tiny")
    assert len(parents) == 1 and len(children) == 2
    assert all(c.info.status == "FINISHED" and "final_val_loss" in c.data.metrics for c in children)


def test_raw_ray_job_submit_with_explicit_destinations(
    cluster: LocalCluster, tmp_path: Path, tiny: dict, shared_data_dir: Path
) -> None:
    """docs/cluster.md's raw form: `ray job submit ... -- harness run SPEC --tracking-uri ... --storage-path ...`."""
    workdir = tmp_path / "job"
    _spec(workdir, tiny, name="jobstudy")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    out = _ray_job(
        cluster,
        "submit",
        "--working-dir",
        str(workdir),
        "--",
        "harness",
        "run",
        "spec.yaml",
        "--tracking-uri",
        uri,
        "--storage-path",
        str(tmp_path / "results"),
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "succeeded" in out.stdout + out.stderr
    assert "Study jobstudy: 2 trials" in out.stdout
    parents, children = _study_runs(uri, "jobstudy")
    assert len(parents) == 1 and len(children) == 2
    assert all(c.data.tags["status"] == "finished" for c in children)


def test_readme_era_submission_is_refused_and_writes_nothing_into_ray_temp(
    cluster: LocalCluster, tmp_path: Path, tiny: dict, shared_data_dir: Path
) -> None:
    """The destinations exported only in the client's shell do not travel with the job: the
    driver would fall back to sqlite:///mlflow.db and ./results in Ray's temporary copy of
    the working directory. It refuses (exit 2) before anything starts."""
    workdir = tmp_path / "job"
    _spec(workdir, tiny, name="readme")
    asked_db, asked_storage = tmp_path / "mlflow.db", tmp_path / "results"
    out = subprocess.run(
        [shutil.which("ray") or "ray", "job", "submit", "--address", cluster.dashboard, "--working-dir", str(workdir)]
        + ["--", "harness", "run", "spec.yaml"],
        env=_client_env(
            cluster,
            RAY_AUTH_MODE="token",
            MLFLOW_TRACKING_URI=f"sqlite:///{asked_db}",
            HARNESS_STORAGE_PATH=str(asked_storage),
        ),
        capture_output=True,
        text=True,
        timeout=JOB_TIMEOUT,
    )
    text = out.stdout + out.stderr
    assert out.returncode != 0, text[-3000:]
    assert "failed with exit code 2" in text  # the driver's exit code, as Ray reports it
    assert "--tracking-uri" in text and "--storage-path" in text
    assert "Ray's temporary copy of the job's working directory" in text
    assert "does not inherit the environment" in text
    assert "Study readme:" not in text  # nothing started
    assert _outputs_in_ray_temp(cluster) == []
    assert not asked_db.exists() and not asked_storage.exists()


# -- harness submit ----------------------------------------------------------------------------


def test_submit_records_at_the_asked_destinations(
    cluster: LocalCluster, tmp_path: Path, tiny: dict, shared_data_dir: Path
) -> None:
    """`harness submit` with the destinations only in the client's environment (a
    plain shell's setup): they reach the driver, the study is recorded there, the command exits
    with the job's status and prints the job id and the MLflow link of the parent run."""
    workdir = tmp_path / "job"
    _spec(workdir, tiny, name="submitted")
    uri, storage = f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "results"
    env = _client_env(cluster, MLFLOW_TRACKING_URI=uri, HARNESS_STORAGE_PATH=str(storage))
    out = run_harness("submit", "spec.yaml", "--address", cluster.dashboard, cwd=workdir, env=env, timeout=JOB_TIMEOUT)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    job_id = _job_id(out.stdout)
    assert f"Job {job_id}: SUCCEEDED" in out.stdout
    assert f"--tracking-uri {uri} --storage-path {storage}" in out.stdout  # passed explicitly
    assert "Study submitted: 2 trials" in out.stdout  # the job's own output, streamed
    assert re.search(r"\[2/2\] DONE", out.stdout)

    parents, children = _study_runs(uri, "submitted")
    assert len(parents) == 1 and len(children) == 2
    assert all(c.info.status == "FINISHED" and c.data.tags["status"] == "finished" for c in children)
    parent = parents[0]
    link = f"/#/experiments/{parent.info.experiment_id}/runs/{parent.info.run_id}?workflowType=machine_learning"
    assert f"View it: harness ui --tracking-uri {uri}  ->  http://127.0.0.1:5000{link}" in out.stdout
    (study_dir,) = (storage / "submitted").iterdir()
    assert (study_dir / "results.parquet").is_file()
    assert parent.data.tags["harness.study_dir"] == str(study_dir)
    assert _outputs_in_ray_temp(cluster) == []


def test_submit_ships_a_user_component_beside_the_spec(
    cluster: LocalCluster, tmp_path: Path, tiny: dict, shared_data_dir: Path
) -> None:
    """A gate in a module beside the spec (not installed, not on any PYTHONPATH): `harness
    submit` sends it as the job's py_modules, the driver on the cluster imports it from there and
    checks it before any trial, every trial trains it, and MLflow records it by its import path."""
    workdir = tmp_path / "job"  # the working directory; the spec and the module in a folder below it
    module = write_module(workdir / "study", "gates", GOOD_GATE)
    variants = ["baseline", {"name": "good", "gate": f"{module}:GoodGate"}]
    _spec(workdir / "study", tiny, name="own", variants=variants)
    uri, storage = f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "results"
    flags = ["--address", cluster.dashboard, "--tracking-uri", uri, "--storage-path", str(storage)]
    env = _client_env(cluster)
    out = run_harness("submit", "study/spec.yaml", *flags, cwd=workdir, env=env, timeout=JOB_TIMEOUT)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    (found,) = [line for line in out.stdout.splitlines() if f"good: gate {module}:GoodGate (class" in line]
    assert "py_modules_files" in found and str(workdir) not in found  # the shipped copy, on the cluster's side
    assert "good: causal over 32 tokens (eval and train mode, 2 random inputs) at nano, contracts kept" in out.stdout
    parents, children = _study_runs(uri, "own")
    good = [c for c in children if c.data.tags["variant"] == "good"]
    assert len(good) == 1 and good[0].info.status == "FINISHED"
    assert good[0].data.params["gate"] == good[0].data.tags["gate"] == f"{module}:GoodGate"


def test_submit_no_wait_then_logs_then_resume(
    cluster: LocalCluster, tmp_path: Path, tiny: dict, shared_data_dir: Path
) -> None:
    """`harness submit --no-wait` returns with the job id; `ray job logs` shows the study;
    the job is stopped after its first trial; `harness submit --resume` finishes the rest
    without training the finished trial again, in the same MLflow runs."""
    workdir = tmp_path / "job"
    _spec(workdir, tiny, name="resumed", max_concurrent_trials=1)  # 2 trials, one after the other
    uri, storage = f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "results"
    flags = ["--address", cluster.dashboard, "--tracking-uri", uri, "--storage-path", str(storage)]
    env = _client_env(cluster)

    first = run_harness("submit", "spec.yaml", *flags, "--no-wait", cwd=workdir, env=env, timeout=120)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    job_id = _job_id(first.stdout)
    assert f"ray job logs -f {job_id}" in first.stdout
    assert f"harness submit spec.yaml {' '.join(flags)} --resume" in first.stdout

    wait_until(
        lambda: "Study resumed: 2 trials" in _ray_job(cluster, "logs", job_id, timeout=60).stdout,
        timeout=JOB_TIMEOUT,
        interval=3,
        what="the job's study header in `ray job logs`",
    )
    done_first = wait_until(
        lambda: [t for t, s in tune_trial_states(storage, "resumed").items() if s == "TERMINATED"],
        timeout=JOB_TIMEOUT,
        interval=1,
        what="the first finished trial",
    )
    stopped = _ray_job(cluster, "stop", job_id, timeout=120)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    (study_dir,) = (storage / "resumed").iterdir()
    reports_before = result_reports(study_dir)

    again = run_harness("submit", "spec.yaml", *flags, "--resume", cwd=workdir, env=env, timeout=JOB_TIMEOUT)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "- resuming" in again.stdout and f"Job {_job_id(again.stdout)}: SUCCEEDED" in again.stdout
    for trial in done_first:  # finished before the stop: not trained again
        assert result_reports(study_dir)[trial] == reports_before[trial]
    parents, children = _study_runs(uri, "resumed")
    assert len(parents) == 1 and len(children) == 2
    assert parents[0].info.status == "FINISHED"
    assert all(c.info.status == "FINISHED" and c.data.tags["status"] == "finished" for c in children)
    assert [p.name for p in (storage / "resumed").iterdir()] == [study_dir.name]


def test_ctrl_c_without_a_terminal_detaches(
    cluster: LocalCluster, tmp_path: Path, tiny: dict, shared_data_dir: Path
) -> None:
    """Ctrl-C while following a job, with no terminal to ask on: the client detaches,
    prints how to follow the job, and the job goes on to the end."""
    workdir = tmp_path / "job"
    _spec(workdir, tiny, name="detached")
    uri, storage = f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "results"
    log = tmp_path / "submit.log"
    with open(log, "w") as sink:
        client = subprocess.Popen(
            harness_cmd("submit", "spec.yaml", "--address", cluster.dashboard)
            + ["--tracking-uri", uri, "--storage-path", str(storage)],
            cwd=workdir,
            env=cli_env(_client_env(cluster)),
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_until(lambda: "Study detached: 2 trials" in log.read_text(), timeout=JOB_TIMEOUT, what="the job's output")
        client.send_signal(signal.SIGINT)
        assert client.wait(timeout=60) == 0
    finally:
        end_session(client.pid)
    text = log.read_text()
    job_id = _job_id(text)
    assert "Detached" in text and f"ray job logs -f {job_id}" in text

    followed = _ray_job(cluster, "logs", "-f", job_id)  # the printed command, to the job's end
    assert "Study detached finished" in followed.stdout, followed.stdout[-3000:] + followed.stderr[-3000:]
    parents, children = _study_runs(uri, "detached")
    assert len(parents) == 1 and len(children) == 2


def test_ctrl_c_on_a_terminal_asks_and_stops_the_job(
    cluster: LocalCluster, tmp_path: Path, tiny: dict, shared_data_dir: Path
) -> None:
    """Ctrl-C with a terminal: the client asks; "s" stops the job, which ends STOPPED; the
    client exits 130 and prints how to resume."""
    workdir = tmp_path / "job"
    _spec(workdir, tiny, name="stopped")
    log = tmp_path / "submit.log"
    leader, follower = pty.openpty()
    with open(log, "w") as sink:
        client = subprocess.Popen(
            harness_cmd("submit", "spec.yaml", "--address", cluster.dashboard)
            + ["--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}", "--storage-path", str(tmp_path / "results")],
            cwd=workdir,
            env=cli_env(_client_env(cluster)),
            stdin=follower,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    os.close(follower)
    try:
        wait_until(lambda: "Study stopped: 2 trials" in log.read_text(), timeout=JOB_TIMEOUT, what="the job's output")
        client.send_signal(signal.SIGINT)
        wait_until(lambda: "Stop the job (s) or detach" in log.read_text(), timeout=60, what="the question")
        os.write(leader, b"s\n")
        assert client.wait(timeout=JOB_TIMEOUT) == 130
    finally:
        end_session(client.pid)
        os.close(leader)
    text = log.read_text()
    job_id = _job_id(text)
    assert f"Job {job_id}: STOPPED" in text and "Resume it with: harness submit spec.yaml" in text
    assert "was stopped" in _ray_job(cluster, "status", job_id, timeout=60).stdout  # Ray's own record


def test_multi_node_cluster_refuses_local_storage(cluster: LocalCluster, tmp_path: Path, tiny: dict) -> None:
    cluster.add_worker()
    try:
        spec = _spec(tmp_path, tiny)
        args = ["run", str(spec), "--address", cluster.address, "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"]
        out = run_harness(*args, "--storage-path", str(tmp_path / "results"), cwd=tmp_path, env=_client_env(cluster))
        assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
        assert "has 2 nodes" in out.stderr and "shared storage" in out.stderr
        assert not (tmp_path / "results").exists() and not (tmp_path / "mlflow.db").exists()
    finally:
        stop_workers(cluster)


# -- a node without the corpus -----------------------------------------------------------------


class _Mirror(BaseHTTPRequestHandler):
    """A corpus mirror on 127.0.0.1: serves ``server.files[path]`` whole, or (``server.truncate``)
    announces the full length, sends half and closes, as a dropped connection does."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        body = self.server.files.get(self.path)  # type: ignore[attr-defined]
        if body is None:
            self.send_error(404)
            return
        self.server.hits += 1  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body[: len(body) // 2] if self.server.truncate else body)  # type: ignore[attr-defined]

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def mirror(shared_data_dir: Path) -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Mirror)
    server.files = {"/tinyshakespeare/input.txt": (shared_data_dir / "tinyshakespeare" / "input.txt").read_bytes()}
    server.hits, server.truncate = 0, False
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def test_a_node_without_the_corpus_fetches_it_verified_or_fails_naming_it(
    tmp_path: Path, tiny: dict, mirror: ThreadingHTTPServer
) -> None:
    """Two nodes: the head (the corpora in HARNESS_DATA_DIR, no CPUs for trials) and a worker
    whose HARNESS_DATA_DIR is empty, with a cache of its own and a corpus mirror; the driver
    gives no data folder. A mirror that drops the connection mid-file: the check on every node
    stops the study before its first trial (exit 2), naming the corpus and the node, and
    nothing is left in the worker's cache. A mirror that serves the file: the worker fetches
    it once, checksum-verified, and the study trains."""
    worker_cache = tmp_path / "worker-cache"
    c = LocalCluster(cluster_env())
    try:
        c.start_head(num_cpus=0)
        worker_env = {**c.env, "HARNESS_DATA_DIR": "", "HARNESS_CACHE_DIR": str(worker_cache)}
        c.add_worker(env={**worker_env, "HARNESS_DATA_MIRROR": f"http://127.0.0.1:{mirror.server_address[1]}"})
        (worker,) = [n["id"] for n in c.alive_nodes() if not n["head"]]
        # One trial per study; one machine: its paths are shared storage.
        spec = _spec(tmp_path, tiny, variants=["baseline"], retries=0, storage_shared=True)

        def study(name: str) -> subprocess.CompletedProcess:
            args = ["run", str(spec), "--address", c.address, "--tracking-uri", f"sqlite:///{tmp_path / name}.db"]
            args += ["--storage-path", str(tmp_path / name)]
            # The driver names no data folder: on one machine, its own would be readable by every "node".
            env = _client_env(c, HARNESS_DATA_DIR="")
            return run_harness(*args, cwd=tmp_path, env=env, timeout=JOB_TIMEOUT)

        mirror.truncate = True
        failed = study("truncated")
        assert failed.returncode == 2, failed.stdout[-3000:] + failed.stderr[-3000:]
        assert "no trial was started" in failed.stderr
        assert "corpus 'tinyshakespeare' is not available on node" in failed.stderr and worker in failed.stderr
        assert "incomplete download discarded" in failed.stderr
        assert [p for p in worker_cache.rglob("*") if p.is_file()] == []  # no partial file, no token cache
        assert not (tmp_path / "truncated.db").exists() and not (tmp_path / "truncated").exists()

        mirror.truncate = False
        done = study("served")
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert "1 finished" in done.stdout
        fetched = worker_cache / "data" / "tinyshakespeare" / "input.txt"
        assert hashlib.sha256(fetched.read_bytes()).hexdigest() == REGISTRY["tinyshakespeare"].files[0].sha256
        assert mirror.hits == 2  # the truncated download, then the complete one (the trial finds it cached)
        _, children = _study_runs(f"sqlite:///{tmp_path / 'served'}.db", "tiny")
        assert len(children) == 1 and children[0].data.tags["status"] == "finished"
    finally:
        c.stop()


# -- a user's modules on every node -------------------------------------------------------------


def _marks(folder: Path, kind: str) -> dict[str, set[str]]:
    """Ray node -> the files the ``kind`` component's class was imported from, over the
    constructions in trials (the driver's pre-flight is left out)."""
    out: dict[str, set[str]] = {}
    for mark in folder.glob(f"{kind}-*"):
        node, path = mark.read_text().split(" ", 1)
        if node != "driver":
            out.setdefault(node, set()).add(path)
    return out


def test_run_by_address_ships_the_users_modules_to_every_node(
    tmp_path: Path, tiny: dict, shared_data_dir: Path
) -> None:
    """`harness run --address` on two nodes (a worker started from another folder), one CPU each:
    a variant whose gate lies beside the spec and whose position comes from a package on the
    driver's PYTHONPATH only, registered by its entry point (not installed on the nodes). Both
    travel as the job's py_modules: every node resolves both from the shipped copy before the first
    trial, and the variant's two trials train, importing the shipped copies."""
    marks, elsewhere = tmp_path / "marks", tmp_path / "elsewhere"
    marks.mkdir()
    elsewhere.mkdir()
    source = MARKED.format(marks=str(marks))
    gates = write_module(tmp_path / "study", "marked_gates", source)
    _, _, position = development_package(tmp_path / "devpkgs", source, "MarkedPosition")
    variants = [{"name": "mine", "position": position, "gate": f"{gates}:MarkedGate"}]
    spec = _spec(tmp_path / "study", tiny, name="shipped", variants=variants, seeds=2, retries=0, storage_shared=True)
    c = LocalCluster(cluster_env())
    try:
        c.start_head(num_cpus=1)
        c.add_worker(num_cpus=1, cwd=elsewhere)
        nodes = {n["id"] for n in c.alive_nodes()}
        args = ["run", str(spec), "--address", c.address, "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"]
        env = _client_env(c, PYTHONPATH=os.pathsep.join([str(REPO), str(tmp_path / "devpkgs")]))
        args += ["--storage-path", str(tmp_path / "results")]
        out = run_harness(*args, cwd=tmp_path, env=env, timeout=JOB_TIMEOUT)
    finally:
        c.stop()
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    for name in (f"gate {gates}:MarkedGate", f"position {position}"):
        checked = [line for line in out.stdout.splitlines() if f": {name} from " in line]
        assert {node for node in nodes if any(node in line for line in checked)} == nodes, out.stdout[-3000:]
        assert all("py_modules_files" in line for line in checked), checked
    for kind in ("gate", "position"):
        # Where the two trials train is Ray's choice (run one after the other, both may land on
        # one node); every node resolving both modules is the check lines' assertion above.
        built = _marks(marks, kind)
        assert built and set(built) <= nodes, built  # trained, on the cluster's nodes
        assert all("py_modules_files" in path for paths in built.values() for path in paths), built
    _, children = _study_runs(f"sqlite:///{tmp_path / 'mlflow.db'}", "shipped")
    assert len(children) == 2 and all(child.data.tags["status"] == "finished" for child in children)
