"""Garbage-collector settings for the daemon process.

Every replayed change leaves container objects (``RowChange`` and its ``TupleData``) alive
until its batch is applied; none of them is part of a reference cycle, and reference
counting frees them as soon as their batch is applied. The cyclic collector only walks them:

* with CPython's default thresholds (700, 10, 10) it runs a young collection every few
  hundred changes and a full one whenever the batches in flight grew the heap by a quarter
  (about 2 s of a 15 s, 1M-change capture run on the benchmark machine);
* with a young threshold of 100k it still ran about 40 young collections and one of the
  middle generation per 1M changes, 0.6-0.8 s of a 6 s ``bench e2e`` run, all of it holding
  the interpreter lock the capture and the sink share, and finding almost nothing.

CPython counts young allocations *net* of deallocations, so a young threshold above the
objects of the batches in flight (a few hundred thousand changes) means the collector
practically never runs while a backlog streams through: batches are freed as fast as new
ones are built. What the automatic collector would have found instead is the little cyclic
garbage of the libraries (gRPC calls, exceptions); ``collector_paced_by_time`` collects it
with one full collection a minute from a background thread, so it stays bounded by time
rather than by a count a quiet stream may take days to reach.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

DAEMON_GC_THRESHOLDS: Final = (5_000_000, 20, 100)
"""Young collection every 5M net allocations (CPython's default: 700, 10, 10)."""

FULL_COLLECTION_INTERVAL_SECONDS: Final = 60.0
"""How often the background thread runs a full collection."""


@contextmanager
def collector_paced_by_time(
    interval_seconds: float = FULL_COLLECTION_INTERVAL_SECONDS,
) -> Iterator[None]:
    """The daemon's collector settings for the duration of the block, then undone.

    Start-up objects are frozen out of the collector's reach, the thresholds are raised to
    ``DAEMON_GC_THRESHOLDS``, and a background thread runs a full collection every
    ``interval_seconds``. Meant for the daemon's own process (``wal2delta run``) and the
    benchmarks that time it: it changes process-wide state while it is active.
    """
    thresholds = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(*DAEMON_GC_THRESHOLDS)
    stop = threading.Event()
    pacer = threading.Thread(
        target=_collect_until, args=(stop, interval_seconds), name="wal2delta-gc", daemon=True
    )
    pacer.start()
    try:
        yield
    finally:
        stop.set()
        pacer.join()
        gc.set_threshold(*thresholds)
        gc.unfreeze()


def _collect_until(stop: threading.Event, interval_seconds: float) -> None:
    while not stop.wait(interval_seconds):
        gc.collect()


__all__ = ["DAEMON_GC_THRESHOLDS", "FULL_COLLECTION_INTERVAL_SECONDS", "collector_paced_by_time"]
