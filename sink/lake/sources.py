"""MERGE sources handed to the embedded engine as local Parquet files instead of over gRPC.

Theory of operation
-------------------
Every MERGE reads its batch from a relation over an Arrow table built by the sink. Through
Spark Connect that table travels inside the plan: pyspark writes it to Arrow IPC, copies it
into a protobuf message, copies that into the request and serialises it, and the server
decodes it again - about 60 ms of the sink thread's time per 100k-row source, most of it
holding the interpreter lock the capture thread needs (docs/performance-log.md).

The embedded engine (``sink.spark.mode: embedded``) runs in this process and sees its
files, so the sink writes the table once, as an uncompressed Parquet file without
dictionaries or column statistics, and the MERGE reads that file (``parquet.`path```): one
sequential write into the page cache, no copy through the interpreter. The file lives
exactly as long as the statement; it is removed as soon as the statement that read it is
done. Parquet and not Arrow IPC (the format used before, decision 0110): a Parquet footer
carries the row count, and Sail plans the MERGE's hash join from it, building on the small
source and probing with the target; an Arrow IPC file gives no row count, and Sail built
the hash table from the whole target instead (a 10k-change MERGE into 10M rows took 1.7x
as long). Writing Parquet costs a few milliseconds more per 100k rows. A remote engine
(``connect``) cannot read the daemon's disk: it keeps the inline path, and so does classic
Spark, whose local relation is never run here (``sink/engine/spark.py``). So does a sink whose
file could not be written (no writable temporary directory, a full disk): it logs a
warning once and sends every later source inline (``tables.py``).

Appends (``LakeTables.append_rows``) read no target, so nothing is planned from the
source's row count: a small one (``INLINE_APPEND_BYTES``) goes inline, which for a few
hundred rows is cheaper than a file; a larger one is written to a file like a MERGE
source and read with the DataFrame reader.

Files go to a private directory under the system temporary directory (``TMPDIR``; the
Kubernetes manifests mount an ``emptyDir`` at ``/tmp``), created on first use and removed
by ``close`` - or, for an owner never closed, when it is collected or the interpreter
exits (``weakref.finalize``). A process killed part-way leaves its directory behind; the
directory holds an exclusive ``flock`` on its ``.lock`` file for as long as its owner
lives, so the next sink to start removes every such directory whose lock it can take -
also after a container restart that reused the same process id.
"""

from __future__ import annotations

import fcntl
import itertools
import os
import shutil
import tempfile
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pyarrow as pa
import pyarrow.parquet as pq
import structlog

from sink.engine.sql import quote

log = structlog.get_logger("wal2delta.sink")

DIRECTORY_PREFIX: Final = "wal2delta-sources-"
LOCK_NAME: Final = ".lock"
UNLOCKED_GRACE_SECONDS: Final = 60.0
FILE_FORMAT: Final = "parquet"
"""The engine's name of the files' format (``parquet.`path``` in SQL)."""
INLINE_APPEND_BYTES: Final = 256 * 1024
"""An append's rows up to this many Arrow bytes go to the engine inline even when it could
read a file (``LakeTables.append_rows``): for a few hundred rows the request costs less than
writing the file and reading it back, from about 2,000 rows the two are even, and at 100k
rows the file is a third cheaper (docs/performance.md). Appends have no join to plan, so
an inline source's unknown row count costs nothing."""


@dataclass(frozen=True, slots=True)
class StagedFile:
    """A file of rows the engine reads: where it is, and the relation reference SQL names
    it by (``parquet.`path```)."""

    path: Path
    reference: str


class SourceFiles:
    """A private directory of Parquet files, one per MERGE source an engine reads."""

    def __init__(self, parent: Path | None = None) -> None:
        """Files go to a new directory under ``parent`` (default: the system temporary
        directory), made on first use."""
        self._parent = parent
        self._directory: Path | None = None
        self._quoted_directory = ""
        """The directory with a trailing slash, quoted for SQL (``sql.quote``) without the
        closing backtick: the start of every file's reference."""
        self._removal: weakref.finalize[[Path, int], SourceFiles] | None = None
        self._numbers = itertools.count(1)
        self._guard = threading.Lock()

    @property
    def directory(self) -> Path | None:
        """The directory in use; None before the first file and after ``close``."""
        return self._directory

    def write(self, table: pa.Table) -> Path:
        """Write ``table`` to a new file (``staged`` removes it after the block).

        Raises:
            OSError: the directory or the file could not be written (nothing is left).
        """
        path = self._directory_in_use() / f"{next(self._numbers)}.parquet"
        try:
            # Read once, from the page cache: encoding and compression would only cost
            # time. The footer's row count is what the engine's join planning needs.
            pq.write_table(
                table,
                str(path),
                compression="none",
                use_dictionary=False,
                write_statistics=False,
            )
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        return path

    @contextmanager
    def staged(self, table: pa.Table) -> Iterator[StagedFile]:
        """``table`` in a new file (``write``) for the duration of the block, removed
        however the block ends.

        Raises:
            OSError: the file could not be written (nothing is left).
        """
        path = self.write(table)
        try:
            # ``quote(str(path))``: a file's own name, a number, needs no escaping.
            yield StagedFile(path, f"{FILE_FORMAT}.{self._quoted_directory}{path.name}`")
        finally:
            path.unlink(missing_ok=True)

    def close(self) -> None:
        """Remove the directory and every file still in it; the next file makes a new one."""
        with self._guard:
            removal, self._removal = self._removal, None
            self._directory = None
        if removal is not None:
            removal()  # runs once, whoever calls it first

    def _directory_in_use(self) -> Path:
        with self._guard:
            if self._directory is None:
                parent = self._parent if self._parent is not None else Path(tempfile.gettempdir())
                remove_abandoned(parent)
                directory = Path(tempfile.mkdtemp(prefix=DIRECTORY_PREFIX, dir=parent))
                try:
                    lock_file = os.open(directory / LOCK_NAME, os.O_CREAT | os.O_RDWR, 0o600)
                    try:
                        fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BaseException:
                        os.close(lock_file)
                        raise
                except BaseException:
                    shutil.rmtree(directory, ignore_errors=True)
                    raise
                self._directory = directory
                self._quoted_directory = quote(f"{directory}/").removesuffix("`")
                self._removal = weakref.finalize(self, _remove_directory, directory, lock_file)
            return self._directory


def _remove_directory(directory: Path, lock_file: int) -> None:
    """Remove a directory ``SourceFiles`` made, then release its lock."""
    shutil.rmtree(directory, ignore_errors=True)
    os.close(lock_file)


def remove_abandoned(parent: Path) -> list[Path]:
    """Remove the source directories under ``parent`` whose owner is gone; return them.

    An owner holds the exclusive lock on its directory's lock file until it closes it or
    dies; a directory whose lock can be taken is abandoned, and so is one without a lock
    file that is older than a minute (its owner died between making it and locking it; a
    younger one may be locked in a moment).
    """
    removed: list[Path] = []
    for directory in parent.glob(f"{DIRECTORY_PREFIX}*"):
        if not directory.is_dir() or _owned(directory):
            continue
        shutil.rmtree(directory, ignore_errors=True)
        removed.append(directory)
    if removed:
        log.info("removed source files left by an earlier process", directories=len(removed))
    return removed


def _owned(directory: Path) -> bool:
    try:
        lock_file = os.open(directory / LOCK_NAME, os.O_RDWR)
    except FileNotFoundError:
        return _young(directory)
    except OSError:
        return True  # not ours to judge (permissions): leave it
    try:
        fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(lock_file)  # also releases a lock taken here
    return False


def _young(directory: Path) -> bool:
    try:
        return time.time() - directory.stat().st_mtime < UNLOCKED_GRACE_SECONDS
    except FileNotFoundError:
        return True  # gone already: nothing to remove
