"""Plain settings for the sink and the Spark session, so ``sink`` does not import ``config``.

``capture`` translates the validated configuration into these (``daemon.cli``); tests
build them directly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from sink.constants import (
    COMMIT_TIME_COLUMN,
    DELETED_COLUMN,
    KEY_BUCKET_COLUMN,
    LSN_COLUMN,
    ORDINAL_COLUMN,
    ROW_LSN_COLUMN,
    ROW_ORDINAL_COLUMN,
    BulkWriter,
    ColumnNamePolicy,
    ColumnTypeOverride,
    MissingKeyPolicy,
    SparkMode,
    UnrepresentablePolicy,
)

__all__ = [
    "BulkWriter",
    "ColumnNamePolicy",
    "ColumnTypeOverride",
    "KeyBuckets",
    "MissingKeyPolicy",
    "SinkSettings",
    "SparkMode",
    "SparkSettings",
    "UnrepresentablePolicy",
]


@dataclass(frozen=True, slots=True)
class KeyBuckets:
    """Partition a table by ranges of one integer key column (``sink.partition_by_key``).

    Attributes:
        width: keys per partition; a row's partition is ``floor(key / width)``.
        column: the key column to bucket; None means the table's only key column.
    """

    width: int
    column: str | None = None


@dataclass(frozen=True, slots=True)
class SinkSettings:
    """Where and how ``DeltaSink`` writes.

    Attributes:
        path: root of the lake; a table lives at ``naming.table_path(path, schema, table)``,
            ``<path>/<schema>/<table>`` with unsafe characters escaped.
        lsn_column: metadata column holding the source commit LSN of the row's last change.
        commit_time_column: metadata column holding that change's commit time (UTC).
        deleted_column: soft-delete flag column, present only when ``soft_delete`` is on.
        soft_delete: keep deleted rows with the flag set instead of removing them.
        messages_table: write logical decoding messages to ``<path>/_wal2delta_messages``.
        keys: qualified table name (``schema.table``) -> key columns, for tables whose
            replica identity flags no key column (FULL, NOTHING, DEFAULT without primary
            key). A key flagged by the relation always wins.
        ordinal_column: metadata column holding the position in its transaction of the
            change that last wrote the row; with the LSN column it is the row's stamp. In
            tables without any key it is also the identity that makes a replayed insert
            recognisable.
        on_missing_key: what an UPDATE or DELETE on a table without any identity (no key
            flagged, configured or in the catalog) does: ``error`` stops with a
            ``SinkDataError``, ``skip`` drops the change and logs how many were dropped
            (``source.on_missing_key``).
        key_buckets: qualified table name -> how to partition its Delta table by key
            range, so a MERGE reads only the partitions its rows fall in.
        key_bucket_column: the partition column of such tables (``floor(key / width)``).
        row_lsn_column: with ``row_ordinal_column``, the hidden identity of each row of a
            table without any key under REPLICA IDENTITY FULL: the position of the INSERT
            that created it (``sink/keyless.py``).
        row_ordinal_column: see ``row_lsn_column``.
        column_names: a source column whose name Delta cannot hold (a space or one of
            ``,;{}()=``): ``error`` stops with a ``SinkDataError``, ``map`` stores it under
            ``naming.mapped_column_name`` (``unit price`` -> ``unit_x0020_price``).
        history: the tables whose every change is also appended to a change history
            (``history.py``): all (True), none (False), or these qualified names.
        bulk_writer: who appends the initial snapshot's rows (``deltars.py``): delta-rs
            where it can write the table (``auto``), always delta-rs, or the engine.
        compact_after_writes: compact a table's small files after this many writes to it
            (``compaction.py``); 0 never compacts.
        inline_sources: send every MERGE source through the Spark session, also to the
            embedded engine, which otherwise reads it from a local Arrow file
            (``sources.py``); for the tests that compare the two.
        column_types: qualified table name -> source column name -> what the column is
            stored as instead of its mapped type: ``string`` (PostgreSQL's text form) or
            ``double`` (a numeric).
        on_unrepresentable: what a legal value its Delta column cannot hold does
            (``unrepresentable.py``): ``keep`` stores it under its documented convention
            and keeps its text in the rejects table; ``stop`` stops the daemon.
        on_unrepresentable_tables: qualified table name -> its own ``on_unrepresentable``.
    """

    path: str
    lsn_column: str = LSN_COLUMN
    commit_time_column: str = COMMIT_TIME_COLUMN
    deleted_column: str = DELETED_COLUMN
    soft_delete: bool = False
    messages_table: bool = False
    keys: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    ordinal_column: str = ORDINAL_COLUMN
    on_missing_key: MissingKeyPolicy = "error"
    key_buckets: Mapping[str, KeyBuckets] = field(default_factory=dict)
    key_bucket_column: str = KEY_BUCKET_COLUMN
    row_lsn_column: str = ROW_LSN_COLUMN
    row_ordinal_column: str = ROW_ORDINAL_COLUMN
    column_names: ColumnNamePolicy = "error"
    history: bool | frozenset[str] = False
    bulk_writer: BulkWriter = "auto"
    compact_after_writes: int = 20
    inline_sources: bool = False
    column_types: Mapping[str, Mapping[str, ColumnTypeOverride]] = field(default_factory=dict)
    on_unrepresentable: UnrepresentablePolicy = "keep"
    on_unrepresentable_tables: Mapping[str, UnrepresentablePolicy] = field(default_factory=dict)

    def unrepresentable_policy(self, table: str) -> UnrepresentablePolicy:
        """``on_unrepresentable`` of the qualified table ``table``."""
        return self.on_unrepresentable_tables.get(table, self.on_unrepresentable)


@dataclass(frozen=True, slots=True)
class SparkSettings:
    """Which Spark engine runs the MERGEs.

    Attributes:
        mode: ``embedded`` starts a Sail Spark Connect server in this process; ``connect``
            uses the Spark Connect server at ``url``; ``classic`` starts a local JVM with
            the delta-spark jars.
        url: ``sc://host:port`` for ``connect``.
        conf: extra Spark settings applied when the session is built.
        parallelism: partitions the embedded engine splits a query into; None picks
            ``spark.embedded_parallelism()`` (``embedded`` only).
    """

    mode: SparkMode = "embedded"
    url: str | None = None
    conf: Mapping[str, str] = field(default_factory=dict)
    parallelism: int | None = None
