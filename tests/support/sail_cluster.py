"""A Sail Spark Connect server in local-cluster mode, as its own process (issue 41).

``SAIL_MODE=local-cluster python -m pysail spark server --port N``: a driver and its
workers in one process, Sail's distributed path, the engine the ``engine-cluster`` overlay
runs in Kubernetes. A daemon reaches it with ``sink.spark: {mode: connect, url:
sc://127.0.0.1:N}``. The server's output goes to a file (printed nowhere unless a test
reads it); ``kill`` and ``start`` let a test take the engine away mid-stream and bring it
back on the same port.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

START_TIMEOUT = 120.0
"""Seconds a start may take to listen on its port (a busy two-core machine)."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class SailCluster:
    """One local-cluster Sail server on a fixed port, started and killed on demand."""

    def __init__(self, port: int | None = None, log: Path | None = None) -> None:
        self.port = port if port is not None else free_port()
        self.log = log or Path(tempfile.mkdtemp(prefix="wal2delta-sail-")) / "server.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        """Start the server and wait until it listens; fail if it exits or never does."""
        assert not self.running(), "the server is already running"
        environment = {**os.environ, "SAIL_MODE": "local-cluster", "RUST_LOG": "warn"}
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "pysail", "spark", "server", "--port", str(self.port)],
                env=environment,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.starts += 1
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"the Sail server exited with {self.process.returncode}:\n{self.tail()}"
                )
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"the Sail server did not listen within {START_TIMEOUT:g}s")

    def kill(self) -> None:
        """SIGKILL the server (its driver and workers are one process) and reap it."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(60)

    def ensure_running(self) -> None:
        if not self.running():
            self.start()

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""


def sail_cluster_server() -> Iterator[SailCluster]:
    """Fixture body: one local-cluster server for the tests that use it; stopped after."""
    server = SailCluster()
    server.start()
    try:
        yield server
    finally:
        server.kill()
