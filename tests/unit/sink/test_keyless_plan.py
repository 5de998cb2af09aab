"""Tables without a key: identical rows kept, one row per change, replays harmless.

Generated change streams on a REPLICA IDENTITY FULL table without a key, over a value
domain small enough that identical rows are common, are planned in batches cut anywhere
and executed by the model of the SQL (``table_model``); the result must hold the source's
rows as a multiset, whatever the cuts, and after replaying any suffix of the stream cut
differently - what the server re-sends after a crash.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from decoder import RowChange
from sink import Batch
from sink.planning.fold import plan_batch
from sink.planning.keyless import Candidate, FoldedStep, Take, assign_takes, fold
from sink.planning.plan import NO_POSITION, KeylessStep
from tests.support.sink_changes import INT4, batch, col, commit_time, delete, insert, rel, update
from tests.support.table_model import TableModel, apply_plan, replay_changes

LOG = rel("public.log", col("a", INT4), col("b"), identity="f")
VALUES = [(a, b) for a in ("1", "2", None) for b in ("x", None)]


def _steps(changes: Batch, floor: tuple[int, int] = NO_POSITION) -> FoldedStep:
    (table,) = plan_batch(changes).tables
    (step,) = table.steps
    assert isinstance(step, KeylessStep)
    return fold(step, floor)


def test_insert_then_delete_of_an_equal_row_in_one_batch_folds_away_and_touches_the_value() -> None:
    step = _steps(batch(insert(LOG, "1", "x", lsn=10), delete(LOG, "1", "x", lsn=20)))
    assert (step.new_rows, step.takes) == ((), ())
    assert [(t.values, t.lsn) for t in step.touches] == [((1, "x"), 20)]


def test_changes_at_or_before_the_floor_are_replays_and_skipped() -> None:
    changes = batch(
        insert(LOG, "1", "x", lsn=10),
        delete(LOG, "1", "x", lsn=20),
        insert(LOG, "2", "y", lsn=20, ordinal=1),
    )
    step = _steps(changes, floor=(20, 0))
    assert [(r.values, r.row_lsn, r.row_ordinal) for r in step.new_rows] == [((2, "y"), 20, 1)]
    assert (step.takes, step.touches, step.first_lsn, step.first_ordinal) == ((), (), 20, 1)
    assert _steps(changes, floor=(20, 1)).is_empty


def test_a_take_is_served_by_the_latest_row_the_step_wrote_before_the_target() -> None:
    step = _steps(
        batch(
            update(LOG, "1", "y", old=["1", "x"], old_kind="O", lsn=10),
            update(LOG, "1", "z", old=["1", "y"], old_kind="O", lsn=20),
            delete(LOG, "1", "x", lsn=30),
        )
    )
    assert [(t.old, t.new, t.new_lsn) for t in step.takes] == [
        ((1, "x"), (1, "z"), 20),
        ((1, "x"), None, 30),
    ]
    assert step.taken_values() == [((1, "x"), 2)]


def test_each_take_gets_the_smallest_stamp_before_it_and_none_when_there_is_none() -> None:
    def take(lsn: int) -> Take:
        return Take((1,), lsn, 0, None, lsn, 0, commit_time(lsn))

    rows = [Candidate(1, 0, lsn=50, ordinal=0), Candidate(2, 0, lsn=5, ordinal=0)]
    # The take at 40 may use only the row stamped 5; the take at 70 gets the other one.
    assert assign_takes([take(40), take(70)], [rows]) == [rows[1], rows[0]]
    # A take at 4 finds nothing, and must not keep the take at 70 from its row.
    assert assign_takes([take(4), take(70)], [rows[:1]]) == [None, rows[0]]


@dataclass
class Workload:
    changes: list[RowChange]
    source: Counter[tuple[object, ...]]


@st.composite
def workloads(draw: st.DrawFn) -> Workload:
    source: Counter[tuple[str | None, str | None]] = Counter()
    changes: list[RowChange] = []
    for lsn in range(10, 10 * draw(st.integers(2, 9)), 10):
        for ordinal in range(draw(st.integers(1, 4))):
            present = sorted(source.elements(), key=repr)
            op = draw(
                st.sampled_from(["insert", "insert", *(["update", "delete"] if present else [])])
            )
            if op == "insert":
                value = draw(st.sampled_from(VALUES))
                changes.append(insert(LOG, *value, lsn=lsn, ordinal=ordinal))
                source[value] += 1
                continue
            old = draw(st.sampled_from(present))
            source[old] -= 1
            if op == "delete":
                changes.append(delete(LOG, *old, lsn=lsn, ordinal=ordinal, old_kind="O"))
                continue
            new = draw(st.sampled_from(VALUES))
            changes.append(update(LOG, *new, old=list(old), old_kind="O", lsn=lsn, ordinal=ordinal))
            source[new] += 1
    return Workload(changes, +source)


def _cut(draw: st.DrawFn, changes: list[RowChange]) -> list[Batch]:
    cuts = draw(st.sets(st.integers(1, max(1, len(changes) - 1)), max_size=5))
    bounds = sorted({0, *cuts, len(changes)})
    return [batch(*changes[a:b]) for a, b in itertools.pairwise(bounds) if a < b]


def _expected(workload: Workload) -> Counter[tuple[tuple[str, object], ...]]:
    def typed(value: str | None) -> object:
        return None if value is None else int(value)

    return Counter(
        {
            tuple(sorted((("a", repr(typed(a))), ("b", repr(b))))): n
            for (a, b), n in workload.source.items()
        }
    )


def _apply(model: TableModel, batches: list[Batch]) -> TableModel:
    for changes in batches:
        apply_plan(model, plan_batch(changes))
    return model


PROPERTIES = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTIES
@given(workload=workloads(), soft_delete=st.booleans(), data=st.data())
def test_planned_batches_hold_the_source_rows_with_their_duplicates(
    workload: Workload, soft_delete: bool, data: st.DataObject
) -> None:
    cut = _cut(data.draw, workload.changes)
    planned = _apply(TableModel(soft_delete=soft_delete), cut)
    one_by_one = replay_changes(TableModel(soft_delete=soft_delete), batch(*workload.changes))
    assert planned.multiset().get("public.log", Counter()) == _expected(workload)
    assert one_by_one.multiset().get("public.log", Counter()) == _expected(workload)


@PROPERTIES
@given(workload=workloads(), soft_delete=st.booleans(), data=st.data())
def test_replaying_any_suffix_of_the_stream_cut_anew_changes_nothing(
    workload: Workload, soft_delete: bool, data: st.DataObject
) -> None:
    model = _apply(TableModel(soft_delete=soft_delete), _cut(data.draw, workload.changes))
    # A crash after any point: the server re-sends from an earlier transaction boundary
    # (here: any change), and the daemon batches the replay differently.
    start = data.draw(st.integers(0, len(workload.changes) - 1))
    _apply(model, _cut(data.draw, workload.changes[start:]))
    assert model.multiset().get("public.log", Counter()) == _expected(workload)
    _apply(model, [batch(*workload.changes[start:])])
    assert model.multiset().get("public.log", Counter()) == _expected(workload)
