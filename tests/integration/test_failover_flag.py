"""source.failover on real servers: the slot's failover flag follows the setting on
PostgreSQL 17 and 18, and 14 to 16 have no failover slots (docs/decisions/0107-failover-slots.md).

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


@pytest.fixture(params=["pg18", "pg17"])
def dsn(request: pytest.FixtureRequest) -> str:
    """A fresh database on each server with failover slots."""
    dsn: str = request.getfixturevalue(f"{request.param}_dsn")
    return dsn


def test_the_slots_failover_flag_follows_the_setting_on_postgresql_17_and_18(
    dsn: str, tmp_path: Path
) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
    assert _prepare(dsn, tmp_path, "auto") == (True, True)  # created as one
    assert _prepare(dsn, tmp_path, False) == (False, False)  # ALTER_REPLICATION_SLOT
    assert _prepare(dsn, tmp_path, "true") == (True, True)
    assert _prepare(dsn, tmp_path, True) == (True, True)  # nothing to change


def test_a_slot_created_without_the_flag_gets_it(dsn: str, tmp_path: Path) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (SLOT,))
        state = slot_state(conn, SLOT)
    assert state is not None
    assert state.failover is False
    assert _prepare(dsn, tmp_path, "auto") == (True, True)


@pytest.mark.parametrize("server", ["pg16", "pg15", "pg14"])
def test_postgresql_16_and_older_have_no_failover_slots(
    server: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    dsn: str = request.getfixturevalue(f"{server}_dsn")
    major = server.removeprefix("pg")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
    with pytest.raises(
        ServerCapabilityError,
        match=rf"source.failover: true needs PostgreSQL 17.*PostgreSQL {major} "
        rf"\(server_version_num {major}",
    ) as e:
        _prepare(dsn, tmp_path, True)
    assert e.value.exit_code == EXIT_CONFIG
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert slot_state(conn, SLOT) is None  # refused before anything was created
    assert _prepare(dsn, tmp_path, "auto") == (None, False)
    assert _prepare(dsn, tmp_path, False) == (None, False)
