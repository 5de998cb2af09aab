"""Batcher: size and age limits, and which batch may carry a transaction's end LSN."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from capture.batcher import Batcher
from decoder import (
    ColumnKind,
    ColumnValue,
    Lsn,
    Oid,
    PgTimestamp,
    Relation,
    RelationColumn,
    RowChange,
    TupleData,
)

RELATION = Relation(
    xid=None,
    relation_id=Oid(1),
    namespace="public",
    relation_name="t",
    replica_identity="d",
    columns=(RelationColumn(1, "id", Oid(23), -1),),
)


def change(n: int, commit_lsn: int = 100) -> RowChange:
    return RowChange(
        op="insert",
        relation=RELATION,
        new=TupleData((ColumnValue(ColumnKind.TEXT, str(n).encode()),)),
        old=None,
        old_kind=None,
        commit_lsn=Lsn(commit_lsn),
        commit_time=PgTimestamp(0),
        ordinal=n,
    )


def test_batch_closes_at_max_rows_without_claiming_the_open_transaction() -> None:
    batcher = Batcher(max_rows=2, max_age=60)
    assert batcher.add(change(0), 0.0) is None
    full = batcher.add(change(1), 0.0)
    assert full is not None
    assert len(full.changes) == 2
    assert full.durable_lsn is None
    batcher.end_transaction(Lsn(150), PgTimestamp(5), 0.0)
    rest = batcher.take()
    assert rest is not None
    assert rest.changes == ()
    assert rest.durable_lsn == 150
    assert rest.transaction_count == 1


def test_batch_is_due_after_max_age_of_its_oldest_content() -> None:
    batcher = Batcher(max_rows=100, max_age=1.0)
    assert not batcher.due(10.0)
    batcher.add(change(0), 10.0)
    batcher.end_transaction(Lsn(150), PgTimestamp(5), 10.5)
    assert not batcher.due(10.9)
    assert batcher.due(11.0)
    batch = batcher.take()
    assert batch is not None
    assert batch.durable_lsn == 150
    assert batcher.take() is None


def test_group_commit_hands_over_a_whole_transaction_at_once_while_the_sink_is_idle() -> None:
    batcher = Batcher(max_rows=100, max_age=1.0, close_when_idle=True)
    batcher.add(change(0), 10.0)
    assert not batcher.due(10.0), "part of a transaction waits for the rest of it"
    batcher.end_transaction(Lsn(150), PgTimestamp(5), 10.0)
    assert not batcher.due(10.0, backlog=True), "while the sink works, the batch grows"
    assert batcher.due(10.0), "the sink is idle: no need to wait for max_age"
    batch = batcher.take()
    assert batch is not None
    assert batch.durable_lsn == 150


def test_without_group_commit_an_idle_sink_still_waits_for_max_age() -> None:
    batcher = Batcher(max_rows=100, max_age=1.0)
    batcher.add(change(0), 10.0)
    batcher.end_transaction(Lsn(150), PgTimestamp(5), 10.0)
    assert not batcher.due(10.5)
    assert batcher.due(11.0)


def test_a_batch_carries_the_end_of_the_last_complete_transaction_it_holds() -> None:
    batcher = Batcher(max_rows=3, max_age=60)
    batcher.add(change(0, 100), 0.0)
    batcher.end_transaction(Lsn(110), PgTimestamp(1), 0.0)
    batcher.add(change(1, 200), 0.0)
    full = batcher.add(change(2, 200), 0.0)
    assert full is not None
    assert full.durable_lsn == 110
    assert full.transaction_count == 1


def test_a_busy_sink_lets_the_batch_grow_up_to_the_ceiling() -> None:
    batcher = Batcher(max_rows=2, max_age=1.0, max_rows_ceiling=5)
    for n in range(4):
        assert batcher.add(change(n), 0.0, backlog=True) is None
    assert not batcher.due(10.0, backlog=True), "age alone does not close it under backlog"
    full = batcher.add(change(4), 10.0, backlog=True)
    assert full is not None
    assert len(full.changes) == 5


def test_when_the_backlog_clears_the_grown_batch_is_due_at_once() -> None:
    batcher = Batcher(max_rows=2, max_age=1.0, max_rows_ceiling=100)
    for n in range(10):
        batcher.add(change(n), 0.0, backlog=True)
    assert batcher.due(0.1, backlog=False), "already past max_rows"
    batch = batcher.take()
    assert batch is not None
    assert len(batch.changes) == 10


@given(
    max_rows=st.integers(1, 20),
    extra=st.integers(0, 30),
    steps=st.lists(st.tuples(st.integers(0, 25), st.booleans()), max_size=12),
)
def test_adding_slices_of_the_room_left_closes_the_same_batches_as_adding_one_at_a_time(
    max_rows: int, extra: int, steps: list[tuple[int, bool]]
) -> None:
    """The capture loop hands over slices (``room`` / ``add_many``) instead of changes."""
    one_by_one = Batcher(max_rows=max_rows, max_age=60, max_rows_ceiling=max_rows + extra)
    sliced = Batcher(max_rows=max_rows, max_age=60, max_rows_ceiling=max_rows + extra)
    seen_one: list[tuple[int, ...]] = []
    seen_sliced: list[tuple[int, ...]] = []
    n = 0
    for size, backlog in steps:
        pending = [change(n + i) for i in range(size)]
        n += size
        for c in pending:
            batch = one_by_one.add(c, 0.0, backlog=backlog)
            if batch is not None:
                seen_one.append(tuple(ch.ordinal for ch in batch.changes))  # type: ignore[union-attr]
        while pending:
            room = sliced.room(backlog=backlog)
            assert room >= 1
            chunk, pending = pending[:room], pending[room:]
            batch = sliced.add_many(chunk, 0.0, backlog=backlog)
            if batch is not None:
                seen_sliced.append(tuple(ch.ordinal for ch in batch.changes))  # type: ignore[union-attr]
        assert one_by_one.row_count == sliced.row_count
    assert seen_sliced == seen_one
    assert sliced.add_many([], 0.0) is None


def test_a_batch_closes_at_max_bytes_whatever_the_backlog() -> None:
    batcher = Batcher(max_rows=100, max_age=60, max_rows_ceiling=1000, max_bytes=1000)
    assert batcher.byte_room() == 1000
    assert batcher.add(change(1), 0.0, backlog=True, size=600) is None
    assert batcher.byte_room() == 400
    assert not batcher.due(0.0, backlog=True)
    full = batcher.add(change(2), 0.0, backlog=True, size=600)
    assert full is not None
    assert len(full.changes) == 2
    assert batcher.byte_count == 0
    assert batcher.add_many([change(3), change(4)], 0.0, size=2000) is not None
    assert Batcher(max_rows=5, max_age=60).byte_room() is None


def _transaction(batcher: Batcher, n: int, now: float, *, backlog: bool = False) -> None:
    """One transaction of one change, ending at LSN 1000 + n."""
    assert batcher.add(change(n), now, backlog=backlog) is None
    batcher.end_transaction(Lsn(1000 + n), PgTimestamp(n), now)


def test_catching_up_the_first_batch_goes_at_once_and_the_backlog_in_one_more() -> None:
    batcher = Batcher(
        max_rows=2, max_age=1.0, max_rows_ceiling=100, close_when_idle=True, catch_up_to=Lsn(5000)
    )
    assert not batcher.catching_up(1001)  # nothing handed over yet: the sink warms up
    _transaction(batcher, 1, 0.0)
    assert batcher.due(0.0, catching_up=batcher.catching_up(1001))
    first = batcher.take()
    assert first is not None
    assert first.transaction_count == 1
    # The sink is idle, but the server held more when the session started: the batch
    # grows past max_rows (up to the ceiling) and closes at max_age, not at every commit.
    for n in range(2, 12):
        growing = batcher.catching_up(1000 + n)
        assert growing
        _transaction(batcher, n, 0.1, backlog=growing)
        assert not batcher.due(0.1, catching_up=growing)
    assert batcher.row_count == 10  # five times max_rows
    # The read stalls short of the position (WAL this stream does not carry): the batch
    # closes max_age after the last change added, not after its first.
    assert not batcher.due(1.05, catching_up=True)
    assert batcher.next_deadline(catching_up=True) == 1.1
    assert batcher.due(1.1, catching_up=True)
    # Read past where the server was: group commit again, and for good.
    assert not batcher.catching_up(5000)
    assert batcher.due(0.2, catching_up=batcher.catching_up(1011))
    caught_up = batcher.take()
    assert caught_up is not None
    assert caught_up.transaction_count == 10
    assert not batcher.catching_up(1012)  # once past, it never catches up again


def test_catching_up_a_batch_still_closes_at_the_ceiling() -> None:
    batcher = Batcher(max_rows=2, max_age=60.0, max_rows_ceiling=4, catch_up_to=Lsn(5000))
    _transaction(batcher, 1, 0.0)
    assert batcher.take() is not None
    for n in range(2, 5):
        _transaction(batcher, n, 0.0, backlog=batcher.catching_up(1000 + n))
    assert not batcher.due(0.0, catching_up=True)
    assert batcher.add(change(5), 0.0, backlog=True) is not None  # the fourth change


def test_without_a_catch_up_position_nothing_changes() -> None:
    batcher = Batcher(max_rows=2, max_age=60.0, close_when_idle=True)
    _transaction(batcher, 1, 0.0)
    assert batcher.take() is not None
    assert not batcher.catching_up(0)
    _transaction(batcher, 2, 0.0)
    assert batcher.due(0.0, catching_up=batcher.catching_up(0))
