"""``MergeStep.only_new_keys``: the fold finds the steps none of whose keys can be in the
table, on the row path and on the columnar path (the compiled kernel) alike, and
``ReplayHorizon`` finds the tables the lake cannot hold changes of yet."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from decoder import Lsn
from sink import Batch
from sink.engine.sql import new_row_columns, render_merge
from sink.planning.fold import plan_batch
from sink.planning.kernel import COMPILED
from sink.planning.plan import MergePlan, MergeStep
from sink.planning.replays import ReplayHorizon, first_lsn
from sink.steps.step_append import appends
from tests.support.pg_text_forms import as_wire
from tests.support.settings import metadata_columns
from tests.support.sink_changes import INT4, batch, col, delete, insert, rel, truncate, update

RESERVED = ("_wal2delta_lsn", "_wal2delta_commit_ts", "_wal2delta_deleted", "_wal2delta_ordinal")
DOCS = rel("public.docs", col("id", INT4, key=True), col("body"))
FULL = rel("public.full", col("id", INT4), col("body"), identity="f")
NOTHING = rel("public.nothing", col("id", INT4), col("body"), identity="n")


def steps(changes: Batch, **options: object) -> list[MergeStep]:
    plan = plan_batch(changes, reserved_columns=RESERVED, **options)  # type: ignore[arg-type]
    found = [s for table in plan.tables for s in table.steps if isinstance(s, MergeStep)]
    assert found
    return found


def new_keys(changes: Batch, **options: object) -> bool:
    """``only_new_keys`` of the batch's one step, which the row path and the columnar path
    (text tuples as pgoutput sends them, folded by the kernel) must agree on."""
    (by_rows,) = steps(changes, columnar=False, **options)
    (by_columns,) = steps(as_wire(changes), columnar=True, **options)
    assert by_rows.only_new_keys == by_columns.only_new_keys
    return by_rows.only_new_keys


def test_the_kernel_is_built() -> None:
    assert COMPILED is not None, "the columnar path below would fold nothing"


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        pytest.param(
            [insert(DOCS, "1", "a", lsn=10), insert(DOCS, "2", "b", lsn=10, ordinal=1)],
            True,
            id="inserts",
        ),
        pytest.param(
            [insert(DOCS, "1", "a", lsn=10), update(DOCS, "1", "b", lsn=20)],
            True,
            id="insert then update",
        ),
        pytest.param(
            [insert(DOCS, "1", "a", lsn=10), delete(DOCS, "1", None, lsn=20)],
            True,
            id="insert then delete",
        ),
        pytest.param(
            [
                insert(DOCS, "1", "a", lsn=10),
                delete(DOCS, "1", None, lsn=20),
                insert(DOCS, "1", "c", lsn=30),
            ],
            True,
            id="insert, delete, insert",
        ),
        pytest.param(
            [delete(DOCS, "1", None, lsn=10), insert(DOCS, "1", "a", lsn=20)],
            False,
            id="delete then insert",
        ),
        pytest.param(
            [insert(DOCS, "1", "a", lsn=10), update(DOCS, "2", "b", lsn=20)],
            False,
            id="an update of a key the step did not insert",
        ),
        pytest.param(
            [insert(DOCS, "2", "a", lsn=10), delete(DOCS, "1", None, lsn=20)],
            False,
            id="a delete of a key the step did not insert",
        ),
        pytest.param(
            [
                insert(DOCS, "1", "a", lsn=10),
                update(DOCS, "5", "a", old=["1", None], old_kind="K", lsn=20),
            ],
            False,
            id="a key moved to one the step never saw",
        ),
    ],
)
def test_a_step_has_only_new_keys_when_every_key_starts_with_an_insert(
    changes: list[object], expected: bool
) -> None:
    assert new_keys(batch(*changes)) is expected  # type: ignore[arg-type]


def test_a_key_the_source_does_not_keep_unique_is_never_new() -> None:
    inserts = [insert(NOTHING, "1", "a", lsn=10), insert(NOTHING, "2", "b", lsn=10, ordinal=1)]
    (step,) = steps(batch(*inserts), keys={"public.nothing": ["id"]})
    assert step.identity == "key"
    assert not step.only_new_keys


def test_the_catalog_primary_key_of_a_full_identity_table_is_unique() -> None:
    inserts = [insert(FULL, "1", "a", lsn=10), insert(FULL, "2", "b", lsn=10, ordinal=1)]
    (step,) = steps(batch(*inserts), primary_key=lambda _relation: ("id",))
    assert step.only_new_keys
    (configured,) = steps(batch(*inserts), keys={"public.full": ["id"]})
    assert not configured.only_new_keys


def test_a_truncate_starts_a_step_whose_keys_are_new_again() -> None:
    plan = plan_batch(
        batch(
            update(DOCS, "1", "a", lsn=10),
            truncate(DOCS, lsn=20),
            insert(DOCS, "1", "b", lsn=30),
        ),
        reserved_columns=RESERVED,
    )
    (table,) = plan.tables
    _, step = table.steps
    assert isinstance(step, MergeStep)
    assert step.only_new_keys
    assert first_lsn(table) == 20


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["insert", "update", "delete"]), st.integers(1, 4)),
        min_size=1,
        max_size=12,
    )
)
def test_only_new_keys_means_every_key_was_first_inserted(ops: list[tuple[str, int]]) -> None:
    changes = []
    for position, (op, key) in enumerate(ops):
        lsn = 10 * (position + 1)
        if op == "insert":
            changes.append(insert(DOCS, str(key), f"v{position}", lsn=lsn))
        elif op == "update":
            changes.append(update(DOCS, str(key), f"v{position}", lsn=lsn))
        else:
            changes.append(delete(DOCS, str(key), None, lsn=lsn))
    first_ops: dict[int, str] = {}
    for op, key in ops:
        first_ops.setdefault(key, op)
    expected = all(op == "insert" for op in first_ops.values())
    assert new_keys(batch(*changes)) is expected


def test_appends_need_new_keys_a_new_table_no_rejects_and_no_soft_deletes() -> None:
    (plan,) = plan_batch(batch(insert(DOCS, "1", "a", lsn=10)), reserved_columns=RESERVED).tables
    (step,) = plan.steps
    assert isinstance(step, MergeStep)
    meta = metadata_columns()
    assert appends(plan, step, meta, new_table=True)
    assert not appends(plan, step, meta, new_table=False)
    assert not appends(plan, step, metadata_columns(soft_delete=True), new_table=True)


def test_the_appended_rows_are_the_rows_a_merge_would_insert() -> None:
    (step,) = steps(batch(insert(DOCS, "1", "a", lsn=10)))
    names = new_row_columns(step, metadata_columns())
    assert names == ["id", "body", "_wal2delta_lsn", "_wal2delta_commit_ts", "_wal2delta_ordinal"]
    merge = render_merge(step, metadata_columns(), target="t", view="v")
    assert f"THEN INSERT ({', '.join(f'`{n}`' for n in names)})" in merge


def _plan(name: str, lsn: int) -> MergePlan:
    relation = rel(name, col("id", INT4, key=True), col("body"))
    (plan,) = plan_batch(
        batch(insert(relation, "1", "a", lsn=lsn)), reserved_columns=RESERVED
    ).tables
    return plan


def test_the_replay_horizon_starts_at_the_commit_logs_newest_intent() -> None:
    reads: list[int] = []

    def newest() -> Lsn | None:
        reads.append(1)
        return Lsn(100)

    horizon = ReplayHorizon(newest)
    assert horizon.new_tables([_plan("public.a", 100), _plan("public.b", 101)]) == {"public.b"}
    horizon.attempted([_plan("public.b", 101)], Lsn(150))
    # b was handed to the engine up to 150: its changes at or below are a replay; a's are
    # not, as no batch with a's changes above 100 was.
    assert horizon.new_tables([_plan("public.a", 120), _plan("public.b", 140)]) == {"public.a"}
    assert horizon.new_tables([_plan("public.b", 151)]) == {"public.b"}
    assert len(reads) == 1
    horizon.forget()
    assert horizon.new_tables([_plan("public.b", 151)]) == {"public.b"}
    assert len(reads) == 2


def test_a_lake_without_batches_holds_nothing() -> None:
    horizon = ReplayHorizon(lambda: None)
    assert horizon.new_tables([_plan("public.a", 1)]) == {"public.a"}
