"""Prometheus metrics of the daemon, defined once against an injectable registry.

Names follow https://prometheus.io/docs/practices/naming: ``wal2delta_`` prefix, base
units, ``_total`` for counters (prometheus_client adds the suffix on exposition), bounded
labels only (table names from the publication, operation kinds; never xids or LSNs).
The list of exposed names is pinned by a test because dashboards and alerts depend on it.

The class body of ``Metrics`` is the one table of them: each metric one declaration (kind,
help text, labels), exposed as ``wal2delta_<attribute>``, made once per registry.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Generic, TypeVar, get_args, overload

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
)

from capture.slots import SlotState, StandbySlot, StandbyState

# The ``*_created`` series double the exposition and no dashboard or alert uses them.
disable_created_metrics()  # type: ignore[no-untyped-call]

LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


M = TypeVar("M", Counter, Gauge, Histogram)


class _Declared(Generic[M]):
    """One metric of ``Metrics``: its kind, help text and labels, named ``wal2delta_<attribute>``.

    ``Metrics.__init__`` makes one per registry into the instance, whose attribute then hides
    this declaration; reading it through the class gives the declaration itself.
    """

    def __init__(self, kind: Callable[..., M], documentation: str, labels: tuple[str, ...]):
        self._kind: Callable[..., M] = kind
        self._documentation = documentation
        self._labels = labels
        self._attribute = ""  # set by __set_name__

    def __set_name__(self, owner: type, attribute: str) -> None:
        self._attribute = attribute

    def make(self, registry: CollectorRegistry) -> M:
        name = f"wal2delta_{self._attribute}"
        return self._kind(name, self._documentation, self._labels, registry=registry)

    @overload
    def __get__(self, instance: None, owner: type) -> _Declared[M]: ...
    @overload
    def __get__(self, instance: object, owner: type) -> M: ...
    def __get__(self, instance: object, owner: type) -> _Declared[M] | M:
        if instance is None:
            return self
        made: M = vars(instance)[self._attribute]
        return made


def _gauge(documentation: str, labels: tuple[str, ...] = ()) -> _Declared[Gauge]:
    return _Declared(Gauge, documentation, labels)


def _counter(documentation: str, labels: tuple[str, ...] = ()) -> _Declared[Counter]:
    return _Declared(Counter, documentation, labels)


def _histogram(documentation: str, labels: tuple[str, ...] = ()) -> _Declared[Histogram]:
    return _Declared(partial(Histogram, buckets=LATENCY_BUCKETS), documentation, labels)


class Metrics:
    """Every metric the daemon exports, one declaration each: the exposed name is
    ``wal2delta_`` and the attribute's name."""

    build_info = _gauge(
        "Build and protocol information; always 1.",
        ("version", "proto_version", "spark_mode", "decoder_kernel"),
    )
    replication_lag_bytes = _gauge("Server's current WAL LSN minus the slot's confirmed flush LSN.")
    apply_lag_seconds = _gauge(
        "Now minus the commit time of the oldest transaction received but not yet "
        "durable in Delta (0 when none is pending): grows while the sink is stuck."
    )
    sink_stalled_seconds = _gauge(
        "Seconds the sink has been on its current batch or upkeep while work is pending "
        "(a batch handed over, a transaction not yet durable); 0 when it waits for work or "
        "nothing is pending. /healthz fails above health.stall_timeout."
    )
    batch_apply_lag_seconds = _histogram(
        "Commit-to-durable-in-Delta lag of the newest transaction of each batch."
    )
    received_lsn = _gauge("Highest WAL position received, in bytes.")
    written_lsn = _gauge("Write position last reported to the server.")
    flushed_lsn = _gauge("Flush position last acknowledged to the server (durable in Delta).")
    transactions = _counter("Transactions seen, by outcome.", ("outcome",))
    changes = _counter(
        "Row changes received in committed transactions, by table and operation.",
        ("table", "operation"),
    )
    batches = _counter("Batches applied to Delta.")
    batch_apply_duration_seconds = _histogram("Time to make one batch durable in Delta.")
    merge_duration_seconds = _histogram(
        "Time of the MERGE of one table within a batch.", ("table",)
    )
    rows_merged = _counter("Rows written by MERGE, by table.", ("table",))
    table_writes = _counter(
        "Delta writes of the steps of applied batches, by kind: merge, append (a step whose "
        "keys cannot be in the table), delete (a TRUNCATE), none (every row inserted and "
        "deleted within the step).",
        ("kind",),
    )
    held_changes = _gauge(
        "Row changes the sink holds back for a later batch (sink.table_min_rows); the "
        "acknowledged position stays before the oldest of them."
    )
    bytes_received = _counter("Replication payload bytes received.")
    messages_received = _counter(
        "Replication protocol messages received, by type.", ("message_type",)
    )
    reconnects = _counter("Reconnection attempts to PostgreSQL.")
    store_retries = _counter(
        "Batches applied again after a transient object-store fault (throttling, 5xx, "
        "timeout, reset), by what the store failed: merge, append, commit, checkpoint, "
        "read, write, other.",
        ("operation",),
    )
    spilled_bytes = _gauge("Bytes of open transactions spilled to disk.")
    spool_errors = _counter(
        "Spill file failures, by reason: no_space, quota, io_error, max_bytes "
        "(spool.max_bytes reached), other.",
        ("reason",),
    )
    open_streamed_transactions = _gauge(
        "Streamed transactions received but not yet committed or aborted."
    )
    prepared_transactions = _gauge("Prepared transactions held until COMMIT/ROLLBACK PREPARED.")
    snapshot_rows = _counter(
        "Rows copied by the initial snapshot or a table copy while streaming.", ("table",)
    )
    snapshot_bytes = _counter(
        "Bytes the initial snapshot read: COPY csv text, or Arrow buffers (ADBC).", ("table",)
    )
    snapshot_table_rows_estimated = _gauge(
        "Rows the initial snapshot expects to copy per table (catalog estimate).", ("table",)
    )
    snapshot_tables_remaining = _gauge(
        "Tables the initial snapshot (or the running table copy) has still to copy."
    )
    tables_copying = _gauge(
        "Tables being copied while streaming; their changes wait, holding the acknowledged "
        "position, until the copy landed and the stream was rewound."
    )
    errors = _counter("Errors by component and error class.", ("component", "error_type"))
    last_error_timestamp_seconds = _gauge("Unix time of the last error.")
    last_commit_timestamp_seconds = _gauge(
        "Commit time of the last transaction durable in Delta (Unix seconds)."
    )
    status_updates = _counter("Standby status updates sent, by reason.", ("reason",))
    toast_anomalies = _counter(
        "Unchanged-TOAST updates whose row was missing in Delta (not written).", ("table",)
    )
    unrepresentable_values = _counter(
        "Legal values their Delta column cannot hold, stored under their documented "
        "convention with the exact text in the rejects table, by table, column and "
        "reason (infinity, out_of_range, not_finite, multidimensional, lower_bound).",
        ("table", "column", "reason"),
    )
    ready = _gauge("1 when /readyz reports ready.")
    not_streaming = _gauge(
        "1 for the reason the daemon is waiting to reconnect instead of streaming (the "
        "SQLSTATE condition, e.g. configuration_limit_exceeded, or connection_lost), 0 "
        "for earlier reasons; all 0 while streaming.",
        ("reason",),
    )
    slot_retained_wal_bytes = _gauge(
        "WAL the server keeps for the slot: current WAL LSN minus its restart_lsn."
    )
    slot_safe_wal_size_bytes = _gauge(
        "WAL that may still be written before the slot risks invalidation "
        "(pg_replication_slots.safe_wal_size); +Inf when max_slot_wal_keep_size is -1."
    )
    slot_wal_status = _gauge(
        "1 for the slot's current wal_status (reserved, extended, unreserved, lost, "
        "missing), 0 for the others.",
        ("status",),
    )
    slot_failover = _gauge(
        "1 when the slot is a failover slot (pg_replication_slots.failover, PostgreSQL 17 "
        "and newer: standbys with sync_replication_slots keep a copy), 0 when not."
    )
    failover_standby_slots = _gauge(
        "Physical slots named in the source's synchronized_standby_slots, by state: ready "
        "(a standby streams from it and has the WAL up to the slot's confirmed flush "
        "position), behind, inactive (no standby streams from it), unusable (missing, "
        "logical or invalidated). 0 for every state while the slot is no failover slot.",
        ("state",),
    )

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        for attribute, declared in vars(Metrics).items():
            if isinstance(declared, _Declared):
                setattr(self, attribute, declared.make(self.registry))
        self._not_streaming_reasons: set[str] = set()

    def record_error(self, component: str, exc: BaseException, now: float) -> None:
        self.errors.labels(component=component, error_type=type(exc).__name__).inc()
        self.last_error_timestamp_seconds.set(now)

    def record_not_streaming(self, reason: str | None) -> None:
        """Show why the daemon does not stream (None: it streams again)."""
        if reason is not None:
            self._not_streaming_reasons.add(reason)
        for known in self._not_streaming_reasons:
            self.not_streaming.labels(reason=known).set(1 if known == reason else 0)

    def record_slot(self, slot: SlotState | None, retained_wal_bytes: int | None) -> None:
        """Export what decides whether the slot survives (sampled by the monitor)."""
        status = "missing" if slot is None else (slot.wal_status or "missing")
        for name in SLOT_WAL_STATUSES:
            self.slot_wal_status.labels(status=name).set(1 if name == status else 0)
        if retained_wal_bytes is not None:
            self.slot_retained_wal_bytes.set(retained_wal_bytes)
        if slot is not None:
            safe = slot.safe_wal_size
            self.slot_safe_wal_size_bytes.set(math.inf if safe is None else safe)

    def record_failover(self, slot: SlotState | None, standbys: tuple[StandbySlot, ...]) -> None:
        """Export whether the slot would survive a failover, as far as the primary can tell
        (``capture.slots.StandbySlot``; sampled by the monitor)."""
        failover = slot is not None and bool(slot.failover)
        self.slot_failover.set(1 if failover else 0)
        for state in STANDBY_SLOT_STATES:
            count = sum(1 for standby in standbys if standby.state == state) if failover else 0
            self.failover_standby_slots.labels(state=state).set(count)


SLOT_WAL_STATUSES = ("reserved", "extended", "unreserved", "lost", "missing")
"""Values of ``pg_replication_slots.wal_status``, plus ``missing`` for a slot that is gone."""

STANDBY_SLOT_STATES: tuple[StandbyState, ...] = get_args(StandbyState)
"""The states of ``capture.slots.StandbySlot``."""
