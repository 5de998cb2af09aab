"""Initial snapshot into Delta: copy, then stream, with nothing missed or doubled.

The Delta versions of ``tests/integration/test_snapshot.py``: the snapshot markers live in
the lake (``<path>/_wal2delta_snapshots``), copied rows carry the consistent point as their
LSN, and every Delta table, read with delta-rs, must equal its source table - with writes
racing the snapshot, after a snapshot interrupted half-way and restarted, and with the
publication's row filter and column list applied to the copy.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest

from capture.slots import current_wal_lsn
from config import AppConfig, SnapshotConfig
from daemon.supervisor import Supervisor
from daemon.wiring import sink_settings
from sink import BulkTarget, DeltaSink, table_path
from tests.support.configs import make_config
from tests.support.harness import wait_for_flush
from tests.support.oracle import compare_table, read_delta
from tests.support.sinks import InjectedFaultError

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROWS = 5000
SCHEMA = f"""
CREATE TABLE public.accounts (id int PRIMARY KEY, region text NOT NULL, balance numeric(10, 2),
                              secret text);
INSERT INTO public.accounts
SELECT g, CASE WHEN g % 3 = 0 THEN 'us' ELSE 'eu' END, g * 1.5, 'hidden ' || g
FROM generate_series(1, {ROWS}) g;
-- What a publication with row filter and column list shows, for comparing with Delta.
CREATE VIEW public.accounts_published AS
    SELECT id, region, balance FROM public.accounts WHERE region = 'eu';
"""


def _config(dsn: str, lake: Path, table: Any = "public.accounts") -> AppConfig:
    return make_config(
        dsn, lake, [table], snapshot={"mode": "initial"}, sink={"batch": {"max_rows": 1000}}
    )


def _delta_sink(spark_session: Any, config: AppConfig) -> DeltaSink:
    return DeltaSink(spark_session, sink_settings(config))


def _assert_matches(dsn: str, source: str, lake: Path, key: list[str] | None = None) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        comparison = compare_table(
            conn, source, table_path(str(lake), "public", "accounts"), key=key
        )
    assert comparison.source_rows > 0
    assert comparison.matches, comparison.describe()


def _writer(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for n in range(1, 201):
            conn.execute(
                "UPDATE accounts SET balance = balance + 1 WHERE id = %s", (n * 37 % ROWS + 1,)
            )
            conn.execute("INSERT INTO accounts VALUES (%s, 'eu', 1, 'new')", (100000 + n,))
            conn.execute("DELETE FROM accounts WHERE id = %s", (n * 53 % ROWS + 1,))


def test_snapshot_and_stream_meet_in_delta_without_gaps_or_duplicates(
    pg18_dsn: str, tmp_path: Path, spark_session: object
) -> None:
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
    lake = tmp_path / "lake"
    config = _config(pg18_dsn, lake)
    sink = _delta_sink(spark_session, config)
    stop = threading.Event()
    service = Supervisor(config, sink, stop_event=stop)
    runner = threading.Thread(target=service.run)
    writer = threading.Thread(target=_writer, args=(pg18_dsn,))
    runner.start()
    writer.start()  # changes race with the snapshot being taken and copied
    writer.join(120)
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        endpos = current_wal_lsn(conn)
    try:
        wait_for_flush(pg18_dsn, config.source.slot, endpos)
    finally:
        stop.set()
        runner.join(60)
    marker = sink.parts.markers.load_snapshot_marker(config.source.slot)
    assert marker is not None
    assert marker.status == "complete"
    _assert_matches(pg18_dsn, "public.accounts", lake)
    rows = read_delta(table_path(str(lake), "public", "accounts"))
    lsns = [r["_wal2delta_lsn"] for r in rows]
    assert all(isinstance(lsn, int) and lsn >= marker.consistent_point for lsn in lsns)
    assert sum(lsn == marker.consistent_point for lsn in lsns) >= ROWS - 400


class _FailingDeltaSink(DeltaSink):
    """A Delta sink whose bulk path fails once, after ``fail_after`` appends of the
    snapshot."""

    fail_after = 1

    def __init__(self, *arguments: Any, **keywords: Any) -> None:
        super().__init__(*arguments, **keywords)
        bulk = self.parts.bulk
        append_bulk = bulk.append_bulk

        def failing_once(target: BulkTarget, strings: Any, first_ordinal: int) -> int:
            if self.fail_after == 0:
                self.fail_after = -1
                raise InjectedFaultError("crash in the middle of the snapshot")
            self.fail_after -= 1
            return append_bulk(target, strings, first_ordinal)

        bulk.append_bulk = failing_once


def test_interrupted_snapshot_into_delta_restarts_cleanly(
    pg18_dsn: str, tmp_path: Path, spark_session: object
) -> None:
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
    lake = tmp_path / "lake"
    # Small chunks: the 5000 rows take several appends, and the crash comes between two.
    config = _config(pg18_dsn, lake).model_copy(
        update={"snapshot": SnapshotConfig(mode="initial", chunk_size=64 * 1024)}
    )
    failing = _FailingDeltaSink(spark_session, sink_settings(config))  # type: ignore[arg-type]
    with pytest.raises(InjectedFaultError):
        Supervisor(config, failing).run()
    marker = failing.parts.markers.load_snapshot_marker(config.source.slot)
    assert marker is not None
    assert marker.status == "in_progress"
    assert 0 < len(read_delta(table_path(str(lake), "public", "accounts"))) < ROWS
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM accounts WHERE id <= 100")  # changes while the daemon is down
        conn.execute("UPDATE accounts SET region = 'us' WHERE id BETWEEN 101 AND 200")
        endpos = current_wal_lsn(conn)
    restarted = _delta_sink(spark_session, config)
    Supervisor(config, restarted, endpos=endpos).run()
    marker = restarted.parts.markers.load_snapshot_marker(config.source.slot)
    assert marker is not None
    assert marker.status == "complete"
    _assert_matches(pg18_dsn, "public.accounts", lake)


def test_snapshot_into_delta_honours_the_row_filter_and_column_list(
    pg18_dsn: str, tmp_path: Path, spark_session: object
) -> None:
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
    lake = tmp_path / "lake"
    table = {
        "name": "public.accounts",
        "where": "region = 'eu'",
        "columns": ["id", "region", "balance"],
    }
    config = _config(pg18_dsn, lake, table)
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        endpos = current_wal_lsn(conn)
    Supervisor(config, _delta_sink(spark_session, config), endpos=endpos).run()
    rows = read_delta(table_path(str(lake), "public", "accounts"))
    assert {name for name in rows[0] if not name.startswith("_wal2delta")} == {
        "id",
        "region",
        "balance",
    }
    _assert_matches(pg18_dsn, "public.accounts_published", lake, key=["id"])
