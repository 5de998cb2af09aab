"""Deadlines on the calls the sink makes into the engine and the store.

Theory of operation
-------------------
A call into Spark Connect (and through it into S3), or into delta-rs, may never return:
a server that accepted the connection and went silent, a store request stuck behind a
dead peer. Nothing in pyspark or delta-rs bounds such a call for us, and nothing can end
it from outside either: the calling thread sits in gRPC's or Rust's C code.

So the deadline is kept by a watchdog, not by the caller. Every such call runs inside
``engine_call(action)`` - ``spark.engine_errors`` opens one for every Spark call, and the
delta-rs call sites open their own. The block registers itself (action, thread, start)
with the process's ``CallDeadlines`` when one is installed, and unregisters when it ends,
however it ends. The watchdog thread wakes at the earliest registered deadline; a call
still registered then is *overdue*, and the watchdog hands it to ``on_overdue`` once.

What ``on_overdue`` does is the daemon's choice (``daemon/process.py``: it exits the
process, decision 0114). It cannot be "raise in the caller and carry on": an abandoned
Spark Connect operation keeps running in the engine. Measured on Sail 0.7.2, a query
interrupted with ``SparkSession.interruptAll()`` - which answered with the operation's
id - ran on to its end about 100 s later; only then did its caller get an error. A MERGE
abandoned that way could commit after a new session had started to apply the same
changes: two writers on one table. The replay guard makes a replay harmless, not a race.

Without an installed ``CallDeadlines`` (tests that drive the sink directly, the command
line tools other than ``run``) ``engine_call`` only marks the block.

Nested blocks each have their own deadline, counted from their own start.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import structlog

log = structlog.get_logger("wal2delta.sink")


@dataclass(frozen=True, slots=True)
class OverdueCall:
    """A call past its deadline, as the watchdog saw it.

    Attributes:
        action: what the sink was doing ("merging into public.orders").
        thread: the name of the thread that made the call.
        timeout: the deadline, in seconds after the start.
        elapsed: seconds since the call started, when the watchdog found it.
    """

    action: str
    thread: str
    timeout: float
    elapsed: float

    def describe(self) -> str:
        """One sentence for a log line or an error message."""
        return (
            f"an engine or store call did not return within its deadline of "
            f"{self.timeout:g}s while {self.action} (running for {self.elapsed:.0f}s on "
            f"thread {self.thread})"
        )


@dataclass(slots=True)
class _Call:
    action: str
    thread: str
    started: float
    deadline: float


class CallDeadlines:
    """The watchdog of ``engine_call`` blocks (see the module docstring)."""

    def __init__(
        self,
        timeout: float,
        on_overdue: Callable[[OverdueCall], None],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Start the watchdog thread.

        Args:
            timeout: seconds a call may take; more than 0.
            on_overdue: called on the watchdog thread, once per overdue call.
            clock: monotonic seconds.
        """
        if timeout <= 0:
            raise ValueError("a call deadline must be more than 0 seconds")
        self.timeout = timeout
        self._on_overdue = on_overdue
        self._clock = clock
        self._calls: dict[int, _Call] = {}
        self._numbers = itertools.count()
        self._changed = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._watch, name="wal2delta-deadlines", daemon=True)
        self._thread.start()

    @contextmanager
    def call(self, action: str) -> Iterator[None]:
        """Run the block under the deadline; ``action`` says what it does."""
        number = next(self._numbers)
        started = self._clock()
        entry = _Call(action, threading.current_thread().name, started, started + self.timeout)
        with self._changed:
            self._calls[number] = entry
            self._changed.notify()
        try:
            yield
        finally:
            with self._changed:
                self._calls.pop(number, None)

    @property
    def running(self) -> int:
        """Calls registered now."""
        with self._changed:
            return len(self._calls)

    def stop(self) -> None:
        """End the watchdog; calls still running are no longer watched."""
        with self._changed:
            self._stopped = True
            self._changed.notify()
        self._thread.join()

    def _watch(self) -> None:
        while True:
            with self._changed:
                if self._stopped:
                    return
                now = self._clock()
                overdue = [n for n, call in self._calls.items() if call.deadline <= now]
                found = [(self._calls.pop(n), now) for n in overdue]
                if not found:
                    earliest = min((c.deadline for c in self._calls.values()), default=None)
                    self._changed.wait(None if earliest is None else max(0.0, earliest - now))
                    continue
            for call, now in found:  # outside the lock: the handler may take its time
                self._on_overdue(
                    OverdueCall(call.action, call.thread, self.timeout, now - call.started)
                )


_installed: CallDeadlines | None = None
_installed_lock = threading.Lock()


def install_call_deadlines(deadlines: CallDeadlines | None) -> CallDeadlines | None:
    """Make ``deadlines`` the process's watchdog (None: none); returns the one before."""
    global _installed
    with _installed_lock:
        previous, _installed = _installed, deadlines
    return previous


@contextmanager
def engine_call(action: str) -> Iterator[None]:
    """The block is one call into the engine or the store, under the installed deadline."""
    deadlines = _installed
    if deadlines is None:
        yield
        return
    with deadlines.call(action):
        yield
