"""`harness run` from the command line: bad input exits 2 with one clear message and leaves
nothing behind (no MLflow database or run, no Tune directory); --dry-run starts nothing."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from harness_support import cli_env, free_port, harness_cmd, run_harness, stop_session


def _left_behind(directory: Path, spec: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p != spec)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("name: tiny\nvariants: [baseline, ega\n", "not valid YAML at line"),
        (None, "unknown key 'contxt_lengths' (did you mean 'context_lengths'?)"),
        ("variants", "unknown variant 'egga' (did you mean 'ega'?)"),
        ("seeds", "seeds: expected a count of seeds"),
        ("analysis", "analysis.primary.treatment: unknown variant 'eg' (did you mean 'ega'?)"),
    ],
    ids=["syntax", "unknown-key", "unknown-variant", "zero-seeds", "analysis-typo"],
)
def test_bad_spec_exits_2_and_writes_nothing(tmp_path: Path, tiny: dict, text: str | None, expected: str) -> None:
    data = dict(tiny)
    if text is None:
        data["contxt_lengths"] = data.pop("context_lengths")
        text = yaml.safe_dump(data)
    elif text == "variants":
        data["variants"] = ["baseline", "egga"]
        text = yaml.safe_dump(data)
    elif text == "seeds":
        data["seeds"] = 0
        text = yaml.safe_dump(data)
    elif text == "analysis":
        data["analysis"] = {"primary": {"treatment": "eg", "control": "baseline"}}
        text = yaml.safe_dump(data)
    spec = tmp_path / "bad.yaml"
    spec.write_text(text)
    out = run_harness("run", str(spec), cwd=tmp_path)  # default tracking and storage: here
    assert out.returncode == 2, out.stderr
    assert expected in out.stderr
    assert "bad.yaml" in out.stderr
    assert "Traceback" not in out.stderr
    assert _left_behind(tmp_path, spec) == []  # no mlflow.db, no results/


def test_gpu_request_on_a_cluster_without_gpus(tmp_path: Path, tiny: dict, shared_data_dir: Path) -> None:
    spec = tmp_path / "gpu.yaml"
    spec.write_text(yaml.safe_dump({**tiny, "resources": {"cpus": 1, "gpus": 0.5}}))
    out = run_harness("run", str(spec), cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert "resources.gpus is 0.5 per trial" in out.stderr and "has no GPUs" in out.stderr
    assert _left_behind(tmp_path, spec) == []


def test_unreachable_address(tmp_path: Path, write_spec) -> None:
    spec = write_spec()
    port = free_port()
    out = run_harness("run", str(spec), "--address", f"127.0.0.1:{port}", cwd=tmp_path, timeout=180)
    assert out.returncode == 2, out.stderr
    assert f"cannot reach the Ray cluster at 127.0.0.1:{port}" in out.stderr
    assert _left_behind(tmp_path, spec) == []
    # RAY_ADDRESS is the same as --address (and a dashboard URL is explained, not tried).
    out = run_harness("run", str(spec), cwd=tmp_path, env={"RAY_ADDRESS": "http://127.0.0.1:8265"}, timeout=180)
    assert out.returncode == 2 and "dashboard (job submission) address" in out.stderr
    assert _left_behind(tmp_path, spec) == []


def test_resume_without_a_study(tmp_path: Path, write_spec) -> None:
    spec = write_spec()
    out = run_harness("run", str(spec), "--resume", cwd=tmp_path)
    assert out.returncode == 2 and "nothing to resume" in out.stderr
    assert _left_behind(tmp_path, spec) == []


def test_unusable_tracking_uri_is_refused(tmp_path: Path, write_spec) -> None:
    spec = write_spec()
    out = run_harness("run", str(spec), "--tracking-uri", str(tmp_path / "mlruns"), cwd=tmp_path)
    assert out.returncode == 2 and "file store" in out.stderr
    out = run_harness("run", str(spec), "--tracking-uri", f"sqlite:///{tmp_path}/missing/dir/mlflow.db", cwd=tmp_path)
    assert out.returncode == 2 and "does not exist" in out.stderr
    assert _left_behind(tmp_path, spec) == []


def test_dry_run_prints_the_plan(tmp_path: Path, tiny: dict) -> None:
    spec = tmp_path / "plan.yaml"
    spec.write_text(yaml.safe_dump({**tiny, "seeds": 2, "variants": ["baseline", "ega", "mope", "ega-mope"]}))
    out = run_harness("run", str(spec), "--dry-run", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "Study tiny: 8 trials (4 variants x 2 seeds x nano x tinyshakespeare x T=32), 1 CPU each" in text
    for variant in ("baseline", "ega", "mope", "ega-mope"):
        for seed in (0, 1):
            assert f"{variant}_s{seed}_nano_T32_tinyshakespeare" in text
    assert "total: 8 trials" in text
    assert "tokens: 2.05e+04 trained" in text  # 8 trials x 10 steps x batch 8 x T=32
    assert "rough estimate" in text and "H200" in text
    assert "nothing was started" in text
    assert _left_behind(tmp_path, spec) == []


@pytest.mark.slow
def test_ui_serves_the_store_on_loopback(tmp_path: Path, write_spec) -> None:
    """`harness ui` starts the MLflow UI on 127.0.0.1 with the given store; it refuses a
    store that does not exist instead of creating an empty one."""
    import time
    import urllib.request

    from mlflow import MlflowClient

    missing = run_harness("ui", "--tracking-uri", f"sqlite:///{tmp_path / 'none.db'}", cwd=tmp_path)
    assert missing.returncode == 2 and "no MLflow database" in missing.stderr
    assert not (tmp_path / "none.db").exists()

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    MlflowClient(uri).create_experiment("seen-in-ui")
    port = free_port()
    proc = subprocess.Popen(
        harness_cmd("ui", "--tracking-uri", uri, "--port", str(port)),
        cwd=tmp_path,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 90
        body = ""
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                request = urllib.request.Request(
                    f"http://127.0.0.1:{port}/ajax-api/2.0/mlflow/experiments/search",
                    data=b'{"max_results": 10}',
                    headers={"Content-Type": "application/json"},
                )
                body = urllib.request.urlopen(request, timeout=5).read().decode()
                break
            except OSError:
                time.sleep(1)
        assert "seen-in-ui" in body, proc.stdout.read() if proc.poll() is not None else "no answer"
        listening = subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True).stdout
        for line in listening.splitlines():  # State Recv-Q Send-Q Local:Port Peer:Port
            assert line.split()[3].startswith("127.0.0.1:"), listening
    finally:
        stop_session(proc, grace=20)
    printed = proc.stdout.read()
    assert f"http://127.0.0.1:{port}/#/experiments?workflowType=machine_learning" in printed, printed


def _wait_for_port(port: int, proc: subprocess.Popen, timeout_s: float = 120) -> bool:
    import socket
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return True
        time.sleep(0.5)
    return False


@pytest.mark.slow
@pytest.mark.parametrize("signame", ["SIGTERM", "SIGHUP", "SIGINT"])
def test_ui_stops_its_server_when_stopped(tmp_path: Path, signame: str) -> None:
    """SIGTERM, SIGHUP or Ctrl-C sent to `harness ui` alone (not its process group, as `kill PID`,
    a closed terminal or a service manager would) stops the MLflow server it started, workers and
    all: the port stops answering and no process of the server is left."""
    import signal
    import socket
    import time

    from mlflow import MlflowClient

    def group_members(pgid: int) -> list[str]:
        ps = subprocess.run(["ps", "-e", "-o", "pgid=,pid=,args="], capture_output=True, text=True).stdout
        return [line for line in ps.splitlines() if line.split()[0] == str(pgid)]

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    MlflowClient(uri).create_experiment("ui-stops")
    port = free_port()
    proc = subprocess.Popen(
        harness_cmd("ui", "--tracking-uri", uri, "--port", str(port)),
        cwd=tmp_path,
        env=cli_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # only to clean up after a failure: the signal goes to proc alone
    )
    try:
        assert _wait_for_port(port, proc), "the UI never listened"
        children = subprocess.run(["ps", "-o", "pid=", "--ppid", str(proc.pid)], capture_output=True, text=True)
        server = int(children.stdout.split()[0])  # the server leads a process group of its own
        assert len(group_members(server)) >= 2, group_members(server)  # the server and its workers
        proc.send_signal(getattr(signal, signame))
        assert proc.wait(timeout=60) == 0
        deadline = time.monotonic() + 30
        while group_members(server) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not group_members(server), group_members(server)
        with socket.socket() as sock:
            assert sock.connect_ex(("127.0.0.1", port)) != 0, "the port still answers"
    finally:
        stop_session(proc, grace=5)


def test_corrupt_corpus_exits_2_before_anything_starts(tmp_path: Path, write_spec) -> None:
    spec = write_spec()
    data = tmp_path / "data" / "tinyshakespeare"
    data.mkdir(parents=True)
    (data / "input.txt").write_text("not the corpus\n")
    env = {"HARNESS_DATA_DIR": str(tmp_path / "data"), "HARNESS_CACHE_DIR": str(tmp_path / "cache")}
    out = run_harness("run", str(spec), cwd=tmp_path, env=env)
    assert out.returncode == 2, out.stderr
    assert "tinyshakespeare" in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "results").exists()


def test_a_study_with_a_tiny_fraction_exits_2_before_anything_starts(tmp_path: Path, tiny: dict) -> None:
    spec = tmp_path / "subset.yaml"
    spec.write_text(yaml.safe_dump({**tiny, "train": {**tiny.get("train", {}), "train_fraction": 0.0001}}))
    out = run_harness("run", str(spec), cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert "train_fraction 0.0001" in out.stderr and "fewer than one batch" in out.stderr
    assert _left_behind(tmp_path, spec) == []  # no mlflow.db, no results/


def test_commands_are_registered(tmp_path: Path) -> None:
    root = run_harness("--help", cwd=tmp_path)
    assert root.returncode == 0 and " run " in root.stdout and " ui " in root.stdout
    bench = run_harness("bench", "--help", cwd=tmp_path)
    assert bench.returncode == 0 and " study " in bench.stdout
    run_help = run_harness("run", "--help", cwd=tmp_path)
    for flag in ("--address", "--tracking-uri", "--storage-path", "--resume", "--dry-run"):
        assert flag in run_help.stdout
