"""Changes of tables that change a little, held back to ride in a later batch.

Theory of operation
-------------------
With many tables, most batches touch most of them with a few changes each, and every table
touched costs a Delta commit (a MERGE) whose price barely depends on its rows. With
``sink.table_min_rows`` set, ``HeldChanges.admit`` takes each batch before it is planned
and decides, per table:

* A table with fewer row changes than ``min_rows`` in the batch - counting what it already
  holds for the table - has them held back: they leave the batch and wait for a later one.
* A table that reaches ``min_rows``, or that a TRUNCATE in the batch names, gets its held
  changes back, in front of the batch's own (they are older: batches come in commit order).
* A batch that finds a held change older than ``max_age`` seconds (or is marked
  ``release_held``) gets every held change back and holds nothing: so no change waits
  longer than about ``max_age`` plus one batch, and such a batch is a consistent cut for
  ``wal2delta cut`` (the commit log records a batch that leaves changes held as no cut:
  ``DeltaSink`` hands it on without ``durable_lsn``).

Nothing held is acknowledged: ``low_lsn`` is the commit LSN of the oldest held change, and
the session keeps the acknowledged position at or before it (``BatchResult.held_lsn``;
``capture.feedback.FlushTracker.hold_for_sink``). The server re-sends everything after the
acknowledged position, so held changes lost to a crash come again; after a reconnect the
sink worker forgets them (``discard``) for the same reason, so they are not applied twice.

Memory: at most ``min_rows - 1`` changes per table (each a few hundred bytes plus its
message bytes), so the bound grows with the table count times ``min_rows``, and only
while those tables change a little (docs/operations.md, Many tables).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import replace

from decoder import Change, Lsn, RowChange, TruncateChange
from sink.base import Batch


class HeldChanges:
    """The row changes held back per table, and when the oldest was first held."""

    def __init__(self, min_rows: int, max_age: float) -> None:
        """``min_rows``: a table with fewer changes in a batch is held (0: never);
        ``max_age``: seconds after which every held change is released."""
        self._min_rows = min_rows
        self._max_age = max_age
        self._held: dict[str, list[RowChange]] = {}
        self._since: dict[str, float] = {}
        """Table -> when (monotonic) it was first held without a release since."""

    @property
    def count(self) -> int:
        """Changes held."""
        return sum(len(changes) for changes in self._held.values())

    @property
    def low_lsn(self) -> Lsn | None:
        """The commit LSN of the oldest held change; None when none is held."""
        return min((changes[0].commit_lsn for changes in self._held.values()), default=None)

    @property
    def deadline(self) -> float | None:
        """When (monotonic) the oldest held change reaches ``max_age``; None when none is held."""
        oldest = min(self._since.values(), default=None)
        return None if oldest is None else oldest + self._max_age

    def discard(self) -> None:
        """Forget every held change (the server sends them again)."""
        self._held.clear()
        self._since.clear()

    def admit(self, batch: Batch, now: float) -> Batch:
        """The batch to apply now: held changes given back, small tables' changes held.

        Returns ``batch`` itself when nothing is held before or after. Otherwise a batch
        of the changes to apply now, in commit order; its ``durable_lsn`` is None when
        changes stay held (see the module docstring), its other fields are ``batch``'s.
        """
        if self._min_rows <= 0 and not self._held:
            return batch
        held = self._held
        deadline = self.deadline
        release_all = (
            self._min_rows <= 0 or batch.release_held or (deadline is not None and now >= deadline)
        )
        since = self._since
        self._held, self._since = {}, {}
        released: list[Change] = sorted(
            (change for changes in held.values() for change in changes),
            key=lambda change: (change.commit_lsn, change.ordinal),
        )
        changes = [*released, *batch.changes]
        if not release_all:
            changes = self._hold_small_tables(changes, since, now)
        if not self._held and not held:
            return batch
        return replace(
            batch,
            changes=tuple(changes),
            durable_lsn=None if self._held else batch.durable_lsn,
            release_held=False,
        )

    def _hold_small_tables(
        self, changes: list[Change], since: dict[str, float], now: float
    ) -> list[Change]:
        """Take the changes of the tables below ``min_rows`` out of ``changes`` into
        ``self._held``; return the rest, in order."""
        counts = Counter(
            change.relation.qualified_name for change in changes if isinstance(change, RowChange)
        )
        truncated = set(_truncated_tables(changes))
        small = {t for t, n in counts.items() if n < self._min_rows and t not in truncated}
        if not small:
            return changes
        kept: list[Change] = []
        for change in changes:
            if isinstance(change, RowChange) and (name := change.relation.qualified_name) in small:
                self._held.setdefault(name, []).append(change)
            else:
                kept.append(change)
        self._since = {name: since.get(name, now) for name in self._held}
        return kept


def _truncated_tables(changes: Iterable[Change]) -> Iterable[str]:
    for change in changes:
        if isinstance(change, TruncateChange):
            for relation in change.relations:
                yield relation.qualified_name
