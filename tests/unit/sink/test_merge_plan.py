"""MERGE planning: folding per key, key changes, TOAST, truncate barriers, identities, replays."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from decoder import Lsn, Relation, RowChange, TruncateChange
from sink import Batch, SinkDataError
from sink.planning.fold import plan_batch
from sink.planning.plan import KeylessStep, MergeStep, PlannedRow, TruncateStep
from tests.support.sink_changes import (
    INT4,
    U,
    Value,
    batch,
    col,
    commit_time,
    delete,
    insert,
    message,
    rel,
    truncate,
    update,
)
from tests.support.table_model import TableModel, apply_plan, replay_changes

RESERVED = ("_wal2delta_lsn", "_wal2delta_commit_ts", "_wal2delta_deleted", "_wal2delta_ordinal")
DOCS = rel("public.docs", col("id", INT4, key=True), col("body"), col("rev", INT4))


def only_step(changes_batch: Batch) -> MergeStep:
    plan = plan_batch(changes_batch, reserved_columns=RESERVED)
    assert len(plan.tables) == 1
    (step,) = plan.tables[0].steps
    assert isinstance(step, MergeStep)
    return step


def by_id(step: MergeStep) -> dict[object, PlannedRow]:
    return {row.values[0]: row for row in step.rows}


def test_last_change_per_key_wins_in_commit_order() -> None:
    step = only_step(
        batch(
            insert(DOCS, "1", "a", "1", lsn=10),
            insert(DOCS, "2", "b", "1", lsn=10, ordinal=1),
            update(DOCS, "1", "a2", "2", lsn=20),
            update(DOCS, "1", "a3", "3", lsn=30),
        )
    )
    rows = by_id(step)
    assert set(rows) == {1, 2}
    assert rows[1].values == (1, "a3", 3)
    assert (rows[1].lsn, rows[1].commit_time) == (30, commit_time(30))
    assert not rows[1].delete
    assert rows[2].values == (2, "b", 1)


def test_insert_then_delete_in_one_batch_plans_a_delete_of_that_key() -> None:
    step = only_step(
        batch(insert(DOCS, "1", "a", "1", lsn=10), delete(DOCS, "1", None, None, lsn=20))
    )
    (row,) = step.rows
    assert row.delete
    assert row.values == (1, None, None)
    assert row.lsn == 20


def test_key_changing_update_deletes_the_old_key_and_upserts_the_new_key() -> None:
    step = only_step(batch(update(DOCS, "5", "a", "2", old=["1", None, None], lsn=10)))
    rows = by_id(step)
    assert rows[1].delete
    assert not rows[5].delete
    assert rows[5].values == (5, "a", 2)
    assert rows[5].moved_from is None


def test_unchanged_toast_column_is_kept_when_the_row_came_from_an_earlier_batch() -> None:
    step = only_step(batch(update(DOCS, "1", U, "2", lsn=10)))
    (row,) = step.rows
    assert row.keep == frozenset({1})
    assert row.values == (1, None, 2)
    assert step.kept_indexes == (1,)
    assert not step.has_moved_keeps


def test_earlier_value_in_the_same_batch_fills_a_later_unchanged_toast_column() -> None:
    step = only_step(
        batch(
            insert(DOCS, "1", "big body", "1", lsn=10),
            update(DOCS, "1", U, "2", lsn=20),
            update(DOCS, "1", U, "3", lsn=30),
        )
    )
    (row,) = step.rows
    assert row.keep == frozenset()
    assert row.values == (1, "big body", 3)
    assert step.kept_indexes == ()


def test_earlier_kept_column_stays_kept_through_later_updates() -> None:
    step = only_step(batch(update(DOCS, "1", U, "2", lsn=10), update(DOCS, "1", U, "3", lsn=20)))
    (row,) = step.rows
    assert row.keep == frozenset({1})
    assert row.values == (1, None, 3)


def test_key_change_with_unchanged_toast_reads_kept_columns_from_the_old_key() -> None:
    step = only_step(batch(update(DOCS, "5", U, "2", old=["1", None, None], lsn=10)))
    rows = by_id(step)
    assert rows[1].delete
    assert rows[5].keep == frozenset({1})
    assert rows[5].moved_from is not None
    assert rows[5].moved_from.identity == (1,)
    assert step.has_moved_keeps


def test_chained_key_changes_keep_reading_from_the_original_target_row() -> None:
    step = only_step(
        batch(
            update(DOCS, "5", U, "2", old=["1", None, None], lsn=10),
            update(DOCS, "7", U, "3", old=["5", None, None], lsn=20),
        )
    )
    rows = by_id(step)
    assert rows[1].delete
    assert rows[5].delete
    assert rows[7].moved_from is not None
    assert rows[7].moved_from.identity == (1,)
    assert rows[7].values == (7, None, 3)


def test_key_change_of_a_row_inserted_in_the_batch_needs_no_target_lookup() -> None:
    step = only_step(
        batch(
            insert(DOCS, "1", "body", "1", lsn=10),
            update(DOCS, "5", U, "2", old=["1", None, None], lsn=20),
        )
    )
    rows = by_id(step)
    assert rows[5].values == (5, "body", 2)
    assert rows[5].moved_from is None
    assert not step.has_moved_keeps


def test_unchanged_toast_key_column_is_filled_from_the_old_key_tuple() -> None:
    step = only_step(batch(update(DOCS, U, "x", "2", old=["1", None, None], lsn=10)))
    (row,) = step.rows
    assert row.values == (1, "x", 2)
    assert not row.delete


def test_unchanged_toast_key_column_without_old_tuple_is_a_data_error() -> None:
    with pytest.raises(SinkDataError, match=r"identity column 'id'.*unchanged TOAST"):
        plan_batch(batch(update(DOCS, U, "x", "2", lsn=10)))


def test_truncate_is_a_barrier_that_replaces_the_steps_before_it() -> None:
    plan = plan_batch(
        batch(
            insert(DOCS, "1", "a", "1", lsn=10),
            update(DOCS, "3", U, "1", lsn=10, ordinal=1),
            truncate(DOCS, lsn=20),
            insert(DOCS, "2", "b", "1", lsn=20, ordinal=1),
            insert(DOCS, "1", "c", "1", lsn=30),
        )
    )
    (table,) = plan.tables
    barrier, after = table.steps
    assert isinstance(barrier, TruncateStep)
    assert isinstance(after, MergeStep)
    assert (barrier.lsn, barrier.commit_time) == (20, commit_time(20))
    assert sorted(r.values for r in after.rows) == [(1, "c", 1), (2, "b", 1)]
    assert table.counts == {"insert": 3, "update": 1, "delete": 0}


def test_only_the_last_of_several_truncates_is_kept() -> None:
    plan = plan_batch(batch(truncate(DOCS, lsn=10), truncate(DOCS, lsn=20)))
    assert plan.tables[0].steps == (TruncateStep(Lsn(20), commit_time(20)),)


def test_truncate_of_several_tables_puts_a_barrier_in_each() -> None:
    other = rel("public.other", col("id", INT4, key=True), relation_id=16385)
    plan = plan_batch(
        batch(
            insert(other, "1", lsn=5),
            truncate(DOCS, other, lsn=10),
            insert(other, "2", lsn=10, ordinal=1),
        )
    )
    steps = {t.qualified_name: t.steps for t in plan.tables}
    assert [type(s) for s in steps["public.other"]] == [TruncateStep, MergeStep]
    assert [type(s) for s in steps["public.docs"]] == [TruncateStep]


FULL = rel("public.full", col("id", INT4), col("body"), col("rev", INT4), identity="f")


def test_full_identity_without_key_takes_one_equal_row_toast_filled_from_old_tuple() -> None:
    plan = plan_batch(
        batch(update(FULL, "1", U, "3", old=["1", "body", "2"], old_kind="O", lsn=10)),
        reserved_columns=RESERVED,
    )
    (step,) = plan.tables[0].steps
    assert isinstance(step, KeylessStep)
    assert plan.tables[0].uses_row_ids
    (change,) = step.changes
    assert (change.old, change.new, change.position) == ((1, "body", 2), (1, "body", 3), (10, 0))


def test_full_identity_with_configured_key_matches_on_that_key() -> None:
    plan = plan_batch(
        batch(update(FULL, "1", "new", "3", old=["1", "old", "2"], old_kind="O", lsn=10)),
        keys={"public.full": ("id",)},
    )
    (step,) = plan.tables[0].steps
    assert isinstance(step, MergeStep)
    assert (step.identity, step.match_indexes) == ("key", (0,))
    (row,) = step.rows
    assert row.values == (1, "new", 3)


def test_configured_key_naming_an_unpublished_column_is_a_data_error() -> None:
    with pytest.raises(SinkDataError, match=r"public\.full .*: nope; fix sink.keys"):
        plan_batch(batch(insert(FULL, "1", "a", "1", lsn=10)), keys={"public.full": ("nope",)})


NOTHING = rel("public.log", col("id", INT4), col("body"), identity="n")


def test_nothing_identity_plans_each_insert_by_commit_lsn_and_ordinal() -> None:
    step = only_step(
        batch(insert(NOTHING, "1", "a", lsn=10), insert(NOTHING, "1", "a", lsn=10, ordinal=1))
    )
    assert step.identity == "ordinal"
    assert step.match_indexes == ()
    assert [(r.lsn, r.ordinal) for r in step.rows] == [(10, 0), (10, 1)]


@pytest.mark.parametrize("op", ["update", "delete"])
def test_update_or_delete_without_any_identity_is_a_data_error_that_says_what_to_fix(
    op: str,
) -> None:
    change = (
        update(NOTHING, "1", "b", lsn=10)
        if op == "update"
        else delete(NOTHING, "1", "a", lsn=10, old_kind="O")
    )
    with pytest.raises(SinkDataError, match=f"{op.upper()} on public.log.*sink.keys"):
        plan_batch(batch(change))


def test_nothing_identity_with_configured_key_upserts_by_that_key() -> None:
    plan = plan_batch(
        batch(insert(NOTHING, "1", "a", lsn=10), insert(NOTHING, "1", "b", lsn=20)),
        keys={"public.log": ("id",)},
    )
    (step,) = plan.tables[0].steps
    assert isinstance(step, MergeStep)
    assert [r.values for r in step.rows] == [(1, "b")]


class PrimaryKeys:
    """A fake catalog lookup that records which relations it was asked about."""

    def __init__(self, keys: dict[str, tuple[str, ...]]) -> None:
        self.keys = keys
        self.asked: list[str] = []

    def __call__(self, relation: Relation) -> tuple[str, ...]:
        self.asked.append(relation.qualified_name)
        return self.keys.get(relation.qualified_name, ())


def test_full_identity_matches_on_the_catalog_primary_key_although_every_column_is_flagged() -> (
    None
):
    lookup = PrimaryKeys({"public.full": ("id",)})
    plan = plan_batch(
        batch(
            update(FULL, "1", "new", "3", old=["1", "old", "2"], old_kind="O", lsn=10),
            delete(FULL, "2", "x", "1", old_kind="O", lsn=10, ordinal=1),
        ),
        primary_key=lookup,
    )
    (step,) = plan.tables[0].steps
    assert isinstance(step, MergeStep)
    assert all(c.is_key for c in FULL.columns)
    assert (step.identity, step.match_indexes) == ("key", (0,))
    assert {(r.values[0], r.delete) for r in step.rows} == {(1, False), (2, True)}
    assert lookup.asked == ["public.full"], "looked up once per relation"


def test_a_configured_key_wins_over_the_catalog_primary_key() -> None:
    lookup = PrimaryKeys({"public.full": ("id",)})
    plan = plan_batch(
        batch(insert(FULL, "1", "a", "1", lsn=10)),
        keys={"public.full": ("body",)},
        primary_key=lookup,
    )
    (step,) = plan.tables[0].steps
    assert isinstance(step, MergeStep)
    assert step.match_indexes == (1,)
    assert lookup.asked == []


def test_a_primary_key_the_publication_does_not_fully_publish_falls_back_to_every_column() -> None:
    lookup = PrimaryKeys({"public.full": ("id", "tenant")})
    step_plan = plan_batch(batch(insert(FULL, "1", "a", "1", lsn=10)), primary_key=lookup)
    (step,) = step_plan.tables[0].steps
    assert isinstance(step, KeylessStep)
    assert [(c.old, c.new, c.position) for c in step.changes] == [(None, (1, "a", 1), (10, 0))]


def test_a_flagged_replica_identity_key_is_used_without_asking_the_catalog() -> None:
    lookup = PrimaryKeys({"public.docs": ("body",)})
    plan = plan_batch(batch(insert(DOCS, "1", "a", "1", lsn=10)), primary_key=lookup)
    (step,) = plan.tables[0].steps
    assert isinstance(step, MergeStep)
    assert step.match_indexes == (0,)
    assert lookup.asked == []


def test_nothing_identity_with_a_catalog_primary_key_upserts_by_it() -> None:
    plan = plan_batch(
        batch(insert(NOTHING, "1", "a", lsn=10), insert(NOTHING, "1", "b", lsn=20)),
        primary_key=PrimaryKeys({"public.log": ("id",)}),
    )
    (step,) = plan.tables[0].steps
    assert isinstance(step, MergeStep)
    assert [r.values for r in step.rows] == [(1, "b")]


def test_updates_and_deletes_without_identity_are_dropped_and_counted_when_told_to_skip() -> None:
    plan = plan_batch(
        batch(
            insert(NOTHING, "1", "a", lsn=10),
            update(NOTHING, "1", "b", lsn=20),
            delete(NOTHING, "1", "a", lsn=30, old_kind="O"),
            insert(NOTHING, "2", "c", lsn=30, ordinal=1),
        ),
        on_missing_key="skip",
    )
    (table,) = plan.tables
    assert table.skipped == 2
    assert table.counts == {"insert": 2, "update": 0, "delete": 0}
    (step,) = table.steps
    assert isinstance(step, MergeStep)
    assert [r.values for r in step.rows] == [(1, "a"), (2, "c")]


def test_the_missing_identity_error_names_the_replica_identity_and_the_skip_setting() -> None:
    with pytest.raises(SinkDataError) as caught:
        plan_batch(batch(update(NOTHING, "1", "b", lsn=16)))
    message = str(caught.value)
    assert "REPLICA IDENTITY NOTHING" in message
    assert "commit 0/10" in message
    assert "source.on_missing_key: skip" in message


def test_each_step_records_the_commit_lsn_of_its_first_change() -> None:
    wider = rel("public.docs", col("id", INT4, key=True), col("body"), col("rev", INT4), col("tag"))
    plan = plan_batch(
        batch(
            insert(DOCS, "1", "a", "1", lsn=10),
            insert(wider, "2", "b", "1", "t", lsn=20),
            update(wider, "2", "b", "2", "t", lsn=30),
        )
    )
    first, second = plan.tables[0].steps
    assert isinstance(first, MergeStep)
    assert isinstance(second, MergeStep)
    assert (first.first_lsn, second.first_lsn) == (10, 20)
    assert [r.lsn for r in second.rows] == [30]


def test_relation_gaining_a_column_starts_a_new_step_and_the_plan_lists_every_column() -> None:
    wider = rel("public.docs", col("id", INT4, key=True), col("body"), col("rev", INT4), col("tag"))
    plan = plan_batch(
        batch(insert(DOCS, "1", "a", "1", lsn=10), insert(wider, "2", "b", "1", "t", lsn=20))
    )
    (table,) = plan.tables
    assert [c.name for c in table.columns] == ["id", "body", "rev", "tag"]
    first, second = table.steps
    assert isinstance(first, MergeStep)
    assert isinstance(second, MergeStep)
    assert [c.name for c in first.columns] == ["id", "body", "rev"]
    assert [c.name for c in second.columns] == ["id", "body", "rev", "tag"]


def test_changes_of_one_relation_message_stay_in_one_step() -> None:
    plan = plan_batch(
        batch(insert(DOCS, "1", "a", "1", lsn=10), insert(DOCS, "2", "b", "1", lsn=20))
    )
    assert len(plan.tables[0].steps) == 1
    assert plan.tables[0].relations == (DOCS,)


def test_repeated_identical_relations_stay_in_one_step_under_the_first_message() -> None:
    """The server re-sends the Relation in every streamed transaction: one MERGE for all."""
    same = rel("public.docs", col("id", INT4, key=True), col("body"), col("rev", INT4))
    plan = plan_batch(
        batch(insert(DOCS, "1", "a", "1", lsn=10), insert(same, "2", "b", "1", lsn=20))
    )
    (table,) = plan.tables
    assert [s.first_lsn for s in table.steps if isinstance(s, MergeStep)] == [10]
    assert [r is DOCS for r in table.relations] == [True]


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("_wal2delta_lsn", "metadata column"),
        ("__w2d_keep_0", "metadata column"),
        ("my col", "character Delta does not allow"),
        ("a=b", "character Delta does not allow"),
    ],
)
def test_column_names_delta_cannot_hold_are_rejected(name: str, problem: str) -> None:
    relation = rel("public.bad", col("id", INT4, key=True), col(name))
    with pytest.raises(SinkDataError, match=problem):
        plan_batch(batch(insert(relation, "1", "x", lsn=10)), reserved_columns=RESERVED)


def test_columns_differing_only_in_case_are_rejected() -> None:
    relation = rel("public.bad", col("id", INT4, key=True), col("Name"), col("name"))
    with pytest.raises(SinkDataError, match="differ only in case"):
        plan_batch(batch(insert(relation, "1", "x", "y", lsn=10)))


def test_counts_report_row_changes_per_operation() -> None:
    plan = plan_batch(
        batch(
            insert(DOCS, "1", "a", "1", lsn=10),
            update(DOCS, "1", "b", "1", lsn=20),
            update(DOCS, "1", "c", "1", lsn=30),
            delete(DOCS, "1", None, None, lsn=40),
        )
    )
    assert plan.tables[0].counts == {"insert": 1, "update": 2, "delete": 1}


def test_messages_are_collected_in_order_and_do_not_create_tables() -> None:
    plan = plan_batch(
        batch(message(b"a", lsn=11, commit_lsn=10), message(b"b", lsn=12, commit_lsn=None))
    )
    assert plan.tables == ()
    assert [m.content for m in plan.messages] == [b"a", b"b"]


NUMERIC_10_2 = ((10 << 16) | 2) + 4


def test_values_are_decoded_into_delta_types() -> None:
    relation = rel(
        "public.typed",
        col("id", INT4, key=True),
        col("price", 1700, typmod=NUMERIC_10_2),
        col("ref", 2950),
        col("doc", 3802),
        col("seen", 1184),
    )
    step = only_step(
        batch(
            insert(
                relation,
                "7",
                "1.5",
                "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11",
                '{"b": 1, "a": [1, 2]}',
                "2024-01-02 03:04:05.5+02",
                lsn=10,
            )
        )
    )
    (row,) = step.rows
    identifier, price, ref, doc, seen = row.values
    assert identifier == 7
    assert price == Decimal("1.5")
    # Text-kept types keep exactly what the server sent (its text form).
    assert ref == "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11"
    assert doc == '{"b": 1, "a": [1, 2]}'
    assert seen.isoformat() == "2024-01-02T01:04:05.500000+00:00"  # type: ignore[attr-defined]


def test_nan_in_a_decimal_column_is_null_with_the_original_rejected() -> None:
    relation = rel("public.prices", col("id", INT4, key=True), col("p", 1700, typmod=NUMERIC_10_2))
    (table,) = plan_batch(batch(insert(relation, "1", "NaN", lsn=10))).tables
    (step,) = table.steps
    assert isinstance(step, MergeStep)
    assert [row.values for row in step.rows] == [(1, None)]
    assert [(r.column, r.reason.value, r.original, r.stored, r.key) for r in table.rejects] == [
        ("p", "not_finite", "NaN", None, (("id", "1"),))
    ]


def test_nan_in_a_decimal_column_stops_a_table_whose_policy_is_stop() -> None:
    relation = rel("public.prices", col("id", INT4, key=True), col("p", 1700, typmod=NUMERIC_10_2))
    with pytest.raises(SinkDataError, match=r"column 'p' of public\.prices.*on_unrepresentable"):
        plan_batch(
            batch(insert(relation, "1", "NaN", lsn=10)),
            on_unrepresentable=lambda table: "stop" if table == "public.prices" else "keep",
        )


def test_unloadable_value_is_a_data_error_that_names_its_cause() -> None:
    relation = rel("public.days", col("id", INT4, key=True), col("d", 1082))
    with pytest.raises(SinkDataError) as caught:
        plan_batch(batch(insert(relation, "1", "not a date", lsn=10)))
    assert "column 'd' of public.days" in str(caught.value)
    assert "DataError: " in str(caught.value)  # the cause's own first line, not a pointer
    assert caught.value.__cause__ is not None


# --- properties: plan == one change at a time, replays are harmless --------------------------

KEYS = range(6)
BODIES = ("a", "b", "long body one", "long body two")


@dataclass
class Workload:
    """A generated change stream, the source table it leads to, and its batches."""

    batches: list[Batch]
    source: dict[int, tuple[str, int | None]]


@st.composite
def workloads(
    draw: st.DrawFn, *, full_identity: bool = False, whole_transactions: bool = False
) -> Workload:
    relation = FULL if full_identity else DOCS
    source: dict[int, tuple[str, int | None]] = {}
    changes: list[RowChange | TruncateChange] = []
    lsn = 0
    transaction_ends: list[int] = []
    for _ in range(draw(st.integers(1, 8))):
        lsn += 10
        for ordinal in range(draw(st.integers(1, 4))):
            free = [k for k in KEYS if k not in source]
            ops = (
                ["truncate"]
                + (["insert"] if free else [])
                + (["update", "delete"] if source else [])
            )
            op = draw(st.sampled_from(ops))
            if op == "truncate":
                changes.append(truncate(relation, lsn=lsn, ordinal=ordinal))
                source.clear()
            elif op == "insert":
                key = draw(st.sampled_from(free))
                body = draw(st.sampled_from(BODIES))
                rev = draw(st.none() | st.integers(0, 3))
                changes.append(
                    insert(relation, str(key), body, _text(rev), lsn=lsn, ordinal=ordinal)
                )
                source[key] = (body, rev)
            elif op == "delete":
                key = draw(st.sampled_from(sorted(source)))
                body, rev = source.pop(key)
                old: list[Value] = (
                    [str(key), body, _text(rev)] if full_identity else [str(key), None, None]
                )
                changes.append(
                    delete(
                        relation,
                        *old,
                        lsn=lsn,
                        ordinal=ordinal,
                        old_kind="O" if full_identity else "K",
                    )
                )
            else:
                key = draw(st.sampled_from(sorted(source)))
                old_body, old_rev = source.pop(key)
                new_key = draw(st.sampled_from([key, *[k for k in KEYS if k not in source]]))
                body = draw(st.sampled_from([old_body, *BODIES]))
                rev = draw(st.none() | st.integers(0, 3))
                # An unchanged TOASTed column is sent as 'u'; the long bodies stand for them.
                sent_body: Value = U if body == old_body and body.startswith("long") else body
                old_tuple: list[Value] | None
                if full_identity:
                    old_tuple = [str(key), old_body, _text(old_rev)]
                else:
                    old_tuple = [str(key), None, None] if new_key != key else None
                changes.append(
                    update(
                        relation,
                        str(new_key),
                        sent_body,
                        _text(rev),
                        old=old_tuple,
                        old_kind="O" if full_identity else "K",
                        lsn=lsn,
                        ordinal=ordinal,
                    )
                )
                source[new_key] = (body, rev)
        transaction_ends.append(len(changes))
    # The batcher may cut a large transaction anywhere; whole_transactions keeps them intact.
    candidates = transaction_ends if whole_transactions else list(range(1, len(changes)))
    cuts = sorted(draw(st.sets(st.sampled_from(candidates), max_size=4))) if candidates else []
    bounds = sorted({0, *cuts, len(changes)})
    batches = [batch(*changes[a:b]) for a, b in itertools.pairwise(bounds)]
    return Workload(batches, source)


def _text(value: int | None) -> str | None:
    return None if value is None else str(value)


def _source_rows(workload: Workload) -> set[tuple[tuple[str, object], ...]]:
    return {
        tuple(sorted((("body", repr(b)), ("id", repr(k)), ("rev", repr(r)))))
        for k, (b, r) in workload.source.items()
    }


def _plan(model: TableModel, changes_batch: Batch) -> TableModel:
    return apply_plan(model, plan_batch(changes_batch))


PROPERTY_SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@PROPERTY_SETTINGS
@given(workload=workloads(), soft_delete=st.booleans())
def test_applying_plans_equals_replaying_changes_one_by_one_and_ends_equal_to_the_source(
    workload: Workload, soft_delete: bool
) -> None:
    planned = TableModel(soft_delete=soft_delete)
    one_by_one = TableModel(soft_delete=soft_delete)
    for changes_batch in workload.batches:
        _plan(planned, changes_batch)
        replay_changes(one_by_one, changes_batch)
        assert planned.live() == one_by_one.live()
    assert planned.anomalies == one_by_one.anomalies == 0
    assert planned.data().get("public.docs", set()) == _source_rows(workload)


@PROPERTY_SETTINGS
@given(workload=workloads(full_identity=True), soft_delete=st.booleans())
def test_full_identity_plans_end_equal_to_the_source(workload: Workload, soft_delete: bool) -> None:
    planned = TableModel(soft_delete=soft_delete)
    one_by_one = TableModel(soft_delete=soft_delete)
    for changes_batch in workload.batches:
        _plan(planned, changes_batch)
        replay_changes(one_by_one, changes_batch)
        assert planned.multiset() == one_by_one.multiset()
    assert planned.anomalies == 0
    assert planned.data().get("public.full", set()) == _source_rows(workload)


@PROPERTY_SETTINGS
@given(workload=workloads(), soft_delete=st.booleans())
def test_applying_the_same_batch_twice_equals_applying_it_once(
    workload: Workload, soft_delete: bool
) -> None:
    model = TableModel(soft_delete=soft_delete)
    for changes_batch in workload.batches:
        once = _plan(model.copy(), changes_batch)
        twice = _plan(_plan(model.copy(), changes_batch), changes_batch)
        assert twice.tables == once.tables
        assert twice.anomalies == once.anomalies == 0
        model = once


@PROPERTY_SETTINGS
@given(workload=workloads(), soft_delete=st.booleans(), data=st.data())
def test_replaying_from_any_earlier_batch_after_a_crash_converges_to_the_same_table(
    workload: Workload, soft_delete: bool, data: st.DataObject
) -> None:
    final = TableModel(soft_delete=soft_delete)
    for changes_batch in workload.batches:
        _plan(final, changes_batch)
    restart = data.draw(st.integers(0, len(workload.batches) - 1))
    replayed = final.copy()
    for changes_batch in workload.batches[restart:]:
        _plan(replayed, changes_batch)
    assert replayed.live() == final.live()


@PROPERTY_SETTINGS
@given(workload=workloads(whole_transactions=True), data=st.data())
def test_an_older_batch_replayed_after_newer_ones_never_regresses_a_surviving_row(
    workload: Workload, data: st.DataObject
) -> None:
    final = TableModel(soft_delete=True)
    for changes_batch in workload.batches:
        _plan(final, changes_batch)
    older = data.draw(st.sampled_from(workload.batches))
    replayed = _plan(final.copy(), older)
    # With tombstones, an older transaction cannot bring back or change anything. (A batch
    # holding only part of a transaction can, until the rest of it is replayed too: a
    # TRUNCATE cannot tell rows its own transaction wrote later from those it removed.)
    assert replayed.live() == final.live()


def test_a_table_the_batch_only_truncates_still_plans_the_columns_of_its_relation() -> None:
    """So the executor creates a new table with its data columns, not only metadata."""
    plan = plan_batch(batch(insert(DOCS, "1", "a", "1", lsn=10), truncate(DOCS, lsn=20)))
    (table,) = plan.tables
    assert [type(s) for s in table.steps] == [TruncateStep]
    assert [c.name for c in table.columns] == [c.name for c in DOCS.columns]
