"""A network that goes silent: no FIN, no RST, the connection open and carrying nothing.

The daemon reaches PostgreSQL 18 through ``SilentRelay``. Once it streams, the relay
freezes every connection for good and holds new ones unanswered, as a dropped NAT entry or
a hung peer would; the workload keeps writing straight to the server. With a short
``source.receive_timeout`` the session pings the server at half of it, gives the
connection up at the whole, and the supervisor keeps trying to reconnect (each attempt
stuck in the silent network until its connect timeout). When the relay lets new connections
through again, the daemon must stream again - although the walsender of the abandoned
connection still holds the slot: the daemon's connections disable ``wal_sender_timeout``
here, so the server never ends that walsender itself and only the daemon's own release of
it (``capture.startup.release_own_walsender``) frees the slot. Every Delta table must then
equal its source table.
"""

from __future__ import annotations

import threading
from pathlib import Path

import psycopg
import pytest

from capture.slots import slot_state
from daemon.supervisor import Supervisor
from daemon.wiring import prepare_configured_source, sink_settings
from devtools.pgserver import LocalPostgres
from sink import DeltaSink
from tests.support.configs import make_config
from tests.support.harness import (
    confirmed_flush,
    run_statements,
    serving,
    table_mismatches,
    wait_for_flush,
    wait_until,
)
from tests.support.silent_relay import SilentRelay

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TABLES = ("public.items", "public.events")
SLOT = "w2d_silent"


def _writes(first: int, last: int) -> list[str]:
    """Inserts, updates and deletes over ids ``first`` to ``last`` of both tables."""
    return [
        f"INSERT INTO items SELECT g, 'v' || g, 0 FROM generate_series({first}, {last}) g",
        f"INSERT INTO events SELECT g, now(), 'e' || g FROM generate_series({first}, {last}) g",
        f"UPDATE items SET n = n + 1, label = label || '+' WHERE id % 3 = 0 AND id >= {first}",
        f"DELETE FROM events WHERE id % 5 = 0 AND id >= {first}",
        "UPDATE items SET n = n + 10 WHERE id % 7 = 0",
    ]


def _slot_holder(dsn: str) -> int | None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        state = slot_state(conn, SLOT)
    return state.active_pid if state is not None else None


@pytest.mark.timeout(300)
def test_the_daemon_streams_again_after_the_network_went_silent(
    pg18: LocalPostgres, pg18_dsn: str, tmp_path: Path, spark_session: object
) -> None:
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.items (id int PRIMARY KEY, label text, n int)")
        conn.execute("CREATE TABLE public.events (id int PRIMARY KEY, at timestamptz, note text)")
    relay = SilentRelay("127.0.0.1", pg18.port)
    config = make_config(
        relay.dsn(pg18_dsn, options="-c wal_sender_timeout=0"),
        tmp_path / "lake",
        list(TABLES),
        slot=SLOT,
        source={
            "receive_timeout": "4s",
            "connect_timeout": "2s",
            "reconnect": {"initial_delay": "200ms", "max_delay": "1s"},
        },
    )
    prepare_configured_source(config)
    sink = DeltaSink(spark_session, sink_settings(config))  # type: ignore[arg-type]
    stop = threading.Event()
    service = Supervisor(config, sink, stop_event=stop)
    timeouts = service.metrics.errors.labels(component="capture", error_type="ReceiveTimeoutError")
    pings = service.metrics.status_updates.labels(reason="ping")
    # Closing the relay at the end also ends the monitor's query stuck on a frozen connection.
    with serving(service, stop, before_join=relay.close) as running:
        before = run_statements(pg18_dsn, _writes(1, 300))
        wait_for_flush(pg18_dsn, SLOT, before, timeout=120)
        abandoned = _slot_holder(pg18_dsn)
        assert abandoned is not None

        relay.go_silent()
        during = run_statements(pg18_dsn, _writes(301, 600))
        wait_until(lambda: timeouts._value.get() >= 1, 60, "the session to give up the link")
        assert pings._value.get() >= 1, "no ping was sent before the connection was given up"
        wait_until(lambda: relay.held >= 1, 60, "a reconnect attempt held by the silence")
        # Nothing past the silence was acknowledged, and the old walsender holds the slot.
        assert confirmed_flush(pg18_dsn, SLOT) < during
        assert _slot_holder(pg18_dsn) == abandoned
        assert running.thread.is_alive(), running.errors

        relay.restore()
        after = run_statements(pg18_dsn, _writes(601, 900))
        wait_for_flush(pg18_dsn, SLOT, after, timeout=120)
        holder = _slot_holder(pg18_dsn)
        assert holder is not None
        assert holder != abandoned
        with psycopg.connect(pg18_dsn, autocommit=True) as conn:
            gone = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (abandoned,)
            ).fetchone()
        assert gone == (0,), "the abandoned walsender was not ended"
    assert not running.thread.is_alive()
    assert not running.errors, running.errors
    assert service.metrics.reconnects._value.get() >= 1
    assert table_mismatches(pg18_dsn, config.sink.path, TABLES) == []
