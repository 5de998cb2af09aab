"""Schema evolution decisions (pure): added, returned, renamed and retyped columns."""

from __future__ import annotations

import pytest

from sink import CatalogColumn, CatalogTable, SinkDataError
from sink.evolution import SchemaChange, delta_type_name, evolve, pg_type_label
from sink.plan import PlanColumn
from sink.typemap import delta_type

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
    assert change == SchemaChange(added=(content,))


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
    with pytest.raises(SinkDataError, match=r"from Delta DECIMAL\(10,2\) to numeric\(12,2\)"):
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
