"""The Delta sink: PostgreSQL changes merged into Delta Lake tables through Spark.

``DeltaSink`` (``delta``) orders each batch over the sink's parts, one subpackage per job
(docs/architecture.md, The sink's parts): ``values`` (types, values, names), ``planning``
(the batch folded into per-table plans, pure), ``engine`` (the Spark session, the SQL, the
Arrow sources), ``lake`` (the lake port: every statement on a table and every delta-rs
call), ``records`` (commit log, bookkeeping, rejects, change histories), ``steps`` (one
executor per step kind), ``copies`` (the initial snapshot and copies while streaming) and
``upkeep`` (compaction, retention). The root holds the contract (``base``), the names
defined once (``constants``) and the plain settings (``settings``). This module is the
sink's public surface: capture and the daemon import only from here.
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
        SinkParts,
        SinkRetryableError,
        SinkStoreError,
        SnapshotMarker,
        SnapshotMarkerStore,
        SnapshotStatus,
        TimelineStore,
        WrittenTimeline,
        parts_of,
    )
    from sink.constants import COPIES_TABLE, REJECTS_TABLE, ColumnTypeOverride
    from sink.copies.bulk import RANGE_ORDINAL_STRIDE, BulkTarget
    from sink.copies.copies import RESYNC_PREFIX, TableCopy, read_copy_records, resync_message
    from sink.delta import DeltaSink
    from sink.engine.deadline import CallDeadlines, OverdueCall, engine_call, install_call_deadlines
    from sink.engine.spark import create_spark_session, stop_spark_session
    from sink.lake.deltalog import oldest_readable_version
    from sink.lake.logversion import local_directory, newest_logged_version
    from sink.planning.evolution import CatalogColumn, CatalogTable, SourceCatalog
    from sink.planning.fold import copy_truncate
    from sink.records.commits import (
        commits_path,
        consistent_boundaries,
        oldest_retained_boundary,
        read_commit_records,
        retained_versions,
    )
    from sink.records.rejects import rejects_path
    from sink.settings import (
        ColumnNamePolicy,
        KeyBuckets,
        MetadataColumns,
        SinkSettings,
        SparkSettings,
    )
    from sink.values.convert import pg_text_form, to_delta_value
    from sink.values.naming import (
        column_map,
        delta_can_hold,
        delta_column_name,
        history_path,
        table_of_path,
        table_path,
    )
    from sink.values.typemap import NUMERIC_OID, ColumnTypeError, DeltaType, ValueForm, delta_type
    from sink.values.unrepresentable import (
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
    "SinkParts",
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
    "oldest_readable_version",
    "oldest_retained_boundary",
    "parts_of",
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
    "SinkParts": "sink.base",
    "parts_of": "sink.base",
    "SinkRetryableError": "sink.base",
    "SinkStoreError": "sink.base",
    "SnapshotMarker": "sink.base",
    "SnapshotMarkerStore": "sink.base",
    "SnapshotStatus": "sink.base",
    "TimelineStore": "sink.base",
    "WrittenTimeline": "sink.base",
    "RANGE_ORDINAL_STRIDE": "sink.copies.bulk",
    "BulkTarget": "sink.copies.bulk",
    "oldest_readable_version": "sink.lake.deltalog",
    "commits_path": "sink.records.commits",
    "consistent_boundaries": "sink.records.commits",
    "oldest_retained_boundary": "sink.records.commits",
    "read_commit_records": "sink.records.commits",
    "retained_versions": "sink.records.commits",
    "COPIES_TABLE": "sink.constants",
    "REJECTS_TABLE": "sink.constants",
    "ColumnTypeOverride": "sink.constants",
    "pg_text_form": "sink.values.convert",
    "to_delta_value": "sink.values.convert",
    "RESYNC_PREFIX": "sink.copies.copies",
    "TableCopy": "sink.copies.copies",
    "read_copy_records": "sink.copies.copies",
    "resync_message": "sink.copies.copies",
    "CallDeadlines": "sink.engine.deadline",
    "OverdueCall": "sink.engine.deadline",
    "engine_call": "sink.engine.deadline",
    "install_call_deadlines": "sink.engine.deadline",
    "DeltaSink": "sink.delta",
    "CatalogColumn": "sink.planning.evolution",
    "CatalogTable": "sink.planning.evolution",
    "SourceCatalog": "sink.planning.evolution",
    "copy_truncate": "sink.planning.fold",
    "history_path": "sink.values.naming",
    "column_map": "sink.values.naming",
    "local_directory": "sink.lake.logversion",
    "newest_logged_version": "sink.lake.logversion",
    "delta_can_hold": "sink.values.naming",
    "delta_column_name": "sink.values.naming",
    "table_of_path": "sink.values.naming",
    "table_path": "sink.values.naming",
    "rejects_path": "sink.records.rejects",
    "ColumnNamePolicy": "sink.settings",
    "KeyBuckets": "sink.settings",
    "MetadataColumns": "sink.settings",
    "SinkSettings": "sink.settings",
    "SparkSettings": "sink.settings",
    "create_spark_session": "sink.engine.spark",
    "stop_spark_session": "sink.engine.spark",
    "NUMERIC_OID": "sink.values.typemap",
    "ColumnTypeError": "sink.values.typemap",
    "DeltaType": "sink.values.typemap",
    "ValueForm": "sink.values.typemap",
    "delta_type": "sink.values.typemap",
    "DATE_INFINITY": "sink.values.unrepresentable",
    "DATE_MINUS_INFINITY": "sink.values.unrepresentable",
    "TIMESTAMP_INFINITY": "sink.values.unrepresentable",
    "TIMESTAMP_MINUS_INFINITY": "sink.values.unrepresentable",
    "Reason": "sink.values.unrepresentable",
}
"""Each public name and the module that defines it (``module:name`` when renamed): the root
imports a module on the first use of one of its names (PEP 562), so a command imports only
what it uses (docs/decisions/0119)."""

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, __all__)
