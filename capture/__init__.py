"""Replication: the connection, slots and publications, the initial snapshot, the session
loop, batching and LSN feedback, the slot monitor and the source catalog.

``capture`` reads no configuration files: ``daemon`` hands it ``CaptureSettings``. Other
packages import only from this root.
"""

from typing import TYPE_CHECKING, Final

from decoder import lazy_exports

if TYPE_CHECKING:
    from capture.batcher import Batcher
    from capture.catalog import PostgresCatalog
    from capture.errors import (
        EXIT_CONFIG,
        EXIT_ENGINE_DEADLINE,
        EXIT_FATAL,
        EXIT_OK,
        EXIT_SLOT_IN_USE,
        CaptureError,
        LakeAheadOfServerError,
        PublicationError,
        ReceiveTimeoutError,
        ReplicationConnectionLostError,
        ServerCapabilityError,
        SlotInUseError,
        SlotInvalidatedError,
        SlotNotFoundError,
        SlotUndecodableError,
        SourceRefusedError,
        StreamRewindError,
        TableChangedSinceSnapshotError,
        map_psycopg_errors,
    )
    from capture.feedback import FeedbackPolicy, FlushTracker
    from capture.metrics import Metrics
    from capture.monitor import SourceMonitor
    from capture.negotiation import ReplicationRequest, negotiate, start_replication_options
    from capture.overlaps import Overlap, find_overlaps
    from capture.session import ServiceState, Session
    from capture.settings import (
        CONNECTION_DEFAULTS,
        TEXT_FORM_SETTINGS,
        BatchSettings,
        CaptureSettings,
        ReconnectSettings,
        SnapshotTuning,
        with_connection_defaults,
        with_text_form_settings,
    )
    from capture.sink_worker import AppliedBatch, FailedBatch, SinkWorker
    from capture.slot_sample import SlotSample, sample_slot
    from capture.slots import PublishedTable, current_wal_lsn, read_published_tables, slot_state
    from capture.snapshot import SnapshotCopier
    from capture.startup import (
        SourceInfo,
        drop_undecodable_slot,
        ensure_snapshot,
        prepare_source,
    )
    from capture.stream import ReplicationStream
    from capture.tablecopy import OnlineCopier
    from capture.timeline import TimelineCheck, check_lake_timeline
    from capture.tls import certificate_problem

__all__ = [
    "CONNECTION_DEFAULTS",
    "EXIT_CONFIG",
    "EXIT_ENGINE_DEADLINE",
    "EXIT_FATAL",
    "EXIT_OK",
    "EXIT_SLOT_IN_USE",
    "TEXT_FORM_SETTINGS",
    "AppliedBatch",
    "BatchSettings",
    "Batcher",
    "CaptureError",
    "CaptureSettings",
    "FailedBatch",
    "FeedbackPolicy",
    "FlushTracker",
    "LakeAheadOfServerError",
    "Metrics",
    "OnlineCopier",
    "Overlap",
    "PostgresCatalog",
    "PublicationError",
    "PublishedTable",
    "ReceiveTimeoutError",
    "ReconnectSettings",
    "ReplicationConnectionLostError",
    "ReplicationRequest",
    "ReplicationStream",
    "ServerCapabilityError",
    "ServiceState",
    "Session",
    "SinkWorker",
    "SlotInUseError",
    "SlotInvalidatedError",
    "SlotNotFoundError",
    "SlotSample",
    "SlotUndecodableError",
    "SnapshotCopier",
    "SnapshotTuning",
    "SourceInfo",
    "SourceMonitor",
    "SourceRefusedError",
    "StreamRewindError",
    "TableChangedSinceSnapshotError",
    "TimelineCheck",
    "certificate_problem",
    "check_lake_timeline",
    "current_wal_lsn",
    "drop_undecodable_slot",
    "ensure_snapshot",
    "find_overlaps",
    "map_psycopg_errors",
    "negotiate",
    "prepare_source",
    "read_published_tables",
    "sample_slot",
    "slot_state",
    "start_replication_options",
    "with_connection_defaults",
    "with_text_form_settings",
]

_EXPORTS: Final[dict[str, str]] = {
    "Batcher": "capture.batcher",
    "PostgresCatalog": "capture.catalog",
    "EXIT_CONFIG": "capture.errors",
    "EXIT_ENGINE_DEADLINE": "capture.errors",
    "EXIT_FATAL": "capture.errors",
    "EXIT_OK": "capture.errors",
    "EXIT_SLOT_IN_USE": "capture.errors",
    "CaptureError": "capture.errors",
    "LakeAheadOfServerError": "capture.errors",
    "PublicationError": "capture.errors",
    "ReceiveTimeoutError": "capture.errors",
    "ReplicationConnectionLostError": "capture.errors",
    "ServerCapabilityError": "capture.errors",
    "SlotInUseError": "capture.errors",
    "SlotInvalidatedError": "capture.errors",
    "SlotNotFoundError": "capture.errors",
    "SlotUndecodableError": "capture.errors",
    "SourceRefusedError": "capture.errors",
    "TableChangedSinceSnapshotError": "capture.errors",
    "StreamRewindError": "capture.errors",
    "map_psycopg_errors": "capture.errors",
    "FeedbackPolicy": "capture.feedback",
    "FlushTracker": "capture.feedback",
    "Metrics": "capture.metrics",
    "SourceMonitor": "capture.monitor",
    "SlotSample": "capture.slot_sample",
    "sample_slot": "capture.slot_sample",
    "ReplicationRequest": "capture.negotiation",
    "negotiate": "capture.negotiation",
    "start_replication_options": "capture.negotiation",
    "Overlap": "capture.overlaps",
    "find_overlaps": "capture.overlaps",
    "ServiceState": "capture.session",
    "Session": "capture.session",
    "CONNECTION_DEFAULTS": "capture.settings",
    "TEXT_FORM_SETTINGS": "capture.settings",
    "BatchSettings": "capture.settings",
    "CaptureSettings": "capture.settings",
    "ReconnectSettings": "capture.settings",
    "SnapshotTuning": "capture.settings",
    "with_connection_defaults": "capture.settings",
    "with_text_form_settings": "capture.settings",
    "AppliedBatch": "capture.sink_worker",
    "FailedBatch": "capture.sink_worker",
    "SinkWorker": "capture.sink_worker",
    "PublishedTable": "capture.slots",
    "current_wal_lsn": "capture.slots",
    "read_published_tables": "capture.slots",
    "slot_state": "capture.slots",
    "SnapshotCopier": "capture.snapshot",
    "SourceInfo": "capture.startup",
    "drop_undecodable_slot": "capture.startup",
    "ensure_snapshot": "capture.startup",
    "prepare_source": "capture.startup",
    "ReplicationStream": "capture.stream",
    "OnlineCopier": "capture.tablecopy",
    "TimelineCheck": "capture.timeline",
    "check_lake_timeline": "capture.timeline",
    "certificate_problem": "capture.tls",
}
"""Each public name and the module that defines it (``module:name`` when renamed): the root
imports a module on the first use of one of its names (PEP 562), so a command imports only
what it uses (docs/decisions/0119)."""

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, __all__)
