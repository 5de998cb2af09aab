"""A full spool volume: the daemon retries with a clear error, and loses nothing.

The spool lives on a 1 MiB tmpfs mounted for the test (CI runs as root, as here; a
machine where the mount is refused fails the test rather than skipping it). A transaction
of several MB must spill past a 64 kB memory limit and cannot fit: each session ends with
``SpoolError`` (ENOSPC), nothing of the transaction is acknowledged, and the supervisor
reconnects with backoff. Once the volume is grown online (a remount, as a resized volume)
the same transaction spools whole and the run ends with Delta equal to the source.
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from structlog.testing import capture_logs

from capture.slots import current_wal_lsn
from daemon.supervisor import Supervisor
from daemon.wiring import prepare_configured_source, sink_settings
from decoder import SPOOL_FILE_PREFIX
from sink import DeltaSink, table_path
from tests.support.configs import make_config
from tests.support.harness import confirmed_flush, serving, wait_until
from tests.support.oracle import compare_table

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _mount(*args: str) -> None:
    result = subprocess.run(["mount", *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        pytest.fail(
            f"mount {' '.join(args)} failed ({result.stderr.strip()}): this test needs root "
            "and tmpfs mounts to make a small spool volume"
        )


@pytest.fixture
def tiny_spool(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs, unmounted at the end."""
    spool = tmp_path / "spool"
    spool.mkdir()
    _mount("-t", "tmpfs", "-o", "size=1m", "tmpfs", str(spool))
    try:
        yield spool
    finally:
        subprocess.run(["umount", "-l", str(spool)], check=False)


def test_a_full_spool_volume_is_retried_with_a_clear_error_until_space_returns(
    pg18_dsn: str, tmp_path: Path, tiny_spool: Path, spark_session: object
) -> None:
    dsn = pg18_dsn
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.items (id int PRIMARY KEY, label text)")
    config = make_config(
        dsn,
        tmp_path / "lake",
        ["public.items"],
        slot="spool_faults",
        source={"reconnect": {"initial_delay": "200ms", "max_delay": "1s"}},
        spool={"dir": str(tiny_spool), "memory_limit": "64kB"},
    )
    prepare_configured_source(config)
    delta = DeltaSink(spark_session, sink_settings(config))  # type: ignore[arg-type]
    stop = threading.Event()
    service = Supervisor(config, delta, stop_event=stop)
    no_space = service.metrics.spool_errors.labels(reason="no_space")
    with capture_logs() as logs, serving(service, stop, join_timeout=120) as running:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO items SELECT g, 'small' FROM generate_series(1, 100) g")
            small_end = current_wal_lsn(conn)
        wait_until(
            lambda: confirmed_flush(dsn, config.source.slot) >= small_end,
            120,
            "the small transaction to be durable",
        )
        with psycopg.connect(dsn, autocommit=True) as conn:
            # About 6 MB of changes in one transaction: far more than the 1 MiB volume.
            conn.execute(
                "INSERT INTO items SELECT g, repeat(md5(g::text), 8) "
                "FROM generate_series(101, 20100) g"
            )
            large_end = current_wal_lsn(conn)
        wait_until(lambda: no_space._value.get() >= 2, 300, "the spool to fill twice")
        assert not running.errors
        # Nothing of the transaction that could not be spooled is acknowledged.
        assert confirmed_flush(dsn, config.source.slot) < large_end
        assert service.metrics.reconnects._value.get() >= 2
        _mount("-o", "remount,size=64m", str(tiny_spool))  # the volume grown online
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("UPDATE items SET label = 'updated' WHERE id % 7 = 0")
            conn.execute("DELETE FROM items WHERE id % 11 = 0")
            endpos = current_wal_lsn(conn)
        wait_until(
            lambda: confirmed_flush(dsn, config.source.slot) >= endpos,
            300,
            "the flush position to pass the changes after space returned",
        )
    assert not running.thread.is_alive()
    assert not running.errors
    retried = [
        event
        for event in logs
        if event["event"] == "retryable error; reconnecting" and "spool" in str(event["error"])
    ]
    assert retried, "the spool error was never logged"
    message = str(retried[0]["error"])
    assert message.startswith("spool failed: cannot ")
    assert str(tiny_spool) in message
    assert "No space left on device (ENOSPC)" in message
    assert "free on the volume: " in message
    assert "Grow the volume" in message
    with psycopg.connect(dsn, autocommit=True) as conn:
        comparison = compare_table(
            conn, "public.items", table_path(str(config.sink.path), "public", "items")
        )
        (count,) = conn.execute("SELECT count(*) FROM items").fetchone() or (0,)
    assert count > 18_000
    assert comparison.matches, comparison.describe()
    # The files of the failed sessions are gone with them.
    assert [p for p in tiny_spool.iterdir() if p.name.startswith(SPOOL_FILE_PREFIX)] == []
