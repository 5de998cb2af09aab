"""``check-config``'s look at the source: do the tables and columns the sink settings name
exist, and can their types take what is asked of them?

The configuration alone cannot tell (a table of a ``FOR ALL TABLES`` publication is listed
nowhere), so ``check-config`` asks the source when it can reach it and says so when it
cannot. Each problem names its field path, as the configuration errors do.
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
from psycopg import sql

from config import AppConfig, parse_table_name

_COLUMNS = """
SELECT a.attname::text, a.atttypid::int, a.atttypmod
FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %s AND c.relname = %s AND a.attnum > 0 AND NOT a.attisdropped
"""


def source_problems(config: AppConfig, *, connect_timeout: float = 5.0) -> list[str]:
    """The sink settings that name a table or column the source lacks, or a type override
    its column cannot take, as ``field.path: problem`` lines.

    Raises:
        psycopg.OperationalError: the source cannot be reached.
    """
    named = _named_tables(config)
    if not named:
        return []
    # The type mapping imports pyarrow, the wiring capture's and the sink's settings: only a
    # configuration that names tables pays for them (docs/decisions/0119-*).
    from daemon.wiring import source_conninfo  # noqa: PLC0415
    from sink import NUMERIC_OID, ColumnTypeError, delta_type  # noqa: PLC0415

    problems: list[str] = []
    with psycopg.connect(
        source_conninfo(config), autocommit=True, connect_timeout=max(1, round(connect_timeout))
    ) as conn:
        for path, name in named:
            schema, table = parse_table_name(name)
            columns = {
                str(n): (int(str(t)), int(str(m)))
                for n, t, m in conn.execute(_COLUMNS, (schema, table)).fetchall()
            }
            if not columns:
                problems.append(f"{path}: the source has no table {name}")
                continue
            for column, override in config.sink.column_types.get(name, {}).items():
                where = f"sink.column_types.{name}.{column}"
                found = columns.get(column)
                if found is None:
                    problems.append(f"{where}: {name} has no column {column!r}")
                    continue
                try:
                    delta_type(found[0], found[1], override)
                except ColumnTypeError as exc:
                    kind = "numeric" if found[0] == NUMERIC_OID else _type_name(conn, found[0])
                    problems.append(f"{where}: {exc} ({column!r} is {kind})")
    return problems


def _named_tables(config: AppConfig) -> list[tuple[str, str]]:
    return list(_named(config))


def _named(config: AppConfig) -> Iterator[tuple[str, str]]:
    for name in config.sink.column_types:
        yield f"sink.column_types.{name}", name
    per_table = config.sink.on_unrepresentable
    if isinstance(per_table, dict):
        for name in per_table:
            yield f"sink.on_unrepresentable.{name}", name


def _type_name(conn: psycopg.Connection[tuple[object, ...]], type_oid: int) -> str:
    row = conn.execute(sql.SQL("SELECT format_type(%s, NULL)"), (type_oid,)).fetchone()
    return str(row[0]) if row else f"type OID {type_oid}"


__all__ = ["source_problems"]
