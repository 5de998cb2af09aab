"""Plain settings for the sink and the Spark session, so ``sink`` does not import ``config``.

They hold values, not defaults: every field the configuration sets comes from
``daemon.wiring`` (``sink_settings``, ``spark_settings``), which derives it from the
validated ``config.AppConfig``, whose models in ``config/models.py`` are the one place
defaults live. Tests get theirs the same way (``tests/support/settings.py``). Only what no
configuration sets has a default here (``SinkSettings.inline_sources``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sink.constants import (
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
    "MetadataColumns",
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
    column: str | None


@dataclass(frozen=True, slots=True)
class MetadataColumns:
    """The names of the metadata columns the sink adds to its tables, and whether deletes are soft.

    The names come from the configuration: ``sink.metadata`` and, for the names it does
    not let one change, the constants beside it in ``config/models.py``.

    Attributes:
        lsn: the source commit LSN of the change that last wrote the row.
        commit_time: that change's commit time (UTC).
        deleted: the soft-delete flag, present only when ``soft_delete`` is on.
        ordinal: the position in its transaction of the change that last wrote the row;
            with ``lsn`` it is the row's stamp. In tables without any key it is also the
            identity that makes a replayed insert recognisable.
        soft_delete: keep deleted rows with the flag set instead of removing them.
        key_bucket: the partition column of tables partitioned by key range
            (``floor(key / width)``, ``SinkSettings.key_buckets``).
        row_lsn: with ``row_ordinal``, the hidden identity of each row of a table without
            any key under REPLICA IDENTITY FULL: the position of the INSERT that created
            it (``sink/planning/keyless.py``).
        row_ordinal: see ``row_lsn``.
    """

    lsn: str
    commit_time: str
    deleted: str
    ordinal: str
    soft_delete: bool
    key_bucket: str
    row_lsn: str
    row_ordinal: str

    @property
    def reserved(self) -> tuple[str, ...]:
        """Every metadata column name; source columns may not use them."""
        return (
            self.lsn,
            self.commit_time,
            self.deleted,
            self.ordinal,
            self.key_bucket,
            self.row_lsn,
            self.row_ordinal,
        )


@dataclass(frozen=True, slots=True)
class SinkSettings:
    """Where and how ``DeltaSink`` writes.

    Attributes:
        path: root of the lake; a table lives at ``naming.table_path(path, schema, table)``,
            ``<path>/<schema>/<table>`` with unsafe characters escaped.
        metadata: the names of the metadata columns and whether deletes are soft.
        messages_table: write logical decoding messages to ``<path>/_wal2delta_messages``.
        keys: qualified table name (``schema.table``) -> key columns, for tables whose
            replica identity flags no key column (FULL, NOTHING, DEFAULT without primary
            key). A key flagged by the relation always wins.
        on_missing_key: what an UPDATE or DELETE on a table without any identity (no key
            flagged, configured or in the catalog) does: ``error`` stops with a
            ``SinkDataError``, ``skip`` drops the change and logs how many were dropped
            (``source.on_missing_key``).
        key_buckets: qualified table name -> how to partition its Delta table by key
            range, so a MERGE reads only the partitions its rows fall in
            (``metadata.key_bucket`` is their partition column).
        column_names: a source column whose name Delta cannot hold (a space or one of
            ``,;{}()=``): ``error`` stops with a ``SinkDataError``, ``map`` stores it under
            ``naming.mapped_column_name`` (``unit price`` -> ``unit_x0020_price``).
        history: the tables whose every change is also appended to a change history
            (``steps/step_history.py``): all (True), none (False), or these qualified names.
        bulk_writer: who appends the initial snapshot's rows (``deltars.py``): delta-rs
            where it can write the table (``auto``), always delta-rs, or the engine.
        compact_after_writes: compact a table's small files after this many writes to it
            (``compaction.py``); 0 never compacts.
        inline_sources: send every MERGE source through the Spark session, also to the
            embedded engine, which otherwise reads it from a local Parquet file
            (``sources.py``); for the tests that compare the two. No configuration sets
            it, so it is the one field with a default.
        column_types: qualified table name -> source column name -> what the column is
            stored as instead of its mapped type: ``string`` (PostgreSQL's text form) or
            ``double`` (a numeric).
        on_unrepresentable: what a legal value its Delta column cannot hold does
            (``unrepresentable.py``): ``keep`` stores it under its documented convention
            and keeps its text in the rejects table; ``stop`` stops the daemon.
        on_unrepresentable_tables: qualified table name -> its own ``on_unrepresentable``.
        concurrency: tables of one batch whose steps run at once (``sink.concurrency``).
        table_min_rows: a table with fewer changes in a batch may wait for later batches
            (``sink.table_min_rows``); 0 writes every table every batch.
        table_max_age: seconds a held-back change may wait (``sink.table_max_age``).
        deletion_vectors: the tables written merge-on-read: all (True), none (False), or
            these qualified names (``sink.deletion_vectors``).
        retention: seconds of versions each table keeps when vacuumed; None never vacuums
            (``sink.retention``).
        log_retention: seconds of versions whose Delta log each table keeps, at least
            (``sink.log_retention``; ``retention`` when longer); None with no
            ``retention`` keeps the whole log (``upkeep/logtrim.py``).
    """

    path: str
    metadata: MetadataColumns
    messages_table: bool
    keys: Mapping[str, tuple[str, ...]]
    on_missing_key: MissingKeyPolicy
    key_buckets: Mapping[str, KeyBuckets]
    column_names: ColumnNamePolicy
    history: bool | frozenset[str]
    bulk_writer: BulkWriter
    compact_after_writes: int
    column_types: Mapping[str, Mapping[str, ColumnTypeOverride]]
    on_unrepresentable: UnrepresentablePolicy
    on_unrepresentable_tables: Mapping[str, UnrepresentablePolicy]
    concurrency: int
    table_min_rows: int
    table_max_age: float
    deletion_vectors: bool | frozenset[str]
    retention: float | None
    log_retention: float | None
    inline_sources: bool = False

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
        call_timeout: seconds one engine or delta-rs call may take (``deadline.py``);
            None: no deadline.
    """

    mode: SparkMode
    url: str | None
    conf: Mapping[str, str]
    parallelism: int | None
    call_timeout: float | None
