"""A lake on object storage, as the shipped manifests use: s3:// against a local S3 server.

moto's server stands in for S3; credentials and the endpoint come from the environment
(``AWS_*``), as the Kubernetes manifests pass them. The real daemon streams into
``s3://<bucket>/lake``, is killed with SIGKILL mid-stream and started again, and every
Delta table read back with delta-rs from S3 equals its source table; ``wal2delta status``
reads the same lake and ``wal2delta verify`` (through the Spark engine) finds it equal. The
initial snapshot's appends are written by delta-rs, the streamed MERGEs by the engine, and
delta-rs compacts the tables between batches.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import yaml
from deltalake import DeltaTable

from capture import current_wal_lsn
from decoder import format_lsn
from sink import table_path
from tests.support.appends import append_from_threads
from tests.support.harness import run_cli, start_daemon, wait_for_flush
from tests.support.oracle import compare_table
from tests.support.s3 import aws_environment, moto_s3

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

BUCKET = "w2d-lake"


@pytest.fixture
def s3_endpoint(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A moto S3 server on loopback, its bucket created, the AWS_* environment pointing at it."""
    with moto_s3(BUCKET) as endpoint:
        for name, value in aws_environment(endpoint).items():
            monkeypatch.setenv(name, value)
        yield endpoint


def test_snapshot_workers_append_to_one_s3_table_at_once(s3_endpoint: str) -> None:
    # Commits on S3 are conditional writes: two appends racing for one version must both
    # land, one of them at the next version.
    append_from_threads(f"s3://{BUCKET}/concurrent")


def test_stream_crash_restart_and_status_on_an_s3_lake(
    s3_endpoint: str, pg18_dsn: str, tmp_path: Path
) -> None:
    lake = f"s3://{BUCKET}/lake"
    config = tmp_path / "source.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "source": {
                    "dsn": pg18_dsn,
                    "slot": "w2d_s3",
                    "publication": "w2d_s3",
                    "tables": ["public.orders", "public.events"],
                    "status_interval": "500ms",
                },
                "snapshot": {"mode": "initial"},
                # Compactions every other write: delta-rs rewrites files on S3 too.
                "sink": {
                    "path": lake,
                    "batch": {"max_rows": 500, "max_age": "200ms"},
                    "compact_after_writes": 2,
                },
                "spool": {"dir": str(tmp_path / "spool")},
                "metrics": {"enabled": False},
                "logging": {"format": "json", "level": "warning"},
            }
        )
    )
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE public.orders (id int PRIMARY KEY, amount numeric(10, 2), note text);"
            "CREATE TABLE public.events (kind text, n int);"
            "ALTER TABLE public.events REPLICA IDENTITY FULL;"
            "INSERT INTO orders SELECT g, g * 1.5, 'n' FROM generate_series(1, 300) g;"
            "INSERT INTO events SELECT 'k' || (g % 3), g % 5 FROM generate_series(1, 60) g"
        )
        log = tmp_path / "daemon.log"
        daemon = start_daemon(config, log)
        try:
            # The slot first: changes made before it exists are in the snapshot, not streamed.
            wait_for_flush(pg18_dsn, "w2d_s3", 0, timeout=120)
            conn.execute("UPDATE orders SET note = 'u' WHERE id % 3 = 0")
            conn.execute("DELETE FROM events WHERE ctid = (SELECT min(ctid) FROM events)")
            wait_for_flush(pg18_dsn, "w2d_s3", current_wal_lsn(conn), timeout=120)
            conn.execute("INSERT INTO orders SELECT g, g, 'late' FROM generate_series(301, 900) g")
            time.sleep(0.5)
        finally:
            daemon.send_signal(signal.SIGKILL)
            daemon.wait(30)
        conn.execute("DELETE FROM orders WHERE id % 7 = 0")
        conn.execute("UPDATE events SET n = n + 10 WHERE kind = 'k1'")
        endpos = format_lsn(current_wal_lsn(conn))
        final = run_cli("run", "-c", str(config), "--endpos", endpos, timeout=300)
        assert final.returncode == 0, final.stderr[-3000:]
        for name in ("public.orders", "public.events"):
            schema, table = name.split(".")
            comparison = compare_table(conn, name, table_path(lake, schema, table))
            assert comparison.matches, comparison.describe()
            assert comparison.source_rows > 0
        # The snapshot's rows were appended by delta-rs (snapshot.writer: auto) on S3.
        history = DeltaTable(table_path(lake, "public", "orders")).history()
        writers = {str(c.get("engineInfo")).split(":")[0] for c in history}
        assert {"delta-rs", "sail-delta-lake"} <= writers, writers
        assert "OPTIMIZE" in {c.get("operation") for c in history}
    status = run_cli("status", "-c", str(config), "--json")
    assert status.returncode == 0, status.stderr
    report = json.loads(status.stdout)
    tables = {t["table"]: t for t in report["tables"]}
    assert tables["public.orders"]["delta_path"] == f"{lake}/public/orders"
    assert all(t["delta_version"] is not None for t in tables.values()), tables
    verify = run_cli("verify", "-c", str(config), "--json", "--wait", "10")
    assert verify.returncode == 0, verify.stdout + verify.stderr[-3000:]
    verified = json.loads(verify.stdout)
    assert {t["table"]: t["status"] for t in verified["tables"]} == {
        "public.events": "match",
        "public.orders": "match",
    }
