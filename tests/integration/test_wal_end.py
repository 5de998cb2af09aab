"""The end of the WAL on a page boundary (PostgreSQL 18): ``current_wal_lsn`` is the
boundary, where flush position and slots get to; ``pg_current_wal_insert_lsn()`` reads a
page header past it, which nothing reaches until the server writes another record.

A `verify` compared at that insert position once found a stopped daemon's slot short of it
by 0x2A8 bytes (0x290 of records, the last ending on a page boundary, and the 0x18 header)
and reported changes Delta already held as not replicated.
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from capture import current_wal_lsn
from daemon.verify import replicated_to
from decoder import Lsn, parse_lsn
from tests.support.harness import end_wal_on_page_boundary, insert_position

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

SLOT = "wal_end_slot"
PUBLICATION = "wal_end_pub"


@pytest.fixture
def conn(pg18_dsn: str) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    with psycopg.connect(pg18_dsn, autocommit=True) as connection:
        connection.execute("CREATE TABLE public.items (id int PRIMARY KEY)")
        connection.execute(f"CREATE PUBLICATION {PUBLICATION} FOR TABLE public.items")
        connection.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (SLOT,))
        yield connection


def _quiet_boundary(conn: psycopg.Connection[tuple[object, ...]]) -> Iterator[int]:
    """Boundaries the WAL ends on; the caller checks nothing was written after."""
    for _ in range(10):
        yield end_wal_on_page_boundary(conn)


def test_the_end_of_a_wal_that_ends_on_a_page_boundary_is_the_boundary(
    conn: psycopg.Connection[tuple[object, ...]],
) -> None:
    for boundary in _quiet_boundary(conn):
        end = current_wal_lsn(conn)
        if insert_position(conn) == boundary + 24:  # nothing written meanwhile
            assert end == boundary
            flushed = conn.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()
            assert flushed is not None
            assert parse_lsn(str(flushed[0])) == end
            return
    pytest.fail("other writers kept adding WAL")


def test_a_stopped_slot_with_nothing_published_since_has_passed_the_end_of_the_wal(
    conn: psycopg.Connection[tuple[object, ...]],
) -> None:
    for boundary in _quiet_boundary(conn):
        end = current_wal_lsn(conn)
        passed = replicated_to(conn, SLOT, [PUBLICATION], end)
        # The insert position: the flush position never reaches it, so the slot never
        # passes it however long verify waits.
        raw_passed = replicated_to(conn, SLOT, [PUBLICATION], Lsn(insert_position(conn)))
        if insert_position(conn) == boundary + 24:
            assert end == boundary
            assert passed
            assert not raw_passed
            return
    pytest.fail("other writers kept adding WAL")


def test_a_published_change_before_the_boundary_is_still_pending(
    conn: psycopg.Connection[tuple[object, ...]],
) -> None:
    conn.execute("INSERT INTO public.items VALUES (1)")
    for boundary in _quiet_boundary(conn):
        end = current_wal_lsn(conn)
        if insert_position(conn) == boundary + 24:
            assert end == boundary
            assert not replicated_to(conn, SLOT, [PUBLICATION], end)
            return
    pytest.fail("other writers kept adding WAL")
