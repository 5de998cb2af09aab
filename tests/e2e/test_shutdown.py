"""SIGTERM: stop reading, apply what is committed, acknowledge it, exit 0 within the grace."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import psycopg
import pytest
import yaml

from capture.slots import current_wal_lsn, slot_state
from config import load_config
from daemon.wiring import prepare_configured_source
from decoder import format_lsn
from devtools.workload import DEMO_TABLES, Workload, create_schema
from sink import table_path
from tests.support.harness import log_events, start_daemon
from tests.support.oracle import compare_table

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def _events(log: Path) -> list[dict[str, object]]:
    return log_events(log.read_text())


def test_sigterm_drains_acknowledges_and_exits_zero(pg18_dsn: str, tmp_path: Path) -> None:
    config_path = tmp_path / "source.yaml"
    config_path.write_text(
        yaml.safe_dump(
            {
                "source": {
                    "dsn": pg18_dsn,
                    "slot": "w2d_term",
                    "publication": "w2d_term",
                    "tables": list(DEMO_TABLES),
                },
                "sink": {"path": str(tmp_path / "lake"), "batch": {"max_rows": 200}},
                "metrics": {"enabled": False},
                "logging": {"format": "json", "level": "info"},
                "shutdown": {"grace_period": "60s"},
            }
        )
    )
    config = load_config(config_path)
    log = tmp_path / "daemon.log"
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        create_schema(conn)
        prepare_configured_source(config)
        daemon = start_daemon(config_path, log)
        deadline = time.monotonic() + 120
        while not any(e.get("event") == "replication started" for e in _events(log)):
            assert time.monotonic() < deadline, log.read_text()[-2000:]
            assert daemon.poll() is None, log.read_text()[-2000:]
            time.sleep(0.2)
        workload = Workload(seed=31)
        for _ in range(10):
            workload.run_round(conn)
        time.sleep(1.0)  # let some of it arrive, then stop while batches are in flight
        started = time.monotonic()
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(90) == 0, log.read_text()[-3000:]
        assert time.monotonic() - started < 60
        events = [e.get("event") for e in _events(log)]
        assert "stop requested" in events
        assert "replication stopped" in events
        state = slot_state(conn, config.source.slot)
        assert state is not None
        assert state.active_pid is None
        endpos = format_lsn(current_wal_lsn(conn))
        rest = start_daemon(config_path, log, "--endpos", endpos)
        assert rest.wait(300) == 0, log.read_text()[-3000:]
        for name in DEMO_TABLES:
            schema, _, table = name.partition(".")
            comparison = compare_table(
                conn, name, table_path(str(tmp_path / "lake"), schema, table)
            )
            assert comparison.matches, comparison.describe()
