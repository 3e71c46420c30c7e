"""A local stand-in for PyPI's JSON API (real HTTP on 127.0.0.1), serving small fake
megatron-core wheels, so cache-integrity and exit-code tests need no network."""

from __future__ import annotations

import hashlib
import io
import json
import threading
import zipfile
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional

PACKAGE = "megatron-core"


def wheel_bytes(version: str, extra: Optional[dict[str, str]] = None) -> bytes:
    """A wheel holding a tiny megatron/ tree (plus `extra` files, e.g. injected code)."""
    files = {
        "megatron/__init__.py": "",
        "megatron/core/__init__.py": f'__version__ = "{version}"\n',
        "megatron/core/calc.py": "def add(a, b):\n    return a + b\n",
        **(extra or {}),
    }
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, text in sorted(files.items()):
            archive.writestr(zipfile.ZipInfo(name, (2026, 1, 2, 3, 4, 6)), text)
        archive.writestr(
            f"megatron_core-{version}.dist-info/METADATA",
            f"Name: megatron-core\nVersion: {version}\n",
        )
    return buffer.getvalue()


def wheel_name(version: str) -> str:
    return f"megatron_core-{version}-py3-none-any.whl"


@dataclass
class FakeIndex:
    """Releases served at `url` (set DSA_FORKKIT_PYPI_URL to it); `listed` overrides a
    release's sha256 in the index, as an altered mirror or a proxy would serve it."""

    url: str = ""
    wheels: dict[str, bytes] = field(default_factory=dict)
    listed: dict[str, str] = field(default_factory=dict)
    downloads: list[str] = field(default_factory=list)
    yanked: dict[str, str] = field(default_factory=dict)  # version -> PyPI's reason
    project_requests: int = 0

    def add(self, version: str) -> None:
        self.wheels[version] = wheel_bytes(version)

    def project_json(self) -> bytes:
        releases = {
            version: [
                {
                    "filename": wheel_name(version),
                    "url": f"{self.url}/files/{wheel_name(version)}",
                    "digests": {
                        "sha256": self.listed.get(version, hashlib.sha256(data).hexdigest())
                    },
                    "packagetype": "bdist_wheel",
                    "yanked": version in self.yanked,
                    "yanked_reason": self.yanked.get(version),
                }
            ]
            for version, data in self.wheels.items()
        }
        latest = max(self.wheels, key=lambda v: tuple(map(int, v.split("."))))
        return json.dumps({"info": {"version": latest}, "releases": releases}).encode()


def serve(index: FakeIndex) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            body = None
            if self.path == f"/pypi/{PACKAGE}/json":
                index.project_requests += 1
                body = index.project_json()
            for version, data in index.wheels.items():
                if self.path == f"/pypi/files/{wheel_name(version)}":
                    index.downloads.append(version)
                    body = data
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    index.url = f"http://127.0.0.1:{server.server_address[1]}/pypi"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
