"""Every replica identity, end to end from PostgreSQL 18 into Delta.

* DEFAULT: matched on the primary key, including key-changing updates.
* USING INDEX: matched on a unique index that is not the primary key; updates that change
  the index columns move the row, updates that change only the primary key do not.
* FULL with a primary key: pgoutput flags every column as key, so the sink matches on the
  primary key from the source catalog. That matters when a Delta row differs from its
  source row in a column no WAL record carried (here a volatile default, written by a
  table rewrite that logical decoding does not see): matching on every column would miss
  the row.
* FULL without a key: identical rows are kept; each UPDATE or DELETE changes or removes
  one row equal to its old tuple (``tests/e2e/test_keyless_delta.py`` goes further).
* NOTHING: inserts only - PostgreSQL itself refuses UPDATE and DELETE on a table that
  publishes them without an identity; identical inserts stay separate Delta rows.

A table switching identity mid-stream (DEFAULT to FULL) keeps matching on its primary key.
"""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from psycopg import errors as pg_errors

from capture.slots import current_wal_lsn
from daemon.wiring import prepare_configured_source
from sink import table_path
from tests.support.configs import make_config
from tests.support.harness import run_daemon
from tests.support.oracle import compare_table, read_delta

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TABLES = [
    "public.by_default",
    "public.by_index",
    "public.full_pk",
    "public.full_nokey",
    "public.nothing",
]

SCHEMA = """
CREATE TABLE public.by_default (id int PRIMARY KEY, body text, n int);
CREATE TABLE public.by_index (id int PRIMARY KEY, code text NOT NULL, body text);
CREATE UNIQUE INDEX by_index_code ON public.by_index (code);
ALTER TABLE public.by_index REPLICA IDENTITY USING INDEX by_index_code;
CREATE TABLE public.full_pk (id int PRIMARY KEY, body text, big text);
ALTER TABLE public.full_pk REPLICA IDENTITY FULL;
CREATE TABLE public.full_nokey (a int, b text);
ALTER TABLE public.full_nokey REPLICA IDENTITY FULL;
CREATE TABLE public.nothing (a int, b text);
ALTER TABLE public.nothing REPLICA IDENTITY NOTHING;
"""

# Incompressible, so it is stored out of line and arrives as unchanged TOAST when an
# update does not touch it.
BIG = "(SELECT string_agg(md5(random()::text || g || i), '') FROM generate_series(1, 300) s(i))"

WORKLOAD = [
    "INSERT INTO by_default SELECT g, 'b' || g, g FROM generate_series(1, 50) g",
    "UPDATE by_default SET n = n * 2 WHERE id % 3 = 0",
    "UPDATE by_default SET id = id + 1000 WHERE id % 10 = 0",
    "DELETE FROM by_default WHERE id % 7 = 0",
    "ALTER TABLE by_default REPLICA IDENTITY FULL",
    "UPDATE by_default SET body = 'full' WHERE id % 4 = 0",
    "DELETE FROM by_default WHERE id % 11 = 0",
    "INSERT INTO by_index SELECT g, 'c' || g, 'b' FROM generate_series(1, 40) g",
    "UPDATE by_index SET body = 'x' WHERE id % 2 = 0",
    "UPDATE by_index SET code = code || 'k' WHERE id % 5 = 0",
    "UPDATE by_index SET id = id + 100 WHERE id % 3 = 0",
    "DELETE FROM by_index WHERE id % 7 = 0",
    f"INSERT INTO full_pk SELECT g, 'b' || g, {BIG} FROM generate_series(1, 30) g",
    "UPDATE full_pk SET body = 'u' WHERE id % 2 = 0",
    "UPDATE full_pk SET id = id + 100 WHERE id % 5 = 0",
    "DELETE FROM full_pk WHERE id % 3 = 0",
    # A volatile default rewrites the table: the new values reach no WAL record, so Delta
    # holds NULL where PostgreSQL holds them, until the rows change.
    "ALTER TABLE full_pk ADD COLUMN r float8 DEFAULT random()",
    "UPDATE full_pk SET body = body || '!'",
    "INSERT INTO full_nokey SELECT g % 4, 'v' || (g % 4) FROM generate_series(1, 12) g",
    "UPDATE full_nokey SET b = 'w' WHERE a = 1",
    "DELETE FROM full_nokey WHERE a = 2",
    "INSERT INTO nothing SELECT g % 3, 'same' FROM generate_series(1, 9) g",
]


def test_every_replica_identity_lands_in_delta_equal_to_the_source(
    pg18_dsn: str, tmp_path: Path, spark_session: object
) -> None:
    lake = tmp_path / "lake"
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
    config = make_config(pg18_dsn, lake, TABLES)
    prepare_configured_source(config)
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        for statement in WORKLOAD:
            conn.execute(statement.encode())
        for statement in ("UPDATE nothing SET b = 'x'", "DELETE FROM nothing"):
            with pytest.raises(pg_errors.ObjectNotInPrerequisiteState, match="replica identity"):
                conn.execute(statement.encode())
        endpos = current_wal_lsn(conn)
    run_daemon(pg18_dsn, config, spark_session, endpos)
    mismatches = []
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        for name in TABLES:
            schema, _, table = name.partition(".")
            comparison = compare_table(conn, name, table_path(str(lake), schema, table))
            assert comparison.source_rows > 0
            if not comparison.matches:
                mismatches.append(comparison.describe())
    assert not mismatches, "\n".join(mismatches)
    # Tables without a key are compared as multisets; count their duplicates all the same.
    nothing = read_delta(table_path(str(lake), "public", "nothing"))
    assert len(nothing) == 9
    full_nokey = read_delta(table_path(str(lake), "public", "full_nokey"))
    expected = [(0, "v0")] * 3 + [(1, "w")] * 3 + [(3, "v3")] * 3
    assert sorted((r["a"], r["b"]) for r in full_nokey) == expected
    full_pk = read_delta(table_path(str(lake), "public", "full_pk"))
    assert all(r["r"] is not None for r in full_pk)
