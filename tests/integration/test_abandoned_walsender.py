"""The walsender of a connection given up after a receive timeout, and a real second consumer.

After ``ReceiveTimeoutError`` the supervisor hands ``prepare_source`` the PID of the
abandoned connection's walsender: when exactly that process, a ``wal2delta`` walsender,
still holds the slot, it is ended and the slot is used again. Any other holder - another
process streaming the slot, whatever its name, or one that merely has the PID - stays a
second consumer: ``SlotInUseError`` (exit code 3), and it is left running.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest

from capture.errors import SlotInUseError
from capture.negotiation import start_replication_options
from capture.settings import CaptureSettings
from capture.startup import prepare_source
from capture.stream import ReplicationStream
from daemon.wiring import capture_settings
from tests.support.configs import make_config
from tests.support.harness import wait_until

pytestmark = [pytest.mark.integration]

SLOT = "w2d_abandoned"


@pytest.fixture
def settings(pg18_dsn: str, tmp_path: Path) -> CaptureSettings:
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.items (id int PRIMARY KEY)")
    config = make_config(pg18_dsn, tmp_path / "lake", ["public.items"], slot=SLOT)
    prepared = capture_settings(config)
    prepare_source(prepared)  # publication and slot
    return prepared


@contextmanager
def _streaming(settings: CaptureSettings, application_name: str) -> Iterator[ReplicationStream]:
    """Another process streaming the slot, under ``application_name``."""
    conn = psycopg.connect(
        settings.conninfo,
        replication="database",
        autocommit=True,
        application_name=application_name,
    )
    stream = ReplicationStream(conn)
    info = prepare_source(settings)
    stream.start(SLOT, 0, start_replication_options(info.options, settings.publications, "any"))
    try:
        yield stream
    finally:
        conn.close()


def _holder(dsn: str) -> int | None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (SLOT,)
        ).fetchone()
    assert row is not None
    return row[0] if row[0] is None else int(str(row[0]))


def _alive(dsn: str, pid: int) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,)
        ).fetchone()
    return row == (1,)


def test_the_abandoned_walsender_of_our_own_connection_is_ended(
    settings: CaptureSettings, pg18_dsn: str
) -> None:
    with _streaming(settings, "wal2delta") as abandoned:
        pid = abandoned.backend_pid
        wait_until(lambda: _holder(pg18_dsn) == pid, 30, "the slot to be held")
        prepare_source(settings, abandoned_walsender=pid)
        assert _holder(pg18_dsn) is None
        assert not _alive(pg18_dsn, pid)


def test_another_wal2delta_process_on_the_slot_is_still_a_second_consumer(
    settings: CaptureSettings, pg18_dsn: str
) -> None:
    with _streaming(settings, "wal2delta") as other:
        wait_until(lambda: _holder(pg18_dsn) == other.backend_pid, 30, "the slot to be held")
        # Our abandoned walsender was another process, already gone.
        with pytest.raises(SlotInUseError, match="is active for PID"):
            prepare_source(settings, abandoned_walsender=other.backend_pid + 100_000)
        assert _holder(pg18_dsn) == other.backend_pid
        assert _alive(pg18_dsn, other.backend_pid)


def test_a_holder_that_is_not_a_wal2delta_walsender_is_never_ended(
    settings: CaptureSettings, pg18_dsn: str
) -> None:
    with _streaming(settings, "pg_recvlogical") as other:
        pid = other.backend_pid
        wait_until(lambda: _holder(pg18_dsn) == pid, 30, "the slot to be held")
        with pytest.raises(SlotInUseError, match="is active for PID"):
            prepare_source(settings, abandoned_walsender=pid)
        assert _holder(pg18_dsn) == pid
        assert _alive(pg18_dsn, pid)
