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

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from uuid import UUID

import psycopg
from psycopg import sql

from sink import ColumnNamePolicy, column_map

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
    """Return the live rows of a Delta table read with delta-rs."""
    from deltalake import DeltaTable  # noqa: PLC0415 - heavy import only when verifying

    rows: list[dict[str, object]] = DeltaTable(str(path)).to_pyarrow_table().to_pylist()
    if deleted_column is not None:
        rows = [r for r in rows if not r.get(deleted_column)]
    return rows


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
