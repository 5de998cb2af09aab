"""``wal2delta run --endpos X`` returns while a transaction that began before X is open.

A large transaction is opened on a second connection and streamed to the daemon in part
(``logical_decoding_work_mem`` is 64kB on the test servers), a small one stays open on a
third connection (not sent at all), and other transactions commit around them. The run
with ``--endpos`` at the WAL position after those commits returns 0, as
``pg_recvlogical --endpos`` does, with every transaction committed up to X in Delta, none
of the open ones, a log line saying the acknowledged position stays before the open
transaction, and the slot's confirmed position at or before X. Once the open transactions
commit, the next run brings every table level with its source.
"""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
import yaml

from capture.slots import current_wal_lsn
from decoder import format_lsn
from sink import table_path
from tests.support.harness import confirmed_flush, log_events, run_cli, table_mismatches
from tests.support.oracle import compare_table, read_delta

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

DDL = """
CREATE TABLE public.events (id int PRIMARY KEY, body text);
CREATE TABLE public.small (id int PRIMARY KEY, v text);
"""
TABLES = ["public.events", "public.small"]
SLOT = "wal2delta_endpos"


def write_config(path: Path, dsn: str, lake: Path) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "source": {
                    "dsn": dsn,
                    "slot": SLOT,
                    "publication": SLOT,
                    "tables": TABLES,
                    "status_interval": "1s",
                },
                "sink": {"path": str(lake), "batch": {"max_rows": 500, "max_age": "200ms"}},
                "spool": {"dir": str(path.parent / "spool"), "memory_limit": "1MiB"},
                "metrics": {"enabled": False},
                "logging": {"format": "json", "level": "info"},
            }
        )
    )
    return path


def run_to(config: Path, endpos: int) -> list[dict[str, object]]:
    """``wal2delta run --endpos``; it must exit 0 (a hang fails on the harness's timeout)."""
    result = run_cli("run", "-c", str(config), "--endpos", format_lsn(endpos), timeout=240)
    assert result.returncode == 0, result.stderr[-4000:]
    return log_events(result.stderr)


def delta_ids(lake: Path, table: str) -> set[object]:
    path = Path(table_path(str(lake), "public", table))
    if not (path / "_delta_log").exists():
        return set()
    return {r["id"] for r in read_delta(path)}


@pytest.mark.parametrize("server", ["pg18", "pg15"])
def test_endpos_returns_while_a_transaction_begun_before_it_is_still_open(
    server: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    dsn: str = request.getfixturevalue(f"{server}_dsn")
    lake = tmp_path / "lake"
    config = write_config(tmp_path / "source.yaml", dsn, lake)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(DDL.encode())
        # Creates publication and slot; nothing to apply yet.
        run_to(config, current_wal_lsn(conn))
        with (
            psycopg.connect(dsn) as streamed,
            psycopg.connect(dsn) as unsent,
        ):
            # Far larger than logical_decoding_work_mem: the server streams it while open.
            streamed.execute(
                "INSERT INTO events SELECT g, repeat('x', 200) FROM generate_series(1, 5000) g"
            )
            # Small: the server keeps it until it commits, and sends nothing of it.
            unsent.execute("INSERT INTO small VALUES (1000, 'open')")
            conn.execute("INSERT INTO small SELECT g, 'v' || g FROM generate_series(1, 50) g")
            conn.execute("UPDATE small SET v = 'changed' WHERE id % 5 = 0")
            before_last = current_wal_lsn(conn)
            conn.execute("DELETE FROM small WHERE id = 7")
            endpos = current_wal_lsn(conn)
            events = run_to(config, endpos)
            # Everything committed up to endpos is in Delta, nothing of the open ones.
            assert delta_ids(lake, "events") == set()
            assert delta_ids(lake, "small") == set(range(1, 51)) - {7}
            assert not mismatches_of(conn, lake, "public.small")
            flushed = confirmed_flush(dsn, SLOT)
            assert before_last < flushed <= endpos
            open_events = [
                e for e in events if e["event"] == "endpos reached with a transaction open"
            ]
            assert len(open_events) == 1, [e["event"] for e in events]
            logged = open_events[0]
            assert logged["endpos"] == format_lsn(endpos)
            assert logged["flushed_lsn"] == format_lsn(flushed)
            assert logged["open_streamed_transactions"] == 1
            streamed.execute("UPDATE events SET body = 'late' WHERE id % 100 = 0")
            streamed.commit()
            unsent.commit()
        conn.execute("UPDATE events SET body = 'after' WHERE id % 7 = 0")
        conn.execute("UPDATE small SET v = 'after' WHERE id = 1000")
        end = current_wal_lsn(conn)
    run_to(config, end)
    found = table_mismatches(dsn, lake, TABLES)
    assert not found, "\n".join(found)
    assert confirmed_flush(dsn, SLOT) >= end


def mismatches_of(conn: psycopg.Connection[tuple[object, ...]], lake: Path, name: str) -> str:
    schema, _, table = name.partition(".")
    comparison = compare_table(conn, name, table_path(str(lake), schema, table))
    return "" if comparison.matches else comparison.describe()
