"""Schema evolution decisions (pure): added, returned, renamed and retyped columns."""

from __future__ import annotations

import pytest

from sink import CatalogColumn, CatalogTable, SinkDataError
from sink.planning.evolution import (
    ColumnOrigin,
    SchemaChange,
    delta_type_name,
    evolve,
    pg_type_label,
)
from sink.values.typemap import PlanColumn, delta_type

INT4, INT8, TEXT, VARCHAR, NUMERIC, INT4_ARRAY = 23, 20, 25, 1043, 1700, 1007


def column(name: str, type_oid: int = TEXT, typmod: int = -1) -> PlanColumn:
    return PlanColumn(name, type_oid, typmod, delta_type(type_oid, typmod))


def delta_of(*columns: PlanColumn) -> dict[str, str]:
    return {c.name: delta_type_name(c.delta.spark_sql) for c in columns}


def catalog(*names: str, dropped: int = 0) -> CatalogTable:
    return CatalogTable(
        columns={n: CatalogColumn(n, i + 1) for i, n in enumerate(names)}, dropped_columns=dropped
    )


ID, TITLE, BODY = column("id", INT4), column("title"), column("body")


def test_a_column_added_at_the_end_is_added() -> None:
    change = evolve("public.docs", [ID, TITLE, BODY], delta_of(ID, TITLE), [ID, TITLE], None)
    assert change == SchemaChange(added=(BODY,))


def test_an_unchanged_relation_needs_nothing_also_right_after_a_restart() -> None:
    assert evolve("public.docs", [ID, TITLE], delta_of(ID, TITLE), None, None) == SchemaChange()
    assert evolve("public.docs", [ID, TITLE], delta_of(ID, TITLE), [ID, TITLE], None) == (
        SchemaChange()
    )


def test_a_dropped_column_needs_nothing_it_stays_in_delta() -> None:
    change = evolve("public.docs", [ID, BODY], delta_of(ID, TITLE, BODY), [ID, TITLE, BODY], None)
    assert change == SchemaChange()


def test_a_dropped_column_whose_name_comes_back_is_returned_not_added() -> None:
    delta = delta_of(ID, TITLE, BODY)
    change = evolve("public.docs", [ID, BODY, TITLE], delta, [ID, BODY], None)
    assert change == SchemaChange(returned=(TITLE,))


def test_a_new_column_before_a_returning_one_is_not_taken_for_a_rename() -> None:
    extra = column("extra")
    delta = delta_of(ID, TITLE, BODY)
    change = evolve("public.docs", [ID, BODY, extra, TITLE], delta, [ID, BODY], None)
    assert change == SchemaChange(added=(extra,), returned=(TITLE,))


def test_an_unknown_column_before_a_known_one_is_a_rename_naming_the_vanished_column() -> None:
    heading = column("heading")
    with pytest.raises(SinkDataError) as caught:
        evolve(
            "public.docs", [ID, heading, BODY], delta_of(ID, TITLE, BODY), [ID, TITLE, BODY], None
        )
    message = str(caught.value)
    assert "column 'heading' of public.docs was renamed or replaced" in message
    assert "before column 'body'" in message
    assert "no longer published: 'title'" in message
    assert not caught.value.retryable


def test_a_middle_rename_is_caught_after_a_restart_from_the_delta_columns() -> None:
    heading = column("heading")
    with pytest.raises(SinkDataError, match="'heading'"):
        evolve("public.docs", [ID, heading, BODY], delta_of(ID, TITLE, BODY), None, None)


def test_renaming_the_last_column_shows_as_fewer_dropped_attributes_than_gone_columns() -> None:
    content = column("content")
    with pytest.raises(SinkDataError, match="fewer dropped columns") as caught:
        evolve(
            "public.docs",
            [ID, TITLE, content],
            delta_of(ID, TITLE, BODY),
            [ID, TITLE, BODY],
            catalog("id", "title", "content"),
        )
    assert "'body'" in str(caught.value)


def test_dropping_the_last_column_and_adding_another_is_not_a_rename() -> None:
    content = column("content")
    change = evolve(
        "public.docs",
        [ID, TITLE, content],
        delta_of(ID, TITLE, BODY),
        [ID, TITLE, BODY],
        catalog("id", "title", "content", dropped=1),
    )
    assert (change.added, change.returned) == ((content,), ())


def test_without_a_catalog_a_last_column_rename_cannot_be_told_from_drop_and_add() -> None:
    content = column("content")
    change = evolve("public.docs", [ID, TITLE, content], delta_of(ID, TITLE, BODY), None, None)
    assert change == SchemaChange(added=(content,))


def test_a_type_change_delta_cannot_hold_names_table_column_and_both_types() -> None:
    with pytest.raises(SinkDataError) as caught:
        evolve("public.docs", [column("id", INT8), TITLE], delta_of(ID, TITLE), [ID, TITLE], None)
    assert str(caught.value).startswith(
        "column 'id' of public.docs changed type from int4 (Delta INT) to int8 (Delta BIGINT); "
        "Delta cannot widen INT to BIGINT safely"
    )


def test_a_type_change_after_a_restart_names_the_delta_type_it_found() -> None:
    with pytest.raises(
        SinkDataError,
        match=r"is DECIMAL\(10,2\) in Delta, but its type numeric\(12,2\) is now stored as "
        r"DECIMAL\(12,2\).*sink\.column_types",
    ):
        evolve(
            "public.t",
            [column("n", NUMERIC, (12 << 16 | 2) + 4)],
            delta_of(column("n", NUMERIC, (10 << 16 | 2) + 4)),
            None,
            None,
        )


def test_a_type_change_that_keeps_the_delta_type_goes_on() -> None:
    short, long = column("title", VARCHAR, 10 + 4), column("title", VARCHAR, 200 + 4)
    assert evolve("public.docs", [ID, long], delta_of(ID, short), [ID, short], None) == (
        SchemaChange()
    )
    assert evolve("public.docs", [ID, TITLE], delta_of(ID, short), [ID, short], None) == (
        SchemaChange()
    )


def test_type_names_read_like_postgresql_and_delta_types_compare_normalised() -> None:
    assert pg_type_label(INT4, -1) == "int4"
    assert pg_type_label(NUMERIC, (10 << 16 | 2) + 4) == "numeric(10,2)"
    assert pg_type_label(NUMERIC, -1) == "numeric"
    assert pg_type_label(VARCHAR, 24) == "varchar(20)"
    assert pg_type_label(INT4_ARRAY, -1) == "int4[]"
    assert pg_type_label(16400, -1) == "type OID 16400"
    assert delta_type_name("DECIMAL(10, 2)") == "decimal(10,2)"
    assert delta_type_name("ARRAY<BIGINT>") == "array<bigint>"


# --- origins: the attnum each Delta column came from ---------------------------------------

B, C = column("b"), column("c")


def at(
    attnums: dict[str, int],
    *,
    dropped: int = 0,
    oid: int = 7,
    dropped_attnums: set[int] | None = None,
) -> CatalogTable:
    """The catalog now: live columns with their attnums."""
    return CatalogTable(
        columns={n: CatalogColumn(n, a) for n, a in attnums.items()},
        dropped_columns=max(dropped, len(dropped_attnums or ())),
        oid=oid,
        dropped_attnums=frozenset(dropped_attnums or ()),
    )


def origins(*, since: int | None = None, oid: int = 7, **attnums: int) -> dict[str, ColumnOrigin]:
    return {n: ColumnOrigin(a, oid, since) for n, a in attnums.items()}


A = column("a", INT4)


@pytest.mark.parametrize("previous", [[A, B], None], ids=["running", "after a restart"])
def test_a_dropped_column_added_back_under_its_name_is_a_new_column_not_a_rename(
    previous: list[PlanColumn] | None,
) -> None:
    """ALTER TABLE t DROP b, ADD c text DEFAULT 'x', ADD b text (the issue's example)."""
    change = evolve(
        "public.t",
        [A, C, B],
        delta_of(A, B),
        previous,
        at({"a": 1, "c": 3, "b": 4}, dropped_attnums={2}),
        origins=origins(a=1, b=2),
        first_lsn=500,
    )
    assert change.added == (C,)
    assert change.returned == (B,)
    assert dict(change.origins) == {"c": ColumnOrigin(3, 7, 500), "b": ColumnOrigin(4, 7, 500)}


def test_a_column_holding_a_recorded_attnum_under_a_new_name_is_a_rename() -> None:
    with pytest.raises(SinkDataError) as caught:
        evolve(
            "public.docs",
            [ID, TITLE, column("content")],
            delta_of(ID, TITLE, BODY),
            None,
            at({"id": 1, "title": 2, "content": 3}),
            origins=origins(id=1, title=2, body=3),
        )
    message = str(caught.value)
    assert message.startswith("column 'content' of public.docs was renamed or replaced: it is ")
    assert "attribute 3 of the source table" in message
    assert "Delta holds as column 'body'" in message


def test_a_column_left_out_of_a_column_list_and_listed_again_is_the_same_column() -> None:
    change = evolve(
        "public.docs",
        [ID, TITLE, BODY],
        delta_of(ID, TITLE, BODY),
        [ID, BODY],
        at({"id": 1, "title": 2, "body": 3}),
        origins=origins(id=1, title=2, body=3),
        first_lsn=900,
    )
    assert change == SchemaChange()


def test_a_previously_unpublished_column_listed_before_known_ones_is_added_not_a_rename() -> None:
    """The catalog places it: ALTER PUBLICATION ... SET TABLE t (id, title, body)."""
    change = evolve(
        "public.docs",
        [ID, TITLE, BODY],
        delta_of(ID, BODY),
        [ID, BODY],
        at({"id": 1, "title": 2, "body": 3}),
        origins=origins(id=1, body=3),
    )
    assert change.added == (TITLE,)


def test_the_step_that_brought_a_column_back_resets_it_again_when_replayed() -> None:
    args = ("public.t", [A, B], delta_of(A, B), None, at({"a": 1, "b": 4}, dropped_attnums={2}))
    recorded = {**origins(a=1), **origins(b=4, since=500)}
    assert evolve(*args, origins=recorded, first_lsn=500).returned == (B,)
    assert evolve(*args, origins=recorded, first_lsn=400).returned == (B,)
    assert evolve(*args, origins=recorded, first_lsn=600) == SchemaChange()


def test_a_catalog_moved_on_by_later_renames_is_not_read_against_an_older_relation() -> None:
    """b and c swapped names later: the catalog's attnums for [a, b, c] do not increase."""
    change = evolve(
        "public.t",
        [A, B, C],
        delta_of(A, B, C),
        None,
        at({"a": 1, "b": 3, "c": 2}),
        origins=origins(a=1, b=2, c=3),
    )
    assert change == SchemaChange()


def test_a_column_gone_from_the_catalog_since_is_new_when_its_recorded_attnum_cannot_fit() -> None:
    """DROP b, ADD c, ADD b, then later RENAME b TO d: applying the [a, c, b] step."""
    change = evolve(
        "public.t",
        [A, C, B],
        delta_of(A, B),
        None,
        at({"a": 1, "c": 3, "d": 4}, dropped_attnums={2}),
        origins=origins(a=1, b=2),
        first_lsn=500,
    )
    assert (change.added, change.returned) == ((C,), (B,))
    # Nothing later in the relation vouches for c's attnum, so it is not learned yet.
    assert change.origins == ()


def test_a_column_gone_from_the_catalog_since_keeps_its_origin_where_it_fits() -> None:
    """b was dropped after the step being applied: it is still the recorded column."""
    change = evolve(
        "public.t",
        [A, B],
        delta_of(A, B),
        None,
        at({"a": 1}, dropped_attnums={2}),
        origins=origins(a=1, b=2),
    )
    assert change == SchemaChange()


def test_origins_of_a_table_dropped_and_created_again_are_ignored_and_learned_anew() -> None:
    change = evolve(
        "public.t",
        [A, C, B],
        delta_of(A, B),
        [A, B],
        at({"a": 1, "c": 2, "b": 3}, oid=8),
        origins=origins(a=1, b=2, oid=7),
        first_lsn=500,
    )
    assert (change.added, change.returned) == ((C,), ())
    assert dict(change.origins) == {
        "a": ColumnOrigin(1, 8),
        "b": ColumnOrigin(3, 8),
        "c": ColumnOrigin(2, 8, 500),
    }


def test_a_table_without_records_learns_the_origins_of_its_relation_columns_on_first_sight() -> (
    None
):
    change = evolve(
        "public.t", [A, B], delta_of(A, B, C), None, at({"a": 1, "b": 2, "c": 3}), origins={}
    )
    assert change.added == change.returned == ()
    assert dict(change.origins) == {"a": ColumnOrigin(1, 7), "b": ColumnOrigin(2, 7)}


def test_a_last_column_that_may_have_been_added_again_since_is_not_learned() -> None:
    """The catalog is later than the step: b may be attribute 2 here, dropped since."""
    change = evolve(
        "public.t",
        [A, B],
        delta_of(A, B),
        None,
        at({"a": 1, "b": 3}, dropped_attnums={2}),
        origins={},
    )
    assert change == SchemaChange(origins=(("a", ColumnOrigin(1, 7)),))


def test_a_column_followed_by_a_sure_one_is_sure_whatever_was_dropped_before_it() -> None:
    change = evolve(
        "public.t",
        [A, C, B],
        delta_of(A, C, B),
        None,
        at({"a": 1, "c": 3, "b": 4}, dropped_attnums={2}),
        origins={},
    )
    assert [name for name, _ in change.origins] == ["a", "c", "b"]


def test_a_name_whose_attribute_changed_after_a_restart_is_reset_and_learned_with_its_step() -> (
    None
):
    """Without a record b would be learned; with one, attribute 4 is a new column b."""
    change = evolve(
        "public.t",
        [A, B],
        delta_of(A, B),
        None,
        at({"a": 1, "b": 4}, dropped_attnums={2}),
        origins=origins(a=1, b=2),
        first_lsn=800,
    )
    assert change.returned == (B,)
    assert dict(change.origins) == {"b": ColumnOrigin(4, 7, 800)}
