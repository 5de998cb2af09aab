"""Tables without a key keep identical rows, end to end, compared with a native subscriber.

A REPLICA IDENTITY FULL table without a primary key may hold identical rows; PostgreSQL's
subscriber keeps them, and so must Delta: each INSERT adds a row, each UPDATE or DELETE
changes or removes exactly one equal row (NULLs matching NULLs). The workload below runs
on the source while a native subscriber (a second database on the same server) and the
daemon read the same publication; afterwards every Delta table must equal the source and
the subscriber's table as multisets. The daemon is stopped and started again half-way,
and one large transaction is streamed by the server with a rolled-back subtransaction.
Runs on PostgreSQL 18 and on 15 (streaming protocol 2).
"""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from capture.slots import current_wal_lsn
from daemon.wiring import prepare_configured_source
from tests.support.configs import make_config
from tests.support.harness import run_daemon, table_mismatches
from tests.support.subscriber import native_subscriber, wait_for_subscriber

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TABLES = ["public.log", "public.events"]

DDL = """
CREATE TABLE public.log (a int);
ALTER TABLE public.log REPLICA IDENTITY FULL;
CREATE TABLE public.events (kind text, payload jsonb, amount numeric(10, 2), tags text[]);
ALTER TABLE public.events REPLICA IDENTITY FULL;
"""

FIRST = [
    # The example: PostgreSQL holds two of each but 3; DELETE sends two messages.
    "INSERT INTO log SELECT generate_series(1, 5)",
    "INSERT INTO log SELECT generate_series(1, 5)",
    "DELETE FROM log WHERE a = 3",
    # One of two identical rows changes; NULLs are rows too.
    "UPDATE log SET a = 20 WHERE ctid = (SELECT min(ctid) FROM log WHERE a = 2)",
    "INSERT INTO log VALUES (NULL), (NULL), (NULL)",
    "DELETE FROM log WHERE ctid = (SELECT min(ctid) FROM log WHERE a IS NULL)",
    "INSERT INTO events SELECT 'click', NULL, 1.50, ARRAY['a', NULL] FROM generate_series(1, 4)",
    "INSERT INTO events SELECT 'view', '{\"p\": 1}', NULL, NULL FROM generate_series(1, 3)",
    "UPDATE events SET amount = 2.25 "
    "WHERE ctid = (SELECT min(ctid) FROM events WHERE kind = 'click')",
    "DELETE FROM events WHERE ctid = (SELECT max(ctid) FROM events WHERE kind = 'view')",
]

SECOND = [
    "UPDATE log SET a = 10 WHERE a = 1",
    "DELETE FROM log WHERE ctid = (SELECT min(ctid) FROM log WHERE a = 4)",
    "INSERT INTO log VALUES (4), (4)",
    "UPDATE events SET kind = 'view' WHERE kind = 'click' AND amount = 1.50",
    "DELETE FROM events WHERE kind = 'view' AND payload IS NULL "
    "AND ctid = (SELECT min(ctid) FROM events WHERE kind = 'view' AND payload IS NULL)",
]

# Larger than logical_decoding_work_mem: the server streams it before it commits.
STREAMED = [
    "INSERT INTO log SELECT g % 7 FROM generate_series(1, 3000) g",
    "SAVEPOINT s",
    "DELETE FROM log WHERE a = 5",
    "ROLLBACK TO SAVEPOINT s",
    "DELETE FROM log WHERE a = 6",
    "UPDATE log SET a = 60 WHERE ctid IN (SELECT ctid FROM log WHERE a = 0 LIMIT 100)",
]


@pytest.mark.parametrize("server", ["pg18", "pg15"])
def test_identical_rows_land_in_delta_as_in_a_native_subscriber(
    server: str, request: pytest.FixtureRequest, tmp_path: Path, spark_session: object
) -> None:
    dsn: str = request.getfixturevalue(f"{server}_dsn")
    lake = tmp_path / "lake"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(DDL.encode())
    config = make_config(dsn, lake, TABLES)
    prepare_configured_source(config)
    # make_config names the publication after the slot.
    with native_subscriber(dsn, DDL, [config.source.slot]) as subscriber:
        with psycopg.connect(dsn, autocommit=True) as conn:
            for statement in FIRST:
                conn.execute(statement.encode())
            middle = current_wal_lsn(conn)
        run_daemon(dsn, config, spark_session, middle)
        with psycopg.connect(dsn, autocommit=True) as conn:
            for statement in SECOND:
                conn.execute(statement.encode())
            with conn.transaction():
                for statement in STREAMED:
                    conn.execute(statement.encode())
            end = current_wal_lsn(conn)
        run_daemon(dsn, config, spark_session, end)
        wait_for_subscriber(dsn, subscriber, end)
        assert not table_mismatches(dsn, lake, TABLES), "\n".join(
            table_mismatches(dsn, lake, TABLES)
        )
        assert not table_mismatches(subscriber, lake, TABLES), "\n".join(
            table_mismatches(subscriber, lake, TABLES)
        )
    with psycopg.connect(dsn, autocommit=True) as conn:
        (count,) = conn.execute("SELECT count(*) FROM log WHERE a = 4").fetchone() or (0,)
    assert count > 400, "the duplicates this test is about are there"
