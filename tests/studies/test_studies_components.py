"""A study naming a user's component: the spec accepts it by import path, the module is found
beside the spec (never on PYTHONPATH), every trial gets the spec's folder, the component is
checked before any trial starts (a leaky one refused with exit 2, nothing created), the
results, MLflow and the report name it by its import path, `harness submit` ships its module,
and the scorecard reads a user's own claims file."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
import yaml
from components_support import (
    BREACHES,
    GOOD_GATE,
    HIDDEN_LEAKS,
    LEAKY_GATE,
    development_package,
    module_name,
    write_module,
)
from harness_support import REPO, run_harness
from mlflow import MlflowClient

from harness.errors import InputError
from harness.studies.cluster import modules as shipping
from harness.studies.runner import run_study
from harness.studies.spec.grid import expand_grid
from harness.studies.spec.study_spec import load_spec, parse_spec
from harness.studies.submit import plan_submission, stage_py_modules

EXAMPLE = REPO / "examples" / "forgetting-transformer"


def _spec(folder: Path, tiny: dict, variants: list, **overrides) -> Path:
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump({**tiny, "variants": variants, **overrides}, sort_keys=False))
    return path


def test_a_variant_may_name_only_its_gate_and_the_other_slots_are_the_baselines(tiny: dict) -> None:
    spec = parse_spec(yaml.safe_dump({**tiny, "variants": ["baseline", {"name": "good", "gate": "mygates:GoodGate"}]}))
    entry = spec.variants[1]
    assert (entry.position, entry.gate, entry.scoring) == ("sinusoidal", "mygates:GoodGate", "dot")
    bad = yaml.safe_dump({**tiny, "variants": ["baseline", {"name": "good", "gate": "GoodGate"}]})
    with pytest.raises(
        InputError, match=r"variants\[1\] \(good\): variant 'good': unknown gate 'GoodGate'.*user component"
    ):
        from harness.studies.spec.study_spec import check_registries

        check_registries(parse_spec(bad))


def test_trials_of_a_user_component_get_the_specs_folder(tmp_path: Path, tiny: dict) -> None:
    module = write_module(tmp_path, "gates", GOOD_GATE)
    spec_path = _spec(tmp_path, tiny, ["baseline", {"name": "good", "gate": f"{module}:GoodGate"}])
    trials = expand_grid(load_spec(spec_path), component_dir=str(tmp_path))
    by_variant = {t.config.variant: t for t in trials}
    assert (
        by_variant["good"].config.component_dir == str(tmp_path) and by_variant["baseline"].config.component_dir is None
    )
    assert by_variant["good"].gate == f"{module}:GoodGate" and by_variant["good"].tags()["gate"] == f"{module}:GoodGate"
    params = by_variant["good"].config.run_params()
    assert params["gate"] == f"{module}:GoodGate" and params["position"] == "sinusoidal"
    # where the code is found may change on resume; what the component is may not
    assert "component_dir" not in by_variant["good"].config.resume_contract_fields()
    assert "gate" in by_variant["good"].config.resume_contract_fields()


@pytest.mark.parametrize("dry_run", [True, False])
def test_a_leaky_gate_is_refused_with_exit_2_before_any_trial_starts(
    tmp_path: Path, tiny: dict, shared_data_dir: Path, dry_run: bool
) -> None:
    module = write_module(tmp_path, "gates", LEAKY_GATE)
    _spec(tmp_path, tiny, ["baseline", {"name": "leaky", "gate": f"{module}:LeakyGate"}])
    out = run_harness("run", "spec.yaml", *(["--dry-run"] if dry_run else []), cwd=tmp_path, timeout=300)
    assert out.returncode == 2, out.stdout + out.stderr
    assert f"leaky: gate {module}:LeakyGate (class {module}.LeakyGate, {tmp_path / module}.py)" in out.stdout
    assert "variant 'leaky'" in out.stderr and "fails its check before training" in out.stderr
    assert "changing the tokens from position 2 on moved the output at position 1" in out.stderr
    assert "nothing was started" in out.stderr and "Study tiny:" not in out.stdout
    assert {p.name for p in tmp_path.iterdir()} - {"__pycache__"} == {f"{module}.py", "spec.yaml"}  # no db, no results


@pytest.mark.parametrize(
    ("gate", "told"),
    [
        (
            "LongLeakGate",
            "fails its check before training at 128 tokens: causal: reads the future: changing the tokens",
        ),
        ("TrainLeakGate", "causal: reads the future in train mode (dropout 0.1), not in eval mode"),
    ],
)
def test_a_leak_beyond_96_tokens_or_in_training_only_is_refused_before_a_study_at_128_starts(
    tmp_path: Path, tiny: dict, shared_data_dir: Path, gate: str, told: str
) -> None:
    """Done when (issue 43): the pre-flight probes each context length (64 passes the long leak,
    128 does not) in eval and train mode; exit 2, nothing written, before Ray starts."""
    module = write_module(tmp_path, "hidden", HIDDEN_LEAKS)
    _spec(tmp_path, tiny, ["baseline", {"name": "hidden", "gate": f"{module}:{gate}"}], context_lengths=[64, 128])
    out = run_harness("run", "spec.yaml", cwd=tmp_path, timeout=600)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "variant 'hidden'" in out.stderr and told in out.stderr and "nothing was started" in out.stderr
    assert "Traceback" not in out.stderr and "Study tiny:" not in out.stdout
    assert {p.name for p in tmp_path.iterdir()} - {"__pycache__"} == {f"{module}.py", "spec.yaml"}


@pytest.mark.parametrize("dry_run", [True, False])
def test_a_contract_breach_is_refused_before_a_study_starts_naming_slot_class_and_shapes(
    tmp_path: Path, tiny: dict, shared_data_dir: Path, dry_run: bool
) -> None:
    module = write_module(tmp_path, "breaches", BREACHES)
    variants = ["baseline", {"name": "half", "scoring": f"{module}:HalfWidth"}]
    _spec(tmp_path, tiny, variants, sizes=["nano", "paper"])
    out = run_harness("run", "spec.yaml", *(["--dry-run"] if dry_run else []), cwd=tmp_path, timeout=300)
    assert out.returncode == 2, out.stdout + out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert (
        f"contracts: the scoring slot's {module}.HalfWidth.forward(k) returned shape (2, 2, 32, 16); the slot "
        "expects (B, H, T, hd) = (2, 2, 32, 32), float32 and finite" in line
    )
    assert {p.name for p in tmp_path.iterdir()} - {"__pycache__"} == {f"{module}.py", "spec.yaml"}


def test_a_component_that_cannot_be_imported_is_refused_with_the_reason(tmp_path: Path, tiny: dict) -> None:
    module = write_module(tmp_path, "gates", "import torch\nraise ImportError('needs triton, which is not here')\n")
    _spec(tmp_path, tiny, ["baseline", {"name": "broken", "gate": f"{module}:Gate"}])
    out = run_harness("run", "spec.yaml", "--dry-run", cwd=tmp_path, timeout=300)
    assert out.returncode == 2, out.stdout + out.stderr
    assert f"cannot import {module}:Gate: importing {module} raised ImportError: needs triton" in out.stderr


@pytest.fixture(scope="module")
def fox_study(tmp_path_factory: pytest.TempPathFactory, shared_data_dir: Path, local_ray: None) -> dict:
    """The example's forget gate, copied beside a spec of its own (the example's variants,
    2 seeds, a few steps), run on the embedded Ray."""
    folder = tmp_path_factory.mktemp("fox")
    module = module_name("forget_gate")
    shutil.copy(EXAMPLE / "forget_gate.py", folder / f"{module}.py")
    spec = yaml.safe_load((EXAMPLE / "study.yaml").read_text())
    for entry in spec["variants"]:
        if isinstance(entry, dict) and "gate" in entry:
            entry["gate"] = entry["gate"].replace("forget_gate:", f"{module}:")
    spec.update(
        name="fox-test",
        seeds=2,
        context_lengths=[32],
        train={
            "max_steps": 6,
            "batch_size": 4,
            "eval_every": 3,
            "eval_windows": 4,
            "final_eval_windows": 4,
            "eval_batch_size": 4,
        },
    )
    spec.pop("analysis", None)
    (folder / "spec.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    import io

    stream = io.StringIO()
    outcome = run_study(
        folder / "spec.yaml",
        tracking_uri=f"sqlite:///{folder / 'mlflow.db'}",
        storage_path=str(folder / "results"),
        stream=stream,
        live=False,
    )
    return {"outcome": outcome, "folder": folder, "module": module, "log": stream.getvalue(), "spec": spec}


def test_a_study_trains_a_gate_from_its_specs_folder_and_records_its_import_path(fox_study: dict) -> None:
    outcome, folder, module, log = (fox_study[k] for k in ("outcome", "folder", "module", "log"))
    assert outcome.status == "finished" and outcome.counts["finished"] == outcome.trials, log
    assert f"fox: gate {module}:ForgetGate (class {module}.ForgetGate, {folder / module}.py)" in log
    assert (
        "fox: causal over 32 tokens (eval and train mode, 2 random inputs) at nano, contracts kept, finite outputs and "
        "gradients, +260 parameters" in log
    )
    table = pl.read_parquet(Path(outcome.study_dir) / "results.parquet")
    gates = dict(table.select("variant", "gate").unique().iter_rows())
    assert gates["fox"] == gates["rope-fox"] == f"{module}:ForgetGate" and gates["rope"] == "none"
    assert table.filter(pl.col("variant") == "fox").get_column("position").unique().to_list() == ["none"]

    client = MlflowClient(outcome.tracking_uri)
    runs = client.search_runs([client.get_experiment_by_name("fox-test").experiment_id])
    fox = [r for r in runs if r.data.tags.get("variant") == "fox"]
    assert len(fox) == 2 and all(r.data.params["gate"] == f"{module}:ForgetGate" for r in fox)
    assert all(
        r.data.tags["gate"] == f"{module}:ForgetGate" and r.data.params["component_dir"] == str(folder) for r in fox
    )
    (parent,) = [r for r in runs if r.data.tags.get("harness.role") == "study"]
    assert parent.data.tags["harness.component_dir"] == str(folder)
    report = (Path(outcome.study_dir) / "report" / "summary.md").read_text()
    assert f"fox = none + {module}:ForgetGate + dot" in report


def test_scorecard_gives_the_users_own_claims_their_rows(fox_study: dict, tmp_path: Path) -> None:
    outcome = fox_study["outcome"]
    out = run_harness(
        "scorecard",
        "--claims",
        str(EXAMPLE / "claims.yaml"),
        "--from",
        outcome.study_dir,
        "--out",
        str(tmp_path / "card"),
        "--no-log",
        cwd=tmp_path,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    card = pl.read_parquet(tmp_path / "card" / "scorecard.parquet")
    for claim in ("fox-beats-rope", "forget-gate-replaces-position", "forget-gate-on-rope"):
        rows = card.filter(pl.col("claim") == claim)
        assert rows.height >= 1 and "not measured" not in rows.get_column("kind").to_list(), claim


def test_submit_ships_the_modules_beside_the_spec(tmp_path: Path, tiny: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "study").mkdir()
    module = write_module(tmp_path / "study", "gates", GOOD_GATE)
    (tmp_path / "study" / "pkg_gates").mkdir()
    (tmp_path / "study" / "pkg_gates" / "__init__.py").write_text(GOOD_GATE)
    variants = [
        "baseline",
        {"name": "good", "gate": f"{module}:GoodGate"},
        {"name": "pkg", "gate": "pkg_gates:GoodGate"},
    ]
    _spec(tmp_path / "study", tiny, variants)
    monkeypatch.chdir(tmp_path)
    flags = {"tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}", "storage_path": str(tmp_path / "results")}
    plan = plan_submission("study/spec.yaml", address="http://127.0.0.1:8265", working_dir=None, resume=False, **flags)
    assert plan.py_modules == (tmp_path / "study" / f"{module}.py", tmp_path / "study" / "pkg_gates")
    assert plan.runtime_env()["py_modules"] == [str(path) for path in plan.py_modules]
    # what Ray's job client is given: folders only; the single file as a package of its name
    staging = tmp_path / "staging"
    staging.mkdir()
    assert stage_py_modules(plan.py_modules, staging) == [str(staging / module), str(staging / "pkg_gates")]
    source = (tmp_path / "study" / f"{module}.py").read_text()
    assert (staging / module / "__init__.py").read_text() == source
    assert (staging / "pkg_gates" / "__init__.py").read_text() == GOOD_GATE
    # beside a spec at the working directory's root they travel with it (on every worker's path)
    at_root = plan_submission(
        "study/spec.yaml", address="http://127.0.0.1:8265", working_dir="study", resume=False, **flags
    )
    assert at_root.py_modules == () and "py_modules" not in at_root.runtime_env()
    _spec(tmp_path / "study", tiny, ["baseline", {"name": "gone", "gate": "nowhere_gates:Gate"}])
    with pytest.raises(InputError, match="no module named 'nowhere_gates' on the Python path or in"):
        plan_submission("study/spec.yaml", address="http://127.0.0.1:8265", working_dir=None, resume=False, **flags)


def test_a_cluster_run_ships_the_modules_beside_the_spec_and_the_packages_not_installed(
    tmp_path: Path, tiny: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What `harness run --address` (and `harness submit`) sends as py_modules: the module beside
    the spec, and a registered package found on the Python path outside site-packages with its
    dist-info (so that its name resolves on a node); a package in site-packages is the nodes' to
    have, and the harness is never shipped."""
    module = write_module(tmp_path / "study", "gates", GOOD_GATE)
    package, dist, registered = development_package(tmp_path / "dev", GOOD_GATE, "GoodGate")
    monkeypatch.syspath_prepend(str(tmp_path / "dev"))
    variants = [{"name": "beside", "gate": f"{module}:GoodGate"}, {"name": "dev", "gate": registered}]
    spec = load_spec(_spec(tmp_path / "study", tiny, variants))
    assert shipping.spec_modules(spec, str(tmp_path / "study")) == (tmp_path / "study" / f"{module}.py",)
    assert shipping.local_packages(spec) == (package.resolve(), dist.resolve())
    staging = tmp_path / "staging"
    staging.mkdir()
    env = shipping.cluster_runtime_env(spec, str(tmp_path / "study"), staging)
    assert env == {"py_modules": [str(staging / module), str(staging / package.name), str(staging / dist.name)]}
    assert (staging / module / "__init__.py").read_text() == (tmp_path / "study" / f"{module}.py").read_text()
    # harness submit ships the same packages, beside the modules of a spec below its working directory
    monkeypatch.chdir(tmp_path)
    flags = {"tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}", "storage_path": str(tmp_path / "results")}
    plan = plan_submission("study/spec.yaml", address="http://127.0.0.1:8265", working_dir=None, resume=False, **flags)
    assert plan.py_modules == (tmp_path / "study" / f"{module}.py", package.resolve(), dist.resolve())
    # installed (under the interpreter's site-packages): not shipped
    installed = [*shipping._installed_roots(), (tmp_path / "dev").resolve()]
    monkeypatch.setattr(shipping, "_installed_roots", lambda: installed)
    assert shipping.local_packages(spec) == ()
    # the harness's own classes named by import path: never shipped
    zoo = load_spec(_spec(tmp_path / "study", tiny, [{"name": "zoo", "gate": "harness.models.gates:EnergyGate"}]))
    assert shipping.local_packages(zoo) == () and shipping.cluster_runtime_env(zoo, None, staging) is None


@pytest.mark.slow  # a Ray of its own, with a runtime environment to build: 17 s
def test_modules_of_identical_source_all_reach_the_workers(tmp_path: Path) -> None:
    """Ray names an upload by its files' hash relative to the folder, so two modules of the same
    source under different names (a gate beside the spec and a development package, say) would
    share one upload and the second would not import on the nodes; each staged copy carries a
    file naming it, so both arrive. Checked on a real local Ray whose workers do not have the
    folders on their path."""
    for name in ("same_a", "same_b"):
        (tmp_path / "src" / name).mkdir(parents=True)
        (tmp_path / "src" / name / "__init__.py").write_text("VALUE = 1\n")
    staging = tmp_path / "staging"
    staging.mkdir()
    entries = shipping.stage_py_modules([tmp_path / "src" / "same_a", tmp_path / "src" / "same_b"], staging)
    assert (staging / "same_b" / shipping.SHIPPED_MARKER).read_text().startswith("same_b: shipped by the harness")

    # In a process of its own: this worker may hold the suite's shared local Ray already.
    script = (
        "import importlib, json, sys, ray\n"
        "ray.init(num_cpus=1, include_dashboard=False, runtime_env={'py_modules': json.loads(sys.argv[1])},"
        " logging_level='ERROR')\n"
        "load = ray.remote(lambda: [importlib.import_module(n).__file__ for n in ('same_a', 'same_b')])\n"
        "print(json.dumps(ray.get(load.remote())))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, json.dumps(entries)], capture_output=True, text=True, cwd=tmp_path, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    files = json.loads(done.stdout.strip().splitlines()[-1])
    assert all("py_modules_files" in path for path in files), files
