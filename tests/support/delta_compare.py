"""Compare a Delta table, read with delta-rs, with expected rows - exactly, and readably.

The Delta side is read with ``deltalake`` (never through Spark), so a bug in the Spark path
cannot hide itself. Values are compared by type and value: ``Decimal('1.50')`` differs
from ``Decimal('1.5')`` and from ``1.5``; an aware timestamp differs from a naive one and
aware ones are compared as UTC instants; bytes, lists and NULLs compare exactly; NaN equals
NaN.

Expected rows from PostgreSQL (``postgres_rows``) are brought to the sink's type mapping
(``sink.typemap``) the way the sink does it: every column the sink stores as PostgreSQL
text is selected as ``::text``, so PostgreSQL itself prints it, and every other value goes
through ``to_delta_value``. Expected rows written by hand may hold Python objects the sink
stores as text (UUID, time, network addresses, ranges); they are printed as PostgreSQL
would (``pg_text_form``).

Metadata columns (``_wal2delta_*``) are ignored unless asked for, and soft-deleted rows do
not count as present.
"""

from __future__ import annotations

import datetime as dt
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
from psycopg import sql
from psycopg.types.string import TextLoader

from sink.convert import pg_text_form, to_delta_value
from sink.typemap import NUMERIC_OID, ValueForm, delta_type

METADATA_PREFIX = "_wal2delta_"
DELETED_COLUMN = "_wal2delta_deleted"

Row = Mapping[str, object]


# --- reading -------------------------------------------------------------------------------


def read_delta(path: Path | str) -> pa.Table:
    """The whole Delta table at ``path``, read with delta-rs."""
    from deltalake import DeltaTable

    return DeltaTable(str(path)).to_pyarrow_table()


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
    rows: list[dict[str, object]] = read_delta(path).to_pylist()
    if live_only:
        rows = [r for r in rows if not r.get(deleted_column)]
    if not include_metadata:
        rows = [{k: v for k, v in r.items() if not k.startswith(METADATA_PREFIX)} for r in rows]
    return rows


def postgres_rows(
    conn: psycopg.Connection[Any], qualified_name: str, *, order_by: Sequence[str] = ()
) -> list[dict[str, object]]:
    """Rows of a PostgreSQL table brought to the values the sink writes to Delta.

    Columns the sink keeps as PostgreSQL text are read as the text their output function
    prints - what pgoutput sends in text mode. (A ``::text`` cast is not the same for every
    type: ``inet::text`` adds the netmask the output function omits.) Numeric columns share
    one OID whatever their typmod, so an unconstrained numeric is cast instead, and arrays
    of unconstrained numeric element-wise; both casts print what numeric's output function
    does. The other columns are converted with ``to_delta_value``.
    """
    schema, _, table = qualified_name.partition(".")
    described = conn.execute(
        """
        SELECT attname, atttypid::int, atttypmod FROM pg_attribute
        WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum
        """,
        (sql.Identifier(schema, table).as_string(conn),),
    ).fetchall()
    select: list[sql.Composable] = []
    types = []
    cursor = conn.cursor()
    for name, type_oid, typmod in described:
        mapped = delta_type(type_oid, typmod)
        types.append(mapped)
        ident = sql.Identifier(name)
        if mapped.form is ValueForm.TEXT and type_oid == NUMERIC_OID:
            select.append(sql.SQL("{}::text").format(ident))
        elif mapped.form is ValueForm.TEXT:
            cursor.adapters.register_loader(type_oid, TextLoader)
            select.append(ident)
        elif mapped.element is not None and mapped.element.form is ValueForm.TEXT:
            select.append(sql.SQL("{}::text[]").format(ident))
        else:
            select.append(ident)
    query = sql.SQL("SELECT {} FROM {}").format(
        sql.SQL(", ").join(select), sql.Identifier(schema, table)
    )
    if order_by:
        query += sql.SQL(" ORDER BY {}").format(sql.SQL(", ").join(map(sql.Identifier, order_by)))
    out = []
    for record in cursor.execute(query).fetchall():
        row: dict[str, object] = {}
        for (name, _, _), mapped, value in zip(described, types, record, strict=True):
            row[name] = None if value is None else to_delta_value(mapped, value)
        out.append(row)
    return out


# --- comparing -----------------------------------------------------------------------------


def canonical(value: object) -> object:
    """A hashable, typed form of a value; two values match when their forms are equal."""
    match value:
        case None:
            return None
        case bool():
            return ("bool", value)
        case int():
            return ("int", value)
        case float():
            return ("float", "nan" if math.isnan(value) else repr(value))
        case Decimal():
            return ("decimal", str(value))
        case str():
            return ("text", value)
        case bytes() | bytearray() | memoryview():
            return ("bytes", bytes(value))
        case dt.datetime() if value.tzinfo is not None:
            return ("timestamptz", value.astimezone(dt.UTC).isoformat())
        case dt.datetime():
            return ("timestamp", value.isoformat())
        case dt.date():
            return ("date", value.isoformat())
        case list() | tuple():
            return ("array", tuple(canonical(v) for v in value))
        case dt.timedelta() | dict():
            raise TypeError(
                f"{type(value).__name__} has no exact text form here; select the column as "
                "::text (postgres_rows does) to compare it with Delta"
            )
    # UUIDs, times, network addresses, ranges: the sink stores their PostgreSQL text.
    return ("text", pg_text_form(value))


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
