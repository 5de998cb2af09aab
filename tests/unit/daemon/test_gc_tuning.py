"""The daemon's collector settings: raised thresholds, a full collection paced by time, undone."""

from __future__ import annotations

import gc
import threading
import time
import weakref

from daemon.gc_tuning import DAEMON_GC_THRESHOLDS, collector_paced_by_time


class _Node:
    """A container that can sit in a reference cycle."""

    def __init__(self) -> None:
        self.partner: _Node | None = None


def _cycle_garbage() -> weakref.ref[_Node]:
    first, second = _Node(), _Node()
    first.partner, second.partner = second, first
    return weakref.ref(first)  # both unreachable on return; only the collector frees them


def test_thresholds_are_raised_inside_and_restored_after() -> None:
    before = gc.get_threshold()
    with collector_paced_by_time():
        assert gc.get_threshold() == DAEMON_GC_THRESHOLDS
        assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_cyclic_garbage_is_collected_by_the_pacer_without_reaching_a_threshold() -> None:
    with collector_paced_by_time(interval_seconds=0.05):
        gc.disable()  # only the pacer's explicit collections may free the cycle
        try:
            dead = _cycle_garbage()
            assert dead() is not None, "the cycle must outlive its frame until collected"
            deadline = time.monotonic() + 10
            while dead() is not None and time.monotonic() < deadline:
                time.sleep(0.01)
            assert dead() is None, "no full collection ran within 10 s at a 0.05 s interval"
        finally:
            gc.enable()


def test_the_pacer_thread_stops_with_the_block() -> None:
    with collector_paced_by_time(interval_seconds=3600):
        assert any(t.name == "wal2delta-gc" for t in threading.enumerate())
    assert all(t.name != "wal2delta-gc" for t in threading.enumerate())
