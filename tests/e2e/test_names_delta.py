"""Every name PostgreSQL allows, from PostgreSQL 18 through the real daemon into Delta.

Schemas and tables whose names hold spaces, non-ASCII letters, a backtick or a dot, and
columns whose names hold a space, ``,;{}()=`` or non-ASCII letters, are snapshotted and
streamed (inserts, updates, a key change, deletes, a TRUNCATE, a column added with a
default) with ``sink.column_names: map``; every Delta table, read with delta-rs at its
``table_path``, must equal its source table, and ``wal2delta status --json`` must list
each table with its location and column map. With ``column_names: error`` the daemon
stops at the first such column with a message that names it and the option.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from psycopg import sql

from capture.slots import current_wal_lsn
from config import load_config
from daemon import run_service
from decoder import format_lsn, parse_lsn
from sink import table_path
from tests.support.harness import confirmed_flush, run_cli
from tests.support.oracle import compare_table, read_delta

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

# (schema, table): columns (name, type); the first column is the primary key unless the
# table is keyless (REPLICA IDENTITY FULL, no key).
TABLES: dict[tuple[str, str], list[tuple[str, str]]] = {
    ("Sales EU", "orders"): [
        ("order id", "int"),
        ("unit price", "numeric(10,2)"),
        ("qty (units)", "int"),
        ("note", "text"),
    ],
    ("public", "sp ace"): [("id", "int"), ("a b", "text")],
    ("public", "заказы"): [("id", "int"), ("имя", "text"), ("сумма", "numeric(10,2)")],
    ("public", "back`tick"): [("id", "int"), ("col`q", "text"), ("x.y", "text")],
    ("public", "v1.2 prices"): [("id", "int"), ("price €", "numeric(8,2)")],
    ("public", "odd columns"): [
        ("id", "int"),
        ("with space", "text"),
        ("with_x0020_space", "text"),  # what "with space" maps to, as a real name
        ("c,d", "text"),
        ("e;f", "text"),
        ("{g}", "text"),
        ("(h)", "text"),
        ("i=j", "text"),
        ("tab\there", "text"),
        ("ünï", "int"),
    ],
    ("public", "event log"): [("what (kind)", "text"), ("n = count", "int")],
}
KEYLESS = ("public", "event log")

EXPECTED_MAPS = {
    ("Sales EU", "orders"): {
        "order id": "order_x0020_id",
        "unit price": "unit_x0020_price",
        "qty (units)": "qty_x0020__x0028_units_x0029_",
    },
    ("public", "sp ace"): {"a b": "a_x0020_b"},
    ("public", "заказы"): {},
    ("public", "back`tick"): {},
    ("public", "v1.2 prices"): {"price €": "price_x0020_€"},
    ("public", "odd columns"): {
        "with space": "with_x0020_space",
        "with_x0020_space": "with_x005F_x0020_space",
        "c,d": "c_x002C_d",
        "e;f": "e_x003B_f",
        "{g}": "_x007B_g_x007D_",
        "(h)": "_x0028_h_x0029_",
        "i=j": "i_x003D_j",
        "tab\there": "tab_x0009_here",
    },
    ("public", "event log"): {
        "what (kind)": "what_x0020__x0028_kind_x0029_",
        "n = count": "n_x0020__x003D__x0020_count",
    },
}


def config_name(schema: str, table: str) -> str:
    """The configuration's spelling: exact names, a part with a dot in double quotes."""
    quoted = [f'"{part}"' if "." in part else part for part in (schema, table)]
    return ".".join(quoted)


def create_tables(conn: psycopg.Connection[Any]) -> None:
    conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier("Sales EU")))
    for (schema, table), columns in TABLES.items():
        name = sql.Identifier(schema, table)
        definition = [
            sql.SQL("{} {}").format(sql.Identifier(column), sql.SQL(typ)) for column, typ in columns
        ]
        if (schema, table) != KEYLESS:
            definition.append(sql.SQL("PRIMARY KEY ({})").format(sql.Identifier(columns[0][0])))
        conn.execute(sql.SQL("CREATE TABLE {} ({})").format(name, sql.SQL(", ").join(definition)))
        if (schema, table) == KEYLESS:
            conn.execute(sql.SQL("ALTER TABLE {} REPLICA IDENTITY FULL").format(name))


def insert(conn: psycopg.Connection[Any], key: tuple[str, str], *rows: tuple[object, ...]) -> None:
    columns = [c for c, _ in TABLES[key]]
    statement = sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
        sql.Identifier(*key),
        sql.SQL(", ").join(map(sql.Identifier, columns)),
        sql.SQL(", ").join(sql.Placeholder() * len(columns)),
    )
    with conn.cursor() as cursor:
        cursor.executemany(statement, rows)


def execute(conn: psycopg.Connection[Any], template: str, *identifiers: tuple[str, ...]) -> None:
    """Run ``template`` with ``{}`` filled by quoted identifiers (one tuple per name)."""
    conn.execute(sql.SQL(template).format(*(sql.Identifier(*i) for i in identifiers)))


def odd_row(n: int) -> tuple[object, ...]:
    return (n, f"s{n}", f"x{n}", f"c{n}", f"e{n}", f"g{n}", f"h{n}", f"i{n}", f"t{n}", n)


def before_the_slot(conn: psycopg.Connection[Any]) -> None:
    """Rows the initial snapshot copies."""
    insert(conn, ("Sales EU", "orders"), (1, 2.50, 3, "first"), (2, 10, 1, None))
    insert(conn, ("public", "sp ace"), (1, "one"), (2, "two"))
    insert(conn, ("public", "заказы"), (1, "Анна", 5.5))
    insert(conn, ("public", "back`tick"), (1, "q", "dot"))
    insert(conn, ("public", "v1.2 prices"), (1, 9.99))
    insert(conn, ("public", "odd columns"), *(odd_row(n) for n in range(1, 4)))
    insert(conn, KEYLESS, ("click", 1), ("click", 1), ("view", 2))


def streamed(conn: psycopg.Connection[Any]) -> None:
    """Inserts, updates, a key change, deletes, a TRUNCATE and an added column."""
    orders, odd = ("Sales EU", "orders"), ("public", "odd columns")
    insert(conn, orders, (3, 7.25, 2, "third"))
    execute(conn, 'UPDATE {} SET "unit price" = 3.75, note = NULL WHERE "order id" = 1', orders)
    execute(conn, 'UPDATE {} SET "order id" = 20 WHERE "order id" = 2', orders)
    execute(conn, 'DELETE FROM {} WHERE "order id" = 3', orders)
    execute(conn, "UPDATE {} SET \"a b\" = 'uno' WHERE id = 1", ("public", "sp ace"))
    execute(conn, "DELETE FROM {} WHERE id = 2", ("public", "sp ace"))
    insert(conn, ("public", "заказы"), (2, "Борис", 7))
    execute(conn, "UPDATE {} SET имя = 'Вера' WHERE id = 1", ("public", "заказы"))
    execute(conn, "TRUNCATE {}", ("public", "back`tick"))
    insert(conn, ("public", "back`tick"), (5, "after", "truncate"))
    execute(conn, 'UPDATE {} SET "price €" = 12.5 WHERE id = 1', ("public", "v1.2 prices"))
    insert(conn, odd, *(odd_row(n) for n in range(4, 7)))
    execute(conn, 'UPDATE {} SET "with space" = \'S\', "i=j" = NULL WHERE id = 2', odd)
    execute(conn, "UPDATE {} SET \"with_x0020_space\" = 'X', id = 30 WHERE id = 3", odd)
    execute(conn, "DELETE FROM {} WHERE id = 4", odd)
    execute(conn, "ALTER TABLE {} ADD COLUMN \"new col\" text DEFAULT 'd'", odd)
    execute(conn, "UPDATE {} SET \"new col\" = 'set' WHERE id = 5", odd)
    execute(conn, "INSERT INTO {} VALUES ('view', 2), ('click', 1)", KEYLESS)
    execute(
        conn,
        "DELETE FROM {} WHERE ctid = (SELECT min(ctid) FROM {} WHERE \"what (kind)\" = 'click')",
        KEYLESS,
        KEYLESS,
    )
    execute(
        conn,
        'UPDATE {} SET "n = count" = 9 WHERE ctid = '
        "(SELECT min(ctid) FROM {} WHERE \"what (kind)\" = 'view')",
        KEYLESS,
        KEYLESS,
    )


def write_config(
    dsn: str,
    tmp_path: Path,
    slot: str,
    column_names: str,
    tables: list[tuple[str, str]],
    *,
    snapshot: str = "initial",
) -> Path:
    path = tmp_path / f"{slot}.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "source": {
                    "dsn": dsn,
                    "slot": slot,
                    "publication": slot,
                    "tables": [config_name(*t) for t in tables],
                    "status_interval": "1s",
                },
                "snapshot": {"mode": snapshot},
                "sink": {
                    "path": str(tmp_path / "lake"),
                    "column_names": column_names,
                    "batch": {"max_rows": 2000, "max_age": "200ms"},
                },
                "spool": {"dir": str(tmp_path / "spool")},
                "metrics": {"enabled": False},
                "logging": {"format": "json", "level": "warning"},
            },
            allow_unicode=True,
        ),
        encoding="utf-8",
    )
    return path


def test_every_table_and_column_name_lands_in_delta_equal_to_the_source(
    pg18_dsn: str, tmp_path: Path
) -> None:
    config_file = write_config(pg18_dsn, tmp_path, "w2d_names", "map", list(TABLES))
    config = load_config(config_file)
    lake = str(config.sink.path)
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        create_tables(conn)
        before_the_slot(conn)
        # The snapshot: the slot is created and the existing rows copied.
        assert run_service(config, endpos=current_wal_lsn(conn), install_signal_handlers=False) == 0
        streamed(conn)
        endpos = current_wal_lsn(conn)
        assert run_service(config, endpos=endpos, install_signal_handlers=False) == 0
        assert confirmed_flush(pg18_dsn, config.source.slot) >= endpos

        mismatches = []
        for schema, table in TABLES:
            comparison = compare_table(
                conn, (schema, table), table_path(lake, schema, table), column_names="map"
            )
            assert comparison.source_rows > 0, f"{schema}.{table} must keep rows"
            if not comparison.matches:
                mismatches.append(comparison.describe())
        assert not mismatches, "\n".join(mismatches)

    odd = read_delta(table_path(lake, "public", "odd columns"))
    assert {"with_x0020_space", "with_x005F_x0020_space", "new_x0020_col", "ünï"} <= set(odd[0])
    assert sorted(r["new_x0020_col"] for r in odd) == ["d", "d", "d", "d", "set"]

    result = run_cli("status", "-c", str(config_file), "--json")
    assert result.returncode == 0, result.stderr
    status = json.loads(result.stdout)
    assert status["column_names"] == "map"
    listed = {(t["schema"], t["name"]): t for t in status["tables"]}
    assert set(listed) == set(TABLES)
    for key, expected in EXPECTED_MAPS.items():
        assert listed[key]["delta_path"] == table_path(lake, *key)
        assert listed[key]["delta_version"] is not None
        wanted = dict(expected)
        if key == ("public", "odd columns"):
            wanted["new col"] = "new_x0020_col"
        assert listed[key]["column_map"] == wanted, key
        assert listed[key]["refused_columns"] == []
    assert status["other_delta_tables"] == []
    human = run_cli("status", "-c", str(config_file))
    assert human.returncode == 0, human.stderr
    assert "column 'unit price' is Delta column 'unit_x0020_price'" in human.stdout
    assert table_path(lake, "Sales EU", "orders") in human.stdout


def test_column_names_error_stops_the_daemon_naming_the_column_and_the_option(
    pg18_dsn: str, tmp_path: Path
) -> None:
    orders = ("Sales EU", "orders")
    config_file = write_config(
        pg18_dsn, tmp_path, "w2d_names_error", "error", [orders], snapshot="never"
    )
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        create_tables(conn)
        # Slot and publication first: the row below is streamed.
        started = run_cli(
            "run", "-c", str(config_file), "--endpos", format_lsn(current_wal_lsn(conn))
        )
        assert started.returncode == 0, started.stderr
        insert(conn, orders, (1, 2.50, 3, "first"))
        endpos = format_lsn(current_wal_lsn(conn))
    result = run_cli("run", "-c", str(config_file), "--endpos", endpos)
    assert result.returncode == 1, result.stderr
    assert "'order id' of Sales EU.orders" in result.stderr
    assert "sink.column_names: map" in result.stderr
    assert confirmed_flush(pg18_dsn, "w2d_names_error") < parse_lsn(endpos)
    # status names the columns that stop the daemon.
    status = run_cli("status", "-c", str(config_file), "--json")
    assert status.returncode == 0, status.stderr
    (table,) = json.loads(status.stdout)["tables"]
    assert table["refused_columns"] == ["order id", "unit price", "qty (units)"]
    assert table["column_map"] == {}
    lake = load_config(config_file).sink.path
    assert not Path(table_path(str(lake), *orders), "_delta_log").exists()
