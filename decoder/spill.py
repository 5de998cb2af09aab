"""Where a transaction's raw records wait until its outcome is known; the decoder's only I/O.

Theory of operation: the assembler appends every record of an open transaction (the raw
pgoutput message bytes) to a ``ChangeBuffer`` and reads them back, in order, when the
transaction is replayed. A subtransaction abort truncates the buffer back to a ``mark``
taken before the subtransaction's first record, as worker.c truncates its spool file to
the offset ``subxact_info_add`` recorded.

``MemoryChangeBuffer`` keeps records in a list (unit tests, small deployments).
``FileChangeBuffer`` keeps them in memory within a ``MemoryBudget`` that every buffer of
one assembler shares (``spilling_buffers``): the record that would cross the budget makes
the buffer holding the most memory - usually the one large transaction - move everything
to a temporary file in the spool directory, and every later record of that buffer is
appended there, length-prefixed (a big-endian ``uint32`` before each record). So memory
stays bounded however many transactions are open at once.
Records bound for the file are staged in a 64KiB block and written a block at a time,
and read back the same way. From then on the memory held is that fixed block, whatever
the transaction's size (docs/architecture.md, invariant 6), like worker.c's ``BufFile``
spooling behind ``stream_write_change``. The file is deleted on ``close()``, or when the
buffer is garbage-collected without being closed.

A mark is an opaque integer, meaningful only to the buffer that returned it.

Faults and bounds. Every ``OSError`` met while creating, writing or reading a spool file
(``ENOSPC``, ``EDQUOT``, ``EIO``...) becomes a ``SpoolError`` naming the directory, the
bytes needed, the bytes free there (``statvfs``) and what to do; a buffer that failed
refuses any further write, so no record is silently dropped. The budget may also bound the
bytes all its buffers hold on disk (``spool.max_bytes``): the record that would pass it
raises the same error instead of filling the volume. The error is retryable; whoever
feeds the assembler drops it, and the transaction comes again from the server.

Spool files are named ``wal2delta-txn-*.spool`` and each is held under an exclusive
``flock`` while its buffer lives. The lock dies with the process, however it ends (an OOM
kill, ``SIGKILL``), so a later process can tell a left-over file from a live one (it gets
the lock) and remove it (``daemon.spool``); a file removed by such a clean-up between its
creation and its lock is detected here (no link left, or the lock taken) and made again.

``absorb_frames`` is the receive loop's bulk path: a ``FileChangeBuffer`` still in memory
takes a run of row messages straight from their XLogData frames, in C (the kernel's
``absorb``), as ``append`` would take them one by one. A buffer that cannot (spilled, empty,
another kind, no kernel) answers None and the caller feeds the frames one by one.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import os
import struct
import sys
import tempfile
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO, Final, NamedTuple, Protocol

from decoder.errors import SpoolError
from decoder.native import COMPILED

_LENGTH: Final = struct.Struct(">I")
# A spool file is read back 1 MiB at a time. Each read gives the GIL up for a moment;
# done every few hundred records (64 KiB), that kept the sink worker thread from getting
# it while the loop replayed a spilled transaction
# (docs/decisions/0083-an-offer-to-an-idle-sink-worker-waits-until.md). Only one transaction is
# replayed at a time, so one read buffer exists; writes stay at 64 KiB, because every
# spilled open transaction has its own write block, outside ``spool.memory_limit``.
_READ_BUFFER_BYTES: Final = 1024 * 1024
_WRITE_BLOCK_BYTES: Final = 64 * 1024

SPOOL_FILE_PREFIX: Final = "wal2delta-txn-"
"""Every spool file's name starts so; a start-up clean-up removes only such files."""
SPOOL_FILE_SUFFIX: Final = ".spool"
"""Every spool file's name ends so."""
_CREATE_ATTEMPTS: Final = 100

_REASONS: Final = {errno.ENOSPC: "no_space", errno.EDQUOT: "quota", errno.EIO: "io_error"}

SpoolFileOpener = Callable[[int], BinaryIO]
"""Makes the file object of a new spool file from its descriptor (tests inject faults)."""


def open_spool_file(fd: int) -> BinaryIO:
    """The default ``SpoolFileOpener``: a buffered read-write file on the descriptor."""
    return os.fdopen(fd, "w+b")


def free_bytes(directory: Path) -> int | None:
    """Bytes an unprivileged writer may still use in ``directory``'s file system, or None."""
    try:
        stats = os.statvfs(directory)
    except OSError:
        return None
    return stats.f_bavail * stats.f_frsize


_ADVICE: Final = (
    "Nothing of the transaction being spooled was acknowledged: the daemon reconnects and "
    "receives it again from the last durable position."
)


def spool_error(
    directory: Path,
    action: str,
    needed_bytes: int,
    held_bytes: int,
    *,
    cause: OSError | None = None,
    limit_bytes: int | None = None,
) -> SpoolError:
    """The ``SpoolError`` for a failed ``action`` (``write 65536 bytes to a spill file``...)
    in ``directory``.

    With ``cause`` the operating system refused; without it ``limit_bytes``
    (``spool.max_bytes``) would have been passed.
    """
    free = free_bytes(directory)
    free_text = "unknown" if free is None else f"{free} bytes"
    if cause is None:
        return SpoolError(
            f"spool full: {needed_bytes} more bytes would take the spill files in "
            f"{directory} to {held_bytes + needed_bytes} bytes, over spool.max_bytes "
            f"({limit_bytes} bytes); free on the volume: {free_text}. {_ADVICE} Raise "
            "spool.max_bytes (with a volume that large) for transactions this big.",
            str(directory),
            needed_bytes,
            free,
            "max_bytes",
        )
    code = errno.errorcode.get(cause.errno or 0, "no errno")
    reason = _REASONS.get(cause.errno or 0, "other")
    what = cause.strerror or str(cause)
    hint = (
        "Grow the volume or free space on it, point spool.dir at a larger one, or set "
        "spool.max_bytes below the room the volume has."
        if reason in ("no_space", "quota")
        else "Check the volume (kernel log, permissions, mount state), or point spool.dir "
        "at another one."
    )
    return SpoolError(
        f"spool failed: cannot {action} in {directory}: {what} ({code}); "
        f"{needed_bytes} bytes needed, free on the volume: {free_text}, spooled by open "
        f"transactions (this write included): {held_bytes} bytes. {_ADVICE} {hint}",
        str(directory),
        needed_bytes,
        free,
        reason,
    )


def _create_spool_file(directory: Path, opener: SpoolFileOpener) -> tuple[BinaryIO, Path]:
    """A new, empty spool file in ``directory``, locked for as long as it is open.

    Raises:
        OSError: the file could not be made (or kept) in ``attempts`` tries.
    """
    for _ in range(_CREATE_ATTEMPTS):
        fd, name = tempfile.mkstemp(
            prefix=SPOOL_FILE_PREFIX, suffix=SPOOL_FILE_SUFFIX, dir=directory
        )
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            kept = os.fstat(fd).st_nlink > 0
        except BlockingIOError:
            kept = False  # a clean-up holds it to remove it
        except BaseException:
            os.close(fd)
            raise
        if kept:
            try:
                return opener(fd), Path(name)
            except BaseException:
                os.close(fd)
                raise
        os.close(fd)
    raise OSError(errno.EAGAIN, f"{_CREATE_ATTEMPTS} new spool files were removed at once")


class AbsorbedFrames(NamedTuple):
    """What ``ChangeBuffer.absorb_frames`` took: the kernel's ``absorb`` answer."""

    stop: int
    """Index of the first frame not taken (the caller feeds it the general way)."""
    used_bytes: int
    """Bytes the records added (payload plus four bytes each, as ``append`` counts)."""
    payload_bytes: int
    """The payloads' total length."""
    wal_start: int
    """WAL start of the last frame taken (0 when none was)."""
    inserts: int
    updates: int
    deletes: int

    @property
    def records(self) -> int:
        """Records taken."""
        return self.inserts + self.updates + self.deletes


class ChangeBuffer(Protocol):
    """An append-only sequence of records that can be truncated back to a mark."""

    def append(self, record: bytes) -> None:
        """Add a record at the end."""
        ...

    def absorb_frames(self, frames: list[bytes], start: int) -> AbsorbedFrames | None:
        """Append the payloads of the run of valid row messages at ``frames[start:]``.

        ``frames`` are CopyData payloads as received (XLogData frames). The run ends at the
        first frame that is not an XLogData frame holding a row message the assembler's
        check accepts (``parser.row_message_is_valid`` outside a stream block), or that
        ``append`` would not keep in memory. None when the buffer takes no run at all
        (the caller then feeds every frame the general way).
        """
        ...

    def mark(self) -> int:
        """Return a token for the current end, for a later ``truncate``."""
        ...

    def truncate(self, mark: int) -> None:
        """Drop every record appended after ``mark`` was taken."""
        ...

    def __iter__(self) -> Iterator[bytes]:
        """Yield the records in the order they were appended."""
        ...

    def close(self) -> None:
        """Release memory and files; the buffer is empty afterwards. Idempotent."""
        ...

    @property
    def size_bytes(self) -> int:
        """Bytes held, in memory or on disk, including per-record overhead."""
        ...

    @property
    def spilled_bytes(self) -> int:
        """Bytes held on disk."""
        ...


ChangeBufferFactory = Callable[[], ChangeBuffer]


class MemoryChangeBuffer:
    """A ``ChangeBuffer`` in a Python list; marks are record counts."""

    def __init__(self) -> None:
        self._records: list[bytes] = []
        self._size = 0

    def append(self, record: bytes) -> None:
        """Add a record at the end."""
        self._records.append(record)
        self._size += _LENGTH.size + len(record)

    def absorb_frames(self, frames: list[bytes], start: int) -> AbsorbedFrames | None:
        """None: records are appended one by one (the reference path)."""
        return None

    def mark(self) -> int:
        """Return the current record count."""
        return len(self._records)

    def truncate(self, mark: int) -> None:
        """Drop the records after the first ``mark`` ones.

        Raises:
            ValueError: ``mark`` is not a position inside the buffer.
        """
        if not 0 <= mark <= len(self._records):
            raise ValueError(f"mark {mark} is outside this buffer of {len(self._records)}")
        for record in self._records[mark:]:
            self._size -= _LENGTH.size + len(record)
        del self._records[mark:]

    def __iter__(self) -> Iterator[bytes]:
        """Yield the records in order."""
        return iter(self._records)

    def close(self) -> None:
        """Forget every record."""
        self._records = []
        self._size = 0

    @property
    def size_bytes(self) -> int:
        """Bytes held, counting four bytes of overhead per record like the file buffer."""
        return self._size

    @property
    def spilled_bytes(self) -> int:
        """Always 0: nothing goes to disk."""
        return 0


class CountingChangeBuffer:
    """A ``ChangeBuffer`` that keeps only the count and size of its records.

    For an assembler whose transactions are never replayed (``discard`` only), such as the
    one that finds transaction boundaries while ``wal2delta capture`` records the raw
    stream: a large transaction then costs neither memory nor a spool file next to the
    recording. Marks are record counts, as in ``MemoryChangeBuffer``.
    """

    def __init__(self) -> None:
        self._count = 0
        self._size = 0
        self._size_at_mark: dict[int, int] = {0: 0}

    def append(self, record: bytes) -> None:
        """Count a record."""
        self._count += 1
        self._size += _LENGTH.size + len(record)

    def absorb_frames(self, frames: list[bytes], start: int) -> AbsorbedFrames | None:
        """``ChangeBuffer.absorb_frames``, in C: the run is checked and counted, not kept."""
        if COMPILED is None:
            return None
        absorbed = AbsorbedFrames._make(
            COMPILED.absorb(frames, start, None, sys.maxsize, _LENGTH.size)
        )
        self._count += absorbed.records
        self._size += absorbed.used_bytes
        return absorbed

    def mark(self) -> int:
        """Return the current record count."""
        self._size_at_mark[self._count] = self._size
        return self._count

    def truncate(self, mark: int) -> None:
        """Forget the records counted after ``mark``.

        Raises:
            ValueError: ``mark`` was not returned by ``mark`` (or is past the end).
        """
        size = self._size_at_mark.get(mark)
        if size is None or mark > self._count:
            raise ValueError(f"mark {mark} is outside this buffer of {self._count}")
        self._count = mark
        self._size = size
        self._size_at_mark = {m: s for m, s in self._size_at_mark.items() if m <= mark}

    def __iter__(self) -> Iterator[bytes]:
        """Refuse: the records were not kept.

        Raises:
            TypeError: always.
        """
        raise TypeError("a CountingChangeBuffer keeps no records to replay")

    def close(self) -> None:
        """Forget the count."""
        self._count = 0
        self._size = 0
        self._size_at_mark = {0: 0}

    @property
    def size_bytes(self) -> int:
        """Bytes the records would take, with four bytes of overhead each."""
        return self._size

    @property
    def spilled_bytes(self) -> int:
        """Always 0: nothing goes to disk."""
        return 0


class MemoryBudget:
    """Bytes that the ``FileChangeBuffer``s sharing this budget may hold in memory in all.

    It also counts the bytes they hold on disk, and may bound them.

    Args:
        limit_bytes: the bound (records plus 4 bytes each); 0 spills every record.
        disk_limit_bytes: the bound of the bytes on disk (``spool.max_bytes``); None for
            none but the volume's size.
    """

    def __init__(self, limit_bytes: int, disk_limit_bytes: int | None = None) -> None:
        if limit_bytes < 0:
            raise ValueError(f"memory_limit_bytes must not be negative, not {limit_bytes}")
        if disk_limit_bytes is not None and disk_limit_bytes < 0:
            raise ValueError(f"max_bytes must not be negative, not {disk_limit_bytes}")
        self.limit_bytes = limit_bytes
        self.used_bytes = 0
        self.disk_limit = disk_limit_bytes
        self.disk_limit_bytes = sys.maxsize if disk_limit_bytes is None else disk_limit_bytes
        self.disk_bytes = 0
        """Bytes the spilled buffers hold (written or staged to be written)."""
        self._holders: weakref.WeakSet[FileChangeBuffer] = weakref.WeakSet()

    def admit(self, buffer: FileChangeBuffer, size: int) -> bool:
        """Whether ``buffer`` may keep ``size`` more bytes in memory; spills others if need be.

        Buffers holding the most memory spill first, ``buffer`` included; False means
        ``buffer`` itself spilled (or the record alone exceeds the budget).
        """
        while self.used_bytes + size > self.limit_bytes:
            largest = max(self._holders, key=lambda b: b.memory_bytes, default=None)
            if largest is None or largest.memory_bytes <= buffer.memory_bytes:
                return False
            largest.spill()
        return True

    def hold(self, buffer: FileChangeBuffer) -> None:
        """``buffer`` starts keeping records in memory: a candidate to spill from now on."""
        self._holders.add(buffer)

    def release(self, size: int) -> None:
        """A buffer gave ``size`` bytes of memory back (spilled, truncated or closed)."""
        self.used_bytes -= size


def _remove_spool_file(file: BinaryIO, path: Path) -> None:
    """Close and delete a spool file; used on close and by the garbage-collection finalizer."""
    with contextlib.suppress(OSError):
        file.close()
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


class FileChangeBuffer:
    """A ``ChangeBuffer`` that moves to a temporary file once it outgrows a memory limit.

    Args:
        spool_dir: directory for the temporary file; created when first needed.
        memory_limit_bytes: bytes (records plus 4 bytes each) kept in memory before the
            buffer spills; 0 spills from the first record. Ignored with ``budget``.
        budget: a budget shared with other buffers (``spilling_buffers``); without it
            the buffer has its own budget of ``memory_limit_bytes``.
        open_file: makes the file object of the spool file from its descriptor.

    Marks are byte offsets in the logical length-prefixed stream, which is exactly the
    file's layout, so truncating a spilled buffer is a file truncation.
    """

    def __init__(
        self,
        spool_dir: Path,
        memory_limit_bytes: int,
        budget: MemoryBudget | None = None,
        open_file: SpoolFileOpener = open_spool_file,
    ) -> None:
        if memory_limit_bytes < 0:
            raise ValueError(f"memory_limit_bytes must not be negative, not {memory_limit_bytes}")
        self._spool_dir = Path(spool_dir)
        self._budget = budget if budget is not None else MemoryBudget(memory_limit_bytes)
        self._memory: list[bytes] = []
        self._memory_bytes = 0
        self._file: BinaryIO | None = None
        self._path: Path | None = None
        self._file_bytes = 0
        self._pending = bytearray()
        self._finalizer: weakref.finalize[[BinaryIO, Path], FileChangeBuffer] | None = None
        self._open_file = open_file
        self._failed: SpoolError | None = None
        """The error that broke the spool file: every later use raises it again."""

    @property
    def path(self) -> Path | None:
        """The spool file, once the buffer has spilled."""
        return self._path

    @property
    def memory_bytes(self) -> int:
        """Bytes this buffer holds in memory (0 once spilled)."""
        return self._memory_bytes

    def append(self, record: bytes) -> None:
        """Add a record at the end, spilling to disk when the memory budget is reached."""
        size = _LENGTH.size + len(record)
        if self._file is None:
            budget = self._budget
            if budget.used_bytes + size <= budget.limit_bytes or budget.admit(self, size):
                if not self._memory:
                    budget.hold(self)
                self._memory.append(record)
                self._memory_bytes += size
                budget.used_bytes += size
                return
            if self._file is None:
                self.spill()
        # Records are staged in a bytearray and written a block at a time: two buffered
        # file writes per record cost more than the rest of spooling it.
        budget = self._budget
        if budget.disk_bytes + size > budget.disk_limit_bytes:
            raise self._over_limit(size)
        budget.disk_bytes += size
        pending = self._pending
        pending += _LENGTH.pack(len(record))
        pending += record
        self._file_bytes += size
        if len(pending) >= _WRITE_BLOCK_BYTES:
            self._write_pending()

    def absorb_frames(self, frames: list[bytes], start: int) -> AbsorbedFrames | None:
        """``ChangeBuffer.absorb_frames``, in C: the frames that fit the shared budget.

        Only while the buffer is in memory and holds a record already (the first record
        registers the buffer with the budget, ``append`` does that); the run then ends at
        the record that would cross the budget, which ``append`` takes and spills.
        """
        if COMPILED is None or self._file is not None or not self._memory:
            return None
        budget = self._budget
        absorbed = AbsorbedFrames._make(
            COMPILED.absorb(
                frames, start, self._memory, budget.limit_bytes - budget.used_bytes, _LENGTH.size
            )
        )
        self._memory_bytes += absorbed.used_bytes
        budget.used_bytes += absorbed.used_bytes
        return absorbed

    def _write_pending(self) -> None:
        """Write the staged records to the spool file.

        Raises:
            SpoolError: the write failed (or an earlier one did).
        """
        assert self._file is not None
        if self._failed is not None:
            raise self._failed
        try:
            self._file.write(self._pending)
        except OSError as exc:
            raise self._fail(
                f"write {len(self._pending)} bytes to a spill file", len(self._pending), exc
            ) from exc
        self._pending.clear()

    def _flush(self) -> None:
        """Write the staged records and the file object's own buffer out.

        Raises:
            SpoolError: the write failed (or an earlier one did).
        """
        assert self._file is not None
        self._write_pending()
        try:
            self._file.flush()
        except OSError as exc:
            raise self._fail("flush the records written to a spill file", 0, exc) from exc

    def _fail(self, action: str, needed: int, cause: OSError) -> SpoolError:
        """Break the buffer with the ``SpoolError`` for ``cause``; the caller raises it."""
        error = spool_error(self._spool_dir, action, needed, self._budget.disk_bytes, cause=cause)
        self._failed = error
        return error

    def _over_limit(self, needed: int) -> SpoolError:
        """The ``SpoolError`` for ``needed`` more bytes past the budget's disk bound."""
        budget = self._budget
        return spool_error(
            self._spool_dir, "", needed, budget.disk_bytes, limit_bytes=budget.disk_limit
        )

    def spill(self) -> None:
        """Move the in-memory records to a new spool file (nothing when already spilled).

        Raises:
            SpoolError: the file could not be made or written, or holding the records on
                disk would pass the budget's disk bound (the records then stay in memory).
        """
        if self._file is not None:
            return
        budget = self._budget
        if budget.disk_bytes + self._memory_bytes > budget.disk_limit_bytes:
            raise self._over_limit(self._memory_bytes)
        try:
            self._spool_dir.mkdir(parents=True, exist_ok=True)
            file, path = _create_spool_file(self._spool_dir, self._open_file)
        except OSError as exc:
            raise spool_error(
                self._spool_dir,
                "create a spill file",
                self._memory_bytes,
                budget.disk_bytes,
                cause=exc,
            ) from exc
        self._file = file
        self._path = path
        self._finalizer = weakref.finalize(self, _remove_spool_file, file, path)
        for record in self._memory:
            self._pending += _LENGTH.pack(len(record))
            self._pending += record
        self._file_bytes = self._memory_bytes
        budget.disk_bytes += self._memory_bytes
        budget.release(self._memory_bytes)
        self._memory = []
        self._memory_bytes = 0
        self._write_pending()

    def mark(self) -> int:
        """Return the current logical length in bytes."""
        return self._file_bytes if self._file is not None else self._memory_bytes

    def truncate(self, mark: int) -> None:
        """Drop every record appended after ``mark`` was taken.

        Raises:
            ValueError: ``mark`` is not a record boundary inside the buffer.
        """
        if not 0 <= mark <= self.size_bytes:
            raise ValueError(f"mark {mark} is outside this buffer of {self.size_bytes} bytes")
        if self._file is None:
            while self._memory_bytes > mark:
                freed = _LENGTH.size + len(self._memory.pop())
                self._memory_bytes -= freed
                self._budget.release(freed)
            if self._memory_bytes != mark:
                raise ValueError(f"mark {mark} is not a record boundary")
            return
        # The file stays even if it shrinks below the limit: a transaction that got this
        # big once is likely to grow again, and the file is deleted at close anyway.
        self._flush()
        try:
            self._file.truncate(mark)
            self._file.seek(mark)
        except OSError as exc:
            raise self._fail("truncate a spill file", 0, exc) from exc
        self._budget.disk_bytes -= self._file_bytes - mark
        self._file_bytes = mark

    def __iter__(self) -> Iterator[bytes]:
        """Yield the records in order; a spilled buffer is read back a block at a time."""
        if self._file is None:
            yield from self._memory
            return
        assert self._path is not None
        self._flush()
        try:
            yield from self._read_back(self._path, self._file_bytes)
        except OSError as exc:
            raise self._fail("read back a spill file", self._file_bytes, exc) from exc

    @staticmethod
    def _read_back(path: Path, unread: int) -> Iterator[bytes]:
        """The records of the first ``unread`` bytes of the spool file at ``path``."""
        block = b""
        pos = 0
        unpack = _LENGTH.unpack_from
        with open(path, "rb", buffering=0) as reader:
            while True:
                available = len(block) - pos
                if available >= _LENGTH.size:
                    end = pos + _LENGTH.size + unpack(block, pos)[0]
                    if end <= len(block):
                        yield block[pos + _LENGTH.size : end]
                        pos = end
                        continue
                    needed = end - len(block)
                elif available == 0 and unread == 0:
                    return
                else:
                    needed = _LENGTH.size - available
                want = min(unread, max(needed, _READ_BUFFER_BYTES))
                chunk = reader.read(want) if want >= needed else b""
                if want < needed or len(chunk) != want:
                    raise OSError(errno.EIO, f"spool file {path} is shorter than expected")
                unread -= want
                block = block[pos:] + chunk
                pos = 0

    def close(self) -> None:
        """Delete the spool file and forget every record. Idempotent."""
        if self._finalizer is not None:
            self._finalizer()
            self._finalizer = None
        self._file = None
        self._path = None
        self._budget.disk_bytes -= self._file_bytes
        self._file_bytes = 0
        self._pending = bytearray()
        self._memory = []
        self._budget.release(self._memory_bytes)
        self._memory_bytes = 0

    def __del__(self) -> None:
        # A buffer dropped without close() must not keep its share of the budget (one
        # whose __init__ failed has no attributes yet).
        if getattr(self, "_memory_bytes", 0):
            self._budget.release(self._memory_bytes)
            self._memory_bytes = 0
        if getattr(self, "_file_bytes", 0):
            self._budget.disk_bytes -= self._file_bytes
            self._file_bytes = 0

    @property
    def size_bytes(self) -> int:
        """Bytes held, in memory or on disk, including the 4-byte length of each record."""
        return self._memory_bytes + self._file_bytes

    @property
    def spilled_bytes(self) -> int:
        """Bytes in the spool file."""
        return self._file_bytes


def spilling_buffers(
    spool_dir: Path,
    memory_limit_bytes: int,
    *,
    max_bytes: int | None = None,
    open_file: SpoolFileOpener = open_spool_file,
) -> ChangeBufferFactory:
    """Return a factory of ``FileChangeBuffer``s sharing a spool directory and a budget.

    The limit bounds the memory of all the factory's buffers together: past it, the
    buffer holding the most memory spills. ``max_bytes`` bounds the bytes their spool files
    hold together (None: the volume's size); past it they raise ``SpoolError``.

    Raises:
        ValueError: a limit is negative.
    """
    budget = MemoryBudget(memory_limit_bytes, max_bytes)
    return functools.partial(
        FileChangeBuffer, Path(spool_dir), memory_limit_bytes, budget, open_file
    )
