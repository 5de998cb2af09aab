"""The tests' oracle: a Delta table compared with its source, or with expected rows, exactly.

Theory of operation
-------------------
The oracle is independent of the product: it shares with it nothing but the documented
canonical form of values (docs/operations.md, "How it compares") and the type mapping's
published names. The Delta side is read with delta-rs (``deltalake.DeltaTable``, through
its ``QueryBuilder`` when the table has deletion vectors, which ``to_pyarrow_table`` does
not apply), never through Spark, so a bug in the Spark path cannot hide itself; the
product's verifier (``daemon.verify``) and its value conversion are not used.

The source is read with psycopg in the fixed text-form settings every source connection
of the daemon uses (TimeZone UTC, DateStyle ISO, IntervalStyle postgres, lc_monetary C).
A column the Delta table holds as a string (the types the sink keeps as PostgreSQL text:
json, interval, uuid, time, inet, ranges, domains, an unconstrained numeric, ...) is read
as the text its type's output function prints - what pgoutput sends in text mode - and an
array of such elements element by element (``format('%s', x)``: unlike ``::text`` it keeps
char(n) padding, prints booleans as ``t``/``f`` and omits a full inet netmask). Every
other column is read as psycopg loads it. ``compare_table`` learns which columns are
strings from the Delta table's schema; ``postgres_rows``, which has no Delta table, from
the type mapping (``sink.delta_type``); ``read_source`` alone reads as text every type
``canonical`` has no form for.

Canonical form (``canonical``): the documented canonical text of a value, after its
kind - two values match when their texts are equal, and a value of another kind never
does. ``int:`` digits; ``numeric:`` the decimal's digits with its scale (``1.50`` differs
from ``1.5``); ``float:`` the exact binary value (``float.hex``: ``-0.0`` differs from
``0.0``, NaN equals NaN); ``bool:t``/``bool:f``; ``text:`` the text itself (a uuid its
text); ``bytea:`` lower-case hex; ``date:`` ``YYYY-MM-DD``; ``timestamp:`` the wall-clock
``YYYY-MM-DD HH:MM:SS.ffffff``; ``instant:`` microseconds since the epoch (so no time zone
enters; a naive timestamp is never an instant); ``array:`` the elements' texts in order,
each length-prefixed (``6:text:a``), NULL as ``N``. NULL itself is None. Any other Python
value has no canonical text here: read such a column as its PostgreSQL text.

A table with a key (the one given, else the replica identity index's columns, else the
primary key's) is compared key by key, and a key held by two Delta rows is a mismatch; a
table without one as a multiset of rows. Metadata columns (``_wal2delta_*``) are ignored,
and soft-deleted rows do not count as present. Under ``sink.column_names: map`` each
source column is compared with the Delta column its name maps to (``sink.column_map``).
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder
from psycopg import sql

from sink import ColumnNamePolicy, ValueForm, column_map, delta_type

METADATA_PREFIX = "_wal2delta_"
DELETED_COLUMN = "_wal2delta_deleted"
TEXT_FORM_SETTINGS = (
    ("TimeZone", "UTC"),
    ("DateStyle", "ISO"),
    ("IntervalStyle", "postgres"),
    ("lc_monetary", "C"),
)
LOADED_TYPES = frozenset(
    {"bool", "int2", "int4", "int8", "oid", "float4", "float8", "numeric", "text", "varchar"}
    | {"bpchar", "name", "char", "bytea", "date", "timestamp", "timestamptz", "uuid"}
)
"""Source types ``read_source`` loads by default: those whose loaded value ``canonical``
has a form for (and arrays of them); any other type is read as its text."""

Conn = psycopg.Connection[Any]
Row = Mapping[str, object]


# --- the canonical form --------------------------------------------------------------------


def canonical(value: object) -> str | None:
    """The oracle's canonical text of a value (None for NULL); see the module docstring.

    Raises:
        TypeError: a value with no canonical text (read its column as text).
    """
    if value is None:
        return None
    if isinstance(value, list | tuple):
        texts = [canonical(v) for v in value]
        return "array:[" + ",".join("N" if t is None else f"{len(t)}:{t}" for t in texts) + "]"
    return _scalar_text(value)


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MICROSECOND = dt.timedelta(microseconds=1)


def _scalar_text(value: object) -> str:
    if isinstance(value, bool):
        return "bool:t" if value else "bool:f"
    if isinstance(value, int):
        return f"int:{value}"
    if isinstance(value, float):
        return f"float:{value.hex()}"  # nan, inf, -inf or the exact mantissa and exponent
    if isinstance(value, Decimal):
        return f"numeric:{value:f}"
    if isinstance(value, str | UUID):
        return f"text:{value}"
    if isinstance(value, bytes | bytearray | memoryview):
        return f"bytea:{bytes(value).hex()}"
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return f"instant:{(value - _EPOCH) // _MICROSECOND}"
    if isinstance(value, dt.datetime):
        return f"timestamp:{value.isoformat(' ', 'microseconds')}"
    if isinstance(value, dt.date):
        return f"date:{value.isoformat()}"
    raise TypeError(
        f"{type(value).__name__} has no canonical text in the oracle; read the column as "
        "its PostgreSQL text"
    )


def _cell(value: object) -> str:
    """A value's canonical text in a key or a row the oracle reports (NULL as ``NULL``)."""
    return canonical(value) or "NULL"


# --- reading Delta -------------------------------------------------------------------------


def read_delta_table(path: Path | str) -> pa.Table:
    """The whole Delta table at ``path``, read with delta-rs (deletion vectors applied)."""
    table = DeltaTable(str(path))
    if "deletionVectors" in (table.protocol().reader_features or []):
        schema = pa.schema(table.schema().to_arrow())
        reader = QueryBuilder().register("t", table).execute("SELECT * FROM t")
        # DataFusion reads strings as string views; the table's own types are strings.
        return pa.table(reader.read_all()).select(schema.names).cast(schema)
    return table.to_pyarrow_table()


def delta_rows(
    path: Path | str,
    *,
    include_metadata: bool = False,
    deleted_column: str = DELETED_COLUMN,
    live_only: bool = True,
) -> list[dict[str, object]]:
    """Rows of a Delta table as dictionaries.

    Args:
        path: the table's location.
        include_metadata: keep the ``_wal2delta_*`` columns.
        deleted_column: the soft-delete flag column, if the table has one.
        live_only: drop rows whose soft-delete flag is set.
    """
    return _rows_of(
        read_delta_table(path),
        include_metadata=include_metadata,
        deleted_column=deleted_column,
        live_only=live_only,
    )


def read_delta(path: Path | str, *, deleted_column: str | None = None) -> list[dict[str, object]]:
    """The rows of a Delta table read with delta-rs, metadata included; without the rows
    flagged in ``deleted_column`` when it is given."""
    return delta_rows(
        path,
        include_metadata=True,
        deleted_column=deleted_column or DELETED_COLUMN,
        live_only=deleted_column is not None,
    )


def _rows_of(
    table: pa.Table, *, include_metadata: bool, deleted_column: str, live_only: bool
) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = table.to_pylist()
    if live_only:
        rows = [r for r in rows if not r.get(deleted_column)]
    if not include_metadata:
        rows = [{k: v for k, v in r.items() if not k.startswith(METADATA_PREFIX)} for r in rows]
    return rows


# --- reading the source --------------------------------------------------------------------


def _as_text(column: str, *, array: bool) -> sql.Composable:
    """A column as its output function's text; an array element by element (its lower
    bound dropped). ``num_nulls`` tells NULL from a composite whose fields are all NULL,
    which ``IS NULL`` does not."""
    if not array:
        return sql.SQL("CASE WHEN num_nulls({c}) = 1 THEN NULL ELSE format('%s', {c}) END").format(
            c=sql.Identifier(column)
        )
    return sql.SQL(
        "CASE WHEN num_nulls({c}) = 1 THEN NULL ELSE ARRAY(SELECT CASE WHEN num_nulls({c}[o_i]) "
        "= 1 THEN NULL ELSE format('%s', {c}[o_i]) END FROM generate_subscripts({c}, 1) AS o_i "
        "ORDER BY o_i) END"
    ).format(c=sql.Identifier(column))


def _select(
    conn: Conn,
    schema: str,
    table: str,
    columns: Sequence[tuple[str, str | None]],
    order_by: Sequence[str] = (),
) -> list[tuple[object, ...]]:
    """Rows of ``schema.table``: each column loaded (``None``), or as its ``text`` or its
    elements' text (``elements``), read in the daemon's text-form settings."""
    select = [
        sql.Identifier(name) if how is None else _as_text(name, array=how == "elements")
        for name, how in columns
    ]
    query = sql.SQL("SELECT {} FROM {}").format(
        sql.SQL(", ").join(select) if select else sql.SQL(""), sql.Identifier(schema, table)
    )
    if order_by:
        query += sql.SQL(" ORDER BY {}").format(sql.SQL(", ").join(map(sql.Identifier, order_by)))
    settings = sql.SQL(", ").join(
        sql.SQL("set_config({}, {}, true)").format(sql.Literal(n), sql.Literal(v))
        for n, v in TEXT_FORM_SETTINGS
    )
    with conn.transaction():
        conn.execute(sql.SQL("SELECT {}").format(settings))
        return list(conn.execute(query).fetchall())


def _source_columns(conn: Conn, schema: str, table: str) -> list[tuple[str, str, bool]]:
    """(name, type name, is an array) of each column; a domain is named ``(domain)``."""
    rows = conn.execute(
        """
        SELECT a.attname, CASE WHEN t.typtype = 'd' THEN '(domain)' ELSE t.typname END,
               t.typcategory = 'A'
        FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
        WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped
        ORDER BY a.attnum
        """,
        (sql.Identifier(schema, table).as_string(conn),),
    ).fetchall()
    return [(str(name), str(typ), bool(array)) for name, typ, array in rows]


def _identity_key(conn: Conn, schema: str, table: str) -> list[str]:
    """The replica identity index's columns, else the primary key's, else none."""
    row = conn.execute(
        """
        SELECT ARRAY(SELECT a.attname::text FROM unnest(i.indkey::int2[]) WITH ORDINALITY
                     AS k(attnum, n) JOIN pg_attribute a ON a.attnum = k.attnum
                     WHERE a.attrelid = i.indrelid ORDER BY k.n)
        FROM pg_index i WHERE i.indrelid = %s::regclass AND (i.indisreplident OR i.indisprimary)
        ORDER BY i.indisreplident DESC LIMIT 1
        """,
        (sql.Identifier(schema, table).as_string(conn),),
    ).fetchone()
    return [] if row is None else [str(c) for c in row[0]]


def read_source(
    conn: Conn, schema: str, table: str, columns: Sequence[str] | None = None
) -> tuple[list[str], list[tuple[object, ...]]]:
    """(column names, rows) of a source table; a column of a type ``canonical`` has no form
    for (``LOADED_TYPES`` aside, a domain, an array of such) is read as its text."""
    described = _source_columns(conn, schema, table)
    if columns is not None:
        described = [c for c in described if c[0] in columns]
    how = []
    for name, typ, array in described:
        loaded = (typ[1:] if array else typ) in LOADED_TYPES
        how.append((name, None if loaded else "elements" if array else "text"))
    return [name for name, _, _ in described], _select(conn, schema, table, how)


def postgres_rows(
    conn: Conn, qualified_name: str, *, order_by: Sequence[str] = ()
) -> list[dict[str, object]]:
    """Rows of a PostgreSQL table as the sink should write them to Delta: the columns the
    type mapping (``sink.delta_type``) keeps as PostgreSQL text read as their output
    function's text (arrays element by element), the others as psycopg loads them."""
    schema, _, table = qualified_name.partition(".")
    described = conn.execute(
        """
        SELECT attname, atttypid::int, atttypmod FROM pg_attribute
        WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum
        """,
        (sql.Identifier(schema, table).as_string(conn),),
    ).fetchall()
    how: list[tuple[str, str | None]] = []
    for name, type_oid, typmod in described:
        mapped = delta_type(type_oid, typmod)
        if mapped.form is ValueForm.TEXT:
            how.append((name, "text"))
        elif mapped.element is not None and mapped.element.form is ValueForm.TEXT:
            how.append((name, "elements"))
        else:
            how.append((name, None))
    names = [name for name, _ in how]
    rows = _select(conn, schema, table, how, order_by)
    return [dict(zip(names, row, strict=True)) for row in rows]


# --- a source table against its Delta table ------------------------------------------------


@dataclass(frozen=True)
class TableComparison:
    """The outcome of comparing one table."""

    table: str
    source_rows: int
    delta_rows: int
    missing: list[tuple[object, ...]] = field(default_factory=list)
    unexpected: list[tuple[object, ...]] = field(default_factory=list)
    different: list[tuple[tuple[object, ...], tuple[object, ...]]] = field(default_factory=list)
    duplicated: list[tuple[object, ...]] = field(default_factory=list)
    """Keys held by more than one Delta row (only checked for tables with a key; a table
    without one is compared as a multiset, and ``missing``/``unexpected`` list whole rows,
    once per missing or extra copy)."""

    @property
    def matches(self) -> bool:
        return not (self.missing or self.unexpected or self.different or self.duplicated)

    def describe(self, limit: int = 5) -> str:
        """A readable summary with up to ``limit`` examples of each kind of difference."""
        lines = [
            f"{self.table}: source {self.source_rows} rows, delta {self.delta_rows} rows, "
            f"{'MATCH' if self.matches else 'MISMATCH'}"
        ]
        for key in self.missing[:limit]:
            lines.append(f"  missing in delta: key {key}")
        for key in self.unexpected[:limit]:
            lines.append(f"  only in delta: key {key}")
        for source_row, delta_row in self.different[:limit]:
            lines.append(f"  differs:\n    source {source_row}\n    delta  {delta_row}")
        for key in self.duplicated[:limit]:
            lines.append(f"  several delta rows: key {key}")
        return "\n".join(lines)


def _string_type(arrow: pa.DataType) -> bool:
    return bool(
        pa.types.is_string(arrow)
        or pa.types.is_large_string(arrow)
        or pa.types.is_string_view(arrow)
    )


def _read_as(arrow: pa.DataType) -> str | None:
    """How a source column is read for a Delta column of type ``arrow``: loaded (None), as
    its ``text``, or its ``elements``' text."""
    if pa.types.is_list(arrow) or pa.types.is_large_list(arrow):
        return "elements" if _string_type(arrow.value_type) else None
    return "text" if _string_type(arrow) else None


def _as_delta_holds(value: object, arrow: pa.DataType) -> object:
    """A source value in the Delta column's type where the sink converts: a numeric stored
    as a double (``sink.column_types``) is its nearest double."""
    if isinstance(value, Decimal) and pa.types.is_floating(arrow):
        return float(value)
    return value


def compare_table(
    conn: Conn,
    qualified_name: str | tuple[str, str],
    delta_path: Path | str,
    *,
    key: Sequence[str] | None = None,
    deleted_column: str | None = None,
    column_names: ColumnNamePolicy = "error",
) -> TableComparison:
    """Compare one source table with its Delta table.

    Args:
        conn: a connection to the source database.
        qualified_name: ``schema.table``, or ``(schema, table)`` when a name holds a dot.
        delta_path: the Delta table's location (``sink.table_path``).
        key: the columns identifying a row; default: the replica identity index or the
            primary key, else the table is compared as a multiset of rows.
        deleted_column: the soft-delete flag column, if the sink writes one.
        column_names: the sink's ``column_names``; under ``map`` source column X is
            compared with the Delta column ``sink.column_map`` names for it.
    """
    if isinstance(qualified_name, tuple):
        schema, table = qualified_name
        qualified_name = f"{schema}.{table}"
    else:
        schema, _, table = qualified_name.partition(".")
    arrow = read_delta_table(delta_path)
    described = _source_columns(conn, schema, table)
    to_source = {
        d: s for s, d in column_map([name for name, _, _ in described], column_names).items()
    }
    types = {to_source.get(f.name, f.name): f.type for f in arrow.schema}
    delta = [
        {to_source.get(k, k): v for k, v in row.items()}
        for row in _rows_of(
            arrow,
            include_metadata=True,
            deleted_column=deleted_column or DELETED_COLUMN,
            live_only=deleted_column is not None,
        )
    ]
    how = [(name, _read_as(types[name])) for name, _, _ in described if name in types]
    names = [name for name, _ in how]
    source = [
        tuple(_as_delta_holds(v, types[n]) for n, v in zip(names, row, strict=True))
        for row in _select(conn, schema, table, how)
    ]
    key_columns = list(key) if key else _identity_key(conn, schema, table)
    if not key_columns:
        return _compare_multisets(qualified_name, names, source, delta)
    return _compare_keyed(qualified_name, names, key_columns, source, delta)


def _compare_keyed(
    table: str,
    names: Sequence[str],
    key: Sequence[str],
    source_rows: Sequence[tuple[object, ...]],
    delta_rows: Sequence[dict[str, object]],
) -> TableComparison:
    """Compare a table with a key: each key once on each side, with equal rows."""
    duplicated: list[tuple[object, ...]] = []

    def keyed(
        rows: Iterable[Row], repeats: list[tuple[object, ...]] | None = None
    ) -> dict[tuple[str, ...], tuple[str, ...]]:
        out: dict[tuple[str, ...], tuple[str, ...]] = {}
        for row in rows:
            row_key = tuple(_cell(row.get(k)) for k in key)
            if repeats is not None and row_key in out:
                repeats.append(row_key)
            out[row_key] = tuple(_cell(row.get(n)) for n in names)
        return out

    source = keyed(dict(zip(names, row, strict=True)) for row in source_rows)
    delta = keyed(delta_rows, duplicated)
    return TableComparison(
        table=table,
        source_rows=len(source_rows),
        delta_rows=len(delta_rows),
        missing=sorted(k for k in source if k not in delta),
        unexpected=sorted(k for k in delta if k not in source),
        different=[
            (source[k], delta[k]) for k in sorted(source) if k in delta and source[k] != delta[k]
        ],
        duplicated=sorted(duplicated),
    )


def _compare_multisets(
    table: str,
    names: Sequence[str],
    source_rows: Sequence[tuple[object, ...]],
    delta_rows: Sequence[dict[str, object]],
) -> TableComparison:
    """Compare a table without a key: every row must be in Delta exactly as often."""

    def counted(rows: Iterable[Sequence[object]]) -> Counter[tuple[str, ...]]:
        return Counter(tuple(_cell(v) for v in row) for row in rows)

    source = counted(source_rows)
    delta = counted([row.get(n) for n in names] for row in delta_rows)
    return TableComparison(
        table=table,
        source_rows=len(source_rows),
        delta_rows=len(delta_rows),
        missing=sorted((source - delta).elements()),
        unexpected=sorted((delta - source).elements()),
    )


# --- expected rows against a Delta table (the tests' assertions) ---------------------------


def _show(value: object) -> str:
    return "NULL" if value is None else f"{value!r} ({type(value).__name__})"


def _row_key(row: Row, key: Sequence[str]) -> tuple[object, ...]:
    return tuple(canonical(row.get(k)) for k in key)


def diff_rows(
    actual: Sequence[Row], expected: Sequence[Row], *, key: Sequence[str] = (), limit: int = 10
) -> str | None:
    """Describe how ``actual`` differs from ``expected``; None when they match exactly.

    Args:
        actual: rows read from Delta.
        expected: the rows that should be there.
        key: columns identifying a row; with a key, changed rows are shown column by
            column, without one rows are compared as a multiset.
        limit: examples shown per kind of difference.
    """
    problems: list[str] = []
    actual_columns = sorted({c for r in actual for c in r})
    expected_columns = sorted({c for r in expected for c in r})
    if actual and expected and actual_columns != expected_columns:
        missing = [c for c in expected_columns if c not in actual_columns]
        extra = [c for c in actual_columns if c not in expected_columns]
        problems.append(f"columns differ: missing in Delta {missing}, only in Delta {extra}")
    columns = expected_columns or actual_columns
    if key:
        actual_by_key = {_row_key(r, key): r for r in actual}
        expected_by_key = {_row_key(r, key): r for r in expected}
        if len(actual_by_key) != len(actual):
            problems.append(f"Delta holds several rows for one key {list(key)}")
        missing_keys = [k for k in expected_by_key if k not in actual_by_key]
        extra_keys = [k for k in actual_by_key if k not in expected_by_key]
        for label, keys, source in (
            ("missing in Delta", missing_keys, expected_by_key),
            ("only in Delta", extra_keys, actual_by_key),
        ):
            if keys:
                problems.append(f"{len(keys)} row(s) {label}:")
                problems += [f"  {dict(source[k])}" for k in keys[:limit]]
        changed = []
        for k, want in expected_by_key.items():
            got = actual_by_key.get(k)
            if got is None:
                continue
            cells = [
                f"    {c}: expected {_show(want.get(c))}, Delta {_show(got.get(c))}"
                for c in columns
                if canonical(want.get(c)) != canonical(got.get(c))
            ]
            if cells:
                changed.append(f"  key {dict(zip(key, (want.get(c) for c in key), strict=True))}:")
                changed += cells
        if changed:
            problems.append("rows that differ:")
            problems += changed[: limit * 8]
    else:
        as_tuples_actual = Counter(tuple(canonical(r.get(c)) for c in columns) for r in actual)
        as_tuples_expected = Counter(tuple(canonical(r.get(c)) for c in columns) for r in expected)
        missing_rows = list((as_tuples_expected - as_tuples_actual).elements())
        extra_rows = list((as_tuples_actual - as_tuples_expected).elements())
        for label, rows in (("missing in Delta", missing_rows), ("only in Delta", extra_rows)):
            if rows:
                problems.append(f"{len(rows)} row(s) {label} (columns {columns}):")
                problems += [f"  {row}" for row in rows[:limit]]
    if not problems:
        return None
    return "\n".join([f"Delta has {len(actual)} row(s), expected {len(expected)}", *problems])


def assert_delta_matches(
    path: Path | str,
    expected: Sequence[Row] | pa.Table,
    *,
    key: Sequence[str] = (),
    include_metadata: bool = False,
    live_only: bool = True,
) -> None:
    """Assert that the Delta table at ``path`` holds exactly ``expected``.

    Raises:
        AssertionError: with a readable description of every difference.
    """
    wanted = expected.to_pylist() if isinstance(expected, pa.Table) else list(expected)
    if not include_metadata:
        wanted = [{k: v for k, v in r.items() if not k.startswith(METADATA_PREFIX)} for r in wanted]
    actual = delta_rows(path, include_metadata=include_metadata, live_only=live_only)
    difference = diff_rows(actual, wanted, key=key)
    if difference is not None:
        raise AssertionError(f"Delta table {path} differs:\n{difference}")
