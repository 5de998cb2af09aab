"""Key-range partitions: a MERGE that reads only the partitions its rows fall in.

Theory of operation
-------------------
A MERGE has to find the target rows its source rows match. Engines prune the target's
files by *partition values* named in the merge condition: Sail 0.7.2 does nothing else
(it ignores min/max statistics in a MERGE and scans every file), and Spark with Delta does
it first. A table listed in ``sink.partition_by_key`` is therefore partitioned by a
bucket of one integer key column, ``floor(key / width)``, kept in the metadata column
``key_bucket_column``; each MERGE names the buckets of its rows as literals
(``t.bucket IN (3, 4) AND t.bucket <=> s.bucket AND <key match>``), so its cost follows
the partitions the batch touches instead of the size of the table (measured in
``docs/performance-log.md``).

The bucket is a function of the identity, never of other columns, so the row a change
must find is always in the bucket the change computes: a key-changing UPDATE plans a
delete under the old key (old bucket) and a row under the new key (new bucket), and both
buckets are named. A NULL key (possible only with configured keys) has a NULL bucket,
named as ``t.bucket IS NULL``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sink.base import SinkDataError
from sink.planning.plan import MergeStep
from sink.settings import KeyBuckets

INTEGER_TYPES: Final = frozenset({"TINYINT", "SMALLINT", "INT", "BIGINT"})
"""Spark SQL types of key columns that can be bucketed."""

MAX_LISTED_BUCKETS: Final = 1000
"""Above this many buckets the MERGE does not list them (it reads most of the table anyway)."""


@dataclass(frozen=True, slots=True)
class BucketFilter:
    """The partitions one MERGE may touch.

    Attributes:
        column: the partition column.
        buckets: distinct non-NULL buckets of the source rows, ascending.
        has_null: some source row has a NULL key, hence a NULL bucket.
    """

    column: str
    buckets: tuple[int, ...]
    has_null: bool

    def target_predicate(self, alias: str, quote_column: str) -> str | None:
        """The condition on the target's partition column, or None when not worth listing.

        Args:
            alias: the target's alias in the statement.
            quote_column: the partition column, already quoted.
        """
        if len(self.buckets) > MAX_LISTED_BUCKETS:
            return None
        column = f"{alias}.{quote_column}"
        terms = []
        if self.buckets:
            terms.append(f"{column} IN ({', '.join(str(b) for b in self.buckets)})")
        if self.has_null:
            terms.append(f"{column} IS NULL")
        if not terms:
            return None
        return terms[0] if len(terms) == 1 else "(" + " OR ".join(terms) + ")"


def bucketed_column(table: str, step: MergeStep, spec: KeyBuckets) -> int:
    """Index into ``step.columns`` of the key column ``spec`` buckets.

    Raises:
        SinkDataError: the step has no key identity, the configured column is not one of
            its key columns (or no column is configured and the key has several), or the
            column is not an integer.
    """
    if step.identity != "key":
        raise SinkDataError(
            f"sink.partition_by_key lists {table}, but its changes are matched on "
            f"{'every column' if step.identity == 'row' else 'no key'}; partition "
            "only tables with a primary key, replica identity index or configured key"
        )
    # The configuration names source columns; a Delta name may differ (sink.column_names).
    names = [step.columns[i].source_name for i in step.match_indexes]
    if spec.column is None:
        if len(names) != 1:
            raise SinkDataError(
                f"the key of {table} has several columns ({', '.join(names)}); name the one "
                f"to partition by in sink.partition_by_key.{table}.column"
            )
        index = step.match_indexes[0]
    elif spec.column in names:
        index = step.match_indexes[names.index(spec.column)]
    else:
        raise SinkDataError(
            f"sink.partition_by_key.{table}.column is {spec.column!r}, which is not a key "
            f"column of {table} (key: {', '.join(names)})"
        )
    column = step.columns[index]
    if column.delta.spark_sql not in INTEGER_TYPES:
        raise SinkDataError(
            f"{table} cannot be partitioned by key column {column.name!r}: it is "
            f"{column.delta.spark_sql}, and key ranges need an integer column"
        )
    return index


def bucket_values(step: MergeStep, index: int, width: int) -> pa.Array:
    """Each planned row's bucket, ``floor(key / width)`` (NULL for a NULL key), as BIGINT,
    in row order (``rows``, then the columnar rows, as ``arrow.source_table`` orders them)."""
    # bucketed_column checked the column is an integer: its keys fit BIGINT.
    keys = pa.array([row.values[index] for row in step.rows], pa.int64())
    if step.columnar is not None:
        columnar = step.columnar.values[index].cast(pa.int64())
        keys = pa.concat_arrays([keys, columnar]) if len(keys) else columnar
    return key_buckets(keys, width)


def key_buckets(keys: pa.Array, width: int) -> pa.Array:
    """``floor(key / width)`` of an integer array (``bucket_of``), NULL for a NULL key."""
    values = keys.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False)
    return pa.array(
        np.floor_divide(values, width),
        pa.int64(),
        mask=keys.is_null().to_numpy(zero_copy_only=False),
    )


def bucket_filter(column: str, buckets: pa.Array) -> BucketFilter:
    """The ``BucketFilter`` of a step whose rows have ``buckets`` (BIGINT, NULL allowed)."""
    distinct = pc.unique(buckets.drop_null()).to_pylist()
    return BucketFilter(column, tuple(sorted(distinct)), buckets.null_count > 0)


def bucket_of(key: int, width: int) -> int:
    """The bucket of one key, as ``bucket_values`` computes it."""
    return key // width
