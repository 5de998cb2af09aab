"""Faults on the source side: server restarts, lost slots, idle databases.

Each test here owns its PostgreSQL server, because it stops or breaks it.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from capture.errors import SlotInvalidatedError
from capture.slots import current_wal_lsn, slot_state
from config import AppConfig
from daemon.supervisor import Supervisor
from daemon.wiring import prepare_configured_source, sink_settings
from devtools.pgserver import LocalPostgres
from sink import DeltaSink, table_path
from tests.conftest import TEST_SERVER_SETTINGS, server_dir
from tests.support.configs import make_config
from tests.support.harness import confirmed_flush, serving, wait_until
from tests.support.model_sink import ModelSink
from tests.support.oracle import canonical, compare_table, read_source
from tests.support.sinks import TeeSink

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def own_server() -> Iterator[LocalPostgres]:
    settings = {**TEST_SERVER_SETTINGS, "max_slot_wal_keep_size": "64MB"}
    server = LocalPostgres(server_dir("faults"), settings=settings)
    server.init()
    server.start()
    yield server
    server.destroy()
    shutil.rmtree(server.data_dir.parent, ignore_errors=True)


def _items_source(dsn: str, tmp_path: Path, **source: object) -> AppConfig:
    """``public.items``, published and slotted; the daemon reconnects after 200 ms."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.items (id int PRIMARY KEY, label text)")
    config = make_config(
        dsn,
        tmp_path / "lake",
        ["public.items"],
        source={"reconnect": {"initial_delay": "200ms", "max_delay": "1s"}, **source},
    )
    prepare_configured_source(config)
    return config


def _source_rows(dsn: str) -> dict[str, list[object]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        _, rows = read_source(conn, "public", "items")
    return {repr(r[0]): [canonical(v) for v in r] for r in rows}


def _model_rows(model: ModelSink) -> dict[str, list[object]]:
    return {
        repr(r["id"]): [canonical(r["id"]), canonical(r["label"])]
        for r in model.tables.get("public.items", {}).values()
    }


def test_daemon_reconnects_after_server_restart_and_loses_nothing(
    own_server: LocalPostgres, tmp_path: Path, spark_session: object
) -> None:
    dsn = own_server.dsn()
    config = _items_source(dsn, tmp_path)
    model = ModelSink()
    delta = DeltaSink(spark_session, sink_settings(config))  # type: ignore[arg-type]
    stop = threading.Event()
    service = Supervisor(config, TeeSink(delta, model), stop_event=stop)
    with serving(service, stop) as running:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO items SELECT g, 'before' FROM generate_series(1, 500) g")
        own_server.restart()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO items SELECT g, 'after' FROM generate_series(501, 900) g")
            conn.execute("UPDATE items SET label = 'updated' WHERE id % 7 = 0")
            conn.execute("DELETE FROM items WHERE id % 11 = 0")
            endpos = current_wal_lsn(conn)
        wait_until(
            lambda: confirmed_flush(dsn, config.source.slot) >= endpos, 60, "flush to reach endpos"
        )
    assert not running.errors
    assert service.metrics.reconnects._value.get() >= 1
    assert _model_rows(model) == _source_rows(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        comparison = compare_table(
            conn, "public.items", table_path(str(config.sink.path), "public", "items")
        )
    assert comparison.matches, comparison.describe()


def test_invalidated_slot_stops_the_daemon_with_a_clear_error(
    own_server: LocalPostgres, tmp_path: Path
) -> None:
    dsn = own_server.dsn()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.items (id int PRIMARY KEY, label text)")
    config = make_config(dsn, tmp_path / "lake", ["public.items"])
    prepare_configured_source(config)
    with psycopg.connect(dsn, autocommit=True) as conn:
        # Write more WAL than max_slot_wal_keep_size while nobody consumes the slot.
        for _ in range(6):
            conn.execute(
                "INSERT INTO items SELECT g, repeat('x', 2000) FROM generate_series(1, 6000) g"
            )
            conn.execute("DELETE FROM items")
            conn.execute("SELECT pg_switch_wal()")
        conn.execute("CHECKPOINT")
        state = slot_state(conn, config.source.slot)
    assert state is not None
    assert state.wal_status == "lost"
    with pytest.raises(SlotInvalidatedError, match="invalidated"):
        Supervisor(config, ModelSink()).run()
    with psycopg.connect(dsn, autocommit=True) as conn:
        after = slot_state(conn, config.source.slot)
    assert after is not None, "the lost slot is never dropped or recreated silently"
    assert after.wal_status == "lost"


def _retained_wal(dsn: str, slot: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT pg_current_wal_insert_lsn() - restart_lsn FROM pg_replication_slots "
            "WHERE slot_name = %s",
            (slot,),
        ).fetchone()
    assert row is not None
    return int(str(row[0]))


def test_quiet_publication_does_not_make_the_slot_retain_wal(
    own_server: LocalPostgres, tmp_path: Path
) -> None:
    dsn = own_server.dsn()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.items (id int PRIMARY KEY, label text)")
        conn.execute("CREATE TABLE public.elsewhere (id serial PRIMARY KEY, filler text)")
        conn.execute("CREATE TABLE public.heartbeat (at timestamptz NOT NULL)")
    config = make_config(
        dsn,
        tmp_path / "lake",
        ["public.items"],
        source={
            "heartbeat": {
                "interval": "1s",
                "statement": "INSERT INTO public.heartbeat VALUES (now())",
            }
        },
    )
    prepare_configured_source(config)
    model = ModelSink()
    stop = threading.Event()
    service = Supervisor(config, model, stop_event=stop)
    runner = threading.Thread(target=service.run)
    runner.start()
    generated = 0
    try:
        for _ in range(5):
            with psycopg.connect(dsn, autocommit=True) as conn:
                start = current_wal_lsn(conn)
                conn.execute(
                    "INSERT INTO elsewhere (filler) "
                    "SELECT repeat(md5(g::text), 30) FROM generate_series(1, 15000) g"
                )
                conn.execute("CHECKPOINT")
                end = current_wal_lsn(conn)
            generated += end - start
            wait_until(
                lambda end=end: confirmed_flush(dsn, config.source.slot) >= end,
                60,
                "the idle slot to confirm WAL of unpublished tables",
            )
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CHECKPOINT")
        wait_until(
            lambda: _retained_wal(dsn, config.source.slot) < generated / 3,
            60,
            "retained WAL to shrink",
        )
        wait_until(lambda: _heartbeats(dsn) >= 2, 30, "heartbeat statements to run")
    finally:
        stop.set()
        runner.join(60)
    assert generated > 30 * 1024 * 1024
    assert not model.tables.get("public.items")


def _heartbeats(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM public.heartbeat").fetchone()
    assert row is not None
    return int(str(row[0]))


def test_a_reconnect_keeps_the_flush_position_behind_an_unresolved_prepare(
    own_server: LocalPostgres, tmp_path: Path
) -> None:
    """After an in-process reconnect the flush position still waits for a PREPARE.

    A new session used to start from the previous one's durable position, which had passed
    a prepared transaction committed after it; its first status update then moved the
    slot past the PREPARE, and after the next restart the server sent only the COMMIT
    PREPARED (found by the crash harness).
    """
    dsn = own_server.dsn()
    config = _items_source(dsn, tmp_path, two_phase=True, status_interval="200ms")
    model = ModelSink()
    stop = threading.Event()
    service = Supervisor(config, model, stop_event=stop)

    def rows() -> int:
        return len(model.tables.get("public.items", {}))

    with serving(service, stop) as running:
        with psycopg.connect(dsn) as conn:
            conn.execute("INSERT INTO items VALUES (1, 'prepared')")
            conn.execute("PREPARE TRANSACTION 'w2d_held'")
            conn.commit()
        with psycopg.connect(dsn, autocommit=True) as conn:
            prepared_end = current_wal_lsn(conn)
            conn.execute("INSERT INTO items SELECT g, 'after' FROM generate_series(2, 200) g")
        wait_until(lambda: rows() >= 199, 60, "the later transaction to be applied")
        # Its batch ends past the PREPARE. (Not ">= the insert position read after the
        # commit": a background process may write WAL after the commit, and no later
        # transaction comes to carry the durable position there.)
        wait_until(lambda: max(model.durable_lsns, default=0) > prepared_end, 60, "durable")
        time.sleep(0.6)  # a few status updates
        assert confirmed_flush(dsn, config.source.slot) <= prepared_end
        # Not a server restart: a fast shutdown waits for the walsender, which waits for a
        # flush position the held PREPARE keeps back.
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
                "WHERE slot_name = %s",
                (config.source.slot,),
            )
        wait_until(lambda: service.metrics.reconnects._value.get() >= 1, 60, "a reconnect")
        wait_until(lambda: service.state.connected, 60, "the new session")
        time.sleep(1.0)  # the new session's status updates
        assert confirmed_flush(dsn, config.source.slot) <= prepared_end, (
            "the reconnected session acknowledged past the unresolved PREPARE"
        )
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("COMMIT PREPARED 'w2d_held'")
            endpos = current_wal_lsn(conn)
        wait_until(
            lambda: confirmed_flush(dsn, config.source.slot) >= endpos, 60, "flush to reach endpos"
        )
    assert not running.errors
    assert rows() == 200
    assert model.tables["public.items"][(repr(1),)]["label"] == "prepared"
