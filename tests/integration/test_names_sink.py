"""Every name PostgreSQL allows, through ``DeltaSink`` on Sail, read back with delta-rs.

Table names with spaces, non-ASCII letters, backticks, glob characters, ``/`` and dots
land at their ``table_path`` (and nowhere else); column names Delta cannot hold are
mapped under ``column_names: map`` and refused under ``error``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from sink import (
    CatalogColumn,
    CatalogTable,
    DeltaSink,
    SinkDataError,
    table_of_path,
    table_path,
)
from sink.constants import COMMITS_TABLE
from tests.support.oracle import assert_delta_matches, delta_rows
from tests.support.settings import sink_settings
from tests.support.sink_changes import (
    INT4,
    INT8,
    batch,
    col,
    delete,
    insert,
    rel,
    truncate,
    update,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

ODD_TABLES = [
    ("Sales EU", "orders"),
    ("public", "sp ace"),
    ("public", "заказы"),
    ("public", "back`tick"),
    ("public", "q?m*[x]{y}"),  # Sail reads ?*[ as glob characters in a path
    ("public", "100% ~#\"'\\"),
    ("public", "a/b"),
    ("public", ".."),
    ("public", "_delta_log"),
    ("_wal2delta_messages", "t"),
    ("😀", "Ünïcödé"),
]


def odd_relation(schema: str, table: str, relation_id: int) -> Any:
    return rel(
        f"{schema}.{table}",
        col("id", INT4, key=True),
        col("body"),
        relation_id=relation_id,
    )


def lake_tables(lake: Path) -> set[tuple[str, str]]:
    """Every Delta table under ``lake`` but the lake's own, named through ``table_of_path``."""
    found = set()
    for directory, subdirectories, _ in os.walk(lake):
        if Path(directory).parent == lake and Path(directory).name == COMMITS_TABLE:
            continue
        if "_delta_log" in subdirectories and Path(directory) != lake:
            named = table_of_path(str(lake), directory)
            assert named is not None, f"{directory} is no table's location"
            found.add(named)
    return found


def test_tables_of_any_name_land_at_their_location_and_nowhere_else(
    spark_session: Any, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    sink = DeltaSink(
        spark_session, sink_settings(lake, messages="table", source={"messages": True})
    )
    relations = [odd_relation(s, t, 16384 + i) for i, (s, t) in enumerate(ODD_TABLES)]
    sink.apply(
        batch(
            *(insert(r, "1", f"one {i}", lsn=10, ordinal=i) for i, r in enumerate(relations)),
            *(insert(r, "2", "two", lsn=20, ordinal=i) for i, r in enumerate(relations)),
        )
    )
    sink.apply(
        batch(
            *(update(r, "1", "changed", lsn=30, ordinal=i) for i, r in enumerate(relations)),
            *(delete(r, "2", None, lsn=40, ordinal=i) for i, r in enumerate(relations)),
        )
    )
    for schema, table in ODD_TABLES:
        assert_delta_matches(
            table_path(str(lake), schema, table), [{"id": 1, "body": "changed"}], key=["id"]
        )
    assert lake_tables(lake) == set(ODD_TABLES)
    # Nothing was written above a table (glob characters) or beside the schema folders
    # but the commit log.
    assert {p.name for p in lake.iterdir()} == {
        Path(table_path(str(lake), schema, "x")).parent.name for schema, _ in ODD_TABLES
    } | {COMMITS_TABLE}

    sink.close()  # a restarted sink finds the same tables
    sink.apply(batch(truncate(*relations, lsn=50), insert(relations[0], "3", "new", lsn=50)))
    assert_delta_matches(table_path(str(lake), *ODD_TABLES[0]), [{"id": 3, "body": "new"}])
    for schema, table in ODD_TABLES[1:]:
        assert delta_rows(table_path(str(lake), schema, table)) == []


ORDERS = rel(
    "Sales EU.orders",
    col("order id", INT8, key=True),
    col("unit price"),
    col("f(x)=y"),
    col("имя"),
    col("unit_x0020_price"),
)
MAPPED = ["order_x0020_id", "unit_x0020_price", "f_x0028_x_x0029__x003D_y", "имя"]
LOOKALIKE = "unit_x005F_x0020_price"


def mapped_row(
    key: int, price: str | None, f: str | None, name: str | None, look: str | None
) -> dict[str, object]:
    return dict(zip([*MAPPED, LOOKALIKE], [key, price, f, name, look], strict=True))


class Catalog:
    """A source catalog describing ``ORDERS`` after ``ADD COLUMN "new col" DEFAULT 'd'``."""

    def table(self, schema: str, table: str) -> CatalogTable | None:
        names = ["order id", "unit price", "f(x)=y", "имя", "unit_x0020_price", "new col"]
        columns = {n: CatalogColumn(n, i) for i, n in enumerate(names, start=1)}
        columns["new col"] = CatalogColumn("new col", 6, missing_value="d")
        return CatalogTable(columns=columns, primary_key=("order id",))

    def tables(
        self, names: Sequence[tuple[str, str]]
    ) -> Mapping[tuple[str, str], CatalogTable | None]:
        return {name: self.table(*name) for name in names}


def test_mapped_columns_take_every_path_of_the_sink(spark_session: Any, tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    settings = sink_settings(
        lake,
        column_names="map",
        partition_by_key={"Sales EU.orders": {"width": 10, "column": "order id"}},
    )
    sink = DeltaSink(spark_session, settings, Catalog())
    path = table_path(str(lake), "Sales EU", "orders")
    sink.apply(
        batch(
            insert(ORDERS, "1", "2.50", "a", "б", "look", lsn=10),
            insert(ORDERS, "12", "3.00", "b", None, None, lsn=10, ordinal=1),
            insert(ORDERS, "25", "4.00", "c", "в", None, lsn=10, ordinal=2),
        )
    )
    sink.apply(
        batch(
            update(ORDERS, "12", "3.10", "b2", "г", "x", lsn=20),
            delete(ORDERS, "25", None, None, None, None, lsn=30),
        )
    )
    assert_delta_matches(
        path,
        [mapped_row(1, "2.50", "a", "б", "look"), mapped_row(12, "3.10", "b2", "г", "x")],
        key=["order_x0020_id"],
    )
    # A column added with a fast default: the catalog names it by its source name.
    grown = rel(*_grown_columns())
    sink.apply(batch(insert(grown, "31", "5.00", "d", None, None, "given", lsn=40)))
    assert_delta_matches(
        path,
        [
            {**mapped_row(1, "2.50", "a", "б", "look"), "new_x0020_col": "d"},
            {**mapped_row(12, "3.10", "b2", "г", "x"), "new_x0020_col": "d"},
            {**mapped_row(31, "5.00", "d", None, None), "new_x0020_col": "given"},
        ],
        key=["order_x0020_id"],
    )
    assert {r["_wal2delta_key_bucket"] for r in delta_rows(path, include_metadata=True)} == {
        0,
        1,
        3,
    }


def _grown_columns() -> tuple[Any, ...]:
    return (
        "Sales EU.orders",
        col("order id", INT8, key=True),
        col("unit price"),
        col("f(x)=y"),
        col("имя"),
        col("unit_x0020_price"),
        col("new col"),
    )


def test_a_keyless_table_with_mapped_columns_keeps_identical_rows(
    spark_session: Any, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    sink = DeltaSink(spark_session, sink_settings(lake, column_names="map"))
    log = rel("public.event log", col("what (kind)"), col("n = count", INT4), identity="f")
    sink.apply(
        batch(
            insert(log, "a", "1", lsn=10),
            insert(log, "a", "1", lsn=10, ordinal=1),
            insert(log, "b", "2", lsn=10, ordinal=2),
        )
    )
    sink.apply(batch(delete(log, "a", "1", lsn=20, old_kind="O")))
    assert_delta_matches(
        table_path(str(lake), "public", "event log"),
        [
            {"what_x0020__x0028_kind_x0029_": k, "n_x0020__x003D__x0020_count": n}
            for k, n in [("a", 1), ("b", 2)]
        ],
    )


def test_column_names_error_stops_before_anything_is_written(
    spark_session: Any, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    sink = DeltaSink(spark_session, sink_settings(lake))
    with pytest.raises(SinkDataError, match=r"sink\.column_names: map") as raised:
        sink.apply(batch(insert(ORDERS, "1", "2.50", "a", "б", None, lsn=10)))
    assert "'order id' of Sales EU.orders" in str(raised.value)
    assert not lake.exists()
