"""Groups replayed changes of committed transactions into sink batches by size and age.

A batch closes when it holds ``max_rows`` changes, or when its oldest content is
``max_age`` old, or - group commit, ``close_when_idle`` - as soon as it holds a whole
transaction while the sink has nothing to do: lag is then one MERGE time at low rates
instead of ``max_age``, and under load the batch grows while the sink works.

A transaction larger than ``max_rows`` is split over several batches; only the batch that
holds its last change carries its end LSN as ``durable_lsn``, so the flush position never
passes a transaction that is only partly in Delta. Empty transactions still move
``durable_lsn`` forward, so idle tables do not hold WAL back.

Adaptive batching: while the sink is still busy with earlier batches (a backlog), a batch
neither closes on age nor at ``max_rows``; it keeps growing up to ``max_rows_ceiling``.
A MERGE costs about the same whatever its size (it scans the target), so under load
fewer, larger batches raise throughput, while at low load batches stay small and lag
stays near one MERGE time plus ``max_age``.

Catching up (``catch_up_to``): a session that starts behind - the server's WAL position
when it started lies ahead of what it has read - reads a backlog the server already
holds. Closing a batch at every idle moment of the sink then cuts that backlog into
batches by timing alone: when the sink finishes its first batch while the backlog is
still being read, the rest comes as two batches, and every table of both is written
twice (a MERGE the second time, when the first write inserted the keys the second
updates). So past the session's first batch (handed over at once, so the sink's first
engine calls overlap the reading), until the read position passes ``catch_up_to`` (a
commit's end, or a keepalive's position: the walsender sends one once it has caught up),
a batch neither closes when the sink is idle nor at ``max_rows``: it grows as under a
backlog, to ``max_rows_ceiling`` or ``max_bytes``, and closes ``max_age`` after the last
change added to it - the read stalled short of ``catch_up_to`` - rather than ``max_age``
after its first.

Memory: a batch also closes once the changes in it weigh ``max_bytes`` (as the caller
measures them: the capture loop counts each change's message bytes plus a fixed object
overhead), whatever ``backlog`` says, so wide rows never make a batch of ``max_rows``
changes unboundedly large.
"""

from __future__ import annotations

from collections.abc import Sequence

from decoder import Change, Lsn, PgTimestamp
from sink import Batch


class Batcher:
    """Accumulates changes; hands out ``Batch`` values when they are due."""

    def __init__(
        self,
        *,
        max_rows: int,
        max_age: float,
        max_rows_ceiling: int | None = None,
        max_bytes: int | None = None,
        close_when_idle: bool = False,
        timeline: int | None = None,
        catch_up_to: Lsn | None = None,
    ) -> None:
        """``timeline``: the server's timeline, recorded with every batch (``Batch.timeline``);
        ``catch_up_to``: the server's WAL position when the session started (the module
        docstring), None for no catching up."""
        if max_rows < 1:
            raise ValueError("max_rows must be at least 1")
        self.max_rows = max_rows
        self.max_rows_ceiling = max(max_rows, max_rows_ceiling or max_rows)
        self.max_bytes = max_bytes
        self.max_age = max_age
        self.close_when_idle = close_when_idle
        self.timeline = timeline
        self._changes: list[Change] = []
        self._bytes = 0
        self._durable_lsn: Lsn | None = None
        self._transactions = 0
        self._last_commit_time: PgTimestamp | None = None
        self._opened_at: float | None = None
        self._added_at = 0.0
        """When a change or a transaction's end was last added."""
        self._catch_up_to = catch_up_to
        self._handed_over = False

    @property
    def row_count(self) -> int:
        return len(self._changes)

    @property
    def byte_count(self) -> int:
        """The weight of the open batch's changes, as given to ``add`` / ``add_many``."""
        return self._bytes

    def byte_room(self) -> int | None:
        """Bytes the open batch takes before it is full; None without ``max_bytes``."""
        return None if self.max_bytes is None else max(1, self.max_bytes - self._bytes)

    def _full(self, backlog: bool) -> bool:
        limit = self.max_rows_ceiling if backlog else self.max_rows
        if len(self._changes) >= limit:
            return True
        return self.max_bytes is not None and self._bytes >= self.max_bytes

    def _touch(self, now: float) -> None:
        if self._opened_at is None:
            self._opened_at = now
        self._added_at = now

    def add(
        self, change: Change, now: float, *, backlog: bool = False, size: int = 0
    ) -> Batch | None:
        """Add one change weighing ``size`` bytes; return a batch when it is full.

        Full means ``max_rows`` changes, or ``max_rows_ceiling`` while ``backlog`` says the
        sink is still busy with earlier batches, or ``max_bytes`` in any case.
        """
        self._touch(now)
        self._changes.append(change)
        self._bytes += size
        return self.take() if self._full(backlog) else None

    def room(self, *, backlog: bool = False) -> int:
        """How many changes the open batch takes before it is full (at least 1)."""
        limit = self.max_rows_ceiling if backlog else self.max_rows
        return max(1, limit - len(self._changes))

    def add_many(
        self, changes: Sequence[Change], now: float, *, backlog: bool = False, size: int = 0
    ) -> Batch | None:
        """Add up to ``room(backlog=backlog)`` changes weighing ``size`` bytes in all.

        The same as calling ``add`` for each change, for a caller that never passes more
        than the room left (the capture loop's hot path: one clock reading per slice) and
        stops a slice at the change that fills ``byte_room()``.
        """
        if not changes:
            return None
        self._touch(now)
        self._changes.extend(changes)
        self._bytes += size
        return self.take() if self._full(backlog) else None

    def end_transaction(self, end_lsn: Lsn, commit_time: PgTimestamp, now: float) -> None:
        """Every change of the transaction ending at ``end_lsn`` has been added."""
        self._touch(now)
        self._durable_lsn = end_lsn
        self._transactions += 1
        self._last_commit_time = commit_time

    def catching_up(self, received: int) -> bool:
        """Whether the session, having read up to ``received``, still reads the backlog the
        server held when it started, past its first batch (the module docstring). Once
        past ``catch_up_to`` it never catches up again."""
        if self._catch_up_to is None or not self._handed_over:
            return False
        if received < self._catch_up_to:
            return True
        self._catch_up_to = None
        return False

    def due(self, now: float, *, backlog: bool = False, catching_up: bool = False) -> bool:
        """True when the open batch should be handed over now.

        That is when its oldest content is ``max_age`` old, or with ``close_when_idle``
        when it holds a whole transaction - unless the sink has a backlog, in which case
        the batch keeps growing, or the session is catching up, in which case it closes
        ``max_age`` after the last change added - or when it is full.
        """
        if self._opened_at is None:
            return False
        if self._full(backlog or catching_up):
            return True
        if backlog:
            return False
        if catching_up:
            return now - self._added_at >= self.max_age
        if self.close_when_idle and self._transactions:
            return True
        return now - self._opened_at >= self.max_age

    def next_deadline(self, *, catching_up: bool = False) -> float | None:
        """When the open batch is due by age (``due``); None without one."""
        if self._opened_at is None:
            return None
        return (self._added_at if catching_up else self._opened_at) + self.max_age

    def take(self) -> Batch | None:
        """Close and return the open batch, or None when there is nothing to hand over."""
        if self._opened_at is None:
            return None
        batch = Batch(
            changes=tuple(self._changes),
            durable_lsn=self._durable_lsn,
            transaction_count=self._transactions,
            last_commit_time=self._last_commit_time,
            timeline=self.timeline,
        )
        self._changes = []
        self._bytes = 0
        self._durable_lsn = None
        self._transactions = 0
        self._last_commit_time = None
        self._opened_at = None
        self._handed_over = True
        return batch
