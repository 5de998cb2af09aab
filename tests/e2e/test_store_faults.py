"""Object-store faults under the real daemon: retried, bounded, and nothing doubled.

The lake is ``s3://`` on moto's S3 server, reached by the daemon (its engine, Sail, and
delta-rs) only through ``FaultProxy`` (tests/support/faultproxy.py), which answers some
requests ``503 SlowDown`` or ``500 InternalError`` with S3's XML body, resets some
connections before or after forwarding them, and delays some, by a seeded schedule. The
store client retries a failed request itself, so each fault repeats for the next requests
to the same object (a streak longer than its retries) and reaches the daemon: a MERGE's
data file or a commit's ``_delta_log/*.json`` PUT fails, or - reset after forwarding - a
commit lands while the daemon is told it failed. The daemon applies the batch again
(decision 0115) and the sink's replay guard makes a landed commit harmless.

The tables are read back with delta-rs from moto directly, not through the proxy, and
must equal their source tables row by row, nothing doubled. A second case fails every
request: the daemon stops after ``sink.store_retries.max_attempts`` with an error that
names the store's own error.
"""

from __future__ import annotations

import signal
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import yaml

from capture import current_wal_lsn
from sink import table_path
from tests.support.faultproxy import FaultPlan, FaultProxy
from tests.support.harness import log_events, run_cli, start_daemon, wait_for_flush
from tests.support.oracle import compare_table
from tests.support.s3 import aws_environment, free_port, moto_s3

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

BUCKET = "w2d-faults"
TABLES = ("public.accounts", "public.ledger")
RETRY_EVENT = "the object store failed; the batch is applied again"


@pytest.fixture
def moto_endpoint() -> Iterator[str]:
    """moto's S3 server on loopback, with the lake's bucket."""
    with moto_s3(BUCKET) as endpoint:
        yield endpoint


@pytest.fixture
def proxy(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[FaultProxy]:
    """The fault proxy in front of moto; the AWS_* environment (the daemon's) points at it."""
    faults = FaultProxy(moto_endpoint.removeprefix("http://"), seed=38, max_faults=8).start()
    for name, value in aws_environment(faults.endpoint).items():
        monkeypatch.setenv(name, value)
    try:
        yield faults
    finally:
        faults.stop()


def _config(tmp_path: Path, dsn: str, slot: str, tables: tuple[str, ...], **sink: object) -> Path:
    config = tmp_path / "source.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "source": {
                    "dsn": dsn,
                    "slot": slot,
                    "publication": slot,
                    "tables": list(tables),
                    "status_interval": "500ms",
                    "reconnect": {"initial_delay": "100ms", "max_delay": "1s"},
                },
                "snapshot": {"mode": "initial"},
                "sink": {
                    "path": f"s3://{BUCKET}/lake",
                    "batch": {"max_rows": 200, "max_age": "200ms"},
                    **sink,
                },
                "spool": {"dir": str(tmp_path / "spool")},
                "metrics": {"enabled": True, "host": "127.0.0.1", "port": free_port()},
                "logging": {"format": "json", "level": "warning"},
            }
        )
    )
    return config


def _workload(conn: psycopg.Connection[tuple[object, ...]], round_: int) -> None:
    """Inserts, updates and deletes over both tables, one transaction per statement."""
    base = 1000 + round_ * 100
    conn.execute(
        "INSERT INTO accounts SELECT g, g * 2, %s FROM generate_series(%s::int, %s::int) g",
        (f"r{round_}", base, base + 59),
    )
    conn.execute(
        "UPDATE accounts SET balance = balance + 1, note = %s WHERE id %% 4 = %s::int",
        (f"u{round_}", round_ % 4),
    )
    conn.execute("DELETE FROM accounts WHERE id %% 9 = %s::int", (round_ % 9,))
    conn.execute("INSERT INTO ledger SELECT 'k' || (g % 5), g FROM generate_series(1, 20) g")
    conn.execute(
        "DELETE FROM ledger WHERE ctid IN (SELECT ctid FROM ledger WHERE n = %s::int LIMIT 1)",
        (round_ % 20 + 1,),
    )


def _scrape(config: Path) -> str:
    port = yaml.safe_load(config.read_text())["metrics"]["port"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return str(response.read().decode())


def test_store_faults_during_merges_and_commits_are_retried_and_double_nothing(
    proxy: FaultProxy,
    moto_endpoint: str,
    pg18_dsn: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = _config(
        tmp_path,
        pg18_dsn,
        "w2d_store_faults",
        TABLES,
        store_retries={"max_attempts": 12, "initial_delay": "100ms", "max_delay": "1s"},
    )
    log = tmp_path / "daemon.log"
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE public.accounts (id int PRIMARY KEY, balance bigint, note text);"
            "CREATE TABLE public.ledger (kind text, n int);"
            "ALTER TABLE public.ledger REPLICA IDENTITY FULL;"
            "INSERT INTO accounts SELECT g, g, 'n' FROM generate_series(1, 200) g"
        )
        daemon = start_daemon(config, log)
        try:
            wait_for_flush(pg18_dsn, "w2d_store_faults", 0, timeout=120)
            # The snapshot done and streaming before any fault: a snapshot that fails is
            # begun again on a new slot, whose position would pass the changes below
            # before they are in the lake.
            conn.execute("INSERT INTO accounts VALUES (201, 0, 'streamed')")
            wait_for_flush(pg18_dsn, "w2d_store_faults", current_wal_lsn(conn), timeout=120)
            # Faults from here on, at random points of the streamed MERGEs and commits:
            # every PUT (data files, _delta_log/*.json) may fail; a commit's PUT may also
            # land and have its answer cut off.
            proxy.set_plans(
                FaultPlan(
                    reset_after=0.2,
                    slow_down=0.1,
                    internal_error=0.05,
                    methods=frozenset({"PUT"}),
                    path_contains="/_delta_log/",
                    streak=12,
                ),
                FaultPlan(
                    slow_down=0.15,
                    internal_error=0.1,
                    reset_before=0.05,
                    delay=0.1,
                    methods=frozenset({"PUT", "POST"}),
                    streak=12,
                ),
            )
            for round_ in range(8):
                _workload(conn, round_)
            wait_for_flush(pg18_dsn, "w2d_store_faults", current_wal_lsn(conn), timeout=180)
            metrics = _scrape(config)
        finally:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(60)
        proxy.set_plans()
        # Read back from moto itself, past the proxy.
        for name, value in aws_environment(moto_endpoint).items():
            monkeypatch.setenv(name, value)
        for name in TABLES:
            schema, table = name.split(".")
            comparison = compare_table(conn, name, table_path(f"s3://{BUCKET}/lake", schema, table))
            assert comparison.matches, comparison.describe()
            assert comparison.source_rows > 0
    text = log.read_text()
    retries = [e for e in log_events(text) if e.get("event") == RETRY_EVENT]
    # The proxy injected faults, and they reached the daemon, which applied batches again.
    assert proxy.faults_drawn > 0, proxy.injected
    assert retries, text[-3000:]
    assert all(
        str(e["store_error"]).startswith(("Generic S3 error", "Connection reset", "the store"))
        for e in retries
    ), retries
    counted = sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("wal2delta_store_retries_total{")
    )
    assert 1 <= counted <= len(retries), metrics
    assert daemon.returncode == 0, text[-3000:]


def test_a_store_that_always_fails_stops_the_daemon_naming_its_error(
    proxy: FaultProxy, pg18_dsn: str, tmp_path: Path
) -> None:
    config = _config(
        tmp_path,
        pg18_dsn,
        "w2d_store_down",
        ("public.down",),
        store_retries={"max_attempts": 2, "initial_delay": "100ms", "max_delay": "200ms"},
    )
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.down (id int PRIMARY KEY, v text)")
    proxy.set_plans(FaultPlan(permanent=True))
    result = run_cli("run", "-c", str(config), timeout=180)
    assert result.returncode != 0
    retries = [e for e in log_events(result.stderr) if e.get("event") == RETRY_EVENT]
    assert [e["attempt"] for e in retries] == [1, 2], result.stderr[-3000:]
    assert "the object store failed 3 times in a row" in result.stderr, result.stderr[-3000:]
    assert "503 Service Unavailable" in result.stderr, result.stderr[-3000:]
    assert proxy.answered["slow_down"] > 3
