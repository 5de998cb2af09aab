"""Row filters, column lists and partitioned tables, end to end into Delta.

The Delta versions of ``tests/integration/test_publication_shapes.py``: one workload on
PostgreSQL 18 is read by two daemons, one publishing partitions via their root and one per
partition, and every Delta table, read with delta-rs, must equal what its publication
shows of the source: rows inside the row filter, listed columns only, partitions merged
into the root table or kept apart.
"""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from capture.slots import current_wal_lsn
from daemon.supervisor import Supervisor
from daemon.wiring import prepare_configured_source, sink_settings
from sink import DeltaSink, table_path
from tests.support.configs import make_config
from tests.support.oracle import compare_table, read_delta

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SCHEMA = """
CREATE TABLE public.orders (id int PRIMARY KEY, region text NOT NULL, amount int,
                            internal_note text);
-- Row-filter columns must be in the replica identity for UPDATE/DELETE to publish.
CREATE UNIQUE INDEX orders_identity ON public.orders (id, region);
ALTER TABLE public.orders REPLICA IDENTITY USING INDEX orders_identity;
-- What the publication shows of orders, for comparing with its Delta table.
CREATE VIEW public.orders_published AS
    SELECT id, region, amount FROM public.orders WHERE region = 'eu';
CREATE TABLE public.readings (id int NOT NULL, taken date NOT NULL, value int,
                              PRIMARY KEY (id, taken)) PARTITION BY RANGE (taken);
CREATE TABLE public.readings_2024 PARTITION OF public.readings
    FOR VALUES FROM ('2024-01-01') TO ('2025-01-01');
CREATE TABLE public.readings_2025 PARTITION OF public.readings
    FOR VALUES FROM ('2025-01-01') TO ('2026-01-01');
"""

WORKLOAD = [
    "INSERT INTO orders SELECT g, CASE WHEN g % 2 = 0 THEN 'eu' ELSE 'us' END, g, 'n' "
    "FROM generate_series(1, 100) g",
    "UPDATE orders SET region = 'us' WHERE id BETWEEN 2 AND 20 AND region = 'eu'",  # leave
    "UPDATE orders SET region = 'eu' WHERE id BETWEEN 21 AND 41 AND region = 'us'",  # enter
    "UPDATE orders SET amount = amount * 10 WHERE id > 50",  # stay in / stay out
    "UPDATE orders SET internal_note = 'unpublished' WHERE id % 3 = 0",
    "DELETE FROM orders WHERE id > 90",
    "INSERT INTO readings SELECT g, DATE '2024-06-01' + (g % 400), g "
    "FROM generate_series(1, 300) g",
    "UPDATE readings SET value = value + 1 WHERE id % 5 = 0",
    "DELETE FROM readings WHERE id % 7 = 0",
    # Moves rows between partitions: a delete in one, an insert in the other.
    "UPDATE readings SET taken = taken + 365 WHERE id % 11 = 0 AND taken < DATE '2024-12-01'",
]


def test_row_filters_column_lists_and_partitions_land_in_delta_as_published(
    pg18_dsn: str, tmp_path: Path, spark_session: object
) -> None:
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
    orders = {
        "name": "public.orders",
        "where": "region = 'eu'",
        "columns": ["id", "region", "amount"],
    }
    via_root = make_config(
        pg18_dsn,
        tmp_path / "root",
        [orders, "public.readings"],
        slot="w2d_root",
        source={"publish_via_partition_root": True},
    )
    per_partition = make_config(
        pg18_dsn,
        tmp_path / "parts",
        ["public.readings"],
        slot="w2d_parts",
        source={"publish_via_partition_root": False},
    )
    for config in (via_root, per_partition):
        prepare_configured_source(config)
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        for statement in WORKLOAD:
            conn.execute(statement.encode())
        endpos = current_wal_lsn(conn)
    for config in (via_root, per_partition):
        sink = DeltaSink(spark_session, sink_settings(config))  # type: ignore[arg-type]
        Supervisor(config, sink, endpos=endpos).run()

    root, parts = str(tmp_path / "root"), str(tmp_path / "parts")
    checks = [
        ("public.orders_published", table_path(root, "public", "orders"), ["id"]),
        ("public.readings", table_path(root, "public", "readings"), None),
        ("public.readings_2024", table_path(parts, "public", "readings_2024"), None),
        ("public.readings_2025", table_path(parts, "public", "readings_2025"), None),
    ]
    mismatches = []
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        for source, path, key in checks:
            comparison = compare_table(conn, source, path, key=key)
            assert comparison.source_rows > 0
            if not comparison.matches:
                mismatches.append(comparison.describe())
    assert not mismatches, "\n".join(mismatches)
    published = {"id", "region", "amount"}
    published |= {"_wal2delta_lsn", "_wal2delta_commit_ts", "_wal2delta_ordinal"}
    assert set(read_delta(table_path(root, "public", "orders"))[0]) == published
    assert not Path(table_path(root, "public", "readings_2024")).exists()
    assert not Path(table_path(parts, "public", "readings")).exists()
