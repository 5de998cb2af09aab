"""The source catalog as the sink needs it: ``PostgresCatalog`` implements ``SourceCatalog``.

Theory of operation
-------------------
pgoutput's Relation message tells a client the column names, types and key flags of a
table, and nothing else. Four things the Delta sink must get right need more, and only
the catalog has them:

* **Fast defaults.** ``ALTER TABLE ... ADD COLUMN c ... DEFAULT <constant>`` does not
  rewrite the table: PostgreSQL stores the default once, in ``pg_attribute.attmissingval``
  (``atthasmissing``), and shows it in every row stored before. No WAL record carries
  those values, so the sink backfills existing Delta rows with the value read here. It is
  returned in PostgreSQL's text form (``(attmissingval::text::text[])[1]``: the one
  element of the array, exactly as the type's output function writes it, which is what
  pgoutput's text mode sends), and converted by the sink like any sent value.
* **Which attribute a column name means.** The Relation message carries no ``attnum``s.
  The sink records, per Delta column, the ``attnum`` (and table OID) it came from, and
  compares with the live attributes here: the same name with a new ``attnum`` is a
  column dropped and added again, the same ``attnum`` under a new name a rename. A
  dropped column also leaves an ``attisdropped`` attribute behind for ever, a renamed one
  does not: the count of dropped attributes catches renames of columns nothing was
  recorded for.
* **Primary keys** of REPLICA IDENTITY FULL (and NOTHING) tables, whose Relation message
  flags every (or no) column: the sink matches on the primary key rather than on every
  column when the configuration names no key.
* **User-defined types in binary mode.** A column of an enum, domain, composite, range
  or an array of them arrives in its send format; which layout a type OID has (its
  ``typtype``, base, element and delimiter, range subtype, composite fields) is read
  here (``describe_type``), once per type OID for the life of the catalog, and
  ``decoder.usertypes`` prints the values as PostgreSQL's text form with it.

``PostgresCatalog`` opens one regular (non-replication) connection lazily, on the sink
worker thread that calls it, and is asked only when a relation changes, a key is
missing or a user type is first seen - never per row. Answers describe the catalog
*now*, which may be later than the change being applied; the sink's documentation lists
what that can miss.

Errors: a lost connection becomes ``ReplicationConnectionLostError`` (retryable: the
service reconnects and replays from the last durable LSN, and the catalog reconnects on
its next use); any other database error is a terminal ``SinkError``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from types import TracebackType
from typing import Self

import psycopg

from capture.errors import map_psycopg_errors
from decoder import (
    ArrayType,
    CompositeField,
    CompositeType,
    DomainType,
    EnumType,
    MultirangeType,
    OpaqueType,
    RangeType,
    TypeDescription,
)
from sink import CatalogColumn, CatalogTable, SinkError

Conn = psycopg.Connection[tuple[object, ...]]

# One query each for any number of tables: the live and dropped attributes, the primary
# keys. The names arrive as two arrays, so a batch's new tables cost three round trips.
_TABLES = """
SELECT w.schema_name, w.table_name, c.oid
FROM unnest(%s::text[], %s::text[]) AS w(schema_name, table_name)
JOIN pg_catalog.pg_namespace n ON n.nspname = w.schema_name
JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = w.table_name
"""

# attmissingval is an anyarray holding the one missing value; its text form is an array
# literal whose single element, read back as text[], is the value's own text form.
_COLUMNS = """
SELECT a.attrelid, a.attname, a.attnum, a.attisdropped,
       CASE WHEN a.atthasmissing THEN (a.attmissingval::text::text[])[1] END
FROM pg_catalog.pg_attribute a
WHERE a.attrelid = ANY(%s::oid[]) AND a.attnum > 0
ORDER BY a.attrelid, a.attnum
"""

_PRIMARY_KEYS = """
SELECT i.indrelid, a.attname
FROM pg_catalog.pg_index i
CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, position)
JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
WHERE i.indrelid = ANY(%s::oid[]) AND i.indisprimary
ORDER BY i.indrelid, k.position
"""


# What decides a type's binary layout: its kind, and what it is built from. An array is a
# base type whose send function is array_send (int2vector and oidvector have a typelem too,
# but their own send and output functions; a domain over an array shares array_send but is
# read as its base type); its elements are separated by the element type's typdelim.
# Ranges name their subtype in pg_range, multiranges their range type.
_TYPE = """
SELECT n.nspname, t.typname, t.typtype, t.typbasetype, t.typrelid,
       CASE WHEN t.typtype = 'b' AND t.typsend = 'pg_catalog.array_send'::pg_catalog.regproc
            THEN t.typelem END,
       e.typdelim, r.rngsubtype
FROM pg_catalog.pg_type t
JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace
LEFT JOIN pg_catalog.pg_type e ON e.oid = t.typelem
LEFT JOIN pg_catalog.pg_range r ON r.rngtypid = t.oid
WHERE t.oid = %s
"""

_MULTIRANGE = "SELECT rngtypid FROM pg_catalog.pg_range WHERE rngmultitypid = %s"

_FIELDS = """
SELECT a.attname, a.atttypid
FROM pg_catalog.pg_attribute a
WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""


def describe_type(conn: Conn, type_oid: int) -> TypeDescription | None:
    """Read what decides the binary layout of type ``type_oid`` from the catalog.

    Args:
        conn: a regular connection to the source database.
        type_oid: ``pg_type.oid``.

    Returns:
        Its description (``decoder.usertypes``); None when no such type exists.
    """
    row = conn.execute(_TYPE, (type_oid,)).fetchone()
    if row is None:
        return None
    schema, name, kind, base, relid, element, delimiter, subtype = row
    schema, name, kind = str(schema), str(name), str(kind)
    if element is not None:
        return ArrayType(type_oid, schema, name, _oid(element), str(delimiter or ","))
    match kind:
        case "e":
            return EnumType(type_oid, schema, name)
        case "d":
            return DomainType(type_oid, schema, name, _oid(base))
        case "c":
            fields = tuple(
                CompositeField(str(field), _oid(field_type))
                for field, field_type in conn.execute(_FIELDS, (relid,)).fetchall()
            )
            return CompositeType(type_oid, schema, name, fields)
        case "r" if subtype is not None:
            return RangeType(type_oid, schema, name, _oid(subtype))
        case "m":
            ranges = conn.execute(_MULTIRANGE, (type_oid,)).fetchone()
            if ranges is not None:
                return MultirangeType(type_oid, schema, name, _oid(ranges[0]))
    return OpaqueType(type_oid, schema, name, kind)


def _oid(value: object) -> int:
    return int(str(value))


def describe_table(conn: Conn, schema: str, table: str) -> CatalogTable | None:
    """Read what the sink needs about ``schema.table`` from the catalog
    (``describe_tables`` of the one table)."""
    return describe_tables(conn, [(schema, table)])[(schema, table)]


def describe_tables(
    conn: Conn, names: Sequence[tuple[str, str]]
) -> dict[tuple[str, str], CatalogTable | None]:
    """Read what the sink needs about each ``(schema, table)`` of ``names``, in three
    queries whatever their number.

    Args:
        conn: a regular connection to the source database.
        names: exact schema and table names.

    Returns:
        Per name: the table's OID, live columns with their ``attnum`` and fast default,
        the ``attnum``s of dropped attributes and the primary key; None when the table
        does not exist.
    """
    found = conn.execute(
        _TABLES, ([schema for schema, _ in names], [table for _, table in names])
    ).fetchall()
    oids = {(str(schema), str(table)): _oid(oid) for schema, table, oid in found}
    columns: dict[int, dict[str, CatalogColumn]] = {oid: {} for oid in oids.values()}
    dropped: dict[int, set[int]] = {oid: set() for oid in oids.values()}
    keys: dict[int, list[str]] = {oid: [] for oid in oids.values()}
    if oids:
        listed = list(oids.values())
        for relid, name, attnum, is_dropped, missing in conn.execute(
            _COLUMNS, (listed,)
        ).fetchall():
            if is_dropped:
                dropped[_oid(relid)].add(_oid(attnum))
                continue
            columns[_oid(relid)][str(name)] = CatalogColumn(
                name=str(name),
                attnum=_oid(attnum),
                missing_value=None if missing is None else str(missing),
            )
        for relid, name in conn.execute(_PRIMARY_KEYS, (listed,)).fetchall():
            keys[_oid(relid)].append(str(name))
    described: dict[tuple[str, str], CatalogTable | None] = {}
    for name in names:
        oid = oids.get(name)
        described[name] = (
            None
            if oid is None
            else CatalogTable(
                columns=columns[oid],
                dropped_columns=len(dropped[oid]),
                primary_key=tuple(keys[oid]),
                oid=oid,
                dropped_attnums=frozenset(dropped[oid]),
            )
        )
    return described


class PostgresCatalog:
    """``sink.SourceCatalog`` over a lazily opened regular connection to the source.

    Args:
        conninfo: the source DSN, or a function returning it (``SourceConfig.conninfo``,
            which re-reads a password file on every connect).
    """

    def __init__(self, conninfo: str | Callable[[], str]) -> None:
        self._conninfo = conninfo
        self._conn: Conn | None = None
        self._types: dict[int, TypeDescription | None] = {}

    def _connection(self) -> Conn:
        if self._conn is None or self._conn.closed:
            conninfo = self._conninfo() if callable(self._conninfo) else self._conninfo
            self._conn = psycopg.connect(
                conninfo, autocommit=True, application_name="wal2delta catalog"
            )
        return self._conn

    @contextmanager
    def _reading(self, what: str) -> Iterator[Conn]:
        """The connection, for doing ``what``: psycopg errors become capture errors
        (``map_psycopg_errors``) or a ``SinkError``."""
        try:
            with map_psycopg_errors(what):
                yield self._connection()
        except BaseException as exc:
            # Whatever went wrong, start the next call from a fresh connection.
            self.close()
            if isinstance(exc, psycopg.Error):
                problem = exc.diag.message_primary or type(exc).__name__
                raise SinkError(f"{what} failed: {problem}") from exc
            raise

    def table(self, schema: str, table: str) -> CatalogTable | None:
        """Describe ``schema.table`` as the catalog shows it now; None when it is gone.

        Raises:
            ReplicationConnectionLostError: the connection to PostgreSQL was lost
                (retryable); the next call reconnects.
            SinkError: the catalog query failed otherwise.
        """
        with self._reading(f"reading the catalog entry of {schema}.{table}") as conn:
            return describe_table(conn, schema, table)

    def tables(
        self, names: Sequence[tuple[str, str]]
    ) -> Mapping[tuple[str, str], CatalogTable | None]:
        """Describe each ``(schema, table)`` of ``names`` as the catalog shows it now, in
        three queries (``describe_tables``); None for a table that is gone.

        Raises:
            ReplicationConnectionLostError: the connection to PostgreSQL was lost
                (retryable); the next call reconnects.
            SinkError: the catalog query failed otherwise.
        """
        if not names:
            return {}
        with self._reading(f"reading the catalog entries of {len(names)} tables") as conn:
            return describe_tables(conn, names)

    def describe_type(self, type_oid: int) -> TypeDescription | None:
        """Describe type ``type_oid`` (kind, base, element, fields); None when it is gone.

        Asked once per type OID for the life of the catalog: a type OID always names the
        same type while it exists (a dropped and re-created type gets a new OID), and the
        parts that may change - a composite's fields, an enum's labels - are read from
        each value's own bytes, not from this description.

        Raises:
            ReplicationConnectionLostError: the connection to PostgreSQL was lost
                (retryable); the next call reconnects.
            SinkError: the catalog query failed otherwise.
        """
        if type_oid in self._types:
            return self._types[type_oid]
        with self._reading(f"reading the catalog entry of type OID {type_oid}") as conn:
            description = describe_type(conn, type_oid)
        self._types[type_oid] = description
        return description

    def close(self) -> None:
        """Close the connection, if one is open."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
