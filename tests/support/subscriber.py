"""A native PostgreSQL subscriber: the reference every Delta table is compared with.

``native_subscriber`` creates a second database on the same server, the same tables (the
caller's DDL), and a subscription to the publication(s) through a slot created first -
a subscription to the same cluster cannot create its slot in ``CREATE SUBSCRIPTION``.
``wait_for_subscriber`` waits until the subscriber has applied everything up to an LSN.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import psycopg
from psycopg import sql

from tests.support.harness import wait_until

_numbers = itertools.count(1)


@contextmanager
def native_subscriber(
    dsn: str, ddl: str, publications: Sequence[str], *, copy_data: bool = False
) -> Iterator[str]:
    """A subscriber database fed by ``publications`` of the database at ``dsn``.

    Args:
        dsn: the publisher's database.
        ddl: creates the subscriber's tables (as on the publisher, or a subset).
        publications: the publications to subscribe to.
        copy_data: copy the rows that exist when the subscription starts.

    Yields:
        The subscriber database's DSN. The subscription, its slot and the database are
        dropped afterwards.
    """
    number = next(_numbers)
    database, slot = f"subscriber_{number}", f"native_sub_{number}"
    conninfo = psycopg.conninfo.conninfo_to_dict(dsn)
    subscriber_dsn = psycopg.conninfo.make_conninfo(dsn, dbname=database)
    with psycopg.connect(dsn, autocommit=True) as publisher:
        publisher.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
        publisher.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
    try:
        with psycopg.connect(subscriber_dsn, autocommit=True) as conn:
            conn.execute(ddl.encode())
            conn.execute(
                sql.SQL(
                    "CREATE SUBSCRIPTION {} CONNECTION {} PUBLICATION {} "
                    "WITH (create_slot = false, slot_name = {}, copy_data = {})"
                ).format(
                    sql.Identifier(slot),
                    sql.Literal(psycopg.conninfo.make_conninfo(**conninfo)),
                    sql.SQL(", ").join(map(sql.Identifier, publications)),
                    sql.Literal(slot),
                    sql.Literal(copy_data),
                )
            )
        yield subscriber_dsn
    finally:
        with psycopg.connect(subscriber_dsn, autocommit=True) as conn:
            name = sql.Identifier(slot)
            if conn.execute("SELECT 1 FROM pg_subscription WHERE subname = %s", (slot,)).fetchone():
                conn.execute(sql.SQL("ALTER SUBSCRIPTION {} DISABLE").format(name))
                conn.execute(sql.SQL("ALTER SUBSCRIPTION {} SET (slot_name = NONE)").format(name))
                conn.execute(sql.SQL("DROP SUBSCRIPTION {}").format(name))
        with psycopg.connect(dsn, autocommit=True) as publisher:
            wait_until(lambda: _slot_inactive(publisher, slot), 30, f"slot {slot} to be released")
            publisher.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            publisher.execute(
                sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(database))
            )


def _slot_inactive(conn: psycopg.Connection[tuple[object, ...]], slot: str) -> bool:
    row = conn.execute(
        "SELECT active FROM pg_replication_slots WHERE slot_name = %s", (slot,)
    ).fetchone()
    return row is None or not row[0]


def wait_for_subscriber(dsn: str, subscriber_dsn: str, lsn: int, timeout: float = 120) -> None:
    """Wait until the subscriber fed from ``dsn`` has applied everything up to ``lsn``."""
    with psycopg.connect(subscriber_dsn, autocommit=True) as conn:
        (subscription,) = conn.execute("SELECT subname FROM pg_subscription").fetchone() or ("",)
    with psycopg.connect(dsn, autocommit=True) as publisher:

        def caught_up() -> bool:
            row = publisher.execute(
                "SELECT confirmed_flush_lsn - '0/0'::pg_lsn FROM pg_replication_slots "
                "WHERE slot_name = %s",
                (subscription,),
            ).fetchone()
            return row is not None and row[0] is not None and int(str(row[0])) >= lsn

        wait_until(caught_up, timeout, f"the native subscriber to apply up to {lsn}")
