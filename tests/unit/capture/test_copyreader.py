"""Page ranges of a split copy cover the table exactly once, and the COPY says what it reads."""

from __future__ import annotations

import itertools

import pytest

from capture.copyreader import PageRange, copy_query, page_ranges, select_query
from decoder import Oid, Relation, RelationColumn


@pytest.mark.parametrize(("pages", "count"), [(0, 4), (1, 8), (10, 1), (10, 3), (1000, 8), (7, 7)])
def test_page_ranges_cover_every_page_once_and_the_last_is_open(pages: int, count: int) -> None:
    ranges = page_ranges(pages, count)
    assert 1 <= len(ranges) <= max(1, min(count, pages))
    assert ranges[0].first == 0
    assert ranges[-1].end is None
    for before, after in itertools.pairwise(ranges):
        assert before.end == after.first
        assert before.first < after.first


def _relation() -> Relation:
    return Relation(
        xid=None,
        relation_id=Oid(1),
        namespace="my schema",
        relation_name='odd"name',
        replica_identity="d",
        columns=(RelationColumn(1, "id", Oid(20), -1), RelationColumn(0, "Value", Oid(25), -1)),
    )


def test_copy_query_reads_published_columns_rows_and_one_range() -> None:
    query = copy_query(_relation(), "id > 3", only=True, pages=PageRange(5, 9))
    text = query.as_string(None)
    assert text == (
        'COPY (SELECT "id", "Value" FROM ONLY "my schema"."odd""name" WHERE (id > 3) AND '
        "ctid >= '(5,0)'::tid AND ctid < '(9,0)'::tid) TO STDOUT (FORMAT csv)"
    )


def test_copy_query_of_a_whole_partitioned_table_has_no_condition() -> None:
    text = copy_query(_relation(), None, only=False, pages=PageRange(0, None)).as_string(None)
    assert text == 'COPY (SELECT "id", "Value" FROM "my schema"."odd""name") TO STDOUT (FORMAT csv)'


def test_columns_dropped_since_the_snapshot_are_selected_as_typed_nulls() -> None:
    relation = Relation(
        xid=None,
        relation_id=Oid(1),
        namespace="public",
        relation_name="t",
        replica_identity="d",
        columns=(
            RelationColumn(flags=1, name="id", type_oid=Oid(23), type_modifier=-1),
            RelationColumn(flags=0, name="gone", type_oid=Oid(1700), type_modifier=-1),
        ),
    )
    query = select_query(
        relation, None, only=True, native=frozenset({23}), nulls={"gone": "numeric(10,2)"}
    ).as_string(None)
    assert query == ('SELECT "id", CAST(NULL AS numeric(10,2)) AS "gone" FROM ONLY "public"."t"')
