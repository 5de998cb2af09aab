"""PostgreSQL 18 -> pgoutput -> the real daemon -> Delta, compared row by row with delta-rs.

Every test ends by reading each Delta table with ``deltalake`` (not Spark) and comparing
it with the source table: typed values exactly (numeric scale, timestamps, NULLs, bytea,
arrays, jsonb text).
"""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import psycopg
import pytest
import yaml

from capture.slots import current_wal_lsn
from config import AppConfig
from daemon import run_service
from daemon.wiring import prepare_configured_source
from decoder import format_lsn
from devtools.workload import DEMO_TABLES, Workload, create_schema
from sink import table_path
from tests.support.configs import make_config
from tests.support.harness import confirmed_flush
from tests.support.oracle import compare_table

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def assert_all_tables_match(
    conn: psycopg.Connection[tuple[object, ...]], config: AppConfig
) -> None:
    reports = []
    for name in DEMO_TABLES:
        schema, _, table = name.partition(".")
        comparison = compare_table(conn, name, table_path(str(config.sink.path), schema, table))
        reports.append(comparison)
    assert all(r.source_rows > 0 for r in reports), "the workload must leave rows in every table"
    mismatches = [r.describe() for r in reports if not r.matches]
    assert not mismatches, "\n".join(mismatches)


def test_demo_workload_lands_in_delta_equal_to_source(pg18_dsn: str, tmp_path: Path) -> None:
    config = make_config(pg18_dsn, tmp_path / "lake", list(DEMO_TABLES))
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        create_schema(conn)
        prepare_configured_source(config)
        workload = Workload(seed=11)
        for _ in range(12):
            workload.run_round(conn)
        endpos = current_wal_lsn(conn)
        assert run_service(config, endpos=endpos, install_signal_handlers=False) == 0
        assert confirmed_flush(pg18_dsn, config.source.slot) >= endpos
        assert_all_tables_match(conn, config)


def test_cli_run_with_endpos_exits_zero_once_everything_is_in_delta(
    pg18_dsn: str, tmp_path: Path
) -> None:
    config_file = tmp_path / "source.yaml"
    lake = tmp_path / "lake"
    config_file.write_text(
        yaml.safe_dump(
            {
                "source": {
                    "dsn": pg18_dsn,
                    "slot": "wal2delta_cli",
                    "publication": "wal2delta_cli",
                    "tables": list(DEMO_TABLES),
                },
                "sink": {"path": str(lake), "batch": {"max_rows": 500, "max_age": "200ms"}},
                "metrics": {"enabled": False},
                "logging": {"format": "json"},
            }
        )
    )
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        create_schema(conn)
        start = subprocess.run(
            [
                sys.executable,
                "-m",
                "daemon.cli",
                "run",
                "-c",
                str(config_file),
                "--endpos",
                format_lsn(current_wal_lsn(conn)),
            ],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert start.returncode == 0, start.stderr
        workload = Workload(seed=5)
        for _ in range(5):
            workload.run_round(conn)
        endpos = current_wal_lsn(conn)
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "daemon.cli",
                "run",
                "-c",
                str(config_file),
                "--endpos",
                format_lsn(endpos),
            ],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert '"event": "batch applied"' in done.stderr
        from config import load_config

        assert_all_tables_match(conn, load_config(config_file))


def test_restart_after_some_batches_loses_and_duplicates_nothing(
    pg18_dsn: str, tmp_path: Path
) -> None:
    config = make_config(
        pg18_dsn, tmp_path / "lake", list(DEMO_TABLES), sink={"batch": {"max_rows": 50}}
    )
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        create_schema(conn)
        prepare_configured_source(config)
        workload = Workload(seed=23)
        stop = threading.Event()
        codes: list[int] = []
        daemon = threading.Thread(
            target=lambda: codes.append(
                run_service(config, stop_event=stop, install_signal_handlers=False)
            )
        )
        daemon.start()
        before = confirmed_flush(pg18_dsn, config.source.slot)
        for _ in range(8):
            workload.run_round(conn)
        # Stop once some, not necessarily all, batches are durable.
        for _ in range(600):
            if confirmed_flush(pg18_dsn, config.source.slot) > before:
                break
            stop.wait(0.1)
        stop.set()
        daemon.join(120)
        assert codes == [0]
        for _ in range(8):
            workload.run_round(conn)
        endpos = current_wal_lsn(conn)
        assert run_service(config, endpos=endpos, install_signal_handlers=False) == 0
        assert_all_tables_match(conn, config)
