"""One definition per contract, checked on the source: MLflow is written through one module
(``harness/mlflow_client.py``: the chunked ``log_batch`` calls and the HTTP retry/timeout
policy live there, handed to MLflow's requests by ``harness/mlflow_transport.py`` and nowhere
else), and no module imports another module's private names
(what another module needs is public: docs/conventions.md)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "harness"
MLFLOW_LAYER = PACKAGE / "mlflow_client.py"


def _sources(*roots: Path) -> dict[Path, str]:
    return {path: path.read_text(encoding="utf-8") for root in roots for path in sorted(root.rglob("*.py"))}


def _files_containing(text: str) -> list[str]:
    return [path.relative_to(REPO).as_posix() for path, source in _sources(PACKAGE).items() if text in source]


def test_log_batch_is_called_in_the_mlflow_layer_only() -> None:
    assert _files_containing("log_batch(") == ["harness/mlflow_client.py"]


def test_the_http_policy_is_set_in_the_mlflow_layer_only() -> None:
    # MLflow's retry and timeout settings: arguments of its http_request, else MLFLOW_HTTP_REQUEST_*
    # variables. The policy is defined in the client's module and handed to MLflow by its transport.
    assert _files_containing("MLFLOW_HTTP_REQUEST_") == ["harness/mlflow_client.py", "harness/mlflow_transport.py"]
    assert _files_containing("request_kwargs()") == ["harness/mlflow_transport.py"]
    assert _files_containing("MlflowClient(") == ["harness/mlflow_client.py"]


def test_no_module_imports_another_modules_private_names() -> None:
    found = []
    for path, source in _sources(PACKAGE, REPO / "tests", REPO / "benchmarks").items():
        for node in ast.walk(ast.parse(source, filename=str(path))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("harness"):
                private = [a.name for a in node.names if a.name.startswith("_") and not a.name.endswith("__")]
                if private:
                    found.append(f"{path.relative_to(REPO)}:{node.lineno}: from {node.module} import {private}")
    assert not found, "\n".join(found)
