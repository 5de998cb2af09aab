"""Replication: the connection, slots and publications, the initial snapshot, the session
loop, batching and LSN feedback, the slot monitor and the source catalog.

``capture`` reads no configuration files: ``daemon`` hands it ``CaptureSettings``. Other
packages import only from this root.
"""

from capture.batcher import Batcher
from capture.catalog import PostgresCatalog
from capture.errors import (
    EXIT_CONFIG,
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
    map_psycopg_errors,
)
from capture.feedback import FeedbackPolicy, FlushTracker
from capture.metrics import Metrics
from capture.monitor import SlotSample, SourceMonitor, sample_slot
from capture.negotiation import ReplicationRequest, negotiate, start_replication_options
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

__all__ = [
    "EXIT_CONFIG",
    "EXIT_FATAL",
    "EXIT_OK",
    "EXIT_SLOT_IN_USE",
    "CONNECTION_DEFAULTS",
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
    "TimelineCheck",
    "check_lake_timeline",
    "current_wal_lsn",
    "drop_undecodable_slot",
    "ensure_snapshot",
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
