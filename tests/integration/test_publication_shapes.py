"""Row filters, column lists and partitioned tables, as the server publishes them.

An UPDATE that moves a row out of a publication's row filter arrives as a DELETE, one
that moves it in as an INSERT (PostgreSQL manual, "Row Filters"); only listed columns are
published; partitioned tables arrive as the root or as each partition depending on
``publish_via_partition_root``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from capture.slots import current_wal_lsn
from daemon.supervisor import Supervisor
from daemon.wiring import prepare_configured_source
from tests.support.configs import make_config
from tests.support.model_sink import ModelSink
from tests.support.oracle import canonical

pytestmark = pytest.mark.integration


def _rows(dsn: str, query: str) -> dict[str, list[object]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(query).fetchall()  # type: ignore[call-overload]
    return {repr(r[0]): [canonical(v) for v in r] for r in rows}


def _model(model: ModelSink, table: str, columns: list[str]) -> dict[str, list[object]]:
    return {
        repr(row[columns[0]]): [canonical(row[c]) for c in columns]
        for row in model.tables.get(table, {}).values()
    }


def _stream(
    dsn: str, tmp_path: Path, tables: list[Any], workload: list[str], **source: Any
) -> ModelSink:
    config = make_config(dsn, tmp_path / "lake", tables, source=source)
    prepare_configured_source(config)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in workload:
            conn.execute(statement.encode())
        endpos = current_wal_lsn(conn)
    model = ModelSink()
    Supervisor(config, model, endpos=endpos).run()
    return model


def test_updates_across_a_row_filter_become_deletes_and_inserts(
    pg18_dsn: str, tmp_path: Path
) -> None:
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE public.orders (id int PRIMARY KEY, region text NOT NULL, "
            "amount int, internal_note text)"
        )
        # Row-filter columns must be in the replica identity for UPDATE/DELETE to publish.
        conn.execute("CREATE UNIQUE INDEX orders_identity ON public.orders (id, region)")
        conn.execute("ALTER TABLE public.orders REPLICA IDENTITY USING INDEX orders_identity")
    table = {
        "name": "public.orders",
        "where": "region = 'eu'",
        "columns": ["id", "region", "amount"],
    }
    workload = [
        "INSERT INTO orders SELECT g, CASE WHEN g % 2 = 0 THEN 'eu' ELSE 'us' END, g, 'n' "
        "FROM generate_series(1, 100) g",
        "UPDATE orders SET region = 'us' WHERE id BETWEEN 2 AND 20 AND region = 'eu'",  # leave
        "UPDATE orders SET region = 'eu' WHERE id BETWEEN 21 AND 41 AND region = 'us'",  # enter
        "UPDATE orders SET amount = amount * 10 WHERE id > 50",  # stay in / stay out
        "DELETE FROM orders WHERE id > 90",
    ]
    model = _stream(pg18_dsn, tmp_path, [table], workload)
    assert _model(model, "public.orders", ["id", "region", "amount"]) == _rows(
        pg18_dsn, "SELECT id, region, amount FROM orders WHERE region = 'eu'"
    )
    ops = {op for _, name, op, _ in model.events if name == "public.orders"}
    assert ops == {"insert", "update"}
    assert all("internal_note" not in row for row in model.tables["public.orders"].values())


PARTITIONED = """
CREATE TABLE public.readings (id int NOT NULL, taken date NOT NULL, value int,
                              PRIMARY KEY (id, taken)) PARTITION BY RANGE (taken);
CREATE TABLE public.readings_2024 PARTITION OF public.readings
    FOR VALUES FROM ('2024-01-01') TO ('2025-01-01');
CREATE TABLE public.readings_2025 PARTITION OF public.readings
    FOR VALUES FROM ('2025-01-01') TO ('2026-01-01');
"""
PARTITION_WORKLOAD = [
    "INSERT INTO readings "
    "SELECT g, DATE '2024-06-01' + (g % 400), g FROM generate_series(1, 300) g",
    "UPDATE readings SET value = value + 1 WHERE id % 5 = 0",
    "DELETE FROM readings WHERE id % 7 = 0",
    # Moves rows between partitions: a delete in one, an insert in the other.
    "UPDATE readings SET taken = taken + 365 WHERE id % 11 = 0 AND taken < DATE '2024-12-01'",
]


def test_partition_changes_land_in_the_root_table_when_published_via_root(
    pg18_dsn: str, tmp_path: Path
) -> None:
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute(PARTITIONED)
    model = _stream(
        pg18_dsn, tmp_path, ["public.readings"], PARTITION_WORKLOAD, publish_via_partition_root=True
    )
    assert set(model.tables) == {"public.readings"}
    columns = ["id", "taken", "value"]
    expected = _rows(pg18_dsn, "SELECT id, taken, value FROM readings")
    got = {
        repr((row["id"], row["taken"])): [canonical(row[c]) for c in columns]
        for row in model.tables["public.readings"].values()
    }
    assert sorted(map(tuple, got.values())) == sorted(map(tuple, expected.values()))  # type: ignore[arg-type]


def test_partition_changes_land_per_partition_when_not_published_via_root(
    pg18_dsn: str, tmp_path: Path
) -> None:
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute(PARTITIONED)
    model = _stream(
        pg18_dsn,
        tmp_path,
        ["public.readings"],
        PARTITION_WORKLOAD,
        publish_via_partition_root=False,
    )
    assert set(model.tables) == {"public.readings_2024", "public.readings_2025"}
    for partition in ("readings_2024", "readings_2025"):
        expected = _rows(pg18_dsn, f"SELECT id, taken, value FROM {partition}")
        got = model.tables[f"public.{partition}"].values()
        assert sorted(
            tuple(canonical(r[c]) for c in ("id", "taken", "value")) for r in got
        ) == sorted(tuple(v) for v in expected.values())
