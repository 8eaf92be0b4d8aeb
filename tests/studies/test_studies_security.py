"""What docs/security.md says about code: a spec's folder and an entry point are code, imported
(and so run) by every command that reads a spec naming them, `--dry-run` included; what is
refused without running it (a YAML tag in a spec or a claims file, a function or a class outside
the slots' contracts named as a component); a registered name is listed without importing its
package. Each refusal is exit 2 from the CLI, with nothing called and nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from components_support import GOOD_GATE, module_name, write_module

from harness.cli import main
from harness.models.component_names import is_user_component, registered_components


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(list(argv))
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err


def _spec(folder: Path, tiny: dict, gate: str) -> Path:
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump({**tiny, "variants": ["baseline", {"name": "mine", "gate": gate}]}))
    return path


#: A module that leaves MARKER when its function or its class's constructor is called.
PAYLOAD = """
from pathlib import Path

MARKER = Path({marker!r})


def launch(*args, **kwargs):
    MARKER.write_text("launch ran")


class Payload:
    def __init__(self, *args, **kwargs):
        MARKER.write_text("Payload constructed")
"""


@pytest.mark.parametrize(
    ("attribute", "refusal"),
    [
        ("launch", "is a function, not a class: name the component's class"),
        ("Payload", "is not a component: subclass one of the slots' contracts"),
    ],
)
def test_a_component_that_is_no_contract_class_is_refused_uncalled(
    tmp_path: Path, tiny: dict, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, attribute, refusal
) -> None:
    marker = tmp_path / "called"
    module = write_module(tmp_path, "payload", PAYLOAD.format(marker=str(marker)))
    monkeypatch.chdir(tmp_path)
    spec = _spec(tmp_path, tiny, f"{module}:{attribute}")
    for argv in (["run", str(spec), "--dry-run"], ["zoo", "check", f"{module}:{attribute}", "--no-graphs"]):
        code, out, err = _cli(capsys, *argv)
        assert code == 2, out + err
        assert refusal in err and "Traceback" not in err
        assert not marker.exists()
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "results").exists()


def test_os_system_as_a_component_is_refused(tmp_path: Path, tiny: dict, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _cli(capsys, "run", str(_spec(tmp_path, tiny, "os:system")), "--dry-run")
    assert code == 2 and "os:system is a builtin_function_or_method, not a class" in err, out + err


def test_a_claims_file_with_a_python_yaml_tag_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    marker = tmp_path / "code-ran"
    claims = tmp_path / "evil-claims.yaml"
    claims.write_text(f"claims:\n  - id: !!python/object/apply:os.mkdir [{str(marker)!r}]\n")
    code, out, err = _cli(capsys, "scorecard", "--claims", str(claims), "--from", str(tmp_path), "--no-log")
    assert code == 2, out + err
    assert "evil-claims.yaml" in err and "python/object/apply:os.mkdir" in err and "Traceback" not in err
    assert not marker.exists()


def test_dry_run_imports_the_modules_beside_the_spec_and_starts_nothing(
    tmp_path: Path, tiny: dict, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The spec's folder is code: `--dry-run` imports (runs) a component's module to check it,
    as the help and docs/security.md say; it starts no Ray and writes nothing."""
    import ray

    def no_ray(*args: object, **kwargs: object) -> None:
        raise AssertionError("--dry-run started Ray")

    # Another test of this worker process may have left a Ray running: what counts is that the
    # dry run starts none.
    running_before = ray.is_initialized()
    monkeypatch.setattr(ray, "init", no_ray)
    marker = tmp_path / "imported"
    source = f"from pathlib import Path\nPath({str(marker)!r}).write_text('imported')\n{GOOD_GATE}"
    module = write_module(tmp_path / "study", "gates", source)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    code, out, err = _cli(capsys, "run", str(_spec(tmp_path / "study", tiny, f"{module}:GoodGate")), "--dry-run")
    assert code == 0, out + err
    assert marker.read_text() == "imported"
    assert ray.is_initialized() == running_before and list(work.iterdir()) == []


def test_a_registered_name_is_listed_without_importing_its_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "imported"
    package, name = module_name("registered"), module_name("listed-gate")
    (tmp_path / package).mkdir()
    (tmp_path / package / "__init__.py").write_text(f"from pathlib import Path\nPath({str(marker)!r}).touch()\n")
    dist = tmp_path / f"{package}-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[harness.components]\n{name} = {package}:Gate\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert registered_components()[name] == f"{package}:Gate" and is_user_component(name)
    assert not marker.exists()
