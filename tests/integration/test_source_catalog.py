"""The source catalog read for many tables at once (``capture/catalog.py``,
``PostgresCatalog.tables``): what the sink reads ahead for a batch's new tables must be
what PostgreSQL's catalog says of each - live and dropped attributes, fast defaults, the
primary key in key order - and None for a table that is gone."""

from __future__ import annotations

import psycopg
import pytest

from capture.catalog import PostgresCatalog
from sink import CatalogColumn

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def test_tables_describes_each_table_as_its_catalog_shows_it(pg18_dsn: str) -> None:
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute(
            """
            CREATE SCHEMA "Sales EU";
            CREATE TABLE "Sales EU"."order lines" (
                a int, b text, gone int, c int, PRIMARY KEY (c, a)
            );
            ALTER TABLE "Sales EU"."order lines" DROP COLUMN gone;
            INSERT INTO "Sales EU"."order lines" VALUES (1, 'x', 2);
            ALTER TABLE "Sales EU"."order lines" ADD COLUMN d numeric DEFAULT 1.50;
            CREATE TABLE public.plain (id bigint, note text);
            """
        )
        oids = {
            name: int(conn.execute("SELECT %s::regclass::oid", (name,)).fetchone()[0])
            for name in ('"Sales EU"."order lines"', "public.plain")
        }
    names = [("Sales EU", "order lines"), ("public", "plain"), ("public", "no such table")]
    with PostgresCatalog(pg18_dsn) as catalog:
        described = catalog.tables(names)
        assert catalog.tables([]) == {}
    assert list(described) == names
    lines, plain, missing = (described[n] for n in names)
    assert missing is None
    assert lines is not None
    assert plain is not None
    assert lines.oid == oids['"Sales EU"."order lines"']
    assert lines.primary_key == ("c", "a")  # key order, not column order
    assert lines.columns == {
        "a": CatalogColumn("a", 1),
        "b": CatalogColumn("b", 2),
        "c": CatalogColumn("c", 4),
        "d": CatalogColumn("d", 5, missing_value="1.50"),
    }
    assert lines.dropped_attnums == frozenset({3})
    assert lines.dropped_columns == 1
    assert plain.oid == oids["public.plain"]
    assert plain.primary_key == ()
    assert plain.columns == {"id": CatalogColumn("id", 1), "note": CatalogColumn("note", 2)}
    assert plain.dropped_columns == 0
