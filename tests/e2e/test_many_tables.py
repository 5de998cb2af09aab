"""Many tables through the real daemon: one table's MERGE fails while the others' commit.

``wal2delta run`` (a subprocess) applies the tables of a batch four at a time
(``sink.concurrency``). Once the first changes are durable, one table's Delta log gets an
unreadable next commit, so its next MERGE fails for real while the other tables' MERGEs of
the same batch commit. The batch fails: the slot's acknowledged position must stay before
the commit of the first transaction that touched the broken table - although every other
table already holds that transaction's changes and later ones - so the acknowledgement is
behind every table, never ahead of any (docs/architecture.md, invariant 1). Once the log is
repaired, a run to ``--endpos`` brings every table level with its source.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import psycopg
import pytest
import yaml
from deltalake import DeltaTable

from capture import slot_state
from decoder import format_lsn
from sink import table_path
from tests.support.harness import (
    confirmed_flush,
    log_events,
    run_statements,
    run_transaction,
    start_daemon,
    table_mismatches,
    wait_until,
)
from tests.support.oracle import delta_rows

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]

SLOT = "w2d_many"
TABLES = [f"many.t{number}" for number in range(8)]
BROKEN = "many.t3"
OTHERS = [name for name in TABLES if name != BROKEN]


def _write_config(path: Path, dsn: str, lake: Path) -> None:
    path.write_text(
        yaml.safe_dump(
            {
                "source": {
                    "dsn": dsn,
                    "slot": SLOT,
                    "publication": SLOT,
                    "tables": TABLES,
                    "status_interval": "300ms",
                    "reconnect": {"initial_delay": "500ms", "max_delay": "1s"},
                },
                "snapshot": {"mode": "initial"},
                "sink": {
                    "path": str(lake),
                    "concurrency": 4,
                    # One batch for the transactions committed within a second: the one
                    # that meets the broken table and the later ones fail together.
                    "batch": {"max_rows": 5000, "max_age": "1s", "close_when_idle": False},
                    # No compaction: nothing but a MERGE reads the broken log.
                    "compact_after_writes": 0,
                },
                "metrics": {"enabled": False},
                "logging": {"format": "json", "level": "info"},
            }
        )
    )


def _break_delta_log(lake: Path, name: str) -> Path:
    """Write an unreadable next commit into the table's log: its next MERGE fails.

    (The tests run as root: a log made read-only would not stop a write.)"""
    schema, _, table = name.partition(".")
    path = Path(table_path(str(lake), schema, table))
    version = DeltaTable(str(path)).version() + 1
    broken = path / "_delta_log" / f"{version:020d}.json"
    broken.write_text("this is not a Delta commit\n")
    return broken


def _has_row(lake: Path, name: str, key: int) -> bool:
    """Whether the Delta table of ``name`` exists and holds the row of ``key``."""
    schema, _, table = name.partition(".")
    path = Path(table_path(str(lake), schema, table))
    if not (path / "_delta_log").is_dir():
        return False
    return any(row["id"] == key for row in delta_rows(path))


def _flushed(dsn: str, target: int) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        state = slot_state(conn, SLOT)
    return state is not None and (state.confirmed_flush_lsn or 0) >= target


def _stop(daemon: subprocess.Popen[bytes]) -> None:
    """Stop the daemon as Kubernetes would: SIGTERM, then SIGKILL after a while."""
    daemon.send_signal(signal.SIGTERM)
    try:
        daemon.wait(60)
    except subprocess.TimeoutExpired:
        daemon.kill()
        daemon.wait(30)


def test_a_failing_merge_holds_the_acknowledgement_behind_every_table(
    pg18_dsn: str, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    config = tmp_path / "source.yaml"
    log = tmp_path / "daemon.log"
    _write_config(config, pg18_dsn, lake)
    run_statements(
        pg18_dsn,
        [
            "CREATE SCHEMA many",
            *(f"CREATE TABLE {t} (id int PRIMARY KEY, v int NOT NULL, note text)" for t in TABLES),
            *(f"INSERT INTO {t} SELECT g, g, 'seed' FROM generate_series(1, 20) g" for t in TABLES),
            f"CREATE PUBLICATION {SLOT} FOR TABLE {', '.join(TABLES)}",
        ],
    )
    daemon = start_daemon(config, log)
    try:
        # The snapshot; then a first transaction over every table, merged and acknowledged.
        wait_until(
            lambda: daemon.poll() is not None or all(_has_row(lake, t, 20) for t in TABLES),
            120,
            "the snapshot",
        )
        first = run_statements(
            pg18_dsn, [f"INSERT INTO {t} VALUES (100, 100, 'first')" for t in TABLES]
        )
        wait_until(
            lambda: (
                daemon.poll() is not None
                or (_flushed(pg18_dsn, first) and all(_has_row(lake, t, 100) for t in TABLES))
            ),
            120,
            "the first changes to be in Delta and acknowledged",
        )
        assert daemon.poll() is None, log.read_text()[-3000:]

        broken = _break_delta_log(lake, BROKEN)
        # Every table in one transaction, then later ones: all in the batch that fails.
        meets_broken = run_transaction(
            pg18_dsn,
            *(f"UPDATE {t} SET v = v + 1, note = 'second' WHERE id <= 10" for t in TABLES),
            *(f"INSERT INTO {t} VALUES (200, 200, 'second')" for t in TABLES),
        )
        run_transaction(pg18_dsn, *(f"DELETE FROM {t} WHERE id = 5" for t in OTHERS))
        later = run_transaction(
            pg18_dsn, *(f"INSERT INTO {t} VALUES (300, 300, 'third')" for t in TABLES)
        )

        # The other tables' MERGEs of the failed batch ran to their end.
        wait_until(
            lambda: all(_has_row(lake, t, 300) for t in OTHERS) or daemon.poll() is not None,
            90,
            "the tables that did not fail to hold the later transactions",
        )
        missing = [t for t in OTHERS if not _has_row(lake, t, 300)]
        assert not missing, f"{missing} lack the later transaction:\n{log.read_text()[-3000:]}"
        # Whether the daemon retries the batch or stopped on its failure, it acknowledges
        # nothing of it - not while it runs, nor when it stops.
        if daemon.poll() is None:
            time.sleep(2)  # several status intervals
        acknowledged = confirmed_flush(pg18_dsn, SLOT)
        assert first <= acknowledged <= meets_broken.commit_start, (
            f"acknowledged {format_lsn(acknowledged)}, past the commit at "
            f"{format_lsn(meets_broken.commit_start)} of a transaction not in {BROKEN}"
        )
        # A terminal error stops the daemon; a retryable one has it retry until stopped.
        exited = daemon.poll()
        if exited is None:
            _stop(daemon)
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait(30)
    output = log.read_text()
    assert exited != 0, "a daemon whose batch failed does not end as if it had succeeded"
    failures = [
        event
        for event in log_events(output)
        if event.get("level") in ("error", "warning") and BROKEN in str(event)
    ]
    assert failures, f"no error names {BROKEN}:\n{output[-3000:]}"
    acknowledged = confirmed_flush(pg18_dsn, SLOT)
    assert acknowledged <= meets_broken.commit_start, (
        f"acknowledged {format_lsn(acknowledged)} after the stop, past the commit at "
        f"{format_lsn(meets_broken.commit_start)} of a transaction not in {BROKEN}"
    )
    for name in OTHERS:
        assert not _has_row(lake, name, 5), f"{name} lacks the later transaction's delete"

    # Repaired, the daemon applies the failed batch again; every table ends equal.
    broken.unlink()
    final = start_daemon(config, log, "--endpos", format_lsn(later.wal_end))
    try:
        assert final.wait(180) == 0, log.read_text()[-3000:]
    finally:
        if final.poll() is None:
            final.kill()
            final.wait(30)
    assert confirmed_flush(pg18_dsn, SLOT) >= later.commit_start
    assert not table_mismatches(pg18_dsn, lake, TABLES)
    assert _has_row(lake, BROKEN, 300)
