"""A key-range partitioned Delta table fed from PostgreSQL 18 equals its source table.

Small batches force many MERGEs, each naming only its rows' partitions; the workload
updates rows across the whole key range, moves rows between partitions by changing their
key, keeps TOASTed values through updates that do not touch them, deletes, and adds a
column with a fast default (a schema change that rewrites the partitioned table).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
from deltalake import DeltaTable

from capture.catalog import PostgresCatalog
from capture.slots import current_wal_lsn
from daemon.supervisor import Supervisor
from daemon.wiring import prepare_configured_source, sink_settings
from sink import DeltaSink, table_path
from tests.support.configs import make_config
from tests.support.oracle import compare_table, read_delta

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

BIG = "(SELECT string_agg(md5(random()::text || g || i), '') FROM generate_series(1, 200) s(i))"
WORKLOAD = [
    f"INSERT INTO orders SELECT g, 'b' || g, {BIG}, g FROM generate_series(-50, 1500) g",
    "UPDATE orders SET n = n * 2 WHERE id % 7 = 0",
    "UPDATE orders SET id = id + 5000 WHERE id % 97 = 0",
    "DELETE FROM orders WHERE id % 11 = 0",
    "ALTER TABLE orders ADD COLUMN status text DEFAULT 'new'",
    "UPDATE orders SET status = 'paid' WHERE id % 5 = 0",
    f"INSERT INTO orders SELECT g, 'late', {BIG}, 0 FROM generate_series(1501, 1800) g",
    "UPDATE orders SET id = -id WHERE id BETWEEN 1000 AND 1010",
]


def test_a_key_partitioned_table_equals_its_source_row_by_row(
    pg18_dsn: str, tmp_path: Path, spark_session: Any
) -> None:
    lake = tmp_path / "lake"
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id bigint PRIMARY KEY, body text, big text, n int)")
    config = make_config(
        pg18_dsn,
        lake,
        ["public.orders"],
        sink={"batch": {"max_rows": 300}, "partition_by_key": {"orders": {"width": 100}}},
    )
    prepare_configured_source(config)
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        for statement in WORKLOAD:
            conn.execute(statement.encode())
        endpos = current_wal_lsn(conn)
    with PostgresCatalog(pg18_dsn) as catalog:
        sink = DeltaSink(spark_session, sink_settings(config), catalog=catalog)
        Supervisor(config, sink, endpos=endpos).run()  # type: ignore[arg-type]

    path = table_path(str(lake), "public", "orders")
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        comparison = compare_table(conn, "public.orders", path)
        source_rows = conn.execute("SELECT count(*) FROM orders").fetchone()
    assert comparison.matches, comparison.describe()
    assert source_rows is not None
    rows = read_delta(path)
    assert len(rows) == source_rows[0] == comparison.source_rows
    assert all(row["_wal2delta_key_bucket"] == row["id"] // 100 for row in rows)
    assert DeltaTable(path).metadata().partition_columns == ["_wal2delta_key_bucket"]
