"""A Spark Connect call that never returns ends ``wal2delta run`` at its deadline, with
exit code 4, the call named, and nothing acknowledged (decision 0114).

Two real hangs, each against the daemon as a child process (it exits with ``os._exit``):

* a Spark Connect "server" that accepts connections and never answers: the first call,
  starting the session, hangs;
* a real Sail server behind a relay that goes silent once the daemon streams: the next
  batch's engine call hangs mid-stream, after earlier batches were applied and
  acknowledged.

The deadline is 2 s; the tests wait generously for the exit and assert on its code, the
log and the slot, never on how long anything took.
"""

from __future__ import annotations

import select
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

from capture import EXIT_ENGINE_DEADLINE
from daemon.wiring import prepare_configured_source
from tests.support.configs import make_config
from tests.support.harness import (
    confirmed_flush,
    log_events,
    run_cli,
    run_transaction,
    start_daemon,
    wait_for_flush,
)

pytestmark = pytest.mark.integration

SLOT = "w2d_deadline"
DEADLINE = "2s"


class SilentServer:
    """Accepts TCP connections on 127.0.0.1 and never sends a byte."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._held: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self._listener.accept()
            except OSError:
                return
            self._held.append(connection)

    def close(self) -> None:
        self._listener.close()
        for connection in self._held:
            connection.close()


class FreezingRelay:
    """Forwards 127.0.0.1:``port`` to ``target`` until ``freeze``; from then on nothing is
    forwarded either way and new connections are accepted and held, without FIN or RST
    (a hung server, or a network path that went silent)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self._target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._frozen = threading.Event()
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def freeze(self) -> None:
        self._frozen.set()

    def close(self) -> None:
        self._closed.set()
        self._listener.close()
        for sock in self._sockets:
            sock.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self._sockets.append(client)
            if self._frozen.is_set():
                continue  # held, never answered
            upstream = socket.create_connection(self._target)
            self._sockets.append(upstream)
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()

    def _pump(self, client: socket.socket, upstream: socket.socket) -> None:
        peers = {client: upstream, upstream: client}
        while not self._closed.is_set() and not self._frozen.is_set():
            readable, _, _ = select.select(list(peers), [], [], 0.1)
            if self._frozen.is_set():
                return
            for sock in readable:
                try:
                    data = sock.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                peers[sock].sendall(data)


@pytest.fixture
def silent_server() -> Iterator[SilentServer]:
    server = SilentServer()
    yield server
    server.close()


def _write_config(tmp_path: Path, dsn: str, url: str) -> Path:
    path = tmp_path / "config.yaml"
    document: dict[str, Any] = {
        "source": {
            "dsn": dsn,
            "slot": SLOT,
            "publication": SLOT,
            "tables": ["public.items"],
            "status_interval": "1s",
        },
        "sink": {
            "path": str(tmp_path / "lake"),
            "batch": {"max_rows": 100, "max_age": "200ms"},
            "spark": {"mode": "connect", "url": url, "call_timeout": DEADLINE},
        },
        "metrics": {"enabled": False},
        "logging": {"format": "json", "level": "info"},
    }
    path.write_text(yaml.safe_dump(document))
    return path


def _overdue(events: list[dict[str, object]]) -> dict[str, object]:
    found = [e for e in events if e.get("error_type") == "EngineCallOverdue"]
    assert len(found) == 1, events[-20:]
    return found[0]


def _create_table(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.items (id int PRIMARY KEY, label text)")


@pytest.mark.timeout(300)
def test_a_silent_engine_at_start_ends_the_daemon_with_exit_code_4(
    pg18_dsn: str, tmp_path: Path, silent_server: SilentServer
) -> None:
    _create_table(pg18_dsn)
    config = _write_config(tmp_path, pg18_dsn, f"sc://127.0.0.1:{silent_server.port}")

    result = run_cli("run", "-c", str(config), timeout=240)

    assert result.returncode == EXIT_ENGINE_DEADLINE, result.stderr[-3000:]
    event = _overdue(log_events(result.stderr))
    assert event["event"] == "stopped by error"
    assert str(event["error"]).startswith(
        "an engine or store call did not return within its deadline of 2s while starting "
        "the Spark session"
    ), event


@pytest.fixture
def sail() -> Iterator[tuple[str, int]]:
    from pysail.spark import SparkConnectServer

    server = SparkConnectServer("127.0.0.1", 0)
    server.start(background=True)
    address = server.listening_address
    assert address is not None
    yield address
    server.stop()


@pytest.mark.timeout(420)
def test_an_engine_that_hangs_mid_stream_ends_the_daemon_with_nothing_acknowledged(
    pg18_dsn: str, tmp_path: Path, sail: tuple[str, int]
) -> None:
    _create_table(pg18_dsn)
    relay = FreezingRelay(sail)
    daemon: subprocess.Popen[bytes] | None = None
    log = tmp_path / "daemon.log"
    try:
        config = _write_config(tmp_path, pg18_dsn, f"sc://127.0.0.1:{relay.port}")
        prepare_configured_source(
            make_config(pg18_dsn, tmp_path / "lake", ["public.items"], slot=SLOT)
        )
        daemon = start_daemon(config, log)
        applied = run_transaction(pg18_dsn, "INSERT INTO public.items VALUES (1, 'before')")
        wait_for_flush(pg18_dsn, SLOT, applied.wal_end, timeout=240)

        relay.freeze()
        stuck = run_transaction(pg18_dsn, "INSERT INTO public.items VALUES (2, 'stuck')")
        code = daemon.wait(timeout=240)
    finally:
        if daemon is not None and daemon.poll() is None:
            daemon.kill()
            daemon.wait(30)
        relay.close()

    text = log.read_text()
    assert code == EXIT_ENGINE_DEADLINE, text[-3000:]
    event = _overdue(log_events(text))
    assert "did not return within its deadline of 2s while" in str(event["error"]), event
    flushed = confirmed_flush(pg18_dsn, SLOT)
    assert flushed >= applied.wal_end, "what was applied before the hang stays acknowledged"
    assert flushed < stuck.commit_start, "nothing of the stuck batch was acknowledged"
