"""Test doubles for the ``Sink`` protocol (after supabase/etl's memory destination and faults)."""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Literal

from sink import Batch, BatchResult, Sink, SnapshotMarker, parts_of


class HeldSink:
    """``apply`` waits until ``release`` is set (at most ``limit`` seconds); ``started`` is
    set once it runs: a sink stuck on a batch, for the session's and the health checks'
    tests."""

    def __init__(self, limit: float = 60.0) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        self.limit = limit

    def apply(self, batch: Batch) -> BatchResult:
        self.started.set()
        self.release.wait(self.limit)
        return BatchResult(rows_by_table={}, toast_anomalies=0, duration_seconds=0.0)

    def close(self) -> None:
        pass


@dataclass
class MemorySink:
    """Records every batch; durable as soon as ``apply`` returns."""

    batches: list[Batch] = field(default_factory=list)
    closed: bool = False
    applied: threading.Event = field(default_factory=threading.Event)

    def apply(self, batch: Batch) -> BatchResult:
        self.batches.append(batch)
        self.applied.set()
        return BatchResult(rows_by_table={}, toast_anomalies=0, duration_seconds=0.0)

    def close(self) -> None:
        self.closed = True

    @property
    def durable_lsns(self) -> list[int]:
        return [b.durable_lsn for b in self.batches if b.durable_lsn is not None]


class InjectedFaultError(RuntimeError):
    """The failure a ``FaultySink`` raises on purpose."""


@dataclass
class FaultySink:
    """Wraps a sink; a FIFO of faults decides what each call does."""

    inner: Sink
    faults: deque[Literal["ok", "fail_before", "fail_after"]] = field(default_factory=deque)

    def apply(self, batch: Batch) -> BatchResult:
        fault = self.faults.popleft() if self.faults else "ok"
        if fault == "fail_before":
            raise InjectedFaultError("sink failed before applying the batch")
        result = self.inner.apply(batch)
        if fault == "fail_after":
            raise InjectedFaultError("sink failed after applying the batch")
        return result

    def close(self) -> None:
        self.inner.close()


@dataclass
class TeeSink:
    """Applies every batch to a real sink, then to a shadow (e.g. a reference model)."""

    primary: Sink
    shadow: Sink

    def apply(self, batch: Batch) -> BatchResult:
        result = self.primary.apply(batch)
        self.shadow.apply(batch)
        return result

    def close(self) -> None:
        self.primary.close()
        self.shadow.close()

    def load_snapshot_marker(self, slot: str) -> object:
        markers = parts_of(self.primary).markers
        assert markers is not None, "the primary sink records snapshots"
        return markers.load_snapshot_marker(slot)

    def save_snapshot_marker(self, marker: SnapshotMarker) -> None:
        markers = parts_of(self.primary).markers
        assert markers is not None, "the primary sink records snapshots"
        markers.save_snapshot_marker(marker)
