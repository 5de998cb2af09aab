"""Prometheus metrics of the daemon, defined once against an injectable registry.

Names follow https://prometheus.io/docs/practices/naming: ``wal2delta_`` prefix, base
units, ``_total`` for counters (prometheus_client adds the suffix on exposition), bounded
labels only (table names from the publication, operation kinds; never xids or LSNs).
The list of exposed names is pinned by a test because dashboards and alerts depend on it.
"""

from __future__ import annotations

import math

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
)

from capture.slots import SlotState

# The ``*_created`` series double the exposition and no dashboard or alert uses them.
disable_created_metrics()  # type: ignore[no-untyped-call]

LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


class Metrics:
    """Every metric the daemon exports."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.build_info = Gauge(
            "wal2delta_build_info",
            "Build and protocol information; always 1.",
            ["version", "proto_version", "spark_mode", "decoder_kernel"],
            registry=r,
        )
        self.replication_lag_bytes = Gauge(
            "wal2delta_replication_lag_bytes",
            "Server's current WAL LSN minus the slot's confirmed flush LSN.",
            registry=r,
        )
        self.apply_lag_seconds = Gauge(
            "wal2delta_apply_lag_seconds",
            "Now minus the commit time of the oldest transaction received but not yet "
            "durable in Delta (0 when none is pending): grows while the sink is stuck.",
            registry=r,
        )
        self.batch_apply_lag_seconds = Histogram(
            "wal2delta_batch_apply_lag_seconds",
            "Commit-to-durable-in-Delta lag of the newest transaction of each batch.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.received_lsn = Gauge(
            "wal2delta_received_lsn", "Highest WAL position received, in bytes.", registry=r
        )
        self.written_lsn = Gauge(
            "wal2delta_written_lsn", "Write position last reported to the server.", registry=r
        )
        self.flushed_lsn = Gauge(
            "wal2delta_flushed_lsn",
            "Flush position last acknowledged to the server (durable in Delta).",
            registry=r,
        )
        self.transactions = Counter(
            "wal2delta_transactions",
            "Transactions seen, by outcome.",
            ["outcome"],
            registry=r,
        )
        self.changes = Counter(
            "wal2delta_changes",
            "Row changes received in committed transactions, by table and operation.",
            ["table", "operation"],
            registry=r,
        )
        self.batches = Counter("wal2delta_batches", "Batches applied to Delta.", registry=r)
        self.batch_apply_duration_seconds = Histogram(
            "wal2delta_batch_apply_duration_seconds",
            "Time to make one batch durable in Delta.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.merge_duration_seconds = Histogram(
            "wal2delta_merge_duration_seconds",
            "Time of the MERGE of one table within a batch.",
            ["table"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.rows_merged = Counter(
            "wal2delta_rows_merged", "Rows written by MERGE, by table.", ["table"], registry=r
        )
        self.bytes_received = Counter(
            "wal2delta_bytes_received", "Replication payload bytes received.", registry=r
        )
        self.messages_received = Counter(
            "wal2delta_messages_received",
            "Replication protocol messages received, by type.",
            ["message_type"],
            registry=r,
        )
        self.reconnects = Counter(
            "wal2delta_reconnects", "Reconnection attempts to PostgreSQL.", registry=r
        )
        self.spilled_bytes = Gauge(
            "wal2delta_spilled_bytes", "Bytes of open transactions spilled to disk.", registry=r
        )
        self.open_streamed_transactions = Gauge(
            "wal2delta_open_streamed_transactions",
            "Streamed transactions received but not yet committed or aborted.",
            registry=r,
        )
        self.prepared_transactions = Gauge(
            "wal2delta_prepared_transactions",
            "Prepared transactions held until COMMIT/ROLLBACK PREPARED.",
            registry=r,
        )
        self.snapshot_rows = Counter(
            "wal2delta_snapshot_rows", "Rows copied by the initial snapshot.", ["table"], registry=r
        )
        self.snapshot_bytes = Counter(
            "wal2delta_snapshot_bytes",
            "Bytes the initial snapshot read: COPY csv text, or Arrow buffers (ADBC).",
            ["table"],
            registry=r,
        )
        self.snapshot_table_rows_estimated = Gauge(
            "wal2delta_snapshot_table_rows_estimated",
            "Rows the initial snapshot expects to copy per table (catalog estimate).",
            ["table"],
            registry=r,
        )
        self.snapshot_tables_remaining = Gauge(
            "wal2delta_snapshot_tables_remaining",
            "Tables the initial snapshot has still to copy.",
            registry=r,
        )
        self.errors = Counter(
            "wal2delta_errors",
            "Errors by component and error class.",
            ["component", "error_type"],
            registry=r,
        )
        self.last_error_timestamp_seconds = Gauge(
            "wal2delta_last_error_timestamp_seconds",
            "Unix time of the last error.",
            registry=r,
        )
        self.last_commit_timestamp_seconds = Gauge(
            "wal2delta_last_commit_timestamp_seconds",
            "Commit time of the last transaction durable in Delta (Unix seconds).",
            registry=r,
        )
        self.status_updates = Counter(
            "wal2delta_status_updates",
            "Standby status updates sent, by reason.",
            ["reason"],
            registry=r,
        )
        self.toast_anomalies = Counter(
            "wal2delta_toast_anomalies",
            "Unchanged-TOAST updates whose row was missing in Delta (not written).",
            ["table"],
            registry=r,
        )
        self.unrepresentable_values = Counter(
            "wal2delta_unrepresentable_values",
            "Legal values their Delta column cannot hold, stored under their documented "
            "convention with the exact text in the rejects table, by table, column and "
            "reason (infinity, out_of_range, not_finite, multidimensional, lower_bound).",
            ["table", "column", "reason"],
            registry=r,
        )
        self.ready = Gauge("wal2delta_ready", "1 when /readyz reports ready.", registry=r)
        self.not_streaming = Gauge(
            "wal2delta_not_streaming",
            "1 for the reason the daemon is waiting to reconnect instead of streaming (the "
            "SQLSTATE condition, e.g. configuration_limit_exceeded, or connection_lost), 0 "
            "for earlier reasons; all 0 while streaming.",
            ["reason"],
            registry=r,
        )
        self._not_streaming_reasons: set[str] = set()
        self.slot_retained_wal_bytes = Gauge(
            "wal2delta_slot_retained_wal_bytes",
            "WAL the server keeps for the slot: current WAL LSN minus its restart_lsn.",
            registry=r,
        )
        self.slot_safe_wal_size_bytes = Gauge(
            "wal2delta_slot_safe_wal_size_bytes",
            "WAL that may still be written before the slot risks invalidation "
            "(pg_replication_slots.safe_wal_size); +Inf when max_slot_wal_keep_size is -1.",
            registry=r,
        )
        self.slot_wal_status = Gauge(
            "wal2delta_slot_wal_status",
            "1 for the slot's current wal_status (reserved, extended, unreserved, lost, "
            "missing), 0 for the others.",
            ["status"],
            registry=r,
        )

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


SLOT_WAL_STATUSES = ("reserved", "extended", "unreserved", "lost", "missing")
"""Values of ``pg_replication_slots.wal_status``, plus ``missing`` for a slot that is gone."""
