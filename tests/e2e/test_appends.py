"""Rows whose keys cannot be in the table are appended, end to end from PostgreSQL 18: real
pgoutput folded by the kernel, the append path (``sink/steps/step_append.py``) and the MERGE
beside it, every table read back with delta-rs and compared row by row with the source.

Each pattern of one key within one batch - inserted; inserted then updated; inserted then
deleted; deleted then inserted again; updated beside new keys - ends equal to the source,
and the Delta history shows which path each table took: appends (``WRITE``) where every key
of a step was new, a MERGE otherwise. A second daemon run over the same changes (a slot
created at the same position, as after a lost acknowledgement) finds the lake holding them
already and merges: nothing doubled.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest
from deltalake import DeltaTable

from daemon.wiring import prepare_configured_source
from sink import table_path
from tests.support.configs import make_config
from tests.support.harness import run_daemon, run_statements, table_mismatches

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TABLES = ["public.orders", "public.cycle", "public.seeded"]
SCHEMA = """
CREATE TABLE public.orders (id bigint PRIMARY KEY, item text NOT NULL, qty int);
CREATE TABLE public.cycle (id int PRIMARY KEY, body text);
CREATE TABLE public.seeded (id int PRIMARY KEY, body text);
"""
SEED = "INSERT INTO public.seeded SELECT g, 'seed ' || g FROM generate_series(1, 50) g"
# Each list is one transaction. A batch may hold several transactions, but never a table's
# changes from both sides of a daemon run.
ORDERS = [
    "INSERT INTO orders SELECT g, 'item ' || g, g % 7 FROM generate_series(1, 400) g",
    "INSERT INTO orders SELECT g, 'item ' || g, NULL FROM generate_series(401, 800) g",
]
CYCLE = [
    "INSERT INTO cycle SELECT g, 'new ' || g FROM generate_series(1, 60) g",
    "UPDATE cycle SET body = 'updated' WHERE id % 3 = 0",
    "DELETE FROM cycle WHERE id % 5 = 0",
    "DELETE FROM cycle WHERE id = 7",
    "INSERT INTO cycle VALUES (7, 'inserted again')",
]
SEEDED = [
    "DELETE FROM seeded WHERE id <= 10",
    "INSERT INTO seeded SELECT g, 'back ' || g FROM generate_series(1, 5) g",
    "INSERT INTO seeded SELECT g, 'more ' || g FROM generate_series(51, 80) g",
]


def operations(lake: Path, name: str) -> Counter[str]:
    """The table's Delta commits by operation, its creation (version 0, ``CREATE TABLE``)
    included: a table whose first step appends is made by that append, with its rows."""
    schema, _, table = name.partition(".")
    history = DeltaTable(table_path(str(lake), schema, table)).history()
    return Counter(str(entry["operation"]) for entry in history)


def test_new_keys_are_appended_and_every_table_ends_equal_to_the_source(
    pg18_dsn: str, tmp_path: Path, spark_session: Any
) -> None:
    lake = tmp_path / "lake"
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
    config = make_config(pg18_dsn, lake, TABLES)
    prepare_configured_source(config)
    # seeded's first rows reach Delta in a run of their own: the batch below finds them.
    run_daemon(pg18_dsn, config, spark_session, run_statements(pg18_dsn, [SEED]))
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        # The same changes again, for a second daemon: a slot at the same position.
        conn.execute("SELECT pg_create_logical_replication_slot('w2d_again', 'pgoutput')")
    run_statements(pg18_dsn, ORDERS[:1], one_transaction=True)
    run_statements(pg18_dsn, ORDERS[1:], one_transaction=True)
    run_statements(pg18_dsn, CYCLE, one_transaction=True)
    endpos = run_statements(pg18_dsn, SEEDED, one_transaction=True)
    run_daemon(pg18_dsn, config, spark_session, endpos)
    assert not table_mismatches(pg18_dsn, lake, TABLES)
    # orders and cycle: every key of each step starts with an INSERT. seeded: the first run
    # appended keys 1-50, and the batch deletes and re-inserts five of them.
    first = {name: operations(lake, name) for name in TABLES}
    assert first["public.orders"]["MERGE"] == 0
    assert first["public.orders"]["CREATE TABLE"] == 1  # made by its first append
    assert first["public.orders"]["WRITE"] <= 1  # one or two batches
    assert first["public.cycle"] == {"CREATE TABLE": 1}
    assert first["public.seeded"] == {"CREATE TABLE": 1, "MERGE": 1}

    again = make_config(
        pg18_dsn,
        lake,
        TABLES,
        slot="w2d_again",
        source={"create_publication": False, "publication": "wal2delta_test"},
    )
    run_daemon(pg18_dsn, again, spark_session, endpos)
    assert not table_mismatches(pg18_dsn, lake, TABLES)
    second = {name: operations(lake, name) for name in TABLES}
    for name in TABLES:
        assert second[name]["WRITE"] == first[name]["WRITE"], f"{name} appended a replay"
        assert second[name]["MERGE"] >= first[name]["MERGE"] + 1, f"{name} not merged again"
