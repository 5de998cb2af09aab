"""Protocol workloads that exercise streaming, subtransactions, two-phase and TRUNCATE.

Run against a server with ``logical_decoding_work_mem = 64kB`` so the large transactions
here really are streamed (protocol 2+) or spilled by the server (protocol 1).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg

PROTOCOL_TABLES = ("proto.accounts", "proto.events", "proto.parent", "proto.child")

PROTOCOL_SCHEMA = """
CREATE SCHEMA proto;
CREATE TABLE proto.accounts (id int PRIMARY KEY, balance numeric(12, 2) NOT NULL, note text);
CREATE TABLE proto.events (id bigserial PRIMARY KEY, source text NOT NULL, payload text);
CREATE TABLE proto.parent (id int PRIMARY KEY, label text);
CREATE TABLE proto.child (id serial PRIMARY KEY, parent_id int REFERENCES proto.parent (id));
"""

Conn = psycopg.Connection[tuple[object, ...]]


@contextmanager
def transaction(conn: Conn) -> Iterator[Conn]:
    """An explicit transaction on an autocommit connection (so PREPARE works too)."""
    conn.execute("BEGIN")
    yield conn


def insert_events(conn: Conn, source: str, count: int) -> None:
    conn.execute(
        "INSERT INTO proto.events (source, payload) "
        "SELECT %s, repeat(md5(g::text), 3) FROM generate_series(1, %s) AS g",
        (source, count),
    )


def large_transaction_with_savepoints(conn: Conn, rows: int) -> None:
    with transaction(conn):
        insert_events(conn, "big-kept", rows)
        conn.execute("SAVEPOINT a")
        insert_events(conn, "big-rolled-back-a", rows)
        conn.execute("UPDATE proto.accounts SET balance = balance + 1000")
        conn.execute("ROLLBACK TO SAVEPOINT a")
        conn.execute("SAVEPOINT b")
        insert_events(conn, "big-released-b", rows // 4)
        conn.execute("RELEASE SAVEPOINT b")
        conn.execute("UPDATE proto.accounts SET balance = balance + 1 WHERE id % 2 = 0")
        conn.execute("COMMIT")


def nested_subtransactions(conn: Conn, rows: int) -> None:
    with transaction(conn):
        insert_events(conn, "nested-top", rows // 2)
        conn.execute("SAVEPOINT s1")
        insert_events(conn, "nested-s1", rows // 2)
        conn.execute("SAVEPOINT s2")
        insert_events(conn, "nested-s2-rolled-back", rows // 2)
        conn.execute("SAVEPOINT s3")
        insert_events(conn, "nested-s3-rolled-back", rows // 2)
        conn.execute("DELETE FROM proto.accounts WHERE id = 3")
        conn.execute("ROLLBACK TO SAVEPOINT s2")
        conn.execute("SAVEPOINT s4")
        insert_events(conn, "nested-s4", 10)
        conn.execute("RELEASE SAVEPOINT s4")
        conn.execute("DELETE FROM proto.accounts WHERE id = 4")
        conn.execute("COMMIT")


def interleaved_large_transactions(first: Conn, second: Conn, rows: int) -> None:
    first.execute("BEGIN")
    second.execute("BEGIN")
    for round_number in range(3):
        insert_events(first, f"interleaved-committed-{round_number}", rows // 2)
        insert_events(second, f"interleaved-aborted-{round_number}", rows // 2)
    second.execute("UPDATE proto.accounts SET note = 'never' WHERE id = 1")
    first.execute("UPDATE proto.accounts SET note = 'interleaved' WHERE id = 2")
    first.execute("COMMIT")
    second.execute("ROLLBACK")


def two_phase_transactions(conn: Conn, rows: int) -> None:
    with transaction(conn):
        conn.execute("INSERT INTO proto.accounts VALUES (100, 1.00, 'prepared-committed')")
        conn.execute("PREPARE TRANSACTION 'w2d_small_commit'")
    conn.execute("COMMIT PREPARED 'w2d_small_commit'")
    with transaction(conn):
        conn.execute("INSERT INTO proto.accounts VALUES (101, 1.00, 'prepared-rolled-back')")
        conn.execute("UPDATE proto.accounts SET note = 'rolled back' WHERE id = 5")
        conn.execute("PREPARE TRANSACTION 'w2d_small_rollback'")
    conn.execute("ROLLBACK PREPARED 'w2d_small_rollback'")
    with transaction(conn):
        insert_events(conn, "prepared-large-committed", rows)
        conn.execute("SAVEPOINT p")
        insert_events(conn, "prepared-large-rolled-back-sub", rows // 2)
        conn.execute("ROLLBACK TO SAVEPOINT p")
        conn.execute("PREPARE TRANSACTION 'w2d_large_commit'")
    conn.execute("COMMIT PREPARED 'w2d_large_commit'")
    with transaction(conn):
        insert_events(conn, "prepared-large-rolled-back", rows)
        conn.execute("PREPARE TRANSACTION 'w2d_large_rollback'")
    conn.execute("ROLLBACK PREPARED 'w2d_large_rollback'")


def truncates(conn: Conn) -> None:
    with transaction(conn):
        conn.execute("INSERT INTO proto.parent SELECT g, 'p' || g FROM generate_series(1, 20) g")
        conn.execute("INSERT INTO proto.child (parent_id) SELECT g FROM generate_series(1, 20) g")
        conn.execute("COMMIT")
    with transaction(conn):
        conn.execute("INSERT INTO proto.parent VALUES (21, 'before truncate')")
        # Enough changes before the TRUNCATE that the transaction is streamed.
        insert_events(conn, "streamed-with-truncate", 1500)
        conn.execute("TRUNCATE proto.parent RESTART IDENTITY CASCADE")
        conn.execute("INSERT INTO proto.parent VALUES (1, 'after truncate')")
        conn.execute("INSERT INTO proto.child (parent_id) VALUES (1)")
        conn.execute("COMMIT")


def logical_messages(conn: Conn) -> None:
    with transaction(conn):
        conn.execute("SELECT pg_logical_emit_message(true, 'wal2delta-test', 'transactional')")
        conn.execute("UPDATE proto.accounts SET note = 'with message' WHERE id = 6")
        conn.execute("COMMIT")
    conn.execute("SELECT pg_logical_emit_message(false, 'wal2delta-test', 'non-transactional')")
    with transaction(conn):
        conn.execute("SELECT pg_logical_emit_message(true, 'wal2delta-test', 'rolled back')")
        conn.execute("ROLLBACK")


def run_protocol_workload(dsn: str, *, two_phase: bool, rows: int = 1500) -> None:
    """Every scenario above, in order, on fresh connections."""
    with (
        psycopg.connect(dsn, autocommit=True) as conn,
        psycopg.connect(dsn, autocommit=True) as other,
    ):
        conn.execute(
            "INSERT INTO proto.accounts SELECT g, g * 10, NULL FROM generate_series(1, 10) g"
        )
        large_transaction_with_savepoints(conn, rows)
        nested_subtransactions(conn, rows)
        interleaved_large_transactions(conn, other, rows)
        if two_phase:
            two_phase_transactions(conn, rows)
        truncates(conn)
        logical_messages(conn)
