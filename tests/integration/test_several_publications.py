"""What several publications publish together, read from the catalog as pgoutput combines it.

``read_published_tables`` decides what the initial snapshot copies; these tests pin its
rules against real servers (PostgreSQL 15 to 18; 14 has no row filters, column lists nor
``TABLES IN SCHEMA``) and check each against what pgoutput
itself does with the same ``publication_names``: the server refuses different column
lists for one table, and streams a partition as the ancestor another publication
publishes via its root. Missing publications, and a snapshot that would find no table
although the publications publish some, are errors.
"""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from capture import snapshot as snapshot_module
from capture.errors import CaptureError, PublicationError
from capture.slots import PublishedTable, current_wal_lsn, read_published_tables
from daemon.supervisor import Supervisor
from daemon.wiring import prepare_configured_source
from tests.support.configs import make_config
from tests.support.model_sink import ModelSink

pytestmark = [pytest.mark.integration]

SCHEMA = """
CREATE SCHEMA sales;
CREATE TABLE sales.orders (id int PRIMARY KEY, region text NOT NULL, amount int NOT NULL,
                           note text);
CREATE TABLE public.customers (id int PRIMARY KEY, region text NOT NULL, name text,
                               doubled int GENERATED ALWAYS AS (id * 2) STORED);
CREATE TABLE public.readings (id int, taken int, PRIMARY KEY (id, taken))
    PARTITION BY RANGE (taken);
CREATE TABLE public.readings_low PARTITION OF public.readings FOR VALUES FROM (0) TO (100);
CREATE PUBLICATION eu FOR TABLE sales.orders (id, region, amount) WHERE (region = 'eu'),
    public.customers WHERE (region = 'eu');
CREATE PUBLICATION big FOR TABLE sales.orders (id, region, amount) WHERE (amount > 500),
    public.customers;
CREATE PUBLICATION notes FOR TABLE sales.orders (id, note);
CREATE PUBLICATION in_schema FOR TABLES IN SCHEMA sales;
CREATE PUBLICATION everything FOR ALL TABLES;
CREATE PUBLICATION via_root FOR TABLE public.readings WITH (publish_via_partition_root = true);
CREATE PUBLICATION nothing;
"""

ORDERS = ("id", "region", "amount")
CUSTOMERS = ("id", "region", "name")  # generated columns are not published by default
READINGS = ("id", "taken")


@pytest.fixture(params=["pg18", "pg17", "pg16", "pg15"])
def dsn(request: pytest.FixtureRequest) -> str:
    dsn: str = request.getfixturevalue(f"{request.param}_dsn")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SCHEMA.encode())
    return dsn


def published(dsn: str, *publications: str) -> list[PublishedTable]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return read_published_tables(conn, publications)


def pgoutput_error(dsn: str, publications: str, statement: str) -> str | None:
    """Decode ``statement`` with pgoutput for ``publications``; the error, if any."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_create_logical_replication_slot('probe', 'pgoutput')")
        try:
            conn.execute("SET synchronous_commit = on")
            conn.execute(statement.encode())
            conn.execute(
                "SELECT count(*) FROM pg_logical_slot_peek_binary_changes('probe', NULL, "
                "NULL, 'proto_version', '1', 'publication_names', %s)",
                (publications,),
            )
        except psycopg.Error as exc:
            return str(exc)
        finally:
            conn.execute("SELECT pg_drop_replication_slot('probe')")
    return None


def test_row_filters_are_ored_and_dropped_when_one_publication_has_none(dsn: str) -> None:
    assert published(dsn, "eu", "big") == [
        PublishedTable("public", "customers", None, CUSTOMERS),
        PublishedTable("sales", "orders", "((region = 'eu'::text)) OR ((amount > 500))", ORDERS),
    ]
    assert published(dsn, "eu") == [
        PublishedTable("public", "customers", "((region = 'eu'::text))", CUSTOMERS),
        PublishedTable("sales", "orders", "((region = 'eu'::text))", ORDERS),
    ]


def test_all_tables_and_tables_in_schema_publish_every_row_and_column(dsn: str) -> None:
    orders = PublishedTable("sales", "orders", None, (*ORDERS, "note"))
    assert published(dsn, "in_schema") == [orders]
    assert published(dsn, "everything") == [
        PublishedTable("public", "customers", None, CUSTOMERS),
        PublishedTable("public", "readings_low", None, READINGS),
        orders,
    ]


def test_a_partition_is_copied_as_the_ancestor_another_publication_publishes(dsn: str) -> None:
    tables = published(dsn, "everything", "via_root")
    assert [t.qualified_name for t in tables] == [
        "public.customers",
        "public.readings",
        "sales.orders",
    ]


def test_different_column_lists_are_refused_as_pgoutput_refuses_them(dsn: str) -> None:
    statement = (
        "INSERT INTO sales.orders SELECT coalesce(max(id), 0) + 1, 'eu', 1, 'n' FROM sales.orders"
    )
    for publications in (("eu", "notes"), ("eu", "in_schema")):
        with pytest.raises(PublicationError, match=r"sales\.orders is published with different"):
            published(dsn, *publications)
        error = pgoutput_error(dsn, ",".join(publications), statement)
        assert error is not None
        assert "cannot use different column lists" in error
    # The same column list in both: accepted by both.
    assert pgoutput_error(dsn, "eu,big", statement) is None


def test_missing_publications_are_named_at_start_up(dsn: str, tmp_path: Path) -> None:
    config = make_config(
        dsn,
        tmp_path / "lake",
        [],
        source={"publication": ["eu", "gone", "Also Gone"], "create_publication": False},
    )
    with pytest.raises(PublicationError, match="Publications 'gone', 'Also Gone' do not exist"):
        prepare_configured_source(config)


def test_start_up_refuses_publications_pgoutput_would_refuse(dsn: str, tmp_path: Path) -> None:
    config = make_config(
        dsn,
        tmp_path / "lake",
        [],
        source={"publication": ["eu", "notes"], "create_publication": False},
    )
    with pytest.raises(PublicationError, match="different column lists") as caught:
        prepare_configured_source(config)
    assert caught.value.exit_code == 2


def _snapshot_config(dsn: str, tmp_path: Path, *publications: str):  # type: ignore[no-untyped-def]
    return make_config(
        dsn,
        tmp_path / "lake",
        [],
        source={"publication": list(publications), "create_publication": False},
        snapshot={"mode": "initial"},
    )


def test_an_empty_publication_snapshots_nothing_and_streams(dsn: str, tmp_path: Path) -> None:
    config = _snapshot_config(dsn, tmp_path, "nothing")
    with psycopg.connect(dsn, autocommit=True) as conn:
        endpos = current_wal_lsn(conn)
    sink = ModelSink()
    Supervisor(config, sink, endpos=endpos).run()
    marker = sink.load_snapshot_marker(config.source.slot)
    assert marker is not None
    assert marker.status == "complete"
    assert sink.tables == {}


def test_a_snapshot_that_finds_no_table_of_nonempty_publications_fails(
    dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO sales.orders VALUES (1, 'eu', 1, 'n')")
        endpos = current_wal_lsn(conn)
    # Stands for any bug that loses the table list between catalog and copy.
    monkeypatch.setattr(snapshot_module, "read_published_tables", lambda *_, **__: [])
    config = _snapshot_config(dsn, tmp_path, "in_schema")
    sink = ModelSink()
    with pytest.raises(CaptureError, match="found no table to copy although publications"):
        Supervisor(config, sink, endpos=endpos).run()
    marker = sink.load_snapshot_marker(config.source.slot)
    assert marker is not None
    assert marker.status == "in_progress"


def test_generated_columns_count_only_where_postgresql_18_publishes_them(pg18_dsn: str) -> None:
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute(SCHEMA.encode())
        conn.execute(
            "CREATE PUBLICATION with_generated FOR TABLE public.customers "
            "WITH (publish_generated_columns = stored)"
        )
    (customers,) = published(pg18_dsn, "with_generated")
    assert customers.columns == (*CUSTOMERS, "doubled")
    # Published by one publication and not by another: different column lists.
    with pytest.raises(PublicationError, match="different column lists"):
        published(pg18_dsn, "with_generated", "big")
    error = pgoutput_error(pg18_dsn, "with_generated,big", "INSERT INTO customers VALUES (1, 'eu')")
    assert error is not None
    assert "different" in error


def test_the_snapshot_copies_published_generated_columns(pg18_dsn: str, tmp_path: Path) -> None:
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute(SCHEMA.encode())
        conn.execute("INSERT INTO customers SELECT g, 'eu', 'c' || g FROM generate_series(1, 5) g")
        conn.execute(
            "CREATE PUBLICATION with_generated FOR TABLE public.customers "
            "WITH (publish_generated_columns = stored)"
        )
        endpos = current_wal_lsn(conn)
    sink = ModelSink()
    Supervisor(_snapshot_config(pg18_dsn, tmp_path, "with_generated"), sink, endpos=endpos).run()
    rows = sorted(sink.tables["public.customers"].values(), key=lambda row: str(row["id"]))
    assert [(row["id"], row["doubled"]) for row in rows] == [(n, 2 * n) for n in range(1, 6)]
