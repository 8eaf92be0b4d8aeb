"""Fixtures of the datasets tests: a real HTTP server on 127.0.0.1 and archive builders."""

from __future__ import annotations

import collections
import io
import socket
import tarfile
import threading
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest


class _Handler(BaseHTTPRequestHandler):
    """Serves ``server.routes[path] = (body, mode)``; mode ``ok`` or ``truncate`` (announce
    the full Content-Length, send half the body, close the connection)."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        server: _Server = self.server  # type: ignore[assignment]
        server.hits[self.path] += 1
        route = server.routes.get(self.path)
        if route is None:
            self.send_error(404, "no such file")
            return
        body, mode = route
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if mode == "truncate":
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # keep pytest output quiet
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.routes: dict[str, tuple[bytes, str]] = {}
        self.hits: collections.Counter[str] = collections.Counter()


@dataclass
class LocalServer:
    server: _Server
    urls: dict[str, str] = field(default_factory=dict)

    def serve(self, path: str, body: bytes, *, mode: str = "ok") -> str:
        """Serve ``body`` at ``path``; returns its URL."""
        self.server.routes[path] = (body, mode)
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def hits(self, path: str) -> int:
        return self.server.hits[path]


@pytest.fixture
def http_server() -> Iterator[LocalServer]:
    server = _Server()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield LocalServer(server)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture
def unused_port_url() -> str:
    """A URL on 127.0.0.1 where nobody listens (connection refused: 'offline')."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/corpus.zip"


@pytest.fixture
def no_data_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    """Searches see only the cache (tests of downloads must not find the shared corpora)."""
    monkeypatch.delenv("HARNESS_DATA_DIR", raising=False)


def make_zip(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


def make_tgz(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def all_files(root: Path) -> list[Path]:
    """Every file under ``root`` (hidden temporaries included)."""
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


class _Archives:
    zip = staticmethod(make_zip)
    tgz = staticmethod(make_tgz)
    files = staticmethod(all_files)


@pytest.fixture
def archives() -> type[_Archives]:
    """Builders of small archives (``archives.zip({...})``, ``archives.tgz``) and ``archives.files(root)``."""
    return _Archives
