"""The engine as a Sail cluster (issue 41): the daemon in ``connect`` mode against a Sail
server in local-cluster mode, started as its own process (``tests/support/sail_cluster``),
one server for the module.

* One pipeline run covering the end-to-end core: keyed tables, a table without a key, TOAST
  values left unchanged by updates, TRUNCATE, streamed and two-phase transactions with
  savepoints, columns added and dropped, and a table added to the publication while
  streaming (copied online).
* A short crash harness: ``test_crash.py``'s workload and kill points
  (``tests/support/crash_harness.py``) with four SIGKILLs of the daemon. A remote engine
  outlives a killed daemon, so a MERGE the dead daemon started may still run (and commit)
  while the next daemon replays its batch.
* The engine SIGKILLed mid-stream and started again on the same port: the daemon keeps
  running (the call in flight waits in pyspark's retries and, with the server back, fails
  as a lost operation, which is retryable: decision 0124), nothing is acknowledged while
  the engine is down, the lag metrics keep growing meanwhile and fall back afterwards.

Each test ends with every Delta table, read with delta-rs, equal to its source table.
"""

from __future__ import annotations

import signal
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from deltalake import DeltaTable

from capture.slots import current_wal_lsn
from devtools.pgserver import LocalPostgres
from tests.support.crash_harness import run_crash_harness
from tests.support.harness import (
    confirmed_flush,
    log_events,
    run_transaction,
    start_daemon,
    table_mismatches,
    wait_for_flush,
    wait_until,
)
from tests.support.sail_cluster import SailCluster, free_port, sail_cluster_server
from tests.support.scenarios import PROTOCOL_SCHEMA, PROTOCOL_TABLES, run_protocol_workload

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def sail_cluster_module() -> Iterator[SailCluster]:
    yield from sail_cluster_server()


@pytest.fixture
def sail_cluster(sail_cluster_module: SailCluster) -> SailCluster:
    """The module's server, running (a test before may have killed it)."""
    sail_cluster_module.ensure_running()
    return sail_cluster_module


def write_config(path: Path, document: dict[str, Any], url: str) -> Path:
    """``document`` with the engine at ``url`` (connect mode), written to ``path``."""
    sink = document.setdefault("sink", {})
    sink["spark"] = {"mode": "connect", "url": url, **sink.get("spark", {})}
    path.write_text(yaml.safe_dump(document))
    return path


def stop_daemon(daemon: Any, log: Path) -> int:
    """SIGTERM (drain and exit), killed if it does not within two minutes."""
    if daemon.poll() is None:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(120)
        except Exception:
            daemon.kill()
            daemon.wait(30)
            pytest.fail("the daemon did not stop on SIGTERM:\n" + log.read_text()[-3000:])
    code: int = daemon.returncode
    return code


def streaming(dsn: str, slot: str, statement: str) -> None:
    """Wait until the daemon's slot exists, then until ``statement``, committed after it, is
    durable: the initial snapshot is complete and the daemon streams."""
    wait_for_flush(dsn, slot, 0, timeout=240)
    wait_for_flush(dsn, slot, run_transaction(dsn, statement).wal_end, timeout=240)


# --- one pipeline run over the end-to-end core ----------------------------------------------

CLUSTER_SCHEMA = """
CREATE SCHEMA cl;
-- No key: identical rows stay as many as in PostgreSQL.
CREATE TABLE cl.bag (kind int, note text);
ALTER TABLE cl.bag REPLICA IDENTITY FULL;
INSERT INTO cl.bag SELECT g % 5, 'n' || (g % 2) FROM generate_series(1, 50) g;
-- Bodies stored out of line: an update of another column leaves them unchanged in the WAL.
CREATE TABLE cl.docs (id int PRIMARY KEY, rev int NOT NULL, body text, extra text);
ALTER TABLE cl.docs ALTER COLUMN body SET STORAGE EXTERNAL;
INSERT INTO cl.docs SELECT g, 0, repeat(md5(g::text), 200), 'x' FROM generate_series(1, 20) g;
-- Added to the publication while the daemon streams: copied online.
CREATE TABLE cl.joiner (id int PRIMARY KEY, value int NOT NULL);
INSERT INTO cl.joiner SELECT g, g FROM generate_series(1, 20000) g;
"""
PIPELINE_TABLES = (*PROTOCOL_TABLES, "cl.bag", "cl.docs")
PIPELINE_WORKLOAD = (
    # Keyless: duplicates added, one of two identical rows changed, one removed.
    "INSERT INTO cl.bag SELECT 1, 'n1' FROM generate_series(1, 3)",
    "UPDATE cl.bag SET note = 'changed' WHERE ctid = "
    "(SELECT min(ctid) FROM cl.bag WHERE kind = 1 AND note = 'n1')",
    "DELETE FROM cl.bag WHERE ctid = (SELECT max(ctid) FROM cl.bag WHERE kind = 2)",
    # TOAST: unchanged bodies on update, a new body, a delete.
    "UPDATE cl.docs SET rev = rev + 1 WHERE id <= 10",
    "UPDATE cl.docs SET body = repeat(md5('new'), 300) WHERE id = 3",
    "DELETE FROM cl.docs WHERE id = 20",
    # Schema changes: a column added with a default (old rows show it), one dropped.
    "ALTER TABLE proto.accounts ADD COLUMN tier int DEFAULT 7",
    "UPDATE proto.accounts SET tier = id WHERE id <= 3",
    "INSERT INTO proto.accounts VALUES (500, 5.00, 'after add', 1)",
    "ALTER TABLE cl.docs DROP COLUMN extra",
    "UPDATE cl.docs SET rev = 100 WHERE id = 1",
    "INSERT INTO cl.docs VALUES (21, 0, repeat('y', 5000))",
)


def _copy_states(lake: Path) -> list[tuple[str, str]]:
    path = lake / "_wal2delta_copies"
    if not (path / "_delta_log").is_dir():
        return []
    rows = DeltaTable(str(path)).to_pyarrow_table().to_pylist()
    return [(r["table_name"], r["state"]) for r in rows]


def _scrape(port: int) -> dict[str, float]:
    """The daemon's metrics without labels, by name."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and "{" not in line:
            name, _, value = line.partition(" ")
            values[name] = float(value)
    return values


@pytest.mark.timeout(600)
def test_the_end_to_end_core_through_a_local_cluster_engine(
    pg18_dsn: str, tmp_path: Path, sail_cluster: SailCluster
) -> None:
    slot, lake, log = "w2d_cluster", tmp_path / "lake", tmp_path / "daemon.log"
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute(PROTOCOL_SCHEMA)
        conn.execute(CLUSTER_SCHEMA)
        conn.execute(f"CREATE PUBLICATION {slot} FOR TABLE {', '.join(PIPELINE_TABLES)}".encode())
        conn.execute("INSERT INTO proto.parent VALUES (1000, 'before the daemon')")
    config = write_config(
        tmp_path / "source.yaml",
        {
            "source": {
                "dsn": pg18_dsn,
                "slot": slot,
                "publication": slot,
                "create_publication": False,
                "tables": [],
                "two_phase": True,
                "status_interval": "500ms",
            },
            "snapshot": {"mode": "initial", "new_tables_interval": "1s"},
            "sink": {"path": str(lake), "batch": {"max_rows": 2000, "max_age": "200ms"}},
            "spool": {"dir": str(tmp_path / "spool"), "memory_limit": "256KiB"},
            "metrics": {"enabled": False},
            "logging": {"format": "json", "level": "warning"},
        },
        sail_cluster.url,
    )
    daemon = start_daemon(config, log)
    try:
        streaming(pg18_dsn, slot, "INSERT INTO proto.parent VALUES (1001, 'streamed')")
        run_protocol_workload(pg18_dsn, two_phase=True, rows=1500)
        with psycopg.connect(pg18_dsn, autocommit=True) as conn:
            for statement in PIPELINE_WORKLOAD:
                conn.execute(statement.encode())
            conn.execute(f"ALTER PUBLICATION {slot} ADD TABLE cl.joiner".encode())
        wait_until(
            lambda: bool(_copy_states(lake)) or daemon.poll() is not None,
            120,
            "the added table to be noticed",
        )
        with psycopg.connect(pg18_dsn, autocommit=True) as conn:
            conn.execute("UPDATE cl.joiner SET value = -value WHERE id % 1000 = 0")
            conn.execute("DELETE FROM cl.joiner WHERE id % 999 = 0")
            conn.execute("INSERT INTO cl.joiner SELECT g, g FROM generate_series(30001, 30500) g")
            end = current_wal_lsn(conn)
        wait_until(
            lambda: (
                daemon.poll() is not None
                or (
                    _copy_states(lake) == [("cl.joiner", "done")]
                    and confirmed_flush(pg18_dsn, slot) >= end
                )
            ),
            300,
            "the copy and every change to be durable",
        )
        assert daemon.poll() is None, log.read_text()[-3000:]
        mismatches = table_mismatches(pg18_dsn, lake, (*PIPELINE_TABLES, "cl.joiner"))
    finally:
        code = stop_daemon(daemon, log)
    assert not mismatches, "\n".join(mismatches)
    assert code == 0, log.read_text()[-3000:]
    errors = [e for e in log_events(log.read_text()) if e.get("level") == "error"]
    assert not errors, errors


# --- a short crash harness ------------------------------------------------------------------

CLUSTER_KILLS = 4


@pytest.mark.timeout(900)
def test_sigkill_of_the_daemon_at_random_points_with_a_remote_engine(
    pg18: LocalPostgres, pg18_dsn: str, tmp_path: Path, sail_cluster: SailCluster
) -> None:
    """``test_crash.py``'s harness (``tests/support/crash_harness.py``) with four kills, one
    of them before the first complete snapshot, the daemon's engine the module's server.
    Replay a failure with ``WAL2DELTA_CRASH_SEED=<seed>`` (the seed is in the message)."""
    run_crash_harness(
        pg18,
        pg18_dsn,
        tmp_path,
        kills=CLUSTER_KILLS,
        snapshot_kills=1,
        spark={"mode": "connect", "url": sail_cluster.url},
    )


# --- the engine killed mid-stream and started again -----------------------------------------

RESTART_TABLES = ("public.items", "public.tally")


@pytest.mark.timeout(600)
def test_an_engine_killed_mid_stream_and_started_again_loses_and_doubles_nothing(
    pg18_dsn: str, tmp_path: Path, sail_cluster: SailCluster
) -> None:
    slot, lake, log = "w2d_engine_restart", tmp_path / "lake", tmp_path / "daemon.log"
    metrics_port = free_port()
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE public.items (id int PRIMARY KEY, qty int NOT NULL, note text);"
            "CREATE TABLE public.tally (kind int, n int);"
            "ALTER TABLE public.tally REPLICA IDENTITY FULL;"
            "INSERT INTO public.items SELECT g, g, 'seed' FROM generate_series(1, 500) g;"
            "INSERT INTO public.tally SELECT g % 7, g FROM generate_series(1, 50) g"
        )
    config = write_config(
        tmp_path / "source.yaml",
        {
            "source": {
                "dsn": pg18_dsn,
                "slot": slot,
                "publication": slot,
                "tables": list(RESTART_TABLES),
                "status_interval": "500ms",
                "reconnect": {"initial_delay": "200ms", "max_delay": "2s"},
            },
            "snapshot": {"mode": "initial"},
            "sink": {"path": str(lake), "batch": {"max_rows": 500, "max_age": "200ms"}},
            "spool": {"dir": str(tmp_path / "spool")},
            "metrics": {"enabled": True, "host": "127.0.0.1", "port": metrics_port},
            "logging": {"format": "json", "level": "warning"},
        },
        sail_cluster.url,
    )
    stop, errors = threading.Event(), []

    def workload() -> None:
        n = 1000
        try:
            with psycopg.connect(pg18_dsn, autocommit=True) as conn:
                while not stop.is_set():
                    n += 1
                    with conn.transaction():
                        conn.execute("INSERT INTO items VALUES (%s, 1, 'new')", (n,))
                        conn.execute("UPDATE items SET qty = qty + 1 WHERE id = %s", (n % 500 + 1,))
                        conn.execute("DELETE FROM items WHERE id = %s", (n - 7,))
                        conn.execute("INSERT INTO tally VALUES (%s, %s)", (n % 7, n))
                    time.sleep(0.05)
        except BaseException as exc:
            errors.append(exc)

    daemon = start_daemon(config, log)
    writer = threading.Thread(target=workload, daemon=True)
    try:
        streaming(pg18_dsn, slot, "INSERT INTO items VALUES (999, 0, 'streamed')")
        writer.start()
        with psycopg.connect(pg18_dsn, autocommit=True) as conn:
            wait_for_flush(pg18_dsn, slot, current_wal_lsn(conn), timeout=120)

        sail_cluster.kill()
        down = run_transaction(pg18_dsn, "INSERT INTO items VALUES (-1, -1, 'engine down')")
        # While the engine is down: nothing of what follows is acknowledged, and the lag
        # shows transactions waiting for longer and longer.
        lags: list[dict[str, float]] = []

        def lag_grew() -> bool:
            lags.append(_scrape(metrics_port))
            return len(lags) >= 2 and lags[-1]["wal2delta_apply_lag_seconds"] >= 3.0

        wait_until(lag_grew, 120, "the apply lag to grow while the engine is down")
        time.sleep(2.0)
        lags.append(_scrape(metrics_port))
        assert daemon.poll() is None, log.read_text()[-3000:]
        flushed = confirmed_flush(pg18_dsn, slot)
        assert flushed < down.commit_start, "acknowledged while the engine was down"
        apply_lags = [m["wal2delta_apply_lag_seconds"] for m in lags]
        assert all(lag > 0 for lag in apply_lags[1:]), apply_lags
        assert apply_lags[-1] > apply_lags[-2] > apply_lags[0], apply_lags
        # The slot's lag in bytes (sampled every status_interval) covers at least the
        # transaction committed while the engine was down.
        wait_until(
            lambda: (
                _scrape(metrics_port)["wal2delta_replication_lag_bytes"] >= down.wal_end - flushed
            ),
            60,
            "the replication lag in bytes to show the WAL not acknowledged",
        )

        sail_cluster.start()
        time.sleep(3.0)
        stop.set()
        writer.join(30)
        assert not errors, errors
        with psycopg.connect(pg18_dsn, autocommit=True) as conn:
            end = current_wal_lsn(conn)
        wait_until(
            lambda: daemon.poll() is not None or confirmed_flush(pg18_dsn, slot) >= end,
            300,
            "the daemon to catch up once the engine is back",
        )
        assert daemon.poll() is None, "the daemon exited:\n" + log.read_text()[-3000:]
        wait_until(
            lambda: _scrape(metrics_port)["wal2delta_apply_lag_seconds"] == 0,
            60,
            "the apply lag to fall back to 0",
        )
        mismatches = table_mismatches(pg18_dsn, lake, RESTART_TABLES)
    finally:
        stop.set()
        code = stop_daemon(daemon, log)
    assert not mismatches, "\n".join(mismatches)
    assert code == 0, log.read_text()[-3000:]
    events = log_events(log.read_text())
    # The call in flight at the kill, if any, failed once the engine was back (a lost
    # operation): the supervisor began a new session. Nothing else may have gone wrong.
    reconnects = [e for e in events if e.get("event") == "retryable error; reconnecting"]
    assert all("Spark engine" in str(e["error"]) for e in reconnects), reconnects
    assert not [e for e in events if e.get("level") == "error"], events[-20:]
