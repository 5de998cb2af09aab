"""Held-back changes of small tables (``sink/planning/holdback.py``, ``sink.table_min_rows``).

What must hold whatever the rule decides: every change is applied exactly once, in commit
order per table; nothing held is in a batch with a ``durable_lsn`` (the commit log records
no cut and the acknowledgement stays behind ``low_lsn``); no change waits past the age
limit by more than one batch.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from decoder import RowChange
from sink import Batch
from sink.planning.holdback import HeldChanges
from tests.support.sink_changes import INT4, batch, col, insert, rel, truncate

BIG = rel("public.big", col("id", INT4, key=True))
SMALL = rel("public.small", col("id", INT4, key=True))


def _tables(applied: Batch) -> list[tuple[str, int]]:
    return [
        (c.relation.qualified_name, c.commit_lsn)
        for c in applied.changes
        if isinstance(c, RowChange)
    ]


def test_a_table_below_min_rows_waits_and_the_batch_is_no_cut() -> None:
    held = HeldChanges(min_rows=3, max_age=10.0)
    first = batch(
        insert(BIG, 1, lsn=100),
        insert(BIG, 2, lsn=100, ordinal=1),
        insert(BIG, 3, lsn=100, ordinal=2),
        insert(SMALL, 1, lsn=100, ordinal=3),
    )
    applied = held.admit(first, now=0.0)
    assert _tables(applied) == [("public.big", 100)] * 3
    assert applied.durable_lsn is None, "a batch that leaves changes held is no boundary"
    assert held.low_lsn == 100
    assert held.count == 1
    assert held.deadline == 10.0


def test_held_changes_come_back_first_once_the_table_reaches_min_rows() -> None:
    held = HeldChanges(min_rows=2, max_age=10.0)
    held.admit(batch(insert(SMALL, 1, lsn=100)), now=0.0)
    applied = held.admit(batch(insert(SMALL, 2, lsn=200)), now=1.0)
    assert _tables(applied) == [("public.small", 100), ("public.small", 200)]
    assert applied.durable_lsn == 200
    assert held.low_lsn is None
    assert held.deadline is None


def test_the_age_limit_releases_every_table_and_holds_nothing_back() -> None:
    held = HeldChanges(min_rows=5, max_age=2.0)
    held.admit(batch(insert(SMALL, 1, lsn=100)), now=0.0)
    held.admit(batch(insert(BIG, 1, lsn=150)), now=1.0)
    assert held.deadline == 2.0, "the oldest held change sets the deadline"
    applied = held.admit(batch(insert(SMALL, 2, lsn=200)), now=2.5)
    assert _tables(applied) == [("public.small", 100), ("public.big", 150), ("public.small", 200)]
    assert applied.durable_lsn == 200, "a batch that holds nothing back is a cut again"
    assert held.count == 0


def test_a_release_batch_applies_everything_held() -> None:
    held = HeldChanges(min_rows=5, max_age=60.0)
    held.admit(batch(insert(SMALL, 1, lsn=100)), now=0.0)
    release = Batch(
        (), durable_lsn=None, transaction_count=0, last_commit_time=None, release_held=True
    )
    applied = held.admit(release, now=0.1)
    assert _tables(applied) == [("public.small", 100)]
    assert held.low_lsn is None


def test_a_truncate_takes_the_tables_it_names_back_before_it() -> None:
    held = HeldChanges(min_rows=5, max_age=60.0)
    held.admit(batch(insert(SMALL, 1, lsn=100)), now=0.0)
    applied = held.admit(batch(truncate(SMALL, lsn=200), insert(SMALL, 2, lsn=300)), now=0.1)
    assert [type(c).__name__ for c in applied.changes] == [
        "RowChange",
        "TruncateChange",
        "RowChange",
    ]
    assert [c.commit_lsn for c in applied.changes] == [100, 200, 300]


def test_off_by_default_the_batch_is_handed_on_unchanged() -> None:
    held = HeldChanges(min_rows=0, max_age=5.0)
    original = batch(insert(SMALL, 1, lsn=100))
    assert held.admit(original, now=0.0) is original


def test_discard_forgets_what_is_held() -> None:
    held = HeldChanges(min_rows=5, max_age=5.0)
    held.admit(batch(insert(SMALL, 1, lsn=100)), now=0.0)
    held.discard()
    assert held.count == 0
    assert held.low_lsn is None


_TABLES = [rel(f"public.t{i}", col("id", INT4, key=True)) for i in range(4)]


@settings(max_examples=200, deadline=None)
@given(
    batches=st.lists(
        st.lists(st.integers(0, len(_TABLES) - 1), min_size=0, max_size=8), min_size=1, max_size=8
    ),
    min_rows=st.integers(0, 4),
    max_age=st.floats(0.5, 3.0),
)
def test_every_change_is_applied_once_in_order_and_never_acknowledged_while_held(
    batches: list[list[int]], min_rows: int, max_age: float
) -> None:
    held = HeldChanges(min_rows=min_rows, max_age=max_age)
    applied: list[tuple[str, int, int]] = []
    sent: list[tuple[str, int, int]] = []
    lsn = 0
    for number, tables in enumerate(batches):
        lsn += 100
        changes = [insert(_TABLES[t], i, lsn=lsn, ordinal=i) for i, t in enumerate(tables)]
        sent += [(c.relation.qualified_name, c.commit_lsn, c.ordinal) for c in changes]
        now = float(number)
        deadline = held.deadline
        out = held.admit(batch(*changes) if changes else Batch((), None, 0, None), now=now)
        if deadline is not None and now >= deadline:
            assert held.count == 0, "past the age limit nothing stays held"
        applied += [
            (c.relation.qualified_name, c.commit_lsn, c.ordinal)
            for c in out.changes
            if isinstance(c, RowChange)
        ]
        low = held.low_lsn
        if held.count:
            assert out.durable_lsn is None
            assert low is not None
            # What may be acknowledged (everything before the oldest held change) is applied.
            assert {s for s in sent if s[1] < low} <= set(applied)
        else:
            assert low is None
    final = held.admit(Batch((), None, 0, None, release_held=True), now=1e9)
    applied += [
        (c.relation.qualified_name, c.commit_lsn, c.ordinal)
        for c in final.changes
        if isinstance(c, RowChange)
    ]
    assert sorted(applied) == sorted(sent), "every change once"
    for table in _TABLES:
        order = [(lsn, ordinal) for name, lsn, ordinal in applied if name == table.qualified_name]
        assert order == sorted(order), "commit order per table"
