"""The device path with only what a GPU lease holds: an environment with the image's packages
and the kit's wheels (:func:`harness.studies.device.image.image_environment`), and the lease's
one command (``benchmarks/device_check.sh``) run there on CPU; and the kit itself."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from harness.errors import InputError
from harness.studies.device.image import IMAGE_PACKAGES, KIT_WHEELS, image_environment, missing_on_image, normalise
from harness.studies.device.kit import KIT_LIMIT_BYTES, prepare_kit

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "device_check.sh"
PROBE = """
import importlib.metadata, importlib.util, json
mods = ("polars", "mlflow", "ray", "pydantic", "torch", "lightning", "pyarrow", "yaml", "typer")
names = {m: importlib.util.find_spec(m) is not None for m in mods}
dists = {d.metadata["Name"].lower() for d in importlib.metadata.distributions()}
print(json.dumps({"modules": names, "mlflow_dist": "mlflow" in dists}))
"""


@pytest.fixture(scope="module")
def image_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return image_environment(tmp_path_factory.mktemp("image") / "venv")


def _kit_data(folder: Path, shared: Path) -> Path:
    """A kit without wheels (the kit's are for CPython 3.12; the environment links this
    interpreter's pydantic, of the same version), its corpus copied as the kit lays it out."""
    import shutil

    kit = prepare_kit(folder, datasets=["tinyshakespeare"], data_dir=str(shared), fetch=_fake_wheels)
    shutil.rmtree(kit.folder / "wheels")
    return kit.folder


def _fake_wheels(requirements: Sequence[str], into: Path) -> None:
    for requirement in requirements:
        name, version = requirement.split("==")
        (into / f"{name.replace('-', '_')}-{version}-py3-none-any.whl").write_bytes(b"w" * 1000)


def _script(python: Path, kit: Path, out: Path, *args: str, timeout: int) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RAY_ADDRESS")}
    # The script's own limit (560 s, for a lease) is lifted: a shared 2-core machine is no H200.
    env.update(OUT=str(out), PYTHON=str(python), HARNESS_DEVICE_KIT=str(kit), CHECK_TIMEOUT_S=str(timeout - 60))
    return subprocess.run(
        ["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, cwd=REPO, timeout=timeout
    )


def test_the_environment_holds_the_image_and_the_kit_only(image_python: Path) -> None:
    done = subprocess.run([str(image_python), "-c", PROBE], capture_output=True, text=True, check=True)
    found = json.loads(done.stdout)
    assert found["modules"] == {
        "polars": False,
        "mlflow": False,
        "ray": False,
        "pydantic": True,
        "torch": True,
        "lightning": True,
        "pyarrow": True,
        "yaml": True,
        "typer": True,
    }
    assert not found["mlflow_dist"]  # metadata lookups (Lightning's) do not see it either
    assert missing_on_image(["polars", "PyYAML", "pydantic_core", "torch"]) == ["polars"]
    assert {"torch", "lightning", "pyarrow", "pyyaml"} <= IMAGE_PACKAGES
    assert not {normalise(n) for n in KIT_WHEELS} & IMAGE_PACKAGES


@pytest.mark.slow
def test_the_device_command_runs_its_cpu_smoke_in_the_image(
    image_python: Path, tmp_path: Path, shared_data_dir: Path
) -> None:
    """Every default phase of the lease's command, on CPU, with only the image's packages: the
    first, the training core and the device runner imported in a fresh interpreter of the image's
    environment (pydantic from the kit, no polars, MLflow or Ray); the 2x2's tables come back
    under $OUT/study and the CPU side reads them."""
    from harness.analysis.results import results_frame

    kit = _kit_data(tmp_path / "kit", shared_data_dir)
    out = tmp_path / "out"
    done = _script(image_python, kit, out, "--cpu-smoke", "--report-budgets", timeout=2400)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
    record = json.loads((out / "gpu_check.json").read_text())
    assert record["ok"] and [p["name"] for p in record["phases"]][0] == "device imports"
    (imports,) = record["phases"][0]["rows"]
    assert imports["present"] == {"pydantic": True, "polars": False, "mlflow": False, "ray": False}
    assert (out / "gpu_check.log").is_file()
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert len(files) <= 8  # what a lease hands back
    table = results_frame(out / "study")
    assert table.height == 16 and set(table["status"]) == {"finished"}


def test_the_kit_holds_wheels_and_corpora_under_its_limit(tmp_path: Path, shared_data_dir: Path) -> None:
    fetched: list[list[str]] = []

    def fetch(requirements: Sequence[str], into: Path) -> None:
        fetched.append(list(requirements))
        _fake_wheels(requirements, into)

    corpora = ["tinyshakespeare", "ptb-char"]
    kit = prepare_kit(tmp_path / "kit", datasets=corpora, data_dir=str(shared_data_dir), fetch=fetch)
    assert fetched == [[f"{n}=={v}" for n, v in KIT_WHEELS.items()]]
    assert [p.name.split("-")[0] for p in kit.wheels] == [n.replace("-", "_") for n in KIT_WHEELS]
    assert sorted(p.relative_to(kit.folder / "data").as_posix() for p in kit.corpora) == [
        "ptb-char/ptb.char.test.txt",
        "ptb-char/ptb.char.train.txt",
        "ptb-char/ptb.char.valid.txt",
        "tinyshakespeare/input.txt",
    ]
    assert kit.size_bytes < KIT_LIMIT_BYTES
    assert kit.carry_list(tmp_path) == ["kit"]
    with pytest.raises(InputError, match="outside"):
        kit.carry_list(tmp_path / "elsewhere")
    # the corpora are found where the lease looks for them
    from harness.datasets import get_card, locate

    assert locate(get_card("ptb-char"), data_dir=str(kit.folder / "data")).where == "data_dir"
    prepare_kit(tmp_path / "kit", datasets=["tinyshakespeare"], data_dir=str(shared_data_dir), fetch=fetch)
    assert len(fetched) == 1  # wheels already there are not fetched again


def test_the_kit_refuses_to_outgrow_the_lease(tmp_path: Path, shared_data_dir: Path) -> None:
    (tmp_path / "kit" / "data").mkdir(parents=True)
    with open(tmp_path / "kit" / "data" / "leftover.bin", "wb") as f:
        f.truncate(KIT_LIMIT_BYTES)  # sparse: what the lease would carry, counted
    with pytest.raises(InputError, match="over its 40 MiB"):
        prepare_kit(tmp_path / "kit", data_dir=str(shared_data_dir), fetch=_fake_wheels)


def test_an_unreachable_registry_is_said_so(tmp_path: Path, monkeypatch) -> None:
    from harness.studies.device import kit as kit_module

    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")  # nothing listens on the discard port
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "2")
    with pytest.raises(InputError, match="package registry"):
        kit_module.pip_download(["pydantic==2.13.4"], tmp_path)
