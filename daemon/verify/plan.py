"""What ``wal2delta verify`` compares: the tables, their columns and the key of each.

Theory of operation
-------------------
The tables are the ones the configured publications publish (``read_published_tables``),
with their row filters and column lists, optionally narrowed to the ``--tables`` named.
For each, the catalog (``pg_attribute``) gives the columns in order with their type and
typmod; a column the publication's column list leaves out is not compared, and a generated
column counts only when the Delta table holds it (PostgreSQL publishes generated columns
from version 18, on request). Each column is compared as the Delta type the sink stores it
as (``sink.delta_type``, with ``sink.column_types`` overrides) under its Delta name
(``sink.column_map``, for ``sink.column_names: map``); a column the Delta table lacks is
compared as NULL.

The key is the one the sink merges on: the replica identity's (primary key, or the
identity index), else the configured key, else the primary key; a table without one is
compared as a multiset of rows. The plan also names the Delta columns that change what a
row means: the soft-delete flag (a flagged row is absent) and the row's commit LSN (a row
written after the compared LSN is newer than the snapshot).

Rows are summarised in about one bucket per ``ROWS_PER_BUCKET`` rows of the table's
estimated size (``reltuples``, or a count when the table was never analysed), at most
``MAX_BUCKETS``.

Every function here reads the catalog inside the caller's transaction; none writes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import psycopg
from psycopg import sql

from capture import PublishedTable
from config import AppConfig
from daemon.wiring import configured_keys, relation_name, sink_settings
from sink import ColumnTypeOverride, DeltaType, column_map, delta_type, table_path

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Conn = psycopg.Connection[tuple[object, ...]]

ROWS_PER_BUCKET: Final = 512
MAX_BUCKETS: Final = 16384


@dataclass(frozen=True, slots=True)
class VerifyColumn:
    """One compared column.

    Attributes:
        name: the source column name.
        delta_name: its name in Delta (``sink.column_names: map``); None when the Delta
            table has no such column (its values then compare as NULL).
        mapped: its Delta type (``sink.delta_type``).
    """

    name: str
    delta_name: str | None
    mapped: DeltaType

    @classmethod
    def of(
        cls,
        name: str,
        delta_name: str | None,
        type_oid: int,
        typmod: int,
        override: ColumnTypeOverride | None = None,
    ) -> VerifyColumn:
        return cls(name, delta_name, delta_type(type_oid, typmod, override))


@dataclass(frozen=True, slots=True)
class VerifyTable:
    """What is compared of one published table.

    Attributes:
        schema: source schema.
        name: source table name.
        columns: the compared columns, in order.
        key: names of the key columns; empty for a table compared as a multiset.
        row_filter: the publication's row filter (a SQL expression), if any.
        delta_path: the Delta table's location.
        deleted_column: the soft-delete flag column, when the sink keeps deleted rows.
        lsn_column: the Delta column holding each row's last commit LSN, if present.
    """

    schema: str
    name: str
    columns: tuple[VerifyColumn, ...]
    key: tuple[str, ...]
    row_filter: str | None
    delta_path: str
    deleted_column: str | None = None
    lsn_column: str | None = None

    @property
    def qualified_name(self) -> str:
        return f"{self.schema}.{self.name}"

    @property
    def key_columns(self) -> tuple[VerifyColumn, ...]:
        """The columns that place a row in a bucket: the key, or every column."""
        if not self.key:
            return self.columns
        by_name = {c.name: c for c in self.columns}
        return tuple(by_name[k] for k in self.key)


def selected_tables(
    published: list[PublishedTable], names: Sequence[str] | None
) -> tuple[list[PublishedTable], list[str]]:
    """The published tables among ``names`` (all when none are named), and the names that
    are not published (``table`` means ``public.table``)."""
    if not names:
        return published, []
    wanted = {relation_name(n if "." in n else f"public.{n}") for n in names}
    chosen = [p for p in published if p.qualified_name in wanted]
    unknown = sorted(wanted - {p.qualified_name for p in chosen})
    return chosen, unknown


def _columns(conn: Conn, schema: str, name: str) -> list[tuple[str, int, int, bool]]:
    rows = conn.execute(
        "SELECT attname, atttypid::int, atttypmod, attgenerated <> '' FROM pg_attribute "
        "WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
        (sql.Identifier(schema, name).as_string(conn),),
    ).fetchall()
    return [(str(n), int(str(t)), int(str(m)), bool(g)) for n, t, m, g in rows]


def _catalog_key(conn: Conn, schema: str, name: str) -> tuple[str, list[str], list[str]]:
    """(relreplident, primary key columns, replica identity index columns)."""
    row = conn.execute(
        """
        SELECT c.relreplident::text,
          ARRAY(SELECT a.attname::text FROM pg_index i,
                  unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, n), pg_attribute a
                WHERE i.indrelid = c.oid AND i.indisprimary AND a.attrelid = c.oid
                  AND a.attnum = k.attnum ORDER BY k.n),
          ARRAY(SELECT a.attname::text FROM pg_index i,
                  unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, n), pg_attribute a
                WHERE i.indrelid = c.oid AND i.indisreplident AND a.attrelid = c.oid
                  AND a.attnum = k.attnum ORDER BY k.n)
        FROM pg_class c WHERE c.oid = %s::regclass
        """,
        (sql.Identifier(schema, name).as_string(conn),),
    ).fetchone()
    assert row is not None
    primary, identity = row[1], row[2]
    assert isinstance(primary, list)
    assert isinstance(identity, list)
    return str(row[0]), [str(c) for c in primary], [str(c) for c in identity]


def _key(conn: Conn, published: PublishedTable, configured: Sequence[str] | None) -> list[str]:
    """The key the sink merges on: the replica identity's, else configured, else primary."""
    identity, primary, index = _catalog_key(conn, published.schema, published.name)
    if identity == "d" and primary:
        return primary
    if identity == "i" and index:
        return index
    if configured:
        return list(configured)
    return primary


def plan_table(
    conn: Conn, spark: SparkSession, config: AppConfig, published: PublishedTable
) -> VerifyTable:
    """What is compared of ``published``; reads the source catalog and the Delta table's
    columns (raises the engine's error when the Delta table cannot be read)."""
    schema, name = published.schema, published.name
    path = table_path(str(config.sink.path), schema, name)
    described = _columns(conn, schema, name)
    if published.columns is not None:
        described = [c for c in described if c[0] in published.columns]
    delta_columns = set(spark.read.format("delta").load(path).columns)
    renamed = column_map([c[0] for c in described], config.sink.column_names)
    overrides = sink_settings(config).column_types.get(f"{schema}.{name}", {})
    columns = []
    for column, type_oid, typmod, generated in described:
        delta_name = renamed.get(column, column)
        present = delta_name in delta_columns
        if generated and not present:
            continue  # not published (before PostgreSQL 18, or not asked for)
        override = overrides.get(column)
        columns.append(
            VerifyColumn.of(column, delta_name if present else None, type_oid, typmod, override)
        )
    key = _key(conn, published, configured_keys(config).get(f"{schema}.{name}"))
    metadata = config.sink.metadata
    return VerifyTable(
        schema=schema,
        name=name,
        columns=tuple(columns),
        key=tuple(k for k in key if k in {c.name for c in columns}),
        row_filter=published.where,
        delta_path=path,
        deleted_column=(
            metadata.deleted_column
            if config.sink.soft_delete and metadata.deleted_column in delta_columns
            else None
        ),
        lsn_column=metadata.lsn_column if metadata.lsn_column in delta_columns else None,
    )


def bucket_count(conn: Conn, table: VerifyTable) -> int:
    """How many buckets ``table`` is summarised in: one per ``ROWS_PER_BUCKET`` rows of
    its estimated size, at least one, at most ``MAX_BUCKETS``."""
    row = conn.execute(
        "SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass",
        (sql.Identifier(table.schema, table.name).as_string(conn),),
    ).fetchone()
    estimate = int(str(row[0])) if row is not None else -1
    if estimate < 0:
        counted = conn.execute(
            sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table.schema, table.name))
        ).fetchone()
        estimate = int(str(counted[0])) if counted is not None else 0
    return max(1, min(MAX_BUCKETS, math.ceil(estimate / ROWS_PER_BUCKET)))
