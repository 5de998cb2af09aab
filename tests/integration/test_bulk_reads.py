"""Reading a flowing replication stream in bulk (``capture.stream``, ``SO_RCVLOWAT``).

A real walsender over TCP: a bulk wait does not wake for a small transaction until its
timeout, wakes at once for a large one, and a plain wait - the loop's wait once the
stream has paused - wakes for the first byte, so a quiet stream's changes are not held.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import psycopg
import pytest

from capture.stream import BULK_LOW_WATER, ReplicationStream
from decoder import read_xlog_data

pytestmark = pytest.mark.integration


@pytest.fixture
def stream(pg18_dsn: str) -> Iterator[ReplicationStream]:
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, note text)")
        conn.execute("CREATE PUBLICATION p FOR TABLE t")
        conn.execute("SELECT pg_create_logical_replication_slot('bulk', 'pgoutput')")
    stream = ReplicationStream.open(pg18_dsn, connect_timeout=10)
    stream.start("bulk", 0, {"proto_version": "1", "publication_names": "p"})
    try:
        yield stream
    finally:
        stream.close()


def _write(dsn: str, rows: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO t SELECT g, repeat('x', 100) FROM generate_series(1, %s) g", (rows,)
        )


def _inserts_read(stream: ReplicationStream, rows: int, timeout: float = 30.0) -> int:
    """Read until ``rows`` INSERT messages came (plain waits); how many came."""
    seen = 0
    deadline = time.monotonic() + timeout
    while seen < rows and time.monotonic() < deadline:
        frames = stream.read_frames()
        for frame in frames:
            xlog = read_xlog_data(frame)
            seen += xlog is not None and xlog[1][:1] == b"I"
        if not frames:
            stream.wait_readable(0.5)
    return seen


def test_a_bulk_wait_leaves_a_small_transaction_for_its_timeout_a_plain_wait_does_not(
    stream: ReplicationStream, pg18_dsn: str
) -> None:
    _write(pg18_dsn, 1)  # a few hundred bytes, far below BULK_LOW_WATER
    time.sleep(0.5)  # the walsender sends at commit

    started = time.monotonic()
    assert not stream.wait_readable(0.4, bulk=True)
    assert time.monotonic() - started >= 0.35

    started = time.monotonic()
    assert stream.wait_readable(10.0)
    assert time.monotonic() - started < 5.0
    # The bytes the bulk wait left were there all along: a read takes them.
    assert _inserts_read(stream, 1) == 1

    started = time.monotonic()
    stream.close()  # the server's CopyDone is read without waiting for more
    assert time.monotonic() - started < 2.0


def test_a_bulk_wait_wakes_as_soon_as_a_large_transaction_arrives(
    stream: ReplicationStream, pg18_dsn: str
) -> None:
    rows = 3000  # about 400 KiB of messages
    assert rows * 100 > 2 * BULK_LOW_WATER
    _write(pg18_dsn, rows)

    started = time.monotonic()
    assert stream.wait_readable(20.0, bulk=True)
    assert time.monotonic() - started < 10.0
    assert _inserts_read(stream, rows) == rows
