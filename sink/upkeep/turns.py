"""Turns: when each table this process writes gets its next periodic upkeep, and how one
turn runs.

Vacuums (``retention.py``) and log trims (``logtrim.py``) both come round per table: a
table is due when this process first writes it, then every interval. The work of one
call stops starting new tables once the upkeep's deadline has passed, but always does one,
so every call makes progress (``Compactor.compact_due``). A turn that fails only logs a
warning: the table waits for its next turn.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping

import structlog

from sink.engine.deadline import engine_call
from sink.engine.spark import engine_message

log = structlog.get_logger("wal2delta.sink")


class TableTurns:
    """The next turn of each table written in this process (a clock reading)."""

    def __init__(self, every: float, clock: Callable[[], float] = time.time) -> None:
        """``every``: seconds between two turns of a table; ``clock``: wall time."""
        self.every = every
        self.clock = clock
        self._next: dict[str, float] = {}

    def wrote(self, paths: Iterable[str]) -> None:
        """Note writes to ``paths``: a table first written in this process is due now."""
        now = self.clock()
        for path in paths:
            self._next.setdefault(path, now)

    def due(self, now: float) -> list[str]:
        """The tables whose turn has come at ``now``, in the order they were first written."""
        return [path for path, at in self._next.items() if at <= now]

    def postpone(self, paths: Iterable[str], now: float) -> None:
        """Give ``paths`` their next turn one interval after ``now``."""
        for path in paths:
            self._next[path] = now + self.every

    def take(
        self, due: list[str], now: float, deadline: float | None, work: Callable[[str], None]
    ) -> bool:
        """Run ``work`` on each of ``due`` and give it its next turn, until ``deadline`` (a
        ``time.monotonic`` reading) has passed - one whatever the deadline; return whether
        some are left waiting."""
        for done, path in enumerate(due):
            if done and deadline is not None and time.monotonic() >= deadline:
                return True
            self._next[path] = now + self.every
            work(path)
        return False

    def clear(self) -> None:
        """Forget every turn (a new process starts each table at its first write)."""
        self._next.clear()


def run_turn(
    path: str, doing: str, work: Callable[[], Mapping[str, object] | None], *, done: str
) -> None:
    """Run one table's ``work`` under the engine-call deadline; log ``done`` with the
    fields it returns (nothing when it returns None), or a warning naming ``doing`` when it
    fails."""
    started = time.monotonic()
    try:
        with engine_call(f"{doing} at {path}"):
            fields = work()
    except Exception as exc:
        log.warning(
            f"{doing} failed; it is tried again at its next turn",
            table_path=path,
            error=f"{type(exc).__name__}: {engine_message(exc)}",
        )
        return
    if fields is not None:
        log.debug(
            done,
            table_path=path,
            **fields,
            duration_seconds=round(time.monotonic() - started, 3),
        )
