"""Which LSN may be acknowledged to the server, and when to say so.

Theory of operation (ports ``get_flush_position`` and ``send_feedback`` from PostgreSQL's
``worker.c``, with one stricter rule):

* ``received`` is the highest WAL position seen in a data frame; it is reported as the
  *write* position, which only tells the server how far we have read.
* Every committed transaction handed to the sink is *pending* until the sink reports a
  batch durable up to an end LSN at or beyond the transaction's end LSN. The *flush*
  position - the one the server uses to recycle WAL and to decide what to send again
  after a restart - is the end LSN of the newest transaction such that it and every
  earlier one are durable.
* A prepared transaction holds the flush position at its ``prepare_lsn`` until it is
  rolled back or its COMMIT PREPARED is *durable* - not merely received: acknowledging
  past the PREPARE makes the server think we have it, and after a crash it sends only the
  COMMIT PREPARED, whose changes we never applied (docs/architecture.md, invariant 1; the
  crash harness caught a hold released at receipt). This is stricter than worker.c, which
  may advance because it prepared the transaction locally.
* A durable COMMIT PREPARED is not forgotten either until the flush position reaches its
  end: restarted from a position between its PREPARE and its COMMIT PREPARED, the server
  skips the PREPARE (it lies before the restart point) and sends the COMMIT PREPARED alone,
  which the assembler must refuse although the transaction is in Delta. While another hold
  or a pending commit keeps the flush position inside that range, it is pulled back to the
  PREPARE (the crash harness caught this too).
* When nothing is pending, no prepared transaction is held and the decoder is between
  transactions, a keepalive's ``walEnd`` may be acknowledged: the walsender has decoded
  everything before it and sent us every commit in that range (invariant 5). A walEnd
  received while a transaction is open is never used: the open transaction may commit
  before it.
* Changes the sink holds back for a later batch (``sink.table_min_rows``) hold the flush
  position at the commit LSN of the oldest of them (``hold_for_sink``) until a batch
  applies them: the server skips a transaction on restart only when its commit record
  starts before the acknowledged position, so it sends that one again.
* Reported positions never move backwards.

``FeedbackPolicy`` decides when a status update is due: when the server asked for a
reply, when flush advanced, every ``status_interval`` seconds, and before 60% of
``wal_sender_timeout`` elapses. The clock is passed in, so nothing here sleeps.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Positions:
    """What a standby status update reports."""

    write: int
    flush: int
    apply: int


class FlushTracker:
    """Tracks received, pending and durable LSNs and derives the acknowledgeable flush LSN."""

    def __init__(self, start_lsn: int = 0) -> None:
        self._received = start_lsn
        self._durable = start_lsn
        self._reported_flush = start_lsn
        self._keepalive_end = 0
        self._pending: deque[int] = deque()
        self._prepared: dict[str, int] = {}
        # gid -> (prepare_lsn, end LSN of its COMMIT PREPARED): held until that is durable.
        self._committing: dict[str, tuple[int, int]] = {}
        self._sink_hold: int | None = None

    @property
    def received(self) -> int:
        return self._received

    @property
    def acknowledged(self) -> int:
        """The last flush position ``positions`` reported: never past a held PREPARE."""
        return self._reported_flush

    @property
    def durable(self) -> int:
        """End LSN of the newest transaction that is durable along with all earlier ones."""
        return self._durable

    def on_data(self, wal_start: int) -> None:
        """A data frame starting at ``wal_start`` arrived."""
        self._received = max(self._received, wal_start)

    def on_keepalive(self, wal_end: int) -> None:
        """A keepalive said the server has decoded and sent everything before ``wal_end``."""
        self._received = max(self._received, wal_end)
        self._keepalive_end = max(self._keepalive_end, wal_end)

    def on_commit(self, end_lsn: int) -> None:
        """A committed transaction ending at ``end_lsn`` was handed to the sink."""
        self._received = max(self._received, end_lsn)
        self._pending.append(end_lsn)

    def on_durable(self, end_lsn: int) -> None:
        """The sink made every transaction ending at or before ``end_lsn`` durable."""
        while self._pending and self._pending[0] <= end_lsn:
            self._durable = max(self._durable, self._pending.popleft())

    @property
    def sink_hold(self) -> int | None:
        """The commit LSN the sink's held-back changes hold the flush position at."""
        return self._sink_hold

    def hold_for_sink(self, commit_lsn: int | None) -> None:
        """The sink holds changes back from ``commit_lsn`` on (None: it holds none now)."""
        self._sink_hold = commit_lsn

    def on_prepared(self, gid: str, prepare_lsn: int) -> None:
        """A prepared transaction is held until COMMIT/ROLLBACK PREPARED."""
        self._prepared[gid] = prepare_lsn

    def on_prepare_resolved(self, gid: str, commit_end_lsn: int | None = None) -> None:
        """``gid`` was rolled back (no ``commit_end_lsn``) or committed.

        A COMMIT PREPARED releases the hold only once the transaction ending at
        ``commit_end_lsn`` is durable, and is remembered until the flush position
        reaches ``commit_end_lsn``.
        """
        prepare_lsn = self._prepared.pop(gid, None)
        if prepare_lsn is not None and commit_end_lsn is not None:
            self._committing[gid] = (prepare_lsn, commit_end_lsn)

    def positions(self, *, decoder_idle: bool) -> Positions:
        """Return the positions to report; ``decoder_idle`` means no transaction is open."""
        durable = self._durable
        # A PREPARE holds the flush position until its COMMIT PREPARED is durable.
        holds = [
            *self._prepared.values(),
            *(lsn for lsn, end in self._committing.values() if end > durable),
            *(() if self._sink_hold is None else (self._sink_hold,)),
        ]
        flush = durable
        if decoder_idle and not self._pending and not holds:
            flush = max(flush, self._keepalive_end)
        if holds:
            flush = min(flush, *holds)
        flush = max(self._outside_committed_prepares(flush), self._reported_flush)
        self._reported_flush = flush
        if self._committing:
            # Past its COMMIT PREPARED the server will never send it again.
            self._committing = {
                gid: span for gid, span in self._committing.items() if span[1] > flush
            }
        write = max(self._received, flush)
        return Positions(write=write, flush=flush, apply=flush)

    def _outside_committed_prepares(self, flush: int) -> int:
        """``flush``, pulled back to the PREPARE of any COMMIT PREPARED it falls inside.

        Spans are visited from the latest PREPARE down, so a position pulled back into an
        earlier span is pulled back again by it; one pass suffices.
        """
        for prepare_lsn, end in sorted(self._committing.values(), reverse=True):
            if prepare_lsn < flush < end:
                flush = prepare_lsn
        return flush


class FeedbackPolicy:
    """Decides when the next standby status update is due."""

    def __init__(self, *, status_interval: float, wal_sender_timeout: float) -> None:
        interval = status_interval
        if wal_sender_timeout > 0:
            interval = min(interval, max(0.1, wal_sender_timeout * 0.6))
        self.interval = interval
        self._last_sent = float("-inf")
        self._last_flush = -1
        self._reply_requested = False

    def request_reply(self) -> None:
        """The server asked for an immediate reply (keepalive with reply_requested)."""
        self._reply_requested = True

    def due(self, now: float, flush: int) -> bool:
        """True when a status update should be sent now."""
        return (
            self._reply_requested
            or flush != self._last_flush
            or now - self._last_sent >= self.interval
        )

    def next_deadline(self) -> float:
        """Monotonic time at which the periodic update falls due."""
        return self._last_sent + self.interval

    def sent(self, now: float, flush: int) -> None:
        self._last_sent = now
        self._last_flush = flush
        self._reply_requested = False
