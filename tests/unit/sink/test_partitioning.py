"""Key buckets: which column is bucketed, and the bucket of every planned row."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from sink.planning.fold import plan_batch
from sink.planning.partitioning import bucket_filter, bucket_of, bucket_values, bucketed_column
from sink.planning.plan import MergeStep
from sink.settings import KeyBuckets
from tests.support.sink_changes import INT8, batch, col, delete, insert, rel

ITEMS = rel("public.items", col("id", INT8, key=True), col("body"))


def only_step(*changes: object) -> MergeStep:
    (step,) = plan_batch(batch(*changes)).tables[0].steps  # type: ignore[arg-type]
    assert isinstance(step, MergeStep)
    return step


@given(key=st.integers(-(2**63), 2**63 - 1), width=st.integers(1, 2**40))
def test_a_bucket_is_the_floor_of_key_over_width(key: int, width: int) -> None:
    bucket = bucket_of(key, width)
    assert bucket * width <= key < (bucket + 1) * width


def test_every_planned_row_deletes_included_gets_the_bucket_of_its_identity() -> None:
    step = only_step(
        insert(ITEMS, "-1", "a", lsn=10),
        insert(ITEMS, "250", "b", lsn=10, ordinal=1),
        delete(ITEMS, "99", None, lsn=10, ordinal=2),
    )
    index = bucketed_column("public.items", step, KeyBuckets(width=100, column=None))
    assert index == 0
    values = bucket_values(step, index, 100)
    assert sorted(v for v in values.to_pylist() if v is not None) == [-1, 0, 2]
    found = bucket_filter("b", values)
    assert found.buckets == (-1, 0, 2)
    assert not found.has_null
    with_null = bucket_filter("b", pa.array([None, 4, 4], pa.int64()))
    assert with_null.has_null
    assert with_null.buckets == (4,)
