"""The split-bound benchmark regroups collected batches without breaking batch rules."""

from __future__ import annotations

from bench.split_bound import regroup
from decoder import Lsn, PgTimestamp
from sink import Batch


def _batch(changes: int, durable: int | None, commit_time: int | None) -> Batch:
    return Batch(
        changes=tuple(object() for _ in range(changes)),  # type: ignore[misc]  # only counted
        durable_lsn=None if durable is None else Lsn(durable),
        transaction_count=0 if durable is None else 1,
        last_commit_time=None if commit_time is None else PgTimestamp(commit_time),
    )


def test_batches_are_joined_up_to_each_size_and_keep_their_newest_positions() -> None:
    collected = [
        _batch(2, 10, 1),
        _batch(3, 20, 2),
        _batch(4, None, None),  # part of a large transaction
        _batch(1, 40, 4),
        _batch(5, None, None),
        _batch(2, 60, 6),
    ]
    joined = list(regroup(collected, [4, 5]))
    assert [len(b.changes) for b in joined] == [5, 5, 7]
    assert [b.durable_lsn for b in joined] == [20, 40, 60]
    assert [b.transaction_count for b in joined] == [2, 1, 1]
    assert [b.last_commit_time for b in joined] == [2, 4, 6]
    # Never cut: every change is there once, in order.
    originals = [change for batch in collected for change in batch.changes]
    assert [change for batch in joined for change in batch.changes] == originals


def test_a_group_of_only_partial_batches_has_no_durable_position() -> None:
    (joined,) = regroup([_batch(3, None, None), _batch(3, None, None)], [6])
    assert joined.durable_lsn is None
    assert joined.last_commit_time is None
    assert joined.transaction_count == 0
