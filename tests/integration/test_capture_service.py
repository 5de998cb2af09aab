"""The capture service against a real PostgreSQL 18, with an in-memory sink.

These tests prove the acknowledgement rules without Spark: the flush LSN the server
records never passes what the sink made durable, idle slots advance, a busy slot is
refused.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest

from capture.errors import SlotInUseError
from capture.slots import current_wal_lsn
from daemon.supervisor import Supervisor
from daemon.wiring import prepare_configured_source
from decoder import RowChange
from sink import Batch, BatchResult
from tests.support.configs import make_config
from tests.support.harness import confirmed_flush, wait_until
from tests.support.sinks import FaultySink, InjectedFaultError, MemorySink

pytestmark = pytest.mark.integration


def _setup(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.items (id int PRIMARY KEY, label text)")
        conn.execute("CREATE TABLE public.unpublished (id serial PRIMARY KEY, filler text)")


def test_committed_rows_reach_the_sink_in_commit_order_and_flush_reaches_endpos(
    pg18_dsn: str, tmp_path: Path
) -> None:
    _setup(pg18_dsn)
    config = make_config(pg18_dsn, tmp_path / "lake", ["public.items"])
    prepare_configured_source(config)
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        for i in range(1, 6):
            with conn.transaction():
                conn.execute("INSERT INTO items VALUES (%s, %s)", (i, f"v{i}"))
                conn.execute("UPDATE items SET label = label || '!' WHERE id = %s", (i,))
        endpos = current_wal_lsn(conn)
    sink = MemorySink()
    Supervisor(config, sink, endpos=endpos).run()

    changes = [c for b in sink.batches for c in b.changes if isinstance(c, RowChange)]
    assert [(c.op, c.relation.relation_name) for c in changes] == [
        ("insert", "items"),
        ("update", "items"),
    ] * 5
    commit_lsns = [c.commit_lsn for c in changes]
    assert commit_lsns == sorted(commit_lsns)
    assert confirmed_flush(pg18_dsn, config.source.slot) >= endpos
    assert max(sink.durable_lsns) <= confirmed_flush(pg18_dsn, config.source.slot)


def test_idle_slot_advances_past_wal_of_unpublished_tables(pg18_dsn: str, tmp_path: Path) -> None:
    _setup(pg18_dsn)
    config = make_config(pg18_dsn, tmp_path / "lake", ["public.items"])
    prepare_configured_source(config)
    before = confirmed_flush(pg18_dsn, config.source.slot)
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        for _ in range(50):
            conn.execute("INSERT INTO unpublished (filler) SELECT repeat('x', 1000)")
        endpos = current_wal_lsn(conn)
    sink = MemorySink()
    Supervisor(config, sink, endpos=endpos).run()
    assert not [c for b in sink.batches for c in b.changes]
    after = confirmed_flush(pg18_dsn, config.source.slot)
    assert after >= endpos > before


@dataclass
class _Offered:
    """Keeps every batch handed to ``inner``, the ones it fails too."""

    inner: FaultySink
    batches: list[Batch] = field(default_factory=list)

    def apply(self, batch: Batch) -> BatchResult:
        self.batches.append(batch)
        return self.inner.apply(batch)

    def close(self) -> None:
        self.inner.close()


def test_flush_lsn_never_passes_a_batch_the_sink_failed(pg18_dsn: str, tmp_path: Path) -> None:
    _setup(pg18_dsn)
    config = make_config(
        pg18_dsn, tmp_path / "lake", ["public.items"], sink={"batch": {"max_rows": 1}}
    )
    prepare_configured_source(config)
    start = confirmed_flush(pg18_dsn, config.source.slot)
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        for i in range(1, 4):
            conn.execute("INSERT INTO items VALUES (%s, 'x')", (i,))
        endpos = current_wal_lsn(conn)
    memory = MemorySink()
    faulty = _Offered(FaultySink(memory, deque(["ok", "fail_before"])))
    with pytest.raises(InjectedFaultError):
        Supervisor(config, faulty, endpos=endpos).run()
    confirmed = confirmed_flush(pg18_dsn, config.source.slot)
    durable = max(memory.durable_lsns, default=start)
    assert durable < endpos
    # The slot may pass WAL the daemon had nothing pending from - a keepalive's walEnd
    # while it waited, which a native subscriber reports as flushed too - but never the
    # commit of a transaction that is not durable: the server skips a transaction whose
    # commit record starts before the confirmed position.
    not_durable = [
        c.commit_lsn
        for b in faulty.batches
        for c in b.changes
        if isinstance(c, RowChange) and c.commit_lsn > durable
    ]
    assert not_durable, "the failed batch holds changes of a transaction not durable"
    assert confirmed <= min(not_durable)

    # The server sends the failed transactions again; nothing is lost.
    retry = MemorySink()
    Supervisor(config, retry, endpos=endpos).run()
    ids = sorted(
        c.new.values[0].data
        for b in retry.batches
        for c in b.changes
        if isinstance(c, RowChange) and c.new is not None and c.new.values[0].data
    )
    assert b"2" in ids
    assert b"3" in ids


def test_a_second_daemon_on_the_same_slot_is_refused(pg18_dsn: str, tmp_path: Path) -> None:
    _setup(pg18_dsn)
    config = make_config(pg18_dsn, tmp_path / "lake", ["public.items"])
    prepare_configured_source(config)
    stop = threading.Event()
    first = Supervisor(config, MemorySink(), stop_event=stop)
    runner = threading.Thread(target=first.run)
    runner.start()
    try:
        wait_until(lambda: first.state.connected, 10, "the first daemon to connect")
        with pytest.raises(SlotInUseError, match="is active for PID"):
            Supervisor(config, MemorySink()).run()
    finally:
        stop.set()
        runner.join(30)
    assert not runner.is_alive()


def test_a_retryable_sink_error_reconnects_and_replays_without_loss(
    pg18_dsn: str, tmp_path: Path
) -> None:
    from sink import SinkRetryableError
    from tests.support.model_sink import ModelSink

    _setup(pg18_dsn)
    config = make_config(
        pg18_dsn,
        tmp_path / "lake",
        ["public.items"],
        source={"reconnect": {"initial_delay": "100ms", "max_delay": "200ms"}},
        sink={"batch": {"max_rows": 2}},
    )
    prepare_configured_source(config)
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        for i in range(1, 11):
            conn.execute("INSERT INTO items VALUES (%s, 'x')", (i,))
        endpos = current_wal_lsn(conn)

    class FlakyOnce(ModelSink):
        calls = 0
        failed = False

        def apply(self, batch):  # type: ignore[no-untyped-def]
            self.calls += 1
            if self.calls == 2:
                self.failed = True
                raise SinkRetryableError("engine briefly unreachable")
            return super().apply(batch)

    model = FlakyOnce()
    service = Supervisor(config, model, endpos=endpos)
    service.run()
    assert model.failed
    assert service.metrics.reconnects._value.get() == 1
    assert sorted(int(str(k[0]).strip("'")) for k in model.tables["public.items"]) == list(
        range(1, 11)
    )
    assert confirmed_flush(pg18_dsn, config.source.slot) >= endpos


def test_batches_of_wide_rows_close_at_max_bytes_before_max_rows(
    pg18_dsn: str, tmp_path: Path
) -> None:
    """A transaction of 600 rows of ~20 kB: 12 MB of changes, batches of at most ~1 MiB."""
    _setup(pg18_dsn)
    config = make_config(
        pg18_dsn,
        tmp_path / "lake",
        ["public.items"],
        sink={"batch": {"max_rows": 50_000, "max_bytes": "1MiB"}},
    )
    prepare_configured_source(config)
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO items SELECT g, (SELECT string_agg(md5(g::text || i), '') "
            "FROM generate_series(1, 625) i) FROM generate_series(1, 600) g"
        )
        endpos = current_wal_lsn(conn)
    sink = MemorySink()
    Supervisor(config, sink, endpos=endpos).run()

    sizes = [len(b.changes) for b in sink.batches if b.changes]
    assert sum(sizes) == 600
    # 1 MiB holds 52 changes of 20,256 bytes; the change that reaches the limit closes it.
    assert max(sizes) == 52
    assert len(sizes) == 12
    # Only the batch holding the transaction's last change may acknowledge it.
    assert [b.durable_lsn is not None for b in sink.batches if b.changes][-1]
    assert all(b.durable_lsn is None for b in sink.batches[: len(sizes) - 1])
