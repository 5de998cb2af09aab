"""The Delta sink: PostgreSQL changes merged into Delta Lake tables through Spark.

``DeltaSink`` (``delta``) plans each batch without Spark (``plan``, keyless tables in
``keyless``), renders MERGE statements (``sql``), ships the rows as Arrow (``arrow``) and
runs them on the process's Spark session (``spark``), over the tables ``tables`` creates
and caches. ``typemap`` maps PostgreSQL types to Delta types; ``convert`` turns sent values
into Delta values; ``unrepresentable`` stores legal values a Delta type cannot hold under
their conventions, and ``rejects`` keeps their exact text; ``evolution`` decides how a
table follows a changed relation, with the source catalog (``SourceCatalog``) that capture
injects, and ``follow`` carries it out; ``bookkeeping`` keeps the lake's own tables
(snapshot markers, column origins, messages), ``commits`` the commit log ``wal2delta cut``
reads and the versions a cut can still name, ``history`` each table's change history;
``layout`` gives a table its properties (deletion vectors), ``compaction`` compacts and
purges tables between batches and ``retention`` vacuums them; ``constants`` holds the
names and vocabularies defined once; ``naming`` says where a table lands in the lake
(``table_path``) and what its columns are called in Delta.
"""

from typing import TYPE_CHECKING, Final

from decoder import lazy_exports

if TYPE_CHECKING:
    from sink.base import (
        Batch,
        BatchResult,
        BulkSnapshotSink,
        CopyTarget,
        DeferringSink,
        HoldingSink,
        OnlineCopySink,
        Sink,
        SinkDataError,
        SinkError,
        SinkRetryableError,
        SinkStoreError,
        SnapshotMarker,
        SnapshotMarkerStore,
        SnapshotStatus,
        TimelineStore,
        WrittenTimeline,
    )
    from sink.bulk import RANGE_ORDINAL_STRIDE, BulkTarget
    from sink.commits import (
        commits_path,
        consistent_boundaries,
        oldest_retained_boundary,
        read_commit_records,
        retained_versions,
    )
    from sink.constants import COPIES_TABLE, REJECTS_TABLE, ColumnTypeOverride
    from sink.convert import pg_text_form, to_delta_value
    from sink.copies import RESYNC_PREFIX, TableCopy, read_copy_records, resync_message
    from sink.deadline import CallDeadlines, OverdueCall, engine_call, install_call_deadlines
    from sink.delta import DeltaSink
    from sink.evolution import CatalogColumn, CatalogTable, SourceCatalog
    from sink.fold import copy_truncate
    from sink.history import history_path
    from sink.logversion import local_directory, newest_logged_version
    from sink.naming import column_map, delta_can_hold, delta_column_name, table_of_path, table_path
    from sink.rejects import rejects_path
    from sink.settings import (
        ColumnNamePolicy,
        KeyBuckets,
        MetadataColumns,
        SinkSettings,
        SparkSettings,
    )
    from sink.spark import create_spark_session, stop_spark_session
    from sink.typemap import NUMERIC_OID, ColumnTypeError, DeltaType, ValueForm, delta_type
    from sink.unrepresentable import (
        DATE_INFINITY,
        DATE_MINUS_INFINITY,
        TIMESTAMP_INFINITY,
        TIMESTAMP_MINUS_INFINITY,
        Reason,
    )

__all__ = [
    "COPIES_TABLE",
    "DATE_INFINITY",
    "DATE_MINUS_INFINITY",
    "NUMERIC_OID",
    "RANGE_ORDINAL_STRIDE",
    "REJECTS_TABLE",
    "RESYNC_PREFIX",
    "TIMESTAMP_INFINITY",
    "TIMESTAMP_MINUS_INFINITY",
    "Batch",
    "BatchResult",
    "BulkSnapshotSink",
    "BulkTarget",
    "CallDeadlines",
    "CatalogColumn",
    "CatalogTable",
    "ColumnNamePolicy",
    "ColumnTypeError",
    "ColumnTypeOverride",
    "CopyTarget",
    "DeferringSink",
    "DeltaSink",
    "DeltaType",
    "HoldingSink",
    "KeyBuckets",
    "MetadataColumns",
    "OnlineCopySink",
    "OverdueCall",
    "Reason",
    "Sink",
    "SinkDataError",
    "SinkError",
    "SinkRetryableError",
    "SinkSettings",
    "SinkStoreError",
    "SnapshotMarker",
    "SnapshotMarkerStore",
    "SnapshotStatus",
    "SourceCatalog",
    "SparkSettings",
    "TableCopy",
    "TimelineStore",
    "ValueForm",
    "WrittenTimeline",
    "column_map",
    "commits_path",
    "consistent_boundaries",
    "copy_truncate",
    "create_spark_session",
    "delta_can_hold",
    "delta_column_name",
    "delta_type",
    "engine_call",
    "history_path",
    "install_call_deadlines",
    "local_directory",
    "newest_logged_version",
    "oldest_retained_boundary",
    "pg_text_form",
    "read_commit_records",
    "read_copy_records",
    "rejects_path",
    "resync_message",
    "retained_versions",
    "stop_spark_session",
    "table_of_path",
    "table_path",
    "to_delta_value",
]

_EXPORTS: Final[dict[str, str]] = {
    "Batch": "sink.base",
    "BatchResult": "sink.base",
    "BulkSnapshotSink": "sink.base",
    "CopyTarget": "sink.base",
    "DeferringSink": "sink.base",
    "HoldingSink": "sink.base",
    "OnlineCopySink": "sink.base",
    "Sink": "sink.base",
    "SinkDataError": "sink.base",
    "SinkError": "sink.base",
    "SinkRetryableError": "sink.base",
    "SinkStoreError": "sink.base",
    "SnapshotMarker": "sink.base",
    "SnapshotMarkerStore": "sink.base",
    "SnapshotStatus": "sink.base",
    "TimelineStore": "sink.base",
    "WrittenTimeline": "sink.base",
    "RANGE_ORDINAL_STRIDE": "sink.bulk",
    "BulkTarget": "sink.bulk",
    "commits_path": "sink.commits",
    "consistent_boundaries": "sink.commits",
    "oldest_retained_boundary": "sink.commits",
    "read_commit_records": "sink.commits",
    "retained_versions": "sink.commits",
    "COPIES_TABLE": "sink.constants",
    "REJECTS_TABLE": "sink.constants",
    "ColumnTypeOverride": "sink.constants",
    "pg_text_form": "sink.convert",
    "to_delta_value": "sink.convert",
    "RESYNC_PREFIX": "sink.copies",
    "TableCopy": "sink.copies",
    "read_copy_records": "sink.copies",
    "resync_message": "sink.copies",
    "CallDeadlines": "sink.deadline",
    "OverdueCall": "sink.deadline",
    "engine_call": "sink.deadline",
    "install_call_deadlines": "sink.deadline",
    "DeltaSink": "sink.delta",
    "CatalogColumn": "sink.evolution",
    "CatalogTable": "sink.evolution",
    "SourceCatalog": "sink.evolution",
    "copy_truncate": "sink.fold",
    "history_path": "sink.history",
    "column_map": "sink.naming",
    "local_directory": "sink.logversion",
    "newest_logged_version": "sink.logversion",
    "delta_can_hold": "sink.naming",
    "delta_column_name": "sink.naming",
    "table_of_path": "sink.naming",
    "table_path": "sink.naming",
    "rejects_path": "sink.rejects",
    "ColumnNamePolicy": "sink.settings",
    "KeyBuckets": "sink.settings",
    "MetadataColumns": "sink.settings",
    "SinkSettings": "sink.settings",
    "SparkSettings": "sink.settings",
    "create_spark_session": "sink.spark",
    "stop_spark_session": "sink.spark",
    "NUMERIC_OID": "sink.typemap",
    "ColumnTypeError": "sink.typemap",
    "DeltaType": "sink.typemap",
    "ValueForm": "sink.typemap",
    "delta_type": "sink.typemap",
    "DATE_INFINITY": "sink.unrepresentable",
    "DATE_MINUS_INFINITY": "sink.unrepresentable",
    "TIMESTAMP_INFINITY": "sink.unrepresentable",
    "TIMESTAMP_MINUS_INFINITY": "sink.unrepresentable",
    "Reason": "sink.unrepresentable",
}
"""Each public name and the module that defines it (``module:name`` when renamed): the root
imports a module on the first use of one of its names (PEP 562), so a command imports only
what it uses (docs/decisions/0119)."""

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, __all__)
