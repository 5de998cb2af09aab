"""source.failover on real servers: the slot's failover flag follows the setting on
PostgreSQL 18, and PostgreSQL 15 has no failover slots (docs/decisions/0107-failover-slots.md).

The initial snapshot's slot (``CREATE_REPLICATION_SLOT ... (FAILOVER true)``) is created
in ``tests/e2e/test_failover.py``.
"""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from capture import ServerCapabilityError, slot_state
from capture.errors import EXIT_CONFIG
from daemon.wiring import prepare_configured_source
from tests.support.configs import make_config

SLOT = "w2d_failover_flag"


def _prepare(dsn: str, lake: Path, failover: object) -> tuple[bool | None, bool]:
    """Run start-up with ``source.failover``; the slot's flag and what start-up wanted."""
    config = make_config(dsn, lake, ["public.t"], slot=SLOT, source={"failover": failover})
    info = prepare_configured_source(config)
    with psycopg.connect(dsn, autocommit=True) as conn:
        state = slot_state(conn, SLOT)
    assert state is not None
    assert state.active_pid is None
    return state.failover, info.failover


def test_the_slots_failover_flag_follows_the_setting_on_postgresql_18(
    pg18_dsn: str, tmp_path: Path
) -> None:
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
    assert _prepare(pg18_dsn, tmp_path, "auto") == (True, True)  # created as one
    assert _prepare(pg18_dsn, tmp_path, False) == (False, False)  # ALTER_REPLICATION_SLOT
    assert _prepare(pg18_dsn, tmp_path, "true") == (True, True)
    assert _prepare(pg18_dsn, tmp_path, True) == (True, True)  # nothing to change


def test_a_slot_created_without_the_flag_gets_it(pg18_dsn: str, tmp_path: Path) -> None:
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (SLOT,))
        state = slot_state(conn, SLOT)
    assert state is not None
    assert state.failover is False
    assert _prepare(pg18_dsn, tmp_path, "auto") == (True, True)


def test_postgresql_15_has_no_failover_slots(pg15_dsn: str, tmp_path: Path) -> None:
    with psycopg.connect(pg15_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
    with pytest.raises(ServerCapabilityError, match=r"PostgreSQL 15 \(server_version_num 15") as e:
        _prepare(pg15_dsn, tmp_path, True)
    assert e.value.exit_code == EXIT_CONFIG
    with psycopg.connect(pg15_dsn, autocommit=True) as conn:
        assert slot_state(conn, SLOT) is None  # refused before anything was created
    assert _prepare(pg15_dsn, tmp_path, "auto") == (None, False)
    assert _prepare(pg15_dsn, tmp_path, False) == (None, False)
