"""A primary failover of a PostgreSQL 17 or 18 source: the daemon continues on the promoted
standby from the failover slot the standby kept, copies no table again and ends equal.

A primary and a physical standby (``pg_basebackup -R``: ``primary_conninfo`` with its
``dbname``, ``primary_slot_name``) that synchronizes failover slots
(``sync_replication_slots``, ``hot_standby_feedback``); the primary's
``synchronized_standby_slots`` names the standby's slot, so the daemon never receives a
change the standby lacks. ``wal2delta run`` (a subprocess) gets both hosts with
``target_session_attrs=read-write`` and an initial snapshot. Once the standby keeps a
copy of the slot (``synced`` and not ``temporary`` there), the primary is stopped
immediately and the standby promoted, and the workload goes on there. The daemon
reconnects to the promoted server on its own and streams from the copied slot:
every Delta table equals its source, the snapshot ran once, and no Delta table's history
has a write after the failover other than a MERGE or a compaction - no append of a copy,
no overwrite, truncate or delete (docs/decisions/0107-failover-slots.md).
"""

from __future__ import annotations

import contextlib
import itertools
import re
import shutil
import signal
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from deltalake import DeltaTable

from capture import slot_state
from devtools.pgserver import LocalPostgres, free_tcp_port, postgres_bin
from sink import read_commit_records, table_path
from tests.conftest import TEST_SERVER_SETTINGS, server_dir
from tests.support.harness import log_events, start_daemon, table_mismatches, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]

SLOT = "w2d_failover"
STANDBY_SLOT = "w2d_standby"
TABLES = ["failover.accounts", "failover.events"]

AFTER_FAILOVER = {"MERGE", "WRITE Append", "OPTIMIZE"}
"""The only Delta operations allowed after the failover: applied changes (replayed ones
included; rows of new keys appended, sink/steps/step_append.py) and the daemon's compaction,
which changes no data - no copy of a table."""


def _operation(commit: dict[str, Any]) -> str:
    """A Delta commit's operation, with its save mode for a write (``WRITE Append``)."""
    mode = commit.get("operationParameters", {}).get("mode")
    return str(commit["operation"]) if mode is None else f"{commit['operation']} {mode}"


@contextlib.contextmanager
def _primary_and_standby(
    *, synchronized: bool, major: int = 18
) -> Iterator[tuple[LocalPostgres, LocalPostgres]]:
    """A PostgreSQL ``major`` (17 or 18) primary and its streaming standby, which
    synchronizes failover slots; ``synchronized``: the primary's
    ``synchronized_standby_slots`` names the standby's."""
    extra = {"synchronized_standby_slots": STANDBY_SLOT} if synchronized else {}
    bin_dir = postgres_bin(major)
    primary = LocalPostgres(
        server_dir(f"failover-primary-{major}"),
        bin_dir=bin_dir,
        settings={**TEST_SERVER_SETTINGS, **extra},
    )
    standby = LocalPostgres(
        server_dir(f"failover-standby-{major}"),
        bin_dir=bin_dir,
        settings={
            **TEST_SERVER_SETTINGS,
            "hot_standby_feedback": "on",
            "sync_replication_slots": "on",
        },
    )
    try:
        primary.init()
        primary.start()
        with psycopg.connect(primary.dsn(), autocommit=True) as conn:
            conn.execute("SELECT pg_create_physical_replication_slot(%s, true)", (STANDBY_SLOT,))
        standby.standby_of(primary, STANDBY_SLOT)
        standby.start()
        yield primary, standby
    finally:
        for server in (standby, primary):
            server.destroy()
            shutil.rmtree(server.data_dir.parent, ignore_errors=True)


@pytest.fixture(
    params=[pytest.param(18, marks=pytest.mark.pg18), pytest.param(17, marks=pytest.mark.pg17)],
    ids=["pg18", "pg17"],
)
def clusters(request: pytest.FixtureRequest) -> Iterator[tuple[LocalPostgres, LocalPostgres]]:
    """The primary waits for the standby before it sends wal2delta a change (PostgreSQL 18
    and 17, the versions with failover slots)."""
    with _primary_and_standby(synchronized=True, major=request.param) as servers:
        yield servers


@pytest.fixture
def unsynchronized_clusters() -> Iterator[tuple[LocalPostgres, LocalPostgres]]:
    """The primary sends wal2delta changes its standby may not have (PostgreSQL 18)."""
    with _primary_and_standby(synchronized=False) as servers:
        yield servers


def _write_config(
    path: Path, dsn: str, lake: Path, metrics_port: int, *, on_slot_loss: str = "stop"
) -> None:
    path.write_text(
        yaml.safe_dump(
            {
                "source": {
                    "dsn": dsn,
                    "slot": SLOT,
                    "publication": SLOT,
                    "tables": TABLES,
                    "failover": True,
                    "status_interval": "300ms",
                    "reconnect": {"initial_delay": "200ms", "max_delay": "1s"},
                },
                "snapshot": {"mode": "initial", "on_slot_loss": on_slot_loss},
                "sink": {"path": str(lake), "batch": {"max_rows": 2000, "max_age": "200ms"}},
                "metrics": {"enabled": True, "host": "127.0.0.1", "port": metrics_port},
                "logging": {"format": "json", "level": "info"},
            }
        )
    )


def _create_tables(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE SCHEMA failover;"
            "CREATE TABLE failover.accounts (id int PRIMARY KEY, balance bigint, note text);"
            "CREATE TABLE failover.events (id bigint PRIMARY KEY, kind text, payload text);"
            "INSERT INTO failover.accounts SELECT g, g * 10, 'opened'"
            " FROM generate_series(1, 2000) g;"
            "INSERT INTO failover.events SELECT g, 'seed', md5(g::text)"
            " FROM generate_series(1, 1000) g"
        )


def _workload(dsn: str, rounds: Iterator[int], transactions: int) -> None:
    """Inserts, updates and deletes on both tables: ``transactions`` transactions, each one
    the next round of ``rounds`` (a round number is never used twice)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for n in itertools.islice(rounds, transactions):
            with conn.transaction():
                conn.execute(
                    "UPDATE failover.accounts SET balance = balance + %s, note = %s "
                    "WHERE id %% 97 = %s",
                    (n, f"round {n}", n % 97),
                )
                conn.execute(
                    "INSERT INTO failover.events SELECT 100000 * %s + g, 'round', md5(g::text) "
                    "FROM generate_series(1, 20) g",
                    (n,),
                )
                conn.execute("DELETE FROM failover.events WHERE id %% 101 = %s", (n % 101,))
                conn.execute(
                    "INSERT INTO failover.accounts VALUES (10000 + %s, %s, 'new') "
                    "ON CONFLICT (id) DO UPDATE SET balance = 0",
                    (n, n),
                )
                conn.execute("DELETE FROM failover.accounts WHERE id = %s", (n * 7,))


def _both_hosts(primary: LocalPostgres, standby: LocalPostgres) -> str:
    """The daemon's DSN: both servers, whichever accepts writes."""
    return (
        f"host=127.0.0.1,127.0.0.1 port={primary.port},{standby.port} user=postgres "
        "dbname=postgres target_session_attrs=read-write"
    )


def _wait_until_the_standby_keeps_the_slot(
    primary: LocalPostgres, standby: LocalPostgres, rounds: Iterator[int]
) -> None:
    def kept() -> bool:
        # The standby keeps its copy once the primary's slot has moved on; keep it moving.
        _workload(primary.dsn(), rounds, 1)
        return _standby_keeps_the_slot(standby)

    wait_until(kept, 90, "the standby to keep a copy of the failover slot")


def _standby_keeps_the_slot(standby: LocalPostgres) -> bool:
    with psycopg.connect(standby.dsn(), autocommit=True) as conn:
        row = conn.execute(
            "SELECT synced, temporary, failover FROM pg_replication_slots WHERE slot_name = %s",
            (SLOT,),
        ).fetchone()
    return row is not None and row == (True, False, True)


def _metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text: str = response.read().decode()
    return text


def _value(text: str, sample: str) -> float | None:
    found = re.search(rf"^{re.escape(sample)} (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else None


def _lake_matches(dsn: str, lake: Path, daemon: subprocess.Popen[bytes], log: Path) -> bool:
    """Every Delta table exists and equals its source table at ``dsn``; the daemon runs."""
    assert daemon.poll() is None, log.read_text()[-3000:]
    for name in TABLES:
        schema, _, table = name.partition(".")
        if not DeltaTable.is_deltatable(table_path(str(lake), schema, table)):
            return False
    return table_mismatches(dsn, lake, TABLES) == []


def _delta_versions(lake: Path) -> dict[str, int]:
    versions = {}
    for name in TABLES:
        schema, _, table = name.partition(".")
        versions[name] = DeltaTable(table_path(str(lake), schema, table)).version()
    return versions


def test_a_promoted_standby_continues_from_the_synchronized_slot_and_copies_nothing_again(
    clusters: tuple[LocalPostgres, LocalPostgres], tmp_path: Path
) -> None:
    primary, standby = clusters
    dsn = _both_hosts(primary, standby)
    _create_tables(primary.dsn())
    lake, config, log = tmp_path / "lake", tmp_path / "source.yaml", tmp_path / "daemon.log"
    metrics_port = free_tcp_port()
    _write_config(config, dsn, lake, metrics_port)
    daemon = start_daemon(config, log)
    try:
        rounds = itertools.count(1)
        _workload(primary.dsn(), rounds, 40)
        wait_until(
            lambda: _lake_matches(primary.dsn(), lake, daemon, log),
            180,
            "the snapshot and the first changes in Delta",
        )

        _wait_until_the_standby_keeps_the_slot(primary, standby, rounds)

        def reported() -> bool:
            text = _metrics(metrics_port)
            return (
                _value(text, "wal2delta_slot_failover") == 1
                and _value(text, 'wal2delta_failover_standby_slots{state="ready"}') == 1
            )

        wait_until(reported, 30, "the metrics to show a failover slot and a ready standby")
        with psycopg.connect(primary.dsn(), autocommit=True) as conn:
            state = slot_state(conn, SLOT)
        assert state is not None
        assert (state.failover, state.synced) == (True, False)

        before = _delta_versions(lake)
        primary.stop("immediate")
        standby.promote()
        _workload(standby.dsn(), rounds, 40)

        wait_until(
            lambda: _lake_matches(standby.dsn(), lake, daemon, log),
            120,
            "the daemon to continue on the promoted standby and Delta to match it",
        )
        with psycopg.connect(standby.dsn(), autocommit=True) as conn:
            state = slot_state(conn, SLOT)
        assert state is not None
        assert state.active_pid is not None, "the daemon streams from the copied slot"
        assert (state.failover, state.synced) == (True, True)

        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(90) == 0, log.read_text()[-3000:]
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait(30)

    events = log_events(log.read_text())
    names = [event.get("event") for event in events]
    assert names.count("snapshot started") == 1, "the tables were copied again"
    assert "restarting an interrupted snapshot" not in names
    assert names.count("replication started") >= 2
    assert "retryable error; reconnecting" in names
    for name in TABLES:
        schema, _, table = name.partition(".")
        history = DeltaTable(table_path(str(lake), schema, table)).history()
        after = [commit for commit in history if commit["version"] > before[name]]
        operations = {_operation(commit) for commit in after}
        assert "MERGE" in operations, (name, after)
        assert operations <= AFTER_FAILOVER, (name, after)
    # Every batch recorded the timeline it was streamed on; the standby had every change
    # the lake holds, so the lake was not found ahead of it.
    timelines = {r["timeline"] for r in read_commit_records(str(lake)) if r["high_lsn"] is not None}
    assert timelines == {1, 2}
    assert "the lake is ahead of the promoted server; every table is copied again" not in names


@pytest.mark.pg18
def test_a_lake_ahead_of_the_promoted_standby_stops_the_daemon_or_is_copied_again(
    unsynchronized_clusters: tuple[LocalPostgres, LocalPostgres], tmp_path: Path
) -> None:
    """Without ``synchronized_standby_slots`` the daemon writes changes the standby never
    receives; after the promotion the new timeline writes other transactions at the same
    positions (``capture/timeline.py``). With ``on_slot_loss: stop`` the daemon stops and
    says why; with ``resync`` it copies every table again and ends equal to the promoted
    server."""
    primary, standby = unsynchronized_clusters
    dsn = _both_hosts(primary, standby)
    _create_tables(primary.dsn())
    lake, config, log = tmp_path / "lake", tmp_path / "source.yaml", tmp_path / "daemon.log"
    _write_config(config, dsn, lake, free_tcp_port())
    daemon = start_daemon(config, log)
    try:
        rounds = itertools.count(1)
        _workload(primary.dsn(), rounds, 20)
        wait_until(lambda: _lake_matches(primary.dsn(), lake, daemon, log), 180, "the lake")

        _wait_until_the_standby_keeps_the_slot(primary, standby, rounds)
        wait_until(lambda: _lake_matches(primary.dsn(), lake, daemon, log), 60, "the lake")

        # The standby stops receiving; the daemon writes what it will never have.
        standby.stop()
        _workload(primary.dsn(), rounds, 30)
        wait_until(
            lambda: _lake_matches(primary.dsn(), lake, daemon, log),
            60,
            "the changes the standby lacks in Delta",
        )
        primary.stop("immediate")
        standby.start()
        standby.promote()
        # The new timeline: other transactions at the positions of the lost ones, touching
        # the same rows (round numbers go on, so its rows differ from the lost ones).
        _workload(standby.dsn(), rounds, 40)
        assert daemon.wait(120) == 1, log.read_text()[-3000:]
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait(30)
    stopped = [e for e in log_events(log.read_text()) if e.get("event") == "stopped by error"]
    assert stopped, log.read_text()[-3000:]
    error = str(stopped[-1]["error"])
    assert stopped[-1]["error_type"] == "LakeAheadOfServerError", error
    assert "streamed on timeline 1, which ended at" in error, error
    assert "Set snapshot.on_slot_loss: resync" in error, error
    assert table_mismatches(standby.dsn(), lake, TABLES), "the lake still holds the lost rows"

    _write_config(config, dsn, lake, free_tcp_port(), on_slot_loss="resync")
    daemon = start_daemon(config, log)
    try:
        wait_until(
            lambda: _lake_matches(standby.dsn(), lake, daemon, log),
            180,
            "every table copied again from the promoted server",
        )
        _workload(standby.dsn(), rounds, 20)
        wait_until(
            lambda: _lake_matches(standby.dsn(), lake, daemon, log),
            120,
            "the stream to go on after the copies",
        )
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(90) == 0, log.read_text()[-3000:]
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait(30)
    names = [event.get("event") for event in log_events(log.read_text())]
    assert "the lake is ahead of the promoted server; every table is copied again" in names
    assert names.count("tables copied while streaming") >= 1
    records = read_commit_records(str(lake))
    assert max(int(str(r["timeline"])) for r in records if r["timeline"] is not None) == 2
