"""Legal edge values end to end: none stops the daemon, none is silently changed.

One row per value, each inserted in its own transaction, into a table whose typed columns
cannot hold some of them (``±infinity``, BC and far-future dates and timestamps, NaN in a
``numeric(10,2)``, a multi-dimensional array and one with lower bound 0 in ``int[]``),
next to values every column holds exactly (NaN and infinite floats, ``time '24:00'``,
``json`` with duplicate keys and odd whitespace, ``money`` at its limits, ``char(n)``
padding, astral-plane characters, empty and unbounded ranges, empty arrays and arrays
holding NULLs). Then a few updates move rows into and out of edge values.

With default settings the daemon (wired as the CLI wires it) never stops, and each value
in Delta, read with delta-rs, is either exactly the source value or stored under its
documented convention (``sink.unrepresentable``) with a row in ``_wal2delta_rejects``
whose ``original`` PostgreSQL reads back as the very value in the source row; no exact
value has a reject. ``wal2delta verify`` reports the table equal.

With ``sink.column_types: string`` for every column, every value equals, as text, what a
native subscriber of the same publication holds (``col::text`` in the daemon's session
settings), and nothing is rejected.

Runs on PostgreSQL 18 and 15, in text and in binary mode.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

import capture.snapshot
from capture import TEXT_FORM_SETTINGS
from capture.slots import current_wal_lsn
from daemon.verify import verify_source
from daemon.wiring import prepare_configured_source
from sink import rejects_path, table_path
from tests.support.configs import make_config
from tests.support.harness import run_daemon
from tests.support.oracle import read_delta
from tests.support.subscriber import native_subscriber, wait_for_subscriber

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

COLUMNS: dict[str, str] = {
    "n2": "numeric(10,2)",
    "ts": "timestamp",
    "tstz": "timestamptz",
    "d": "date",
    "a1": "int[]",
    "a2": "int[]",
    "f4": "real",
    "f8": "double precision",
    "t": "time",
    "j": "json",
    "m": "money",
    "c": "char(5)",
    "s": "text",
    "r": "int4range",
    "tr": "tstzrange",
    "na": "numeric(10,2)[]",
    "tsa": "timestamp[]",
}
DDL = (
    "CREATE TABLE public.edge (id int PRIMARY KEY, "
    + ", ".join(f"{name} {kind}" for name, kind in COLUMNS.items())
    + ")"
)


class _SourceText:
    """Expected: the source's own text form (``col::text``), for columns stored as text."""


SOURCE_TEXT = _SourceText()
NAN = float("nan")
INF = float("inf")
TS_MAX = datetime(9999, 12, 31, 23, 59, 59, 999_999)
TS_MIN = datetime(1, 1, 1)


@dataclass(frozen=True)
class Edge:
    """One value: its column, SQL literal, what Delta holds, and the convention's reason."""

    column: str
    literal: str
    stored: object
    reason: str | None = None


EDGES: list[Edge] = [
    Edge("ts", "infinity", TS_MAX, "infinity"),
    Edge("ts", "-infinity", TS_MIN, "infinity"),
    Edge("ts", "4713-01-01 00:00:00 BC", None, "out_of_range"),
    Edge("ts", "2024-02-29 12:34:56.789", datetime(2024, 2, 29, 12, 34, 56, 789_000)),
    Edge("tstz", "294276-12-31 23:59:59.999999+00", None, "out_of_range"),
    Edge("tstz", "infinity", TS_MAX.replace(tzinfo=UTC), "infinity"),
    Edge("tstz", "-infinity", TS_MIN.replace(tzinfo=UTC), "infinity"),
    Edge("tstz", "2024-01-01 00:00:00+05", datetime(2023, 12, 31, 19, tzinfo=UTC)),
    Edge("d", "infinity", date(9999, 12, 31), "infinity"),
    Edge("d", "-infinity", date(1, 1, 1), "infinity"),
    Edge("d", "5874897-12-31", None, "out_of_range"),
    Edge("d", "0001-01-01 BC", None, "out_of_range"),
    Edge("d", "0001-01-01", date(1, 1, 1)),
    Edge("n2", "NaN", None, "not_finite"),
    Edge("n2", "-99999999.99", Decimal("-99999999.99")),
    Edge("a2", "{{1,2},{3,4}}", None, "multidimensional"),
    Edge("a1", "[0:1]={7,8}", [7, 8], "lower_bound"),
    Edge("a1", "{}", []),
    Edge("a1", "{NULL,1,NULL}", [None, 1, None]),
    Edge("f4", "NaN", NAN),
    Edge("f4", "Infinity", INF),
    Edge("f4", "-Infinity", -INF),
    Edge("f8", "NaN", NAN),
    Edge("f8", "Infinity", INF),
    Edge("f8", "-Infinity", -INF),
    Edge("f8", "-0", -0.0),
    Edge("f8", "2.2250738585072014e-308", 2.2250738585072014e-308),
    Edge("t", "24:00", SOURCE_TEXT),
    Edge("j", '{"a": 1, "a": 2,   "b" : [ 1 , 2 ] }', SOURCE_TEXT),
    Edge("m", "-92233720368547758.08", SOURCE_TEXT),
    Edge("m", "92233720368547758.07", SOURCE_TEXT),
    Edge("c", "ab", "ab   "),
    Edge("s", "astral \U0001f600 \U0001d11e", "astral \U0001f600 \U0001d11e"),
    Edge("r", "empty", SOURCE_TEXT),
    Edge("r", "(,)", SOURCE_TEXT),
    Edge("r", "[1,)", SOURCE_TEXT),
    Edge("tr", "(,2024-01-01 00:00:00+00]", SOURCE_TEXT),
    Edge("tr", "empty", SOURCE_TEXT),
    Edge("na", "{1.5,NaN,NULL}", [Decimal("1.50"), None, None], "not_finite"),
    Edge("tsa", "{infinity,2020-01-01 00:00:00}", [TS_MAX, datetime(2020, 1, 1)], "infinity"),
]


def _row(column: str, literal: str) -> int:
    return next(i for i, e in enumerate(EDGES, 1) if (e.column, e.literal) == (column, literal))


UPDATES: list[tuple[int, str, str]] = [
    # (row, column, literal): rows leave their edge value, another one takes one.
    (_row("ts", "infinity"), "ts", "2001-01-01 00:00:00"),
    (_row("ts", "2024-02-29 12:34:56.789"), "ts", "infinity"),
    (_row("n2", "NaN"), "n2", "12.5"),
    (_row("d", "0001-01-01"), "ts", "-infinity"),
]


def _expected_rows(updates: list[tuple[int, str, str]]) -> dict[int, dict[str, Edge]]:
    rows: dict[int, dict[str, Edge]] = {i: {e.column: e} for i, e in enumerate(EDGES, 1)}
    for row, column, literal in updates:
        known = [e for e in EDGES if (e.column, e.literal) == (column, literal)]
        rows[row] = {column: known[0] if known else Edge(column, literal, _plain(column, literal))}
    return rows


def _plain(column: str, literal: str) -> object:
    if COLUMNS[column] == "timestamp":
        return datetime.fromisoformat(literal)
    return Decimal(literal).quantize(Decimal("0.01"))


def _write_workload(dsn: str, updates: list[tuple[int, str, str]]) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for row, edge in enumerate(EDGES, 1):
            conn.execute(
                sql.SQL("INSERT INTO edge (id, {}) VALUES (%s, %s)").format(
                    sql.Identifier(edge.column)
                ),
                (row, edge.literal),
            )
        for row, column, literal in updates:
            with conn.transaction():
                conn.execute(
                    sql.SQL("UPDATE edge SET {} = NULL WHERE id = %s").format(
                        sql.Identifier(EDGES[row - 1].column)
                    ),
                    (row,),
                )
                conn.execute(
                    sql.SQL("UPDATE edge SET {} = %s WHERE id = %s").format(sql.Identifier(column)),
                    (literal, row),
                )
        return current_wal_lsn(conn)


def _same(actual: object, expected: object) -> bool:
    if isinstance(expected, float) and math.isnan(expected):
        return isinstance(actual, float) and math.isnan(actual)
    if isinstance(expected, float) and expected == 0:
        return actual == 0 and math.copysign(1, actual) == math.copysign(1, expected)  # type: ignore[arg-type]
    if isinstance(expected, list) and isinstance(actual, list):
        return len(actual) == len(expected) and all(map(_same, actual, expected))
    return actual == expected


def _session(dsn: str) -> psycopg.Connection[tuple[Any, ...]]:
    """A connection printing text forms as the daemon's connections do."""
    options = " ".join(f"-c {k}={v}" for k, v in TEXT_FORM_SETTINGS.items())
    return psycopg.connect(dsn, autocommit=True, options=options)


def _source_texts(dsn: str) -> dict[int, dict[str, str | None]]:
    with _session(dsn) as conn:
        # The output function's text (format), not a cast: bpchar::text drops the padding.
        names = sql.SQL(", ").join(
            sql.SQL("CASE WHEN {c} IS NOT NULL THEN format('%s', {c}) END").format(
                c=sql.Identifier(c)
            )
            for c in COLUMNS
        )
        rows = conn.execute(sql.SQL("SELECT id, {} FROM edge").format(names)).fetchall()
    return {row[0]: dict(zip(COLUMNS, row[1:], strict=True)) for row in rows}


def _reads_back(dsn: str, row: int, column: str, original: str) -> bool:
    """Whether PostgreSQL reads ``original`` as the value the source row holds."""
    with _session(dsn) as conn:
        found = conn.execute(
            sql.SQL(
                "SELECT format('%%s', {lit}::{kind}) = format('%%s', {col}) FROM edge WHERE id = %s"
            ).format(
                lit=sql.Literal(original),
                kind=sql.SQL(COLUMNS[column]),
                col=sql.Identifier(column),
            ),
            (row,),
        ).fetchone()
    return bool(found and found[0])


def _config(dsn: str, lake: Path, slot: str, *, binary: bool, **sink: Any) -> Any:
    return make_config(
        dsn,
        lake,
        ["public.edge"],
        slot=slot,
        source={"binary": binary, "publication": "edge_pub"},
        sink=sink,
    )


def _edge_lakes(dsn: str, tmp_path: Path, spark_session: Any, *, binary: bool) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(DDL)
    default = _config(dsn, tmp_path / "lake", "w2d_default", binary=binary)
    as_text = _config(
        dsn,
        tmp_path / "text_lake",
        "w2d_text",
        binary=binary,
        column_types={"public.edge": dict.fromkeys(COLUMNS, "string")},
    )
    prepare_configured_source(default)
    prepare_configured_source(as_text)
    with native_subscriber(dsn, DDL, ["edge_pub"]) as subscriber:
        end = _write_workload(dsn, UPDATES)
        run_daemon(dsn, default, spark_session, end)
        run_daemon(dsn, as_text, spark_session, end)
        wait_for_subscriber(dsn, subscriber, end)
        _check_default_lake(dsn, tmp_path / "lake", default, spark_session, UPDATES)
        _check_text_lake(subscriber, tmp_path / "text_lake")


def _check_default_lake(
    dsn: str, lake: Path, config: Any, spark: Any, updates: list[tuple[int, str, str]]
) -> None:
    delta = {r["id"]: r for r in read_delta(table_path(str(lake), "public", "edge"))}
    source = _source_texts(dsn)
    expected = _expected_rows(updates)
    assert set(delta) == set(source) == set(expected)
    rejects = read_delta(rejects_path(str(lake)))
    by_cell = {(json.loads(r["key"])["id"], r["column_name"]): r for r in rejects}
    wrong: list[str] = []
    for row, edges in expected.items():
        for column in COLUMNS:
            edge = edges.get(column)
            actual = delta[row][column]
            if edge is None:
                if actual is not None:
                    wrong.append(f"row {row} {column}: {actual!r}, expected NULL")
                continue
            want = source[row][column] if edge.stored is SOURCE_TEXT else edge.stored
            if not _same(actual, want):
                wrong.append(f"row {row} {column} ({edge.literal}): {actual!r} != {want!r}")
    # Every value under a convention has its reject, reading back as the source value;
    # updates add rejects of their own, so compare the newest per cell with the rows.
    for row, edges in expected.items():
        for column, edge in edges.items():
            reject = by_cell.get((str(row), column))
            if edge.reason is None:
                continue
            if reject is None:
                wrong.append(f"row {row} {column} ({edge.literal}): no reject")
                continue
            if reject["reason"] != edge.reason or not _reads_back(
                dsn, row, column, reject["original"]
            ):
                wrong.append(f"row {row} {column}: reject {reject!r}")
    exact_cells = {
        (str(row), column)
        for row, edges in expected.items()
        for column, edge in edges.items()
        if edge.reason is None and (row, column) not in _formerly_rejected(updates)
    }
    wrong += [f"exact value rejected: {cell}" for cell in exact_cells & set(by_cell)]
    assert not wrong, "\n".join(wrong)
    report = verify_source(config, spark=spark, wait=5)
    assert [(t.table, t.status) for t in report.tables] == [("public.edge", "match")], report


def _formerly_rejected(updates: list[tuple[int, str, str]]) -> set[tuple[int, str]]:
    """Cells an update moved out of an edge value: their earlier reject stays on record."""
    return {
        (row, column)
        for row, column, _ in updates
        if EDGES[row - 1].column == column and EDGES[row - 1].reason is not None
    }


def _check_text_lake(subscriber: str, lake: Path) -> None:
    delta = {r["id"]: r for r in read_delta(table_path(str(lake), "public", "edge"))}
    reference = _source_texts(subscriber)
    assert set(delta) == set(reference)
    wrong = [
        f"row {row} {column}: {delta[row][column]!r} != {text!r}"
        for row, texts in reference.items()
        for column, text in texts.items()
        if delta[row][column] != text
    ]
    assert not wrong, "\n".join(wrong)
    assert not Path(rejects_path(str(lake))).exists()


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_edge_values_on_postgresql_18(
    pg18_dsn: str, tmp_path: Path, spark_session: object, binary: bool
) -> None:
    _edge_lakes(pg18_dsn, tmp_path, spark_session, binary=binary)


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_edge_values_on_postgresql_15(
    pg15_dsn: str, tmp_path: Path, spark_session: object, binary: bool
) -> None:
    _edge_lakes(pg15_dsn, tmp_path, spark_session, binary=binary)


@pytest.mark.parametrize("reader", ["adbc", "csv"])
def test_edge_values_in_the_initial_snapshot(
    pg18_dsn: str,
    tmp_path: Path,
    spark_session: Any,
    reader: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The bulk path (appends, not MERGEs) stores the same conventions and merges the
    # rejects of the copied rows, keyed by the copy's LSN and ordinals.
    monkeypatch.setattr(capture.snapshot, "adbc_available", lambda: reader == "adbc")
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute(DDL)
    end = _write_workload(pg18_dsn, [])
    config = make_config(
        pg18_dsn,
        tmp_path / "lake",
        ["public.edge"],
        source={"publication": "edge_pub"},
        snapshot={"mode": "initial"},
    )
    prepare_configured_source(config)
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        end = current_wal_lsn(conn)
    run_daemon(pg18_dsn, config, spark_session, end)
    _check_default_lake(pg18_dsn, tmp_path / "lake", config, spark_session, [])
