"""A background sampler of the slot as the server sees it, on a normal connection.

Every ``interval`` seconds it reads ``pg_current_wal_lsn()`` and the slot's row from
``pg_replication_slots`` to publish replication lag in bytes (server WAL minus confirmed
flush) and to notice an invalidated slot (``wal_status = lost``); on PostgreSQL 17 and
newer also whether the slot is a failover slot and the state of the standbys named in
``synchronized_standby_slots`` (``capture.slots.standby_slots``). When configured it also
runs the heartbeat statement, which writes a little WAL on databases that have none of
their own so the slot's confirmed position can advance. It never touches the replication
connection; failures are logged and retried at the next tick.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import psycopg
import structlog

from capture.metrics import Metrics
from capture.slot_sample import SlotSample, sample_slot
from capture.slots import SlotState

log = structlog.get_logger("wal2delta.monitor")


class SourceMonitor:
    """Samples lag and runs the heartbeat on its own thread."""

    def __init__(
        self,
        conninfo: str | Callable[[], str],
        slot: str,
        metrics: Metrics,
        *,
        interval: float = 10.0,
        heartbeat_statement: str | None = None,
        heartbeat_interval: float | None = None,
        on_slot_lost: Callable[[SlotState], None] | None = None,
    ) -> None:
        self._conninfo = conninfo
        self._slot = slot
        self._metrics = metrics
        self._interval = interval
        self._heartbeat_statement = heartbeat_statement
        self._heartbeat_interval = heartbeat_interval
        self._on_slot_lost = on_slot_lost
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="wal2delta-monitor", daemon=True)
        self.last_sample: SlotSample | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        conn: psycopg.Connection[tuple[object, ...]] | None = None
        since_heartbeat = 0.0
        while not self._stop.is_set():
            try:
                if conn is None or conn.closed:
                    conninfo = self._conninfo() if callable(self._conninfo) else self._conninfo
                    conn = psycopg.connect(
                        conninfo, autocommit=True, application_name="wal2delta-monitor"
                    )
                self._tick(conn)
                since_heartbeat += self._interval
                if (
                    self._heartbeat_statement
                    and self._heartbeat_interval
                    and since_heartbeat >= self._heartbeat_interval
                ):
                    conn.execute(self._heartbeat_statement.encode())
                    since_heartbeat = 0.0
            except (psycopg.Error, ValueError) as exc:  # ValueError: an unreadable password
                log.warning("source monitor failed; retrying", error_type=type(exc).__name__)
                if conn is not None:
                    conn.close()
                conn = None
            self._stop.wait(self._interval)
        if conn is not None:
            conn.close()

    def _tick(self, conn: psycopg.Connection[tuple[object, ...]]) -> None:
        sample = sample_slot(conn, self._slot)
        self.last_sample = sample
        if sample.lag_bytes is not None:
            self._metrics.replication_lag_bytes.set(sample.lag_bytes)
        self._metrics.record_slot(sample.slot, sample.retained_wal_bytes)
        self._metrics.record_failover(sample.slot, sample.standby_slots)
        if (
            sample.slot is not None
            and sample.slot.wal_status == "lost"
            and self._on_slot_lost is not None
        ):
            self._on_slot_lost(sample.slot)
