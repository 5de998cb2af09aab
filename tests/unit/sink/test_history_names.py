"""The change history's column names: no table column, whatever its name, collides with
another column of the history (``history.py``, "Column names").

Issue 29: a REPLICA IDENTITY FULL table with a column ``kind`` stopped the daemon at its
first batch, its old value ``_wal2delta_old_kind`` being the history's own column of that
name. Names are compared without case, as Spark resolves them.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sink import SinkDataError
from sink.constants import HISTORY_OLD_KIND_COLUMN
from sink.engine.sql import MetadataColumns
from sink.planning.fold import plan_batch
from sink.planning.plan import HELPER_PREFIX
from sink.steps.step_history import OWN_COLUMNS, history_columns, new_value_column, old_value_column
from sink.values.typemap import PlanColumn, delta_type
from tests.support.settings import metadata_columns
from tests.support.sink_changes import INT4, TEXT, batch, col, delete, insert, rel, update

META = metadata_columns()
EVENTS = rel("public.events", col("kind"), col("v", INT4), identity="f")


def names(columns: list[PlanColumn], meta: MetadataColumns = META) -> list[str]:
    return [c.name for c in history_columns("public.t__changes", meta, columns)]


def text_columns(*column_names: str) -> list[PlanColumn]:
    return [PlanColumn(name, TEXT, -1, delta_type(TEXT, -1)) for name in column_names]


def assert_distinct(found: list[str]) -> None:
    folded = [name.lower() for name in found]
    assert len(set(folded)) == len(folded), found


def test_a_full_table_with_a_column_named_kind_has_a_history_without_duplicates() -> None:
    plan = plan_batch(
        batch(
            insert(EVENTS, "a", "1", lsn=10),
            insert(EVENTS, "a", "1", lsn=10, ordinal=1),
            update(EVENTS, "b", "1", lsn=20, old=["a", "1"], old_kind="O"),
            delete(EVENTS, "a", "1", lsn=30, old_kind="O"),
        ),
        reserved_columns=META.reserved,
        history=True,
    )
    (table,) = plan.tables
    assert len(table.changes) == 4
    found = names(list(table.changes[0].columns))
    assert_distinct(found)
    assert found == [
        "_wal2delta_op",
        "_wal2delta_lsn",
        "_wal2delta_ordinal",
        "_wal2delta_commit_ts",
        "_wal2delta_xid",
        HISTORY_OLD_KIND_COLUMN,  # 'key' / 'row', as before
        "_wal2delta_unchanged_toast",
        "kind",
        "v",
        "_wal2delta_old__kind",
        "_wal2delta_old_v",
    ]


@pytest.mark.parametrize(
    "name", ["id", "body", "kind_", "kinds", "Kind2", "oldkind", "x_wal2delta_old_", "_wal2delta_x"]
)
def test_names_that_worked_before_keep_their_history_columns(name: str) -> None:
    assert new_value_column(name) == name
    assert old_value_column(name) == "_wal2delta_old_" + name


@pytest.mark.parametrize(
    ("name", "new", "old"),
    [
        ("kind", "kind", "_wal2delta_old__kind"),
        ("KIND", "KIND", "_wal2delta_old__KIND"),
        ("_kind", "_kind", "_wal2delta_old___kind"),
        ("__Kind", "__Kind", "_wal2delta_old____Kind"),
        ("_wal2delta_op", "_wal2delta_new__wal2delta_op", "_wal2delta_old__wal2delta_op"),
        ("_WAL2DELTA_XID", "_wal2delta_new__WAL2DELTA_XID", "_wal2delta_old__WAL2DELTA_XID"),
        (
            "_wal2delta_old_kind",
            "_wal2delta_new__wal2delta_old_kind",
            "_wal2delta_old__wal2delta_old_kind",
        ),
        (
            "_wal2delta_unchanged_toast",
            "_wal2delta_new__wal2delta_unchanged_toast",
            "_wal2delta_old__wal2delta_unchanged_toast",
        ),
        ("_wal2delta_old_v", "_wal2delta_new__wal2delta_old_v", "_wal2delta_old__wal2delta_old_v"),
        ("_wal2delta_new_v", "_wal2delta_new__wal2delta_new_v", "_wal2delta_old__wal2delta_new_v"),
    ],
)
def test_names_inside_the_historys_own_take_another_name(name: str, new: str, old: str) -> None:
    assert (new_value_column(name), old_value_column(name)) == (new, old)


def test_the_historys_own_columns_and_every_escape_together() -> None:
    tricky = [
        "kind",
        "_kind",
        "__kind",
        "v",
        "_wal2delta_old_v",
        "_wal2delta_new__wal2delta_old_v",
        "_wal2delta_old__wal2delta_old_v",
        "_wal2delta_new_v",
        *OWN_COLUMNS,
    ]
    assert_distinct(names(text_columns(*tricky)))


_PIECES = st.sampled_from(
    ["", "_", "__", "_wal2delta_", "_wal2delta_old_", "_wal2delta_new_", "_WAL2DELTA_Old_"]
)
_STEMS = st.sampled_from(
    ["kind", "KIND", "op", "xid", "old_kind", "unchanged_toast", "v", "new_v", "old_v", "x"]
)
_NAMES = st.one_of(
    st.builds(lambda a, b, c: a + b + c, _PIECES, _PIECES, _STEMS),
    st.text(alphabet="_kindKIoldwa2etv", min_size=1, max_size=20),
)


@settings(max_examples=500, deadline=None)
@given(st.lists(_NAMES, min_size=1, max_size=12))
def test_no_set_of_column_names_gives_two_history_columns_one_name(
    column_names: list[str],
) -> None:
    # What the planner lets through: names distinct without case, none a metadata column
    # of the merged table, none a MERGE helper's.
    reserved = {name.lower() for name in META.reserved}
    allowed: dict[str, str] = {}
    for name in column_names:
        folded = name.lower()
        if folded not in reserved and not folded.startswith(HELPER_PREFIX):
            allowed.setdefault(folded, name)
    assert_distinct(names(text_columns(*allowed.values())))


@pytest.mark.parametrize(
    ("setting", "value", "column"),
    [
        ("lsn", "_wal2delta_old_id", "id"),
        ("ordinal", "_wal2delta_new__wal2delta_op", "_wal2delta_op"),
        ("commit_time", "_wal2delta_op", "id"),
    ],
)
def test_a_configured_metadata_name_inside_the_historys_names_is_refused(
    setting: str, value: str, column: str
) -> None:
    meta = replace(META, **{setting: value})
    with pytest.raises(SinkDataError, match=r"public\.t__changes .*sink\.metadata"):
        names(text_columns(column), meta)
