"""Every delta-rs call of the sink: snapshot appends written without the engine, and the
reads and commits the lake needs besides the engine (the port section below).

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
point and makes it follow its relation (``BulkLoader.begin_bulk``), and every streamed
change after the snapshot is a MERGE in the engine. The files are ordinary Delta; readers
cannot tell which writer wrote them.

delta-rs reaches the lake with the credentials of the process environment (as the commit
log and ``wal2delta status`` do; on S3 it commits with conditional writes). With
``snapshot.writer: auto`` a table delta-rs refuses to write - a writer feature or a schema
it does not support - goes through the engine instead, for the rest of the process; with
``delta-rs`` that refusal stops the snapshot; ``spark`` never uses delta-rs.

The port
--------
This is the one module that imports delta-rs: every other module of the sink reads or
writes through the functions below - table existence, rows of the lake's own small
tables, properties, file lists, history, versions, compaction and the commits of
adopted files - so a delta-rs upgrade is checked here and its exceptions are translated
here (``DeltaRsConflictError``, ``DeltaRsRefusedError``).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import structlog

from sink.base import SinkError, SinkRetryableError
from sink.constants import BulkWriter
from sink.engine.spark import engine_message, store_fault

if TYPE_CHECKING:
    from deltalake import DeltaTable
    from pyarrow import fs as pa_fs

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


# --- reads ------------------------------------------------------------------------------


def is_delta_table(path: str) -> bool:
    """Whether a Delta table's log exists at ``path``."""
    from deltalake import DeltaTable  # noqa: PLC0415 - heavy; only needed here

    return bool(DeltaTable.is_deltatable(path))


def read_rows(path: str, filesystem: pa_fs.FileSystem | None = None) -> list[dict[str, object]]:
    """Every row of the (small) Delta table at ``path``: the lake's own records, read beside
    a running daemon. ``filesystem``: Arrow's to read the files with (None: delta-rs's).

    Raises:
        Exception: delta-rs could not read it.
    """
    from deltalake import DeltaTable  # noqa: PLC0415 - heavy; only needed here

    rows: list[dict[str, object]] = (
        DeltaTable(path).to_pyarrow_table(filesystem=filesystem).to_pylist()
    )
    return rows


def table_configuration(path: str) -> dict[str, str]:
    """The table properties of the Delta table at ``path``.

    Raises:
        Exception: delta-rs could not read it.
    """
    from deltalake import DeltaTable  # noqa: PLC0415 - heavy; only needed here

    return dict(DeltaTable(path).metadata().configuration)


def set_table_properties(path: str, properties: Mapping[str, str]) -> bool:
    """Give the Delta table at ``path`` these table properties, in one metadata commit,
    when any differs (its other properties stay); return whether it committed.

    Raises:
        Exception: delta-rs could not read the table or commit.
    """
    from deltalake import DeltaTable  # noqa: PLC0415 - heavy; only needed here

    table = DeltaTable(path)
    current = table.metadata().configuration
    if all(current.get(key) == value for key, value in properties.items()):
        return False
    table.alter.set_table_properties(dict(properties))
    return True


def file_uris(path: str, version: int | None = None) -> list[str]:
    """The data files ``version`` of the table at ``path`` reads (None: the newest).

    Raises:
        Exception: delta-rs could not read that version.
    """
    from deltalake import DeltaTable  # noqa: PLC0415 - heavy; only needed here

    return list(DeltaTable(path, version=version).file_uris())


def history(path: str, limit: int) -> list[dict[str, Any]]:
    """The newest ``limit`` commits of the table at ``path``, newest first.

    Raises:
        Exception: delta-rs could not read the log.
    """
    from deltalake import DeltaTable  # noqa: PLC0415 - heavy; only needed here

    return list(DeltaTable(path).history(limit=limit))


class TableVersions:
    """The newest version of Delta tables, read with delta-rs; the ``limit`` most recently
    read stay open (each holds its table's file list), so a read is an incremental update."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._open: OrderedDict[str, DeltaTable] = OrderedDict()

    def version(self, path: str) -> int:
        """The newest version of the table at ``path``.

        Raises:
            Exception: delta-rs could not read the table (it is opened anew next time).
        """
        table = self._open.get(path)
        try:
            if table is None:
                from deltalake import DeltaTable  # noqa: PLC0415 - heavy; only needed here

                table = self._open[path] = DeltaTable(path)
                if len(self._open) > self._limit:
                    self._open.popitem(last=False)
            else:
                self._open.move_to_end(path)
                table.update_incremental()
            return int(table.version())
        except Exception:
            self._open.pop(path, None)
            raise

    def clear(self) -> None:
        """Close every open table."""
        self._open.clear()


# --- compaction ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FileLayout:
    """What a compaction needs to know of a table's live files."""

    deletion_vectors: bool
    """The table's protocol has the deletion-vector reader feature."""
    partition_columns: list[str]
    target_file_size: int | None
    """The table's ``delta.targetFileSize``, None when unset."""
    files: pa.Table
    """One row per live file: ``size_bytes`` and ``partition.<column>`` per partition column."""


def file_layout(path: str) -> FileLayout:
    """The live files of the table at ``path`` with their sizes and partitions.

    Raises:
        Exception: delta-rs could not read the table.
    """
    from deltalake import DeltaTable  # noqa: PLC0415 - heavy; only needed here

    table = DeltaTable(path)
    metadata = table.metadata()
    configured = metadata.configuration.get("delta.targetFileSize")
    return FileLayout(
        deletion_vectors="deletionVectors" in (table.protocol().reader_features or []),
        partition_columns=list(metadata.partition_columns),
        target_file_size=int(configured) if configured else None,
        files=pa.table(table.get_add_actions(flatten=True)),
    )


def compact(path: str, partition_filters: list[tuple[str, str, Any]] | None) -> dict[str, Any]:
    """Bin-pack the small files of the partitions ``partition_filters`` selects (None: the
    whole table) in one commit; delta-rs's metrics of what it did.

    Raises:
        Exception: delta-rs failed; nothing was committed.
    """
    from deltalake import DeltaTable  # noqa: PLC0415 - heavy; only needed here

    result: dict[str, Any] = DeltaTable(path).optimize.compact(partition_filters=partition_filters)
    return result


# --- adopting files written elsewhere (adoption.py) -----------------------------------------


class DeltaRsConflictError(Exception):
    """delta-rs could not commit: another writer committed first, or the store failed."""


class DeltaRsRefusedError(Exception):
    """delta-rs does not handle the table (a feature, property or type); nothing was
    committed. ``__cause__`` is delta-rs's error."""


def adopt_files(
    target: str, staging: str, added: Sequence[Mapping[str, Any]], prefix: str
) -> str | None:
    """Replace the table at ``target`` (create it when there is none) by the files of the
    staging table at ``staging``, in one commit; ``added`` are the staging log's add actions,
    ``prefix`` the staging directory's path relative to ``target``. Returns why the table
    cannot take the files (its columns or partitions differ), with nothing written, else
    None.

    Raises:
        DeltaRsConflictError: the commit failed (a conflict).
        DeltaRsRefusedError: delta-rs does not handle the table.
        OSError: the store failed.
        ValueError: a staged file has an absolute path.
    """
    from deltalake import DeltaTable  # noqa: PLC0415 - heavy; only needed here
    from deltalake.exceptions import (  # noqa: PLC0415
        CommitFailedError,
        DeltaError,
    )
    from deltalake.transaction import create_table_with_add_actions  # noqa: PLC0415

    try:
        staged = DeltaTable(staging)
        adds = [_add_action(action, prefix) for action in added]
        metadata = staged.metadata()
        partition_by = list(metadata.partition_columns) or None
        if DeltaTable.is_deltatable(target):
            table = DeltaTable(target)
            mismatch = _mismatch(table, staged)
            if mismatch is not None:
                return mismatch
            table.create_write_transaction(
                adds, mode="overwrite", schema=table.schema(), partition_by=partition_by
            )
        else:
            create_table_with_add_actions(
                target,
                staged.schema(),
                adds,
                mode="error",
                partition_by=partition_by,
                configuration=_table_properties(metadata.configuration) or None,
            )
    except CommitFailedError as exc:
        raise DeltaRsConflictError(engine_message(exc)) from exc
    except (DeltaError, NotImplementedError) as exc:
        raise DeltaRsRefusedError(engine_message(exc)) from exc
    return None


def _add_action(action: Mapping[str, Any], prefix: str) -> Any:
    """The ``AddAction`` naming the staged file from the table's root."""
    from deltalake.transaction import AddAction  # noqa: PLC0415

    path = str(action["path"])
    if "://" in path:
        raise ValueError(f"a staged file has an absolute path ({path})")
    return AddAction(
        path=f"{prefix}/{path}",
        size=int(action["size"]),
        partition_values=dict(action.get("partitionValues") or {}),
        modification_time=int(action["modificationTime"]),
        data_change=True,
        stats=str(action.get("stats") or ""),
    )


def _table_properties(configuration: Mapping[str, str]) -> dict[str, str]:
    """The staging table's properties a new table is created with: its features
    (``delta.feature.*``, which delta-rs derives from the schema and properties itself)
    aside."""
    return {k: v for k, v in configuration.items() if not k.startswith("delta.feature.")}


def _mismatch(table: Any, staged: Any) -> str | None:
    """Why the table cannot adopt the staged files, or None: a column differs (name or type;
    nullability and metadata aside), or a partition column does."""

    def columns(delta: Any) -> list[tuple[str, str]]:
        return [(field.name, str(field.type)) for field in delta.schema().fields]

    if columns(table) != columns(staged):
        return "its columns differ from the copy's"
    if list(table.metadata().partition_columns) != list(staged.metadata().partition_columns):
        return "its partition columns differ from the copy's"
    return None
