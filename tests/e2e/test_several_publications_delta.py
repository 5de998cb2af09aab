"""Several publications, and the initial snapshot of existing publications, into Delta.

Two publications publish the same table with different row filters (and the one column
list PostgreSQL accepts for a table in several publications), a second table with and
without a filter, and a third table only one of them publishes. The daemon, configured
with both publications and no ``tables``, snapshots and then streams; a native subscriber
subscribed to the same two publications copies (PostgreSQL's own table sync) and applies
the same changes. After the snapshot and again after the workload, every Delta table,
read with delta-rs, must hold what the subscriber's table holds and what the
publications show of the source.

The second test is the issue's "snapshot of an existing publication copies nothing":
``create_publication: false``, empty ``tables``, a ``FOR ALL TABLES`` or ``TABLES IN
SCHEMA`` publication, ``snapshot.mode: initial``: every published table must be copied,
and a table created in the schema afterwards streamed.

Both run on PostgreSQL 18 and 15.
"""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from sink import table_path
from tests.support.configs import make_config
from tests.support.harness import run_daemon, run_statements, wait_until
from tests.support.oracle import compare_table, read_delta
from tests.support.subscriber import native_subscriber, wait_for_subscriber

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PUBLICATIONS = ["Orders EU", "orders_big"]

SOURCE = """
CREATE TABLE public.orders (id int PRIMARY KEY, region text NOT NULL, amount int NOT NULL,
                            note text);
-- Row-filter columns must be in the replica identity for UPDATE/DELETE to publish.
CREATE UNIQUE INDEX orders_identity ON public.orders (id, region, amount);
ALTER TABLE public.orders REPLICA IDENTITY USING INDEX orders_identity;
CREATE TABLE public.customers (id int PRIMARY KEY, region text NOT NULL, name text);
CREATE UNIQUE INDEX customers_identity ON public.customers (id, region);
ALTER TABLE public.customers REPLICA IDENTITY USING INDEX customers_identity;
CREATE TABLE public.refunds (id int PRIMARY KEY, order_id int NOT NULL, reason text);
CREATE TABLE public.audit (id int PRIMARY KEY, what text);  -- in no publication

CREATE PUBLICATION "Orders EU" FOR TABLE
    public.orders (id, region, amount) WHERE (region = 'eu'),
    public.customers WHERE (region = 'eu');
CREATE PUBLICATION orders_big FOR TABLE
    public.orders (id, region, amount) WHERE (amount > 500),
    public.customers,
    public.refunds;

-- What the two publications together show of the source.
CREATE VIEW public.orders_published AS
    SELECT id, region, amount FROM public.orders WHERE region = 'eu' OR amount > 500;

INSERT INTO public.orders
SELECT g, (ARRAY['eu', 'us', 'ap'])[g % 3 + 1], (g * 37) % 1000, 'note ' || g
FROM generate_series(1, 3000) g;
INSERT INTO public.customers
SELECT g, CASE WHEN g % 2 = 0 THEN 'eu' ELSE 'us' END, 'customer ' || g
FROM generate_series(1, 200) g;
INSERT INTO public.refunds SELECT g, g * 3, 'reason ' || g FROM generate_series(1, 100) g;
INSERT INTO public.audit SELECT g, 'x' FROM generate_series(1, 10) g;
"""

# The subscriber's tables hold the published columns only.
SUBSCRIBER = """
CREATE TABLE public.orders (id int PRIMARY KEY, region text NOT NULL, amount int NOT NULL);
CREATE TABLE public.customers (id int PRIMARY KEY, region text NOT NULL, name text);
CREATE TABLE public.refunds (id int PRIMARY KEY, order_id int NOT NULL, reason text);
"""

WORKLOAD = [
    "UPDATE orders SET region = 'eu' WHERE id % 10 = 1 AND region <> 'eu'",  # enter by eu
    "UPDATE orders SET amount = amount + 600 WHERE id % 10 = 2 AND amount <= 400",  # by big
    "UPDATE orders SET region = 'us', amount = 1 WHERE id % 10 = 3",  # leave both
    "UPDATE orders SET note = 'unpublished column' WHERE id % 5 = 0",
    "DELETE FROM orders WHERE id % 17 = 0",
    "INSERT INTO orders SELECT g, (ARRAY['eu', 'us'])[g % 2 + 1], g % 900, NULL "
    "FROM generate_series(3001, 3100) g",
    "UPDATE customers SET region = 'us' WHERE id % 4 = 0",  # eu filter, but big has none
    "UPDATE customers SET name = 'renamed ' || id WHERE id % 3 = 0",
    "DELETE FROM customers WHERE id % 11 = 0",
    "UPDATE refunds SET reason = 'changed' WHERE id % 2 = 0",
    "DELETE FROM refunds WHERE id > 90",
    "INSERT INTO audit VALUES (11, 'y')",
]

# Larger than logical_decoding_work_mem: the server streams it before it commits.
STREAMED = [
    "UPDATE orders SET amount = (amount + 250) % 1000 WHERE id <= 2000",
    "INSERT INTO refunds SELECT g, g, 'bulk' FROM generate_series(1000, 1500) g",
]


def wait_for_table_sync(subscriber_dsn: str) -> None:
    """Wait until the subscriber's table sync copied every table (state ready)."""
    with psycopg.connect(subscriber_dsn, autocommit=True) as conn:

        def ready() -> bool:
            row = conn.execute(
                "SELECT count(*) FROM pg_subscription_rel WHERE srsubstate <> 'r'"
            ).fetchone()
            return row is not None and row[0] == 0

        wait_until(ready, 120, "the subscriber's table sync")


def mismatches(dsn: str, lake: Path, checks: list[tuple[str, str]]) -> list[str]:
    """Compare each (table or view of ``dsn``, Delta table name) pair."""
    found = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        for source, delta in checks:
            schema, _, table = delta.partition(".")
            comparison = compare_table(
                conn, source, table_path(str(lake), schema, table), key=["id"]
            )
            assert comparison.source_rows > 0, source
            if not comparison.matches:
                found.append(comparison.describe())
    return found


def published_columns(lake: Path, table: str) -> set[str]:
    rows = read_delta(table_path(str(lake), "public", table))
    return {name for name in rows[0] if not name.startswith("_wal2delta_")}


@pytest.mark.parametrize("server", ["pg18", "pg15"])
def test_two_publications_land_in_delta_as_in_a_native_subscriber(
    server: str, request: pytest.FixtureRequest, tmp_path: Path, spark_session: object
) -> None:
    dsn: str = request.getfixturevalue(f"{server}_dsn")
    lake = tmp_path / "lake"
    run_statements(dsn, [SOURCE])
    config = make_config(
        dsn,
        lake,
        [],
        source={"publication": PUBLICATIONS, "create_publication": False},
        snapshot={"mode": "initial"},
    )
    tables = ["public.orders", "public.customers", "public.refunds"]
    as_published = [
        ("public.orders_published", "public.orders"),
        ("public.customers", "public.customers"),
        ("public.refunds", "public.refunds"),
    ]
    with native_subscriber(dsn, SUBSCRIBER, PUBLICATIONS, copy_data=True) as subscriber:
        before = run_statements(dsn, [])
        run_daemon(dsn, config, spark_session, before)  # the snapshot, nothing to stream
        wait_for_table_sync(subscriber)
        wait_for_subscriber(dsn, subscriber, before)
        copied = mismatches(subscriber, lake, [(t, t) for t in tables])
        assert not copied, "\n".join(copied)
        assert not mismatches(dsn, lake, as_published)

        middle = run_statements(dsn, WORKLOAD)
        run_daemon(dsn, config, spark_session, middle)
        run_statements(dsn, STREAMED, one_transaction=True)
        end = run_statements(dsn, ["UPDATE orders SET region = 'eu' WHERE id = 3"])
        run_daemon(dsn, config, spark_session, end)
        wait_for_subscriber(dsn, subscriber, end)
        streamed = mismatches(subscriber, lake, [(t, t) for t in tables])
        assert not streamed, "\n".join(streamed)
        found = mismatches(dsn, lake, as_published)
        assert not found, "\n".join(found)

    assert published_columns(lake, "orders") == {"id", "region", "amount"}
    assert published_columns(lake, "customers") == {"id", "region", "name"}
    assert not Path(table_path(str(lake), "public", "audit")).exists()
    with psycopg.connect(dsn, autocommit=True) as conn:
        (outside,) = conn.execute(
            "SELECT count(*) FROM orders WHERE NOT (region = 'eu' OR amount > 500)"
        ).fetchone() or (0,)
    assert outside > 500, "rows outside both filters exist and stayed out of Delta"


SCHEMA_SOURCE = """
CREATE SCHEMA sales;
CREATE TABLE sales.orders (id int PRIMARY KEY, amount numeric(10, 2), note text);
CREATE TABLE sales.items (id int PRIMARY KEY, order_id int NOT NULL, sku text);
CREATE TABLE public.customers (id int PRIMARY KEY, name text);
INSERT INTO sales.orders SELECT g, g * 1.25, 'order ' || g FROM generate_series(1, 2500) g;
INSERT INTO sales.items SELECT g, g % 2500 + 1, 'sku-' || g FROM generate_series(1, 4000) g;
INSERT INTO public.customers SELECT g, 'customer ' || g FROM generate_series(1, 300) g;
"""

AFTER_SNAPSHOT = [
    "UPDATE sales.orders SET amount = amount * 2 WHERE id % 7 = 0",
    "DELETE FROM sales.items WHERE id % 13 = 0",
    "INSERT INTO public.customers VALUES (1000, 'late')",
    # A table created after the snapshot: published by both kinds of publication.
    "CREATE TABLE sales.returns (id int PRIMARY KEY, item_id int NOT NULL)",
    "INSERT INTO sales.returns SELECT g, g FROM generate_series(1, 50) g",
]


@pytest.mark.parametrize("publication", ["FOR ALL TABLES", "FOR TABLES IN SCHEMA sales"])
@pytest.mark.parametrize("server", ["pg18", "pg15"])
def test_initial_snapshot_of_an_existing_publication_copies_every_published_table(
    server: str,
    publication: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    spark_session: object,
) -> None:
    dsn: str = request.getfixturevalue(f"{server}_dsn")
    lake = tmp_path / "lake"
    run_statements(dsn, [SCHEMA_SOURCE, f"CREATE PUBLICATION existing {publication}"])
    config = make_config(
        dsn,
        lake,
        [],
        source={"publication": "existing", "create_publication": False},
        snapshot={"mode": "initial"},
    )
    published = ["sales.orders", "sales.items"]
    if publication == "FOR ALL TABLES":
        published.append("public.customers")

    run_daemon(dsn, config, spark_session, run_statements(dsn, []))
    copied = mismatches(dsn, lake, [(t, t) for t in published])
    assert not copied, "\n".join(copied)

    end = run_statements(dsn, AFTER_SNAPSHOT)
    run_daemon(dsn, config, spark_session, end)
    found = mismatches(dsn, lake, [(t, t) for t in [*published, "sales.returns"]])
    assert not found, "\n".join(found)
    customers = Path(table_path(str(lake), "public", "customers"))
    assert customers.exists() == (publication == "FOR ALL TABLES")
