"""The SQL of ``wal2delta verify``: one canonical text per row, rendered in PostgreSQL and
in Spark SQL so that both sides print the same text for the same value; the bucket
summaries and the row reads built on it.

Theory of operation
-------------------
Each compared column has a *kind*, read from the sink's type mapping (``delta_type``): the
Delta type the sink stores it as. A value's canonical text depends only on that kind and
on the value's meaning, never on the engine: integers and decimals as plain digits (a
decimal keeps its scale: ``1.50``), booleans ``t``/``f``, text as itself (PostgreSQL's
output function for every type the sink keeps as text), bytea as lower-case hex, dates
``YYYY-MM-DD``, wall-clock timestamps ``YYYY-MM-DD HH:MM:SS.ffffff``, instants as
microseconds since the epoch (so no time zone enters), and floats as an exact
``mantissa p exponent`` pair (``NaN``, ``Inf``, ``-Inf``, ``0`` apart). Arrays print their
elements in order inside ``[...]``.

Values a Delta type cannot hold are stored under the sink's documented conventions
(``sink.unrepresentable``: ``±infinity`` as sentinels, dates and timestamps outside years
1-9999 and NaN in a DECIMAL as NULL, a multi-dimensional array as NULL, an array without
its lower bound); the source side applies the same conventions (``pg_stored``) before it
prints, so a value stored under its convention is no difference - its exact text is in
the rejects table - and any other deviation still is.

A row's text joins each column's text, length-prefixed (``5:hello``), NULL being ``N``, so
no two rows print alike. Its hash is the first 15 hex digits of the MD5 of that text's
UTF-8 bytes: a 60-bit integer both engines compute exactly. Rows fall into ``buckets`` by
the same hash of their key's text (the whole row for a table without a key), and each
bucket is summarised by its row count and the sum of its row hashes (as DECIMAL(38,0) /
numeric, which cannot overflow). A sum of hashes is a multiset hash, so identical rows of a
keyless table count as often as they occur.

A bucket whose summary differs on the two sides is then read row by row on both sides
(``pg_rows_query``/``spark_rows_query``) and compared in Python (``compare``), so a
value both engines cannot print alike only costs a read, never a false finding; a float's
exponent, say, comes from a logarithm that may differ by one between engines.

Every renderer here is pure: PostgreSQL SQL is built with ``psycopg.sql`` (identifiers
quoted), Spark SQL as text with backtick-quoted identifiers.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Final

from psycopg import sql

from daemon.verify.plan import VerifyColumn, VerifyTable
from sink import (
    DATE_INFINITY,
    DATE_MINUS_INFINITY,
    TIMESTAMP_INFINITY,
    TIMESTAMP_MINUS_INFINITY,
    DeltaType,
    ValueForm,
)

HASH_DIGITS: Final = 15
"""Hex digits of the MD5 taken as the row hash: 60 bits, positive in a BIGINT."""
NULL_MARK: Final = "N"
_LAMBDA: Final = "w2d_x"
_SCALE_BITS: Final = 60


class Kind(enum.Enum):
    """How a Delta column's values print canonically (the members' values mean nothing)."""

    BOOL = enum.auto()
    INT = enum.auto()
    FLOAT = enum.auto()
    DECIMAL = enum.auto()
    TEXT = enum.auto()
    BYTES = enum.auto()
    DATE = enum.auto()
    WALLCLOCK = enum.auto()
    INSTANT = enum.auto()
    ARRAY = enum.auto()


_KIND_OF_SPARK_TYPE: Final = {
    "BOOLEAN": Kind.BOOL,
    "SMALLINT": Kind.INT,
    "INT": Kind.INT,
    "BIGINT": Kind.INT,
    "FLOAT": Kind.FLOAT,
    "DOUBLE": Kind.FLOAT,
    "STRING": Kind.TEXT,
    "BINARY": Kind.BYTES,
    "DATE": Kind.DATE,
    "TIMESTAMP_NTZ": Kind.WALLCLOCK,
    "TIMESTAMP": Kind.INSTANT,
}


def kind_of(mapped: DeltaType) -> Kind:
    """The canonical kind of a Delta type."""
    if mapped.form is ValueForm.ARRAY:
        return Kind.ARRAY
    if mapped.form is ValueForm.DECIMAL:
        return Kind.DECIMAL
    return _KIND_OF_SPARK_TYPE[mapped.spark_sql]


# --- PostgreSQL ----------------------------------------------------------------------------


def _pg_float(value: sql.Composable) -> sql.Composable:
    d = sql.SQL("({})::float8").format(value)
    exponent = sql.SQL("floor(ln(abs({})) / ln(2::float8))::int").format(d)
    shift = sql.SQL("({} - {})").format(sql.Literal(_SCALE_BITS), exponent)
    half = sql.SQL("floor({} / 2.0)::int").format(shift)
    mantissa = sql.SQL("({} * power(2::float8, {}) * power(2::float8, {} - {}))::bigint").format(
        d, half, shift, half
    )
    return sql.SQL(
        "CASE WHEN {d} IS NULL THEN NULL WHEN {d} = 'NaN'::float8 THEN 'NaN' "
        "WHEN {d} = 'Infinity'::float8 THEN 'Inf' WHEN {d} = '-Infinity'::float8 THEN '-Inf' "
        "WHEN {d} = 0 THEN '0' ELSE {m}::text || 'p' || (-{s})::text END"
    ).format(d=d, m=mantissa, s=shift)


def _bounded(value: sql.Composable, kind: str, limits: tuple[str, str, str, str]) -> sql.Composable:
    """``value`` with ``±infinity`` as the sentinels and anything outside them as NULL."""
    high, low, top, bottom = (
        sql.SQL("{} {}").format(sql.SQL(kind), sql.Literal(v)) for v in limits
    )
    return sql.SQL(
        "CASE WHEN {v} = 'infinity' THEN {high} WHEN {v} = '-infinity' THEN {low} "
        "WHEN {v} < {bottom} OR {v} > {top} THEN NULL ELSE {v} END"
    ).format(v=value, high=high, low=low, top=top, bottom=bottom)


def pg_stored(value: sql.Composable, mapped: DeltaType) -> sql.Composable:
    """The source value as the sink stores it in a column mapped to ``mapped``: under the
    conventions of ``sink.unrepresentable`` where the Delta type cannot hold it."""
    match kind_of(mapped):
        case Kind.DATE:
            high, low = DATE_INFINITY.isoformat(), DATE_MINUS_INFINITY.isoformat()
            return _bounded(value, "date", (high, low, high, low))
        case Kind.WALLCLOCK | Kind.INSTANT as kind:
            zone = "+00" if kind is Kind.INSTANT else ""
            high = TIMESTAMP_INFINITY.isoformat(" ", "microseconds") + zone
            low = TIMESTAMP_MINUS_INFINITY.isoformat(" ", "microseconds") + zone
            name = "timestamptz" if kind is Kind.INSTANT else "timestamp"
            return _bounded(value, name, (high, low, high, low))
        case Kind.DECIMAL:
            return sql.SQL("CASE WHEN {v} = 'NaN' THEN NULL ELSE {v} END").format(v=value)
        case Kind.ARRAY:
            # Elements follow their own conventions (pg_canonical's unnest); a lower bound
            # is dropped by unnest, as the sink drops it.
            return sql.SQL("CASE WHEN array_ndims({v}) > 1 THEN NULL ELSE {v} END").format(v=value)
    return value


def pg_canonical(value: sql.Composable, mapped: DeltaType) -> sql.Composable:
    """PostgreSQL text of one value of a column mapped to ``mapped``; NULL stays NULL."""
    value = pg_stored(value, mapped)
    match kind_of(mapped):
        case Kind.BOOL:
            return sql.SQL("CASE {} WHEN true THEN 't' WHEN false THEN 'f' END").format(value)
        case Kind.INT | Kind.DECIMAL:
            return sql.SQL("({})::text").format(value)
        case Kind.FLOAT:
            return _pg_float(value)
        case Kind.TEXT:
            return _pg_output_text(value)
        case Kind.BYTES:
            return sql.SQL("encode({}, 'hex')").format(value)
        case Kind.DATE:
            return sql.SQL("to_char({}, 'YYYY-MM-DD')").format(value)
        case Kind.WALLCLOCK:
            return sql.SQL("to_char({}, 'YYYY-MM-DD HH24:MI:SS.US')").format(value)
        case Kind.INSTANT:
            return sql.SQL("(extract(epoch FROM {}) * 1000000)::bigint::text").format(value)
        case Kind.ARRAY:
            assert mapped.element is not None
            element = _pg_encoded(pg_canonical(sql.SQL("w2d_u.x"), mapped.element))
            return sql.SQL(
                "CASE WHEN {v} IS NULL THEN NULL ELSE '[' || coalesce((SELECT string_agg({e}, ',' "
                "ORDER BY w2d_u.n) FROM unnest({v}) WITH ORDINALITY AS w2d_u(x, n)), '') || ']' END"
            ).format(v=value, e=element)


def _pg_output_text(value: sql.Composable) -> sql.Composable:
    """The type's output function text (bpchar keeps its padding, inet omits a full netmask),
    NULL staying NULL (``format`` prints NULL as an empty string). ``num_nulls`` tells NULL
    from a composite value whose fields are all NULL, which ``IS NULL`` calls NULL."""
    return sql.SQL("CASE WHEN num_nulls({v}) = 1 THEN NULL ELSE format('%s', {v}) END").format(
        v=value
    )


def _pg_encoded(text: sql.Composable) -> sql.Composable:
    return sql.SQL("coalesce(length({t})::text || ':' || {t}, {n})").format(
        t=text, n=sql.Literal(NULL_MARK)
    )


def _pg_row_text(columns: Sequence[VerifyColumn]) -> sql.Composable:
    # || rather than concat_ws: a function takes at most 100 arguments.
    parts = [_pg_encoded(pg_canonical(sql.Identifier(c.name), c.mapped)) for c in columns]
    return sql.SQL(" || ',' || ").join(parts) if parts else sql.Literal("")


def _pg_hash(text: sql.Composable) -> sql.Composable:
    return sql.SQL("('x' || substr(md5(convert_to({}, 'UTF8')), 1, {}))::bit(60)::bigint").format(
        text, sql.Literal(HASH_DIGITS)
    )


def _pg_bucket(table: VerifyTable, buckets: int) -> sql.Composable:
    return sql.SQL("({} % {})::int").format(
        _pg_hash(_pg_row_text(table.key_columns)), sql.Literal(buckets)
    )


def _pg_where(table: VerifyTable, extra: sql.Composable | None = None) -> sql.Composable:
    conditions: list[sql.Composable] = []
    if table.row_filter is not None:
        conditions.append(sql.SQL("({})").format(sql.SQL(table.row_filter)))
    if extra is not None:
        conditions.append(extra)
    if not conditions:
        return sql.SQL("")
    return sql.SQL(" WHERE ") + sql.SQL(" AND ").join(conditions)


def pg_summary_query(table: VerifyTable, buckets: int) -> sql.Composed:
    """``(bucket, rows, sum of row hashes)`` per non-empty bucket of the source table."""
    return sql.SQL(
        "SELECT w2d_b, count(*), sum(w2d_h) FROM (SELECT {b} AS w2d_b, {h} AS w2d_h FROM {t}{w}) "
        "AS w2d_q GROUP BY w2d_b"
    ).format(
        b=_pg_bucket(table, buckets),
        h=_pg_hash(_pg_row_text(table.columns)),
        t=sql.Identifier(table.schema, table.name),
        w=_pg_where(table),
    )


def pg_rows_query(table: VerifyTable, buckets: int, chosen: Sequence[int]) -> sql.Composed:
    """The source rows in the ``chosen`` buckets, one value per compared column.

    Columns the sink keeps as PostgreSQL text are selected as their output function's text
    (what the sink stores); arrays of such elements element by element.
    """
    select: list[sql.Composable] = []
    for column in table.columns:
        ident = pg_stored(sql.Identifier(column.name), column.mapped)
        element = column.mapped.element
        if column.mapped.form is ValueForm.TEXT:
            select.append(_pg_output_text(ident))
        elif element is not None and element.form is ValueForm.TEXT:
            select.append(sql.SQL("({})::text[]").format(ident))
        elif element is not None:
            select.append(_pg_stored_elements(ident, element))
        else:
            select.append(ident)
    in_chosen = sql.SQL("{} IN ({})").format(
        _pg_bucket(table, buckets), sql.SQL(", ").join(map(sql.Literal, chosen))
    )
    return sql.SQL("SELECT {} FROM {}{}").format(
        sql.SQL(", ").join(select),
        sql.Identifier(table.schema, table.name),
        _pg_where(table, in_chosen),
    )


def _pg_stored_elements(value: sql.Composable, element: DeltaType) -> sql.Composable:
    """An array with each element as stored (``pg_stored``), lower bound 1."""
    stored = pg_stored(sql.SQL("w2d_u.x"), element)
    return sql.SQL(
        "CASE WHEN {v} IS NULL THEN NULL ELSE coalesce((SELECT array_agg({e} ORDER BY w2d_u.n) "
        "FROM unnest({v}) WITH ORDINALITY AS w2d_u(x, n)), '{{}}') END"
    ).format(v=value, e=stored)


# --- Spark SQL -----------------------------------------------------------------------------


def quote(identifier: str) -> str:
    """A Spark SQL identifier: backticks, embedded backticks doubled."""
    return "`" + identifier.replace("`", "``") + "`"


def _spark_float(value: str) -> str:
    d = f"CAST({value} AS DOUBLE)"
    exponent = f"CAST(floor(ln(abs({d})) / ln(CAST(2 AS DOUBLE))) AS INT)"
    shift = f"({_SCALE_BITS} - {exponent})"
    half = f"CAST(floor({shift} / 2.0) AS INT)"
    two = "CAST(2 AS DOUBLE)"
    mantissa = f"CAST({d} * power({two}, {half}) * power({two}, {shift} - {half}) AS BIGINT)"
    return (
        f"CASE WHEN {d} IS NULL THEN NULL WHEN isnan({d}) THEN 'NaN' "
        f"WHEN {d} = CAST('Infinity' AS DOUBLE) THEN 'Inf' "
        f"WHEN {d} = CAST('-Infinity' AS DOUBLE) THEN '-Inf' WHEN {d} = 0 THEN '0' "
        f"ELSE concat(CAST({mantissa} AS STRING), 'p', CAST(-{shift} AS STRING)) END"
    )


def spark_canonical(value: str, mapped: DeltaType) -> str:
    """Spark SQL text of one value of a Delta column of type ``mapped``; NULL stays NULL."""
    match kind_of(mapped):
        case Kind.BOOL:
            return f"CASE {value} WHEN true THEN 't' WHEN false THEN 'f' END"
        case Kind.INT | Kind.DECIMAL:
            return f"CAST({value} AS STRING)"
        case Kind.FLOAT:
            return _spark_float(value)
        case Kind.TEXT:
            return value
        case Kind.BYTES:
            return f"lower(hex({value}))"
        case Kind.DATE:
            return f"date_format({value}, 'yyyy-MM-dd')"
        case Kind.WALLCLOCK:
            return f"date_format({value}, 'yyyy-MM-dd HH:mm:ss.SSSSSS')"
        case Kind.INSTANT:
            return f"CAST(unix_micros({value}) AS STRING)"
        case Kind.ARRAY:
            assert mapped.element is not None
            element = _spark_encoded(spark_canonical(_LAMBDA, mapped.element))
            return f"concat('[', array_join(transform({value}, {_LAMBDA} -> {element}), ','), ']')"


def _spark_encoded(text: str) -> str:
    return f"coalesce(concat(CAST(length({text}) AS STRING), ':', {text}), '{NULL_MARK}')"


def _spark_value(column: VerifyColumn) -> str:
    if column.delta_name is None:
        return f"CAST(NULL AS {column.mapped.spark_sql})"
    return quote(column.delta_name)


def _spark_row_text(columns: Sequence[VerifyColumn]) -> str:
    parts = [_spark_encoded(spark_canonical(_spark_value(c), c.mapped)) for c in columns]
    return f"concat_ws(',', {', '.join(parts)})" if parts else "''"


def _spark_hash(text: str) -> str:
    return f"CAST(conv(substr(md5({text}), 1, {HASH_DIGITS}), 16, 10) AS BIGINT)"


def _spark_bucket(table: VerifyTable, buckets: int) -> str:
    return f"CAST({_spark_hash(_spark_row_text(table.key_columns))} % {buckets} AS INT)"


def _spark_from(table: VerifyTable, extra: str | None = None) -> str:
    source = "delta." + quote(table.delta_path)
    conditions = []
    if table.deleted_column is not None:
        conditions.append(f"NOT coalesce({quote(table.deleted_column)}, false)")
    if extra is not None:
        conditions.append(extra)
    return source + (" WHERE " + " AND ".join(conditions) if conditions else "")


def spark_summary_query(table: VerifyTable, buckets: int) -> str:
    """``(bucket, rows, sum of row hashes)`` per non-empty bucket of the Delta table."""
    return (
        f"SELECT w2d_b, count(*) AS w2d_n, sum(CAST(w2d_h AS DECIMAL(38,0))) AS w2d_s FROM "
        f"(SELECT {_spark_bucket(table, buckets)} AS w2d_b, "
        f"{_spark_hash(_spark_row_text(table.columns))} AS w2d_h FROM {_spark_from(table)}) "
        "AS w2d_q GROUP BY w2d_b"
    )


def spark_rows_query(table: VerifyTable, buckets: int, chosen: Sequence[int]) -> str:
    """The Delta rows in the ``chosen`` buckets: the compared columns, then the row's LSN
    (NULL when the table has no LSN column)."""
    values = [_spark_value(c) for c in table.columns]
    values.append(quote(table.lsn_column) if table.lsn_column is not None else "NULL")
    in_chosen = f"{_spark_bucket(table, buckets)} IN ({', '.join(map(str, chosen))})"
    return f"SELECT {', '.join(values)} FROM {_spark_from(table, in_chosen)}"


__all__ = [
    "Kind",
    "kind_of",
    "pg_canonical",
    "pg_rows_query",
    "pg_stored",
    "pg_summary_query",
    "quote",
    "spark_canonical",
    "spark_rows_query",
    "spark_summary_query",
]
