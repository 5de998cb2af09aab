"""Which tables of a batch the lake cannot already hold changes of (``step_append.py``).

The server sends again everything after the acknowledged position when a session starts:
after a crash, a failed batch, a reconnect or a rewind for a copy. Those changes may
already be in Delta - some tables of a crashed batch committed - so they must go through
the MERGE, whose replay guard makes them harmless (docs/architecture.md, invariant 2).

``ReplayHorizon`` tells them apart with positions only, before a batch writes:

* at the first batch of a process (and after ``forget``), the newest ``high_lsn`` of the
  commit log (``commits.CommitLog.newest_high_lsn``): every batch that wrote anything
  recorded its intent - the newest commit LSN among its changes - before its first write,
  so no table holds a change above it;
* then, for each table, the newest commit LSN of every batch that held changes of the
  table and was handed to the engine (``attempted``), whether it committed or not.

A table's changes in a batch are new when its earliest change (the plan's first step) is
above both. The changes of a table held back (``holdback.py``) or dropped while it is
copied (``copies.py``) were never handed to the engine and do not raise its horizon.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

from decoder import Lsn
from sink.planning.plan import MergePlan, TruncateStep

NEVER: Final = Lsn(-1)
"""Below every LSN: the horizon of a lake no batch wrote."""


def first_lsn(plan: MergePlan) -> Lsn:
    """The commit LSN of the table's earliest change the plan applies."""
    return min(
        (step.lsn if isinstance(step, TruncateStep) else step.first_lsn for step in plan.steps),
        default=NEVER,
    )


class ReplayHorizon:
    """The newest change the lake may hold, overall and per table (the module docstring)."""

    def __init__(self, newest_intent: Callable[[], Lsn | None]) -> None:
        """``newest_intent`` reads the newest ``high_lsn`` of the commit log (None for a
        lake without batches); called once, before the first batch."""
        self._newest_intent = newest_intent
        self._start: Lsn | None = None
        self._tables: dict[str, Lsn] = {}

    def new_tables(self, plans: Sequence[MergePlan]) -> frozenset[str]:
        """The qualified names of the tables of ``plans`` none of whose changes the lake
        can hold yet.

        Raises:
            SinkError: the commit log could not be read (the first call).
        """
        if self._start is None:
            newest = self._newest_intent()
            self._start = NEVER if newest is None else newest
        start, seen = self._start, self._tables
        return frozenset(
            plan.qualified_name
            for plan in plans
            if first_lsn(plan) > max(start, seen.get(plan.qualified_name, NEVER))
        )

    def attempted(self, plans: Sequence[MergePlan], high: Lsn | None) -> None:
        """The tables of ``plans`` are handed to the engine with changes up to ``high``."""
        if high is None:
            return
        seen = self._tables
        for plan in plans:
            name = plan.qualified_name
            if seen.get(name, NEVER) < high:
                seen[name] = high

    def forget(self) -> None:
        """Read the commit log again before the next batch (the sink was closed)."""
        self._start = None
        self._tables.clear()
