"""Snapshot appends written by delta-rs straight from the daemon, without the engine.

Theory of operation
-------------------
The initial snapshot appends large Arrow tables (``bulk.py``) to Delta tables nothing else
writes at that moment. Through Spark Connect every chunk is serialised to Arrow IPC, copied
into a gRPC message, sent and decoded again before the engine writes Parquet: on the 2M-row
table of ``python -m bench snapshot`` that round trip made the engine's append take longer
than reading the rows from PostgreSQL. delta-rs (the ``deltalake`` package, already used
to read table versions for the commit log) writes the same Arrow memory as Parquet in Rust
and commits a blind append - the one Delta operation any writer may do next to others.

Only the appends move: the engine still creates the table, truncates it at the consistent
point and makes it follow its relation (``DeltaSink.begin_bulk``), and every streamed
change after the snapshot is a MERGE in the engine. The files are ordinary Delta; readers
cannot tell which writer wrote them.

delta-rs reaches the lake with the credentials of the process environment (as the commit
log and ``wal2delta status`` do; on S3 it commits with conditional writes). With
``snapshot.writer: auto`` a table delta-rs refuses to write - a writer feature or a schema
it does not support - goes through the engine instead, for the rest of the process; with
``delta-rs`` that refusal stops the snapshot; ``spark`` never uses delta-rs.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pyarrow as pa
import structlog

from sink.base import SinkError, SinkRetryableError
from sink.constants import BulkWriter
from sink.engine.spark import engine_message, store_fault

log = structlog.get_logger("wal2delta.sink")


class DeltaRsAppender:
    """Appends Arrow tables to existing Delta tables with delta-rs, when it can."""

    def __init__(self, writer: BulkWriter) -> None:
        self._writer = writer
        self._engine_only: set[str] = set()
        self._lock = threading.Lock()

    def uses_delta_rs(self, path: str) -> bool:
        """Whether an append to ``path`` is tried with delta-rs (else: the engine)."""
        if self._writer == "spark":
            return False
        with self._lock:
            return path not in self._engine_only

    def append(self, path: str, table: pa.Table, partition_by: Sequence[str], action: str) -> bool:
        """Append ``table`` to the Delta table at ``path``; False when the engine must.

        Nothing is written when the engine must (``spark``, or a table delta-rs refused).

        Args:
            path: the table's location, as the engine writes it.
            table: the rows, with exactly the table's columns and types.
            partition_by: the table's partition columns (empty when it has none).
            action: what is being written, for messages ("appending the snapshot of t").

        Raises:
            SinkRetryableError: the lake could not be reached, or a commit conflicted.
            SinkError: delta-rs refused the table and ``snapshot.writer`` is ``delta-rs``,
                or failed otherwise.
        """
        from deltalake import write_deltalake  # noqa: PLC0415 - heavy; only needed here
        from deltalake.exceptions import (  # noqa: PLC0415
            CommitFailedError,
            DeltaProtocolError,
            SchemaMismatchError,
        )

        if not self.uses_delta_rs(path):
            return False
        try:
            write_deltalake(path, table, mode="append", partition_by=list(partition_by) or None)
        except (DeltaProtocolError, SchemaMismatchError) as exc:
            if self._writer == "delta-rs":
                raise SinkError(
                    f"delta-rs cannot write the table while {action}: {engine_message(exc)}; "
                    "set snapshot.writer to auto or spark to let the Spark engine write it"
                ) from exc
            with self._lock:
                self._engine_only.add(path)
            log.info(
                "snapshot appends go through the Spark engine",
                table_path=path,
                reason=engine_message(exc),
            )
            return False
        except (CommitFailedError, OSError) as exc:
            raise store_fault(exc, action) or SinkRetryableError(
                f"delta-rs could not commit while {action} ({type(exc).__name__}: "
                f"{engine_message(exc)}); the snapshot will be retried"
            ) from exc
        except Exception as exc:
            # A DeltaError quoting object_store's error ("Failed to parse parquet: External:
            # Generic S3 error: ... 503") is a store fault, not a refusal.
            raise store_fault(exc, action) or SinkError(
                f"delta-rs failed while {action} ({type(exc).__name__}): {engine_message(exc)}"
            ) from exc
        return True
