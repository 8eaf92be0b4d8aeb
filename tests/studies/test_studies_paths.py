"""Paths mean what the user meant: every path a study is given (the data folder, the storage
path, the tracking URI of a local database, the spec's own) is resolved on the driver against
the user's working directory, and the trials, which run in working directories of Tune's,
receive it absolute in their configs. A corpus a node cannot read stops the study before its
first trial, naming the node and the folder."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from harness_support import free_port, run_harness
from mlflow import MlflowClient

from harness.studies.cluster.corpora import CorpusUnavailable, check_corpora_on_nodes, trial_data_dir
from harness.studies.cluster.destinations import absolute_tracking_uri
from harness.studies.runner import resolve_study


def _spec(folder: Path, tiny: dict, **overrides) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump({**tiny, **overrides}))
    return path


def _offline(tmp_path: Path) -> dict[str, str]:
    """An empty cache of the study's own and a corpus mirror nobody answers at (a closed port
    on 127.0.0.1): a corpus not found on disk cannot come from the internet."""
    return {
        "HARNESS_CACHE_DIR": str(tmp_path / "empty-cache"),
        "HARNESS_DATA_MIRROR": f"http://127.0.0.1:{free_port()}",
    }


def test_the_data_folder_is_made_absolute_against_the_working_directory(tmp_path: Path) -> None:
    here = tmp_path / "work"
    assert trial_data_dir(None, environ={}, cwd=here) is None
    assert trial_data_dir(None, environ={"HARNESS_DATA_DIR": ""}, cwd=here) is None
    assert trial_data_dir(None, environ={"HARNESS_DATA_DIR": "../data"}, cwd=here) == str(tmp_path / "data")
    assert trial_data_dir("corpora", environ={"HARNESS_DATA_DIR": "../data"}, cwd=here) == str(here / "corpora")
    assert trial_data_dir("/abs/corpora", environ={}, cwd=here) == "/abs/corpora"


def test_the_folders_searched_are_named_absolute_and_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a missing corpus's message lists: each folder searched as this process reads it
    (in a trial: the trial's folder, not the driver's), the same folder once."""
    from harness.datasets.fetch import search_roots

    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("HARNESS_DATA_DIR", "../corpora")
    cache = tmp_path / "cache"
    assert search_roots(str(tmp_path / "corpora"), cache) == [
        ("data_dir", tmp_path / "corpora"),
        ("cache", cache / "data"),
    ]
    assert search_roots(None, cache) == [("$HARNESS_DATA_DIR", tmp_path / "corpora"), ("cache", cache / "data")]


def test_a_local_tracking_database_is_made_absolute(tmp_path: Path) -> None:
    assert absolute_tracking_uri("sqlite:///runs/mlflow.db", tmp_path) == f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}"
    assert absolute_tracking_uri("sqlite:///x.db?timeout=5", tmp_path) == f"sqlite:///{tmp_path / 'x.db'}?timeout=5"
    for kept in (f"sqlite:///{tmp_path / 'a.db'}", "sqlite:///:memory:", "http://mlflow:5000", "file:./mlruns"):
        assert absolute_tracking_uri(kept, tmp_path) == kept


def test_the_plan_holds_absolute_paths_and_the_trials_get_the_data_folder(
    tiny: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A study started from ``work/`` with every path relative: the plan and each trial's
    config hold them absolute, as ``work/`` reads them."""
    work = tmp_path / "work"
    spec = _spec(work, tiny, storage_path="spec-results", tracking={"uri": "sqlite:///spec.db"})
    monkeypatch.chdir(work)
    monkeypatch.setenv("HARNESS_DATA_DIR", "../corpora")
    for var in ("MLFLOW_TRACKING_URI", "HARNESS_STORAGE_PATH", "RAY_ADDRESS"):
        monkeypatch.delenv(var, raising=False)
    plan = resolve_study("spec.yaml", tracking_uri=None, storage_path=None, address=None)
    assert plan.data_dir == str(tmp_path / "corpora")
    assert {t.config.data_dir for t in plan.trials} == {str(tmp_path / "corpora")}
    assert plan.storage == str(work / "spec-results")
    assert plan.tracking_uri == f"sqlite:///{work / 'spec.db'}" and plan.tracking_uri_as_given == "sqlite:///spec.db"
    # The resume contract leaves the data folder out: a study resumed from another folder resumes.
    assert all("data_dir" not in t.config.resume_contract() for t in plan.trials)
    flagged = resolve_study(spec, tracking_uri="sqlite:///flag.db", storage_path="flag-results", address=None)
    assert flagged.tracking_uri == f"sqlite:///{work / 'flag.db'}" and flagged.storage == str(work / "flag-results")


def test_a_node_that_cannot_read_the_corpus_is_named_before_any_trial(
    tmp_path: Path, shared_data_dir: Path, local_ray: None
) -> None:
    """The check on every node (here: the embedded Ray's one node), with a damaged copy in the
    data folder: one error naming the node, the corpus and the folder, not retried."""
    import ray

    check_corpora_on_nodes(["tinyshakespeare"], str(shared_data_dir))  # there: passes
    damaged = tmp_path / "corpora"
    (damaged / "tinyshakespeare").mkdir(parents=True)
    source = (shared_data_dir / "tinyshakespeare" / "input.txt").read_bytes()
    (damaged / "tinyshakespeare" / "input.txt").write_bytes(source[: len(source) // 2])
    with pytest.raises(CorpusUnavailable) as err:
        check_corpora_on_nodes(["tinyshakespeare"], str(damaged))
    message = str(err.value)
    (node,) = [n["NodeID"] for n in ray.nodes() if n.get("Alive")]
    assert "no trial was started" in message and f"Ray node {node}" in message
    assert "corpus 'tinyshakespeare' is not available on node" in message
    assert str(damaged / "tinyshakespeare" / "input.txt") in message


def test_with_no_corpus_anywhere_the_study_exits_2_before_anything_starts(tmp_path: Path, tiny: dict) -> None:
    empty = tmp_path / "no-corpora"
    empty.mkdir()
    work = tmp_path / "work"
    _spec(work, tiny)
    env = {**_offline(tmp_path), "HARNESS_DATA_DIR": "../no-corpora"}
    done = run_harness("run", "spec.yaml", "--storage-path", "results", cwd=work, env=env, timeout=300)
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert "tinyshakespeare" in done.stderr and str(empty) in done.stderr  # the folder, absolute
    assert sorted(p.name for p in work.iterdir()) == ["spec.yaml"]  # no trial, no storage, no database


@pytest.mark.slow
def test_a_relative_data_folder_from_another_folder_finishes(tmp_path: Path, tiny: dict, shared_data_dir: Path) -> None:
    """The README's ``export HARNESS_DATA_DIR=../shared/data``, from a folder where that path is
    right for the driver only: every trial runs in a working directory of Tune's. The study
    finishes, with the tracking database and the storage relative too."""
    work = tmp_path / "work" / "deep"
    _spec(work, tiny)
    relative = os.path.relpath(shared_data_dir, work)
    env = {**_offline(tmp_path), "HARNESS_DATA_DIR": relative}
    args = ["run", "spec.yaml", "--storage-path", "results", "--tracking-uri", "sqlite:///mlflow.db"]
    done = run_harness(*args, cwd=work, env=env, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Study tiny finished" in done.stdout and "2 finished" in done.stdout
    (meta,) = [json.loads(p.read_text()) for p in (work / "results" / "tiny").glob("*/harness_study.json")]
    assert meta["tracking_uri"] == f"sqlite:///{work / 'mlflow.db'}"  # `harness report --from` finds it anywhere
    client = MlflowClient(f"sqlite:///{work / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("tiny").experiment_id])
    children = [r for r in runs if r.data.tags.get("harness.role") == "trial"]
    assert len(children) == 2 and all(r.data.tags["status"] == "finished" for r in children)
    assert {r.data.params["data_dir"] for r in children} == {str(shared_data_dir.resolve())}
