"""Record the raw replication stream to a file, and decode such a file to JSON lines.

File format: a sequence of records, each an 8-byte big-endian ``wal_start`` LSN, a 4-byte
big-endian payload length and the pgoutput payload bytes of one XLogData frame. There is
no header; ``decode`` takes the protocol options as arguments.

``wal2delta capture`` runs the normal service loop with a ``frame_tap`` that appends every
XLogData payload to the file and a ``RecordingSink`` that, instead of writing Delta,
fsyncs the file: the flush position therefore never passes what is on disk in the
recording, exactly as it never passes what is durable in Delta in normal operation. The
loop decodes the stream only to find transaction boundaries (``replay_changes`` False):
changes are never replayed into objects, and batches carry only transaction ends.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, Final

from decoder import (
    UNCHANGED_TOAST,
    XLOG_RECORD_HEADER,
    Assembler,
    ColumnKind,
    CommittedTransaction,
    DecodeError,
    MessageChange,
    NonTransactionalMessage,
    ProtocolOptions,
    Relation,
    RowChange,
    StreamAborted,
    TransactionRolledBack,
    TruncateChange,
    TupleData,
    format_lsn,
    pg_timestamp_to_datetime,
    xlog_records,
)
from sink import Batch, BatchResult

RECORD_HEADER: Final = XLOG_RECORD_HEADER
_pack_header: Final = RECORD_HEADER.pack
_PENDING_RECORDS: Final = 1024
"""Records the capture thread collects before it writes them to the file itself."""


class StreamRecorder:
    """Appends records to a file; ``sync`` makes everything written so far durable.

    ``write`` runs on the capture thread once per frame, so it takes no lock: records wait
    in a list that the capture thread writes out every ``_PENDING_RECORDS`` records and
    that ``sync`` (the sink thread) writes out before it fsyncs. Each writer takes the
    first ``count`` records under the lock and deletes just those; an ``append`` racing
    with it lands after them (single list operations are atomic in CPython).
    """

    def __init__(self, path: Path) -> None:
        self._file: BinaryIO = path.open("ab", buffering=1 << 20)
        self._lock = threading.Lock()
        self._pending: list[bytes] = []
        self.records = 0

    def write(self, wal_start: int, payload: bytes) -> None:
        pending = self._pending
        pending.append(_pack_header(wal_start, len(payload)) + payload)
        if len(pending) >= _PENDING_RECORDS:
            self._write_pending()

    def write_frames(self, frames: list[bytes], start: int, stop: int) -> None:
        """``write`` for each XLogData frame of ``frames[start:stop]``, at once (in C when
        the kernel is built): the capture loop hands over the runs it takes in bulk."""
        pending = self._pending
        xlog_records(frames, start, stop, pending)  # the records ``write`` makes
        if len(pending) >= _PENDING_RECORDS:
            self._write_pending()

    def _write_pending(self) -> None:
        with self._lock:
            pending = self._pending
            count = len(pending)
            if count:
                self._file.write(b"".join(pending[:count]))
                del pending[:count]
                self.records += count

    def sync(self) -> None:
        self._write_pending()
        with self._lock:
            self._file.flush()
            os.fsync(self._file.fileno())

    def close(self) -> None:
        self.sync()
        with self._lock:
            self._file.close()


class RecordingSink:
    """A sink whose "durable" means "fsynced in the recording"."""

    def __init__(self, recorder: StreamRecorder) -> None:
        self._recorder = recorder

    def apply(self, batch: Batch) -> BatchResult:
        self._recorder.sync()
        return BatchResult(rows_by_table={}, toast_anomalies=0, duration_seconds=0.0)

    def close(self) -> None:
        self._recorder.close()


def read_records(path: Path) -> Iterator[tuple[int, bytes]]:
    """Yield (wal_start, payload) records of a recording.

    Raises:
        DecodeError: the file ends inside a record.
    """
    with path.open("rb") as file:
        offset = 0
        while True:
            header = file.read(RECORD_HEADER.size)
            if not header:
                return
            if len(header) < RECORD_HEADER.size:
                raise DecodeError(
                    "recording ends inside a record header", offset=offset, message_type="RECORD"
                )
            wal_start, length = RECORD_HEADER.unpack(header)
            payload = file.read(length)
            if len(payload) < length:
                raise DecodeError(
                    f"recording ends inside a {length}-byte record",
                    offset=offset,
                    message_type="RECORD",
                )
            offset += RECORD_HEADER.size + length
            yield wal_start, payload


def _tuple_json(relation: Relation, data: TupleData | None) -> dict[str, object] | None:
    if data is None:
        return None
    out: dict[str, object] = {}
    for column, value in zip(relation.columns, data.values, strict=False):
        if value.kind is ColumnKind.NULL:
            out[column.name] = None
        elif value.kind is ColumnKind.UNCHANGED_TOAST:
            out[column.name] = {"unchanged_toast": True}
        elif value.kind is ColumnKind.TEXT:
            assert value.data is not None
            out[column.name] = value.data.decode("utf-8", errors="replace")
        else:
            assert value.data is not None
            out[column.name] = {"binary": value.data.hex()}
    return out


def _change_json(change: RowChange | TruncateChange | MessageChange) -> dict[str, object]:
    if isinstance(change, RowChange):
        relation = change.relation
        entry: dict[str, object] = {
            "schema": relation.schema_name,
            "table": relation.relation_name,
            "op": change.op,
            "new": _tuple_json(relation, change.new),
        }
        if change.old is not None:
            entry["key" if change.old_kind == "K" else "old"] = _tuple_json(relation, change.old)
        return entry
    if isinstance(change, TruncateChange):
        return {
            "op": "truncate",
            "tables": [r.qualified_name for r in change.relations],
            "cascade": change.cascade,
            "restart_identity": change.restart_identity,
        }
    return {
        "op": "message",
        "prefix": change.prefix,
        "content": change.content.decode("utf-8", errors="replace"),
        "lsn": format_lsn(change.lsn),
    }


def _time(ts: int | None) -> str | None:
    return None if ts is None else pg_timestamp_to_datetime(ts).isoformat()


def decode_recording(path: Path, options: ProtocolOptions) -> Iterator[dict[str, object]]:
    """Decode a recording into one JSON-ready object per transaction or event."""
    assembler = Assembler(options)
    for wal_start, payload in read_records(path):
        for output in assembler.feed(wal_start, payload):
            if isinstance(output, CommittedTransaction):
                yield {
                    "kind": output.kind,
                    "xid": output.xid,
                    "gid": output.gid,
                    "commit_lsn": format_lsn(output.commit_lsn),
                    "end_lsn": format_lsn(output.end_lsn),
                    "commit_time": _time(output.commit_time),
                    "origin": output.origin,
                    "changes": [_change_json(c) for c in assembler.replay(output)],
                }
            elif isinstance(output, TransactionRolledBack):
                yield {
                    "kind": "rollback_prepared",
                    "gid": output.gid,
                    "end_lsn": format_lsn(output.rollback_end_lsn),
                    "commit_time": _time(output.rollback_time),
                }
            elif isinstance(output, StreamAborted):
                yield {
                    "kind": "stream_abort",
                    "xid": output.xid,
                    "subxid": output.subxid,
                    "abort_lsn": None if output.abort_lsn is None else format_lsn(output.abort_lsn),
                    "commit_time": _time(output.abort_time),
                }
            elif isinstance(output, NonTransactionalMessage):
                yield {
                    "kind": "message",
                    "lsn": format_lsn(output.lsn),
                    "prefix": output.prefix,
                    "content": output.content.decode("utf-8", errors="replace"),
                    "transactional": False,
                }


def dump_json_lines(objects: Iterator[dict[str, object]]) -> Iterator[str]:
    """Serialise decoded objects, one per line."""
    for obj in objects:
        yield json.dumps(obj, default=str, ensure_ascii=False)


__all__ = [
    "UNCHANGED_TOAST",
    "RecordingSink",
    "StreamRecorder",
    "decode_recording",
    "dump_json_lines",
    "read_records",
]
