"""Compare a source table with its Delta table, row by row, read independently.

The Delta side is read with ``deltalake`` (delta-rs), not through Spark, so a bug in the
Spark path cannot hide itself. Both sides are normalised to the sink's type mapping:
json/jsonb/interval and domains as their PostgreSQL text, uuid as text, numeric compared
with its scale (``Decimal('1.50')`` differs from ``Decimal('1.5')``), timestamps as aware UTC,
bytea as bytes, arrays as lists. Metadata columns (``_wal2delta_*``) are ignored, and
soft-deleted rows do not count as present. Under ``sink.column_names: map`` each source
column is compared with the Delta column its name maps to (``sink.naming``).
"""

from __future__ import annotations

import datetime as dt
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
import pyarrow as pa
from psycopg import sql
from psycopg.types.string import TextLoader

from sink import (
    NUMERIC_OID,
    ColumnNamePolicy,
    ValueForm,
    column_map,
    delta_type,
    pg_text_form,
    to_delta_value,
)

TEXT_CAST_TYPES = frozenset({"json", "jsonb", "interval", "_json", "_jsonb", "_interval"})
DOMAIN = "(domain)"
"""The type name ``_source_columns`` gives a domain column: the sink stores every domain as
its text form, but PostgreSQL sends clients the base type (an int for a domain over int),
so the source side is text-cast too."""
METADATA_PREFIX = "_wal2delta_"


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


def normalise(value: object) -> object:
    """Bring a value from either side to one comparable form."""
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, Decimal):
        return ("decimal", str(value))
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(UTC)
    if isinstance(value, memoryview | bytearray):
        return bytes(value)
    if isinstance(value, list | tuple):
        return [normalise(v) for v in value]
    return value


def _source_columns(
    conn: psycopg.Connection[tuple[object, ...]], schema: str, table: str
) -> list[tuple[str, str]]:
    rows = conn.execute(
        """
        SELECT a.attname, CASE WHEN t.typtype = 'd' THEN %s ELSE t.typname END
        FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
        WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped
        ORDER BY a.attnum
        """,
        (DOMAIN, sql.Identifier(schema, table).as_string(conn)),
    ).fetchall()
    return [(str(name), str(typ)) for name, typ in rows]


def _primary_key(
    conn: psycopg.Connection[tuple[object, ...]], schema: str, table: str
) -> list[str]:
    rows = conn.execute(
        """
        SELECT a.attname FROM pg_index i
        JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
        WHERE i.indrelid = %s::regclass AND (i.indisprimary OR i.indisreplident)
        ORDER BY i.indisprimary DESC, array_position(i.indkey::int2[], a.attnum)
        """,
        (sql.Identifier(schema, table).as_string(conn),),
    ).fetchall()
    seen: list[str] = []
    for (name,) in rows:
        if str(name) not in seen:
            seen.append(str(name))
    return seen


def read_source(
    conn: psycopg.Connection[tuple[object, ...]],
    schema: str,
    table: str,
    columns: Sequence[str] | None = None,
) -> tuple[list[str], list[tuple[object, ...]]]:
    """Return (column names, rows) of a source table, text-cast where the sink keeps text."""
    described = _source_columns(conn, schema, table)
    if columns is not None:
        described = [(n, t) for n, t in described if n in columns]
    select_list = sql.SQL(", ").join(
        sql.SQL("{}::text").format(sql.Identifier(name))
        if typ in TEXT_CAST_TYPES or typ == DOMAIN
        else sql.Identifier(name)
        for name, typ in described
    )
    rows = conn.execute(
        sql.SQL("SELECT {} FROM {}").format(select_list, sql.Identifier(schema, table))
    ).fetchall()
    return [name for name, _ in described], rows


def read_delta(path: Path | str, *, deleted_column: str | None = None) -> list[dict[str, object]]:
    """The rows of a Delta table read with delta-rs, metadata included; without the rows
    flagged in ``deleted_column`` when it is given."""
    return delta_rows(
        path,
        include_metadata=True,
        deleted_column=deleted_column or DELETED_COLUMN,
        live_only=deleted_column is not None,
    )


def compare_table(
    conn: psycopg.Connection[tuple[object, ...]],
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
        key: the columns identifying a row; default: primary key or replica identity
            index, else the table is compared as a multiset of rows.
        deleted_column: the soft-delete flag column, if the sink writes one.
        column_names: the sink's ``column_names``; under ``map`` source column X is
            compared with the Delta column ``sink.delta_column_name(X, "map")``.
    """
    if isinstance(qualified_name, tuple):
        schema, table = qualified_name
        qualified_name = f"{schema}.{table}"
    else:
        schema, _, table = qualified_name.partition(".")
    key_columns = list(key) if key else _primary_key(conn, schema, table)
    delta_rows = _source_named(
        read_delta(delta_path, deleted_column=deleted_column),
        [name for name, _ in _source_columns(conn, schema, table)],
        column_names,
    )
    delta_columns = [
        c for c in (delta_rows[0].keys() if delta_rows else []) if not c.startswith(METADATA_PREFIX)
    ]
    names, source_rows = read_source(conn, schema, table, delta_columns or None)
    has_key = bool(key_columns)
    if not key_columns:
        key_columns = names
    duplicated: list[tuple[object, ...]] = []

    def keyed(
        rows: Iterable[dict[str, object]], repeats: list[tuple[object, ...]] | None = None
    ) -> dict[tuple[object, ...], tuple[object, ...]]:
        out: dict[tuple[object, ...], tuple[object, ...]] = {}
        for row in rows:
            row_key = tuple(repr(normalise(row[k])) for k in key_columns)
            if repeats is not None and row_key in out:
                repeats.append(row_key)
            out[row_key] = tuple(normalise(row.get(n)) for n in names)
        return out

    coercions = _string_coercions(source_rows, names)
    if not has_key:
        # Identical rows may repeat in a table without a key, and Delta must repeat them
        # as often: compare the two sides as multisets.
        return _compare_multisets(
            qualified_name,
            names,
            source_rows,
            [_coerce_to_source(row, coercions) for row in delta_rows],
        )
    source = keyed(dict(zip(names, row, strict=True)) for row in source_rows)
    delta = keyed((_coerce_to_source(row, coercions) for row in delta_rows), duplicated)
    missing = sorted(k for k in source if k not in delta)
    unexpected = sorted(k for k in delta if k not in source)
    different = [
        (source[k], delta[k]) for k in sorted(source) if k in delta and source[k] != delta[k]
    ]
    return TableComparison(
        table=qualified_name,
        source_rows=len(source_rows),
        delta_rows=len(delta_rows),
        missing=missing,
        unexpected=unexpected,
        different=different,
        duplicated=sorted(duplicated),
    )


def _source_named(
    rows: list[dict[str, object]], names: Sequence[str], policy: ColumnNamePolicy
) -> list[dict[str, object]]:
    """Delta rows with each mapped column under its source name (``sink.column_map``)."""
    renamed = {delta: name for name, delta in column_map(names, policy).items()}
    if not renamed:
        return rows
    return [{renamed.get(k, k): v for k, v in row.items()} for row in rows]


def _compare_multisets(
    table: str,
    names: Sequence[str],
    source_rows: Sequence[tuple[object, ...]],
    delta_rows: Sequence[dict[str, object]],
) -> TableComparison:
    """Compare a table without a key: every row must be in Delta exactly as often."""

    def counted(rows: Iterable[tuple[object, ...]]) -> Counter[tuple[object, ...]]:
        return Counter(tuple(repr(normalise(v)) for v in row) for row in rows)

    source = counted(source_rows)
    delta = counted(tuple(row.get(n) for n in names) for row in delta_rows)
    return TableComparison(
        table=table,
        source_rows=len(source_rows),
        delta_rows=len(delta_rows),
        missing=sorted((source - delta).elements()),
        unexpected=sorted((delta - source).elements()),
    )


def _string_coercions(
    source_rows: Sequence[tuple[object, ...]], names: Sequence[str]
) -> dict[str, type]:
    """Columns Delta keeps as strings (uuid, unconstrained numeric) and their source type."""
    coercions: dict[str, type] = {}
    for index, name in enumerate(names):
        sample = next((r[index] for r in source_rows if r[index] is not None), None)
        if isinstance(sample, Decimal | UUID):
            coercions[name] = type(sample)
    return coercions


def _coerce_to_source(row: dict[str, object], coercions: dict[str, type]) -> dict[str, object]:
    """Turn a Delta row's strings back into the source's type where the sink keeps text."""
    out = dict(row)
    for name, kind in coercions.items():
        value = out.get(name)
        if isinstance(value, str):
            out[name] = kind(value)
    return out


# --- expected rows against a Delta table (the tests' assertions) -----------------------
#
# Compare a Delta table, read with delta-rs, with expected rows - exactly, and readably.
#
# The Delta side is read with ``deltalake`` (never through Spark), so a bug in the Spark path
# cannot hide itself. Values are compared by type and value: ``Decimal('1.50')`` differs
# from ``Decimal('1.5')`` and from ``1.5``; an aware timestamp differs from a naive one and
# aware ones are compared as UTC instants; bytes, lists and NULLs compare exactly; NaN equals
# NaN.
#
# Expected rows from PostgreSQL (``postgres_rows``) are brought to the sink's type mapping
# (``sink.typemap``) the way the sink does it: every column the sink stores as PostgreSQL
# text is selected as ``::text``, so PostgreSQL itself prints it, and every other value goes
# through ``to_delta_value``. Expected rows written by hand may hold Python objects the sink
# stores as text (UUID, time, network addresses, ranges); they are printed as PostgreSQL
# would (``pg_text_form``).
#
# Metadata columns (``_wal2delta_*``) are ignored unless asked for, and soft-deleted rows do
# not count as present.

DELETED_COLUMN = "_wal2delta_deleted"

Row = Mapping[str, object]


# --- reading -------------------------------------------------------------------------------


def read_delta_table(path: Path | str) -> pa.Table:
    """The whole Delta table at ``path``, read with delta-rs."""
    from deltalake import DeltaTable  # noqa: PLC0415 - heavy import only when verifying

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
    rows: list[dict[str, object]] = read_delta_table(path).to_pylist()
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
