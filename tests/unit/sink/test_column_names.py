"""Column names Delta cannot hold: refused (``error``) or mapped (``map``) by the planner."""

from __future__ import annotations

import pytest

from sink import ColumnNamePolicy, SinkDataError
from sink.planning.fold import plan_batch
from sink.planning.partitioning import bucketed_column
from sink.planning.plan import MergeStep
from sink.settings import KeyBuckets
from tests.support.sink_changes import INT4, INT8, batch, col, insert, rel, update

RESERVED = ("_wal2delta_lsn", "_wal2delta_commit_ts", "_wal2delta_deleted", "_wal2delta_ordinal")
ODD = rel(
    "Sales EU.orders",
    col("order id", INT8, key=True),
    col("unit price"),
    col("f(x)=y"),
    col("имя"),
    col("a,b;{c}"),
)


def only_step(plan_table: object) -> MergeStep:
    (step,) = plan_table.steps  # type: ignore[attr-defined]
    assert isinstance(step, MergeStep)
    return step


def test_map_gives_each_column_delta_cannot_hold_its_escaped_name() -> None:
    plan = plan_batch(
        batch(insert(ODD, "1", "2.50", "z", "ё", "q", lsn=10)),
        reserved_columns=RESERVED,
        column_names="map",
    )
    (table,) = plan.tables
    assert (table.schema, table.table) == ("Sales EU", "orders")
    step = only_step(table)
    assert [c.name for c in step.columns] == [
        "order_x0020_id",
        "unit_x0020_price",
        "f_x0028_x_x0029__x003D_y",
        "имя",
        "a_x002C_b_x003B__x007B_c_x007D_",
    ]
    assert [c.source_name for c in step.columns] == [
        "order id",
        "unit price",
        "f(x)=y",
        "имя",
        "a,b;{c}",
    ]
    assert step.columns[3].renamed_from is None  # Delta holds it as it is
    assert step.rows[0].values == (1, "2.50", "z", "ё", "q")


def test_the_map_is_the_same_in_every_plan() -> None:
    def names() -> list[str]:
        plan = plan_batch(batch(insert(ODD, "1", "a", "b", "c", "d", lsn=10)), column_names="map")
        return [c.name for c in only_step(plan.tables[0]).columns]

    assert names() == names()


def test_a_source_name_that_looks_like_a_mapped_one_never_shares_its_delta_column() -> None:
    relation = rel(
        "public.t", col("id", INT4, key=True), col("unit price"), col("unit_x0020_price")
    )
    plan = plan_batch(batch(insert(relation, "1", "a", "b", lsn=10)), column_names="map")
    names = [c.name for c in only_step(plan.tables[0]).columns]
    assert names == ["id", "unit_x0020_price", "unit_x005F_x0020_price"]


@pytest.mark.parametrize("name", ["my col", "a=b", "f(x)", "x,y", "tab\there"])
def test_error_refuses_the_name_and_names_the_option(name: str) -> None:
    relation = rel("public.bad", col("id", INT4, key=True), col(name))
    with pytest.raises(SinkDataError, match=r"sink\.column_names: map") as raised:
        plan_batch(batch(insert(relation, "1", "x", lsn=10)), reserved_columns=RESERVED)
    assert "character Delta does not allow" in str(raised.value)


def test_error_keeps_names_delta_can_hold_as_they_are() -> None:
    relation = rel("public.t", col("id", INT4, key=True), col("имя"), col("a.b"), col("q`t"))
    plan = plan_batch(batch(insert(relation, "1", "x", "y", "z", lsn=10)))
    assert [c.name for c in only_step(plan.tables[0]).columns] == ["id", "имя", "a.b", "q`t"]


def test_a_mapped_name_colliding_with_a_metadata_column_is_refused() -> None:
    relation = rel("public.t", col("id", INT4, key=True), col("my lsn"))
    with pytest.raises(SinkDataError, match="metadata column"):
        plan_batch(
            batch(insert(relation, "1", "x", lsn=10)),
            reserved_columns=("my_x0020_lsn",),
            column_names="map",
        )


def test_a_metadata_name_in_another_case_is_refused_as_spark_ignores_case() -> None:
    relation = rel("public.t", col("id", INT4, key=True), col("_WAL2DELTA_LSN"))
    with pytest.raises(SinkDataError, match="metadata column"):
        plan_batch(batch(insert(relation, "1", "x", lsn=10)), reserved_columns=RESERVED)


@pytest.mark.parametrize("policy", ["error", "map"])
def test_columns_differing_only_in_case_stay_refused(policy: ColumnNamePolicy) -> None:
    plain = rel("public.t", col("id", INT4, key=True), col("Name"), col("name"))
    with pytest.raises(SinkDataError, match="differ only in case"):
        plan_batch(batch(insert(plain, "1", "x", "y", lsn=10)), column_names=policy)


def test_mapped_names_differing_only_in_case_are_refused() -> None:
    relation = rel("public.t", col("id", INT4, key=True), col("Unit Price"), col("unit price"))
    with pytest.raises(SinkDataError, match="differ only in case"):
        plan_batch(batch(insert(relation, "1", "x", "y", lsn=10)), column_names="map")


def test_configured_keys_name_source_columns() -> None:
    relation = rel("public.t", col("order id", INT8), col("note"), identity="f")
    plan = plan_batch(
        batch(
            insert(relation, "1", "a", lsn=10),
            update(relation, "1", "b", old=("1", "a"), old_kind="O", lsn=20),
        ),
        keys={"public.t": ("order id",)},
        column_names="map",
    )
    step = only_step(plan.tables[0])
    assert step.identity == "key"
    assert [c.name for c in step.match_columns] == ["order_x0020_id"]
    assert [r.values for r in step.rows] == [(1, "b")]


def test_catalog_primary_keys_name_source_columns() -> None:
    relation = rel("public.t", col("order id", INT8), col("note"), identity="f")
    plan = plan_batch(
        batch(insert(relation, "1", "a", lsn=10)),
        primary_key=lambda _: ("order id",),
        column_names="map",
    )
    step = only_step(plan.tables[0])
    assert [c.source_name for c in step.match_columns] == ["order id"]


def test_key_partitions_name_the_source_column() -> None:
    plan = plan_batch(batch(insert(ODD, "7", "a", "b", "c", "d", lsn=10)), column_names="map")
    step = only_step(plan.tables[0])
    assert bucketed_column("Sales EU.orders", step, KeyBuckets(width=10, column="order id")) == 0
