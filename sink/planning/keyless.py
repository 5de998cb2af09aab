"""Tables without a key keep identical rows: folding the changes of a keyless table.

Theory of operation
-------------------
A REPLICA IDENTITY FULL table without a primary key (and without a configured key) may
hold identical rows, and PostgreSQL's own subscriber keeps them: every INSERT adds a row,
and every UPDATE or DELETE - whose old tuple is the whole row - changes or removes exactly
*one* row equal to it, NULLs matching NULLs (``worker.c`` finds the first equal tuple).
Matching such changes on every column, as a keyed MERGE would, collapses the duplicates.

So each Delta row of such a table carries a hidden **row identity**: the position (commit
LSN, ordinal) of the INSERT that created it, in ``row_lsn``/``row_ordinal`` metadata
columns, never changed afterwards. And a **stamp**: the position of the last change that
wrote (or *touched*, below) the row, in the LSN and ordinal metadata columns. A change at
position P

* INSERT Y adds a row with identity P and stamp P;
* UPDATE X -> Y or DELETE X *takes* one row equal to X stamped before P and rewrites it
  as Y with stamp P (or removes it), and *touches* every other row equal to X stamped
  before P: its stamp becomes P.

Replays (docs/architecture.md, invariant 2). After a crash the server re-sends every
transaction after the acknowledged position, some of which Delta may already hold. Changes of one
table are applied in stream order, so a stamp P in the table proves that every change of
the table up to P was applied: the **floor** of a step, the newest stamp in the table
when the step runs (``DeltaSink`` reads it once per table after a start, then follows
what it applies), is where replayed changes end, and ``fold`` skips every change at or
before it. Changes after the floor that were applied all the same left no stamp: each
removed a row and left no equal row stamped before it (a take touches every equal row),
and whatever they inserted was removed again. Applying them again finds no such row and
changes nothing - which is why touching matters.

``fold`` then folds the remaining changes in order, without looking at the target: a
take is served first by a row the step itself inserted or rewrote (the most recent one),
touching the step's other rows equal to X, and only otherwise becomes a ``Take`` of a
target row. The executor (``steps/step_keyless.py``) reads, per distinct taken value, the equal
target rows with the smallest stamps, assigns them to the takes in position order
(``assign_takes``), and runs one MERGE that inserts the new rows, rewrites or removes the
taken rows by identity and stamps the touched ones. Nothing depends on which of several
equal rows is taken - they are equal - only on how many.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from decoder import Lsn
from sink.planning.plan import KeylessChange, KeylessStep, Position
from sink.values.matching import hashable
from sink.values.typemap import PlanColumn


@dataclass(frozen=True, slots=True)
class NewRow:
    """A row an INSERT of the step created, as the step leaves it.

    Attributes:
        values: Delta values in step column order.
        row_lsn: commit LSN of the INSERT that created the row (its identity).
        row_ordinal: that INSERT's ordinal in its transaction.
        lsn: commit LSN of the row's last change in the step (its stamp).
        ordinal: that change's ordinal.
        commit_time: that change's commit time (UTC).
    """

    values: tuple[object, ...]
    row_lsn: Lsn
    row_ordinal: int
    lsn: Lsn
    ordinal: int
    commit_time: datetime


@dataclass(frozen=True, slots=True)
class Take:
    """One target row equal to ``old``, stamped before (``lsn``, ``ordinal``), to rewrite.

    Attributes:
        old: the values the taken row holds (the change's old tuple).
        lsn: commit LSN of the change that takes it.
        ordinal: that change's ordinal.
        new: the row's values after the step; None when the step removes it.
        new_lsn: commit LSN of the row's last change in the step (its new stamp).
        new_ordinal: that change's ordinal.
        commit_time: that change's commit time (UTC).
    """

    old: tuple[object, ...]
    lsn: Lsn
    ordinal: int
    new: tuple[object, ...] | None
    new_lsn: Lsn
    new_ordinal: int
    commit_time: datetime

    @property
    def position(self) -> Position:
        """Where the taking change stands."""
        return (self.lsn, self.ordinal)


@dataclass(frozen=True, slots=True)
class Touch:
    """Every target row equal to ``values`` and stamped before the position gets it as stamp."""

    values: tuple[object, ...]
    lsn: Lsn
    ordinal: int
    commit_time: datetime


@dataclass(frozen=True, slots=True)
class FoldedStep:
    """What a keyless step does to the table after its floor.

    Attributes:
        columns: the step's columns.
        first_lsn: commit LSN of the first change after the floor.
        first_ordinal: that change's ordinal. Target rows inserted at or after this
            position do not exist (the floor says so); takes and touches ignore them.
        new_rows: rows the step's inserts created and left, in insert order.
        takes: target rows to rewrite or remove, in position order.
        touches: one per distinct value the step took, with the position of its last take.
    """

    columns: tuple[PlanColumn, ...]
    first_lsn: Lsn
    first_ordinal: int
    new_rows: tuple[NewRow, ...]
    takes: tuple[Take, ...]
    touches: tuple[Touch, ...]

    @property
    def is_empty(self) -> bool:
        """Nothing to write: every change was at or before the floor."""
        return not (self.new_rows or self.takes or self.touches)

    def taken_values(self) -> list[tuple[tuple[object, ...], int]]:
        """Each distinct value the takes need, with how many takes need it, first seen first."""
        counts: dict[tuple[object, ...], int] = {}
        firsts: dict[tuple[object, ...], tuple[object, ...]] = {}
        for take in self.takes:
            key = row_key(take.old)
            counts[key] = counts.get(key, 0) + 1
            firsts.setdefault(key, take.old)
        return [(firsts[key], count) for key, count in counts.items()]


def row_key(values: Sequence[object]) -> tuple[object, ...]:
    """A dictionary key that tells rows apart exactly when Spark's ``<=>`` does."""
    return tuple(hashable(v) for v in values)


@dataclass(slots=True)
class _Pending:
    """A row as the step leaves it so far: new, or a target row already taken."""

    values: tuple[object, ...]
    lsn: Lsn
    ordinal: int
    commit_time: datetime
    insert: Position | None = None
    removed: bool = False


@dataclass(slots=True)
class _OpenTake:
    old: tuple[object, ...]
    lsn: Lsn
    ordinal: int
    row: _Pending


@dataclass(slots=True)
class _Fold:
    new: list[_Pending] = field(default_factory=list)
    takes: list[_OpenTake] = field(default_factory=list)
    pending: dict[tuple[object, ...], list[_Pending]] = field(default_factory=dict)
    touched: dict[tuple[object, ...], Touch] = field(default_factory=dict)

    def insert(self, change: KeylessChange, values: tuple[object, ...]) -> None:
        row = _Pending(values, change.lsn, change.ordinal, change.commit_time, change.position)
        self.new.append(row)
        self.pending.setdefault(row_key(values), []).append(row)

    def take(self, change: KeylessChange, old: tuple[object, ...]) -> None:
        lsn, ordinal, commit_time = change.lsn, change.ordinal, change.commit_time
        key = row_key(old)
        self.touched[key] = Touch(old, lsn, ordinal, commit_time)
        candidates = self.pending.setdefault(key, [])
        if candidates:
            row = candidates.pop()
        else:
            row = _Pending(old, lsn, ordinal, commit_time)
            self.takes.append(_OpenTake(old, lsn, ordinal, row))
        for other in candidates:
            # Touched, as the target rows equal to ``old`` will be.
            other.lsn, other.ordinal, other.commit_time = lsn, ordinal, commit_time
        row.lsn, row.ordinal, row.commit_time = lsn, ordinal, commit_time
        if change.new is None:
            row.removed = True
            return
        row.values = change.new
        self.pending.setdefault(row_key(change.new), []).append(row)


def fold(step: KeylessStep, floor: Position) -> FoldedStep:
    """Fold the step's changes after ``floor`` (see the module docstring)."""
    state = _Fold()
    first: KeylessChange | None = None
    for change in step.changes:
        if change.position <= floor:
            continue  # a replay of what the table already holds
        first = first or change
        if change.old is None:
            assert change.new is not None
            state.insert(change, change.new)
        else:
            state.take(change, change.old)
    new_rows = []
    for row in state.new:
        if row.removed:
            continue
        assert row.insert is not None
        row_lsn, row_ordinal = row.insert
        new_rows.append(
            NewRow(row.values, Lsn(row_lsn), row_ordinal, row.lsn, row.ordinal, row.commit_time)
        )
    takes = tuple(
        Take(
            old=take.old,
            lsn=take.lsn,
            ordinal=take.ordinal,
            new=None if take.row.removed else take.row.values,
            new_lsn=take.row.lsn,
            new_ordinal=take.row.ordinal,
            commit_time=take.row.commit_time,
        )
        for take in state.takes
    )
    return FoldedStep(
        columns=step.columns,
        first_lsn=first.lsn if first is not None else Lsn(0),
        first_ordinal=first.ordinal if first is not None else 0,
        new_rows=tuple(new_rows),
        takes=takes,
        touches=tuple(state.touched.values()),
    )


@dataclass(frozen=True, slots=True)
class Candidate:
    """A target row equal to some taken value: its identity and its stamp."""

    row_lsn: int
    row_ordinal: int
    lsn: int
    ordinal: int

    @property
    def stamp(self) -> Position:
        """Where the row's last change (or touch) stands."""
        return (self.lsn, self.ordinal)


def assign_takes(
    takes: Sequence[Take], candidates: Sequence[Sequence[Candidate]]
) -> list[Candidate | None]:
    """Pick the target row each take rewrites.

    Args:
        takes: the step's takes, in position order.
        candidates: per distinct taken value, in ``KeylessStep.taken_values`` order, the
            target rows equal to it with the smallest stamps (at most as many as takes of
            that value: a row with a smaller stamp can serve every take a larger one can).

    Returns:
        Per take, the row it rewrites, or None when no row equal to its old value was
        stamped before it (a replayed take, or a row Delta never held).

    Each take gets the unassigned candidate with the smallest stamp, if that stamp is
    before the take's position; takes are served in position order, which assigns as many
    takes as any assignment can (the rows a take may use only grow with its position).
    """
    order: dict[tuple[object, ...], int] = {}
    for take in takes:
        order.setdefault(row_key(take.old), len(order))
    queues = [
        sorted(rows, key=lambda c: (c.stamp, c.row_lsn, c.row_ordinal)) for rows in candidates
    ]
    next_free = [0] * len(queues)
    out: list[Candidate | None] = []
    for take in takes:
        index = order[row_key(take.old)]
        queue, position = queues[index], next_free[index]
        if position < len(queue) and queue[position].stamp < take.position:
            out.append(queue[position])
            next_free[index] = position + 1
        else:
            out.append(None)
    return out
