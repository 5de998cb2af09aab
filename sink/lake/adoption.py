"""An online copy's files adopted by its table in one commit, without writing them again.

Theory of operation
-------------------
An online copy (``copies.py``) appends the table's rows to a staging table inside the
table's own directory, ``<table>/wal2delta-copy-<consistent point>``
(``naming.staging_path``). Once the copy is complete the table must go from its old content
to the copied one in one commit. Overwriting it from a SELECT of the staging table through
the engine wrote every row a second time: in ``python -m bench resync`` that took 0.4-1.1x
as long as the table's whole initial snapshot.

Delta needs no second write. A commit may remove every live file of a table and add files
that already exist, named by their path relative to the table (PROTOCOL.md, "Add File and
Remove File"). So the staging table's live ``add`` actions - size, partition values and
statistics as their writer recorded them (``deltalog.py``) - are committed to the table
with the staging directory's name in front of their paths, by delta-rs: an ``overwrite``
transaction on an existing table (it removes every live file in the same commit), or
``create_table_with_add_actions`` for a table that does not exist yet (its version 0 holds
the whole copy). The staging table's own log is deleted after the commit; its data files
now belong to the table and leave it as any other file does (a MERGE rewrites them, the
retention vacuum or Delta's VACUUM deletes them later). The directory's name does not
start with ``_`` because VACUUM skips such directories as hidden and would never delete
the copied files once they are replaced.

The engine's overwrite (``OnlineCopies.finish_copy``) stays the fallback, used when:

* delta-rs refuses the table (a writer feature it does not support, such as deletion
  vectors in deltalake 1.6.6); the refusal is remembered for the table;
* the table's columns differ from the copy's (a column the source dropped stays in Delta:
  the engine's overwrite merges the schemas, an adopting commit would drop it), or its
  partition columns do (``sink.partition_by_key`` set after the table was created: a
  partition column's values are not in the files).

Crash safety: the commit is one atomic log entry. A copy that stops before it leaves a
staging directory no live file names; one that stops after it leaves a directory whose
files are live. ``remove_stale_staging`` tells them apart from the table's log at the
start of the next copy of the table: the first is deleted, the second loses only its log.
"""

from __future__ import annotations

import threading

import structlog

from decoder import cause_line
from sink.base import SinkError, SinkRetryableError
from sink.constants import STAGING_PREFIX
from sink.engine.spark import engine_message, store_fault
from sink.lake.deltalog import LogUnreadableError, read_table_files, table_filesystem
from sink.lake.deltars import DeltaRsConflictError, DeltaRsRefusedError, adopt_files, is_delta_table

log = structlog.get_logger("wal2delta.sink")


class StagedFileAdopter:
    """Commits a staging table's files to their table (the module docstring)."""

    def __init__(self) -> None:
        self._refused: set[str] = set()
        self._lock = threading.Lock()

    def adopt(self, target: str, staging: str, action: str) -> bool:
        """Replace the table at ``target`` by the staging table at ``staging`` (a directory
        inside it) in one commit; False, with nothing written, when the engine must.

        Raises:
            SinkRetryableError: the lake could not be reached, or the commit conflicted.
            SinkError: the staging table's log cannot be read.
        """
        with self._lock:
            if target in self._refused:
                return False
        prefix = _relative_directory(target, staging)
        try:
            files = read_table_files(staging, with_actions=True)
            assert files.added is not None, "asked for"
            mismatch = adopt_files(target, staging, list(files.added.values()), prefix)
        except (DeltaRsConflictError, OSError) as exc:
            # delta-rs's own error, named in the message.
            cause = exc.__cause__ if isinstance(exc, DeltaRsConflictError) else exc
            assert cause is not None, "a DeltaRsConflictError is raised from delta-rs's error"
            raise store_fault(cause, action) or SinkRetryableError(
                f"delta-rs could not commit while {action} ({type(cause).__name__}: "
                f"{engine_message(cause)}); the copy will be retried"
            ) from exc
        except DeltaRsRefusedError as exc:
            store = store_fault(exc.__cause__ or exc, action)
            if store is not None:  # the store failed; delta-rs did not refuse the table
                raise store from exc
            # A feature, property or type delta-rs does not handle (DeltaProtocolError,
            # SchemaMismatchError and the kernel's errors are all DeltaErrors): nothing
            # was committed, and the engine can always replace the table.
            with self._lock:
                self._refused.add(target)
            _through_engine(target, str(exc))
            return False
        except LogUnreadableError as exc:
            raise SinkError(f"the staging table cannot be read while {action}: {exc}") from exc
        if mismatch is not None:
            _through_engine(target, mismatch)
            return False
        remove_directory(f"{staging.rstrip('/')}/_delta_log", "the log of an adopted staging table")
        return True


def remove_stale_staging(target: str) -> None:
    """Delete what earlier copies of the table at ``target`` left (the module docstring):
    a staging directory no live file of the table names goes, one whose files are live
    loses its log only. Failures only warn."""
    from pyarrow import fs as pa_fs  # noqa: PLC0415 - already loaded by deltalog

    try:
        filesystem, root = table_filesystem(target)
        entries = filesystem.get_file_info(pa_fs.FileSelector(root, allow_not_found=True))
        stale = [
            entry.base_name
            for entry in entries
            if entry.type == pa_fs.FileType.Directory and entry.base_name.startswith(STAGING_PREFIX)
        ]
        if not stale:
            return
        live = read_table_files(target).live_paths if is_delta_table(target) else set()
    except (OSError, LogUnreadableError) as exc:
        log.warning("old staging tables could not be listed", table_path=target, error=str(exc))
        return
    for name in stale:
        location = f"{target.rstrip('/')}/{name}"
        if any(path.startswith(f"{name}/") for path in live):
            remove_directory(f"{location}/_delta_log", "the log of an adopted staging table")
        else:
            remove_directory(location, "a staging table no copy finished")


def remove_directory(location: str, what: str) -> None:
    """Delete the directory ``location`` (``what`` it is, for the warning) and all it holds;
    a failure only warns: nothing reads it again, and a later copy uses a new one."""
    try:
        filesystem, path = table_filesystem(location)
        filesystem.delete_dir(path)
    except FileNotFoundError:
        return
    except Exception as exc:  # best effort; see the docstring
        log.warning(f"{what} could not be removed", path=location, error=cause_line(exc))


def _relative_directory(target: str, staging: str) -> str:
    """``staging``'s path relative to ``target``, as a URL-encoded path prefix."""
    base = target.rstrip("/") + "/"
    if not staging.startswith(base) or "/" in staging[len(base) :].strip("/"):
        raise ValueError(f"the staging table {staging} is not a directory of {target}")
    from urllib.parse import quote  # noqa: PLC0415

    return quote(staging[len(base) :].strip("/"))


def _through_engine(target: str, reason: str) -> None:
    log.info("the copy replaces the table through the engine", table_path=target, reason=reason)
