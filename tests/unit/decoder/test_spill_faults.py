"""Spill files under faults: a full volume, a quota, a failing disk, the ``max_bytes`` bound.

The volume is simulated by a file object that writes what fits and then fails as the
kernel does (``OSError`` with ``ENOSPC``...), injected through ``open_file``. What must
hold: the error is a retryable ``SpoolError`` whose message names the directory, the bytes
needed, the free space and what to do; the failed buffer refuses to go on (no record is
silently dropped); its file is removed on close; once space is back the same records
spool and read back whole.
"""

from __future__ import annotations

import errno
import fcntl
import os
import pickle
from pathlib import Path

import pytest

from decoder import (
    SPOOL_FILE_PREFIX,
    SPOOL_FILE_SUFFIX,
    FileChangeBuffer,
    SpoolError,
    Wal2DeltaError,
    spilling_buffers,
)
from decoder.spill import open_spool_file

RECORDS = [bytes([i % 251]) * (1000 + i) for i in range(300)]  # ~450 kB, several blocks
SPOOLED = sum(4 + len(r) for r in RECORDS)


class _SmallVolume:
    """A spool file on a volume with ``room`` bytes: a write passing it writes what fits,
    then fails with ``code``."""

    def __init__(self, fd: int, room: int, code: int) -> None:
        self._file = open_spool_file(fd)
        self.room = room
        self.code = code
        self.written = 0

    def write(self, data: bytes | bytearray) -> int:
        fits = max(0, self.room - self.written)
        if len(data) > fits:
            self._file.write(bytes(data[:fits]))
            self.written += fits
            raise OSError(self.code, os.strerror(self.code))
        self.written += len(data)
        return self._file.write(data)

    def __getattr__(self, name: str) -> object:
        return getattr(self._file, name)


def _volume(room: int, code: int = errno.ENOSPC):
    return lambda fd: _SmallVolume(fd, room, code)


def _fill(buffer: FileChangeBuffer) -> None:
    for record in RECORDS:
        buffer.append(record)


def test_a_full_volume_is_a_retryable_spool_error_naming_directory_bytes_and_remedy(tmp_path):
    spool = tmp_path / "spool"
    buffer = FileChangeBuffer(spool, 0, open_file=_volume(100_000))
    with pytest.raises(SpoolError) as failed:
        _fill(buffer)
    error = failed.value
    assert isinstance(error, Wal2DeltaError)
    assert error.retryable
    assert error.reason == "no_space"
    assert error.directory == str(spool)
    assert 64 * 1024 <= error.needed_bytes < 64 * 1024 + 2000  # the 64 KiB block written
    assert error.free_bytes is not None
    assert error.free_bytes > 0  # the real volume's
    text = str(error)
    assert str(spool) in text
    assert f"{error.needed_bytes} bytes needed" in text
    assert f"free on the volume: {error.free_bytes} bytes" in text
    assert "ENOSPC" in text
    assert "Nothing of the transaction being spooled was acknowledged" in text
    assert "Grow the volume" in text
    assert "point spool.dir at a larger one" in text
    assert "spool.max_bytes" in text
    assert "\n" not in text  # one log line
    assert isinstance(error.__cause__, OSError)


def test_a_failed_buffer_refuses_to_go_on_and_its_file_is_removed_on_close(tmp_path):
    buffer = FileChangeBuffer(tmp_path, 0, open_file=_volume(100_000))
    with pytest.raises(SpoolError):
        _fill(buffer)
    path = buffer.path
    assert path is not None
    assert path.exists()
    # Nothing dropped silently: appending more, reading back or truncating all fail.
    with pytest.raises(SpoolError):
        buffer.append(b"y" * 1000)  # the block that failed is still to be written
    with pytest.raises(SpoolError):
        list(buffer)
    with pytest.raises(SpoolError):
        buffer.truncate(0)
    buffer.close()
    assert not path.exists()
    assert list(tmp_path.iterdir()) == []


def test_once_space_is_back_the_same_records_spool_and_read_back_whole(tmp_path):
    failed = FileChangeBuffer(tmp_path, 0, open_file=_volume(200_000))
    with pytest.raises(SpoolError):
        _fill(failed)
    failed.close()
    # The transaction comes again from the server into a new buffer; the volume has room.
    again = FileChangeBuffer(tmp_path, 0, open_file=_volume(10 * SPOOLED))
    _fill(again)
    assert again.spilled_bytes == SPOOLED
    assert list(again) == RECORDS
    again.close()


@pytest.mark.parametrize(
    ("code", "reason", "advice"),
    [
        (errno.EDQUOT, "quota", "Grow the volume"),
        (errno.EIO, "io_error", "Check the volume"),
        (errno.EROFS, "other", "Check the volume"),
    ],
)
def test_every_os_error_of_a_write_is_a_spool_error_with_its_reason(tmp_path, code, reason, advice):
    buffer = FileChangeBuffer(tmp_path, 0, open_file=_volume(70_000, code))
    with pytest.raises(SpoolError) as failed:
        _fill(buffer)
    assert failed.value.reason == reason
    assert errno.errorcode[code] in str(failed.value)
    assert advice in str(failed.value)
    buffer.close()


def test_a_spool_directory_that_cannot_be_made_is_a_spool_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_bytes(b"")
    buffer = FileChangeBuffer(blocker / "spool", 0)
    with pytest.raises(SpoolError, match="cannot create a spill file") as failed:
        buffer.append(b"x" * 10)
    assert failed.value.reason == "other"
    assert str(blocker / "spool") in str(failed.value)


def test_max_bytes_bounds_the_spill_files_of_all_buffers_together(tmp_path):
    factory = spilling_buffers(tmp_path, 0, max_bytes=100_000)
    first, second = factory(), factory()
    for _ in range(60):
        first.append(b"a" * 996)  # 60_000 bytes on disk
    for _ in range(40):
        second.append(b"b" * 996)  # 100_000 bytes: the bound, not past it
    with pytest.raises(SpoolError) as failed:
        second.append(b"b" * 996)
    error = failed.value
    assert error.reason == "max_bytes"
    assert error.needed_bytes == 1000
    assert "over spool.max_bytes (100000 bytes)" in str(error)
    assert "Raise spool.max_bytes" in str(error)
    assert first.spilled_bytes + second.spilled_bytes == 100_000
    list(first)
    list(second)
    on_disk = sum(p.stat().st_size for p in tmp_path.iterdir())
    assert on_disk == 100_000  # never past the bound
    # Closing a buffer gives its bytes back: the other may grow again.
    first.close()
    for _ in range(40):
        second.append(b"b" * 996)
    assert second.spilled_bytes == 80_000
    second.close()


def test_a_truncation_gives_bytes_back_to_max_bytes(tmp_path):
    factory = spilling_buffers(tmp_path, 0, max_bytes=10_000)
    buffer = factory()
    mark = buffer.mark()
    for _ in range(10):
        buffer.append(b"t" * 996)
    with pytest.raises(SpoolError):
        buffer.append(b"t")
    buffer.truncate(mark)
    for _ in range(10):
        buffer.append(b"u" * 996)
    assert list(buffer) == [b"u" * 996] * 10
    buffer.close()


def test_a_buffer_that_cannot_spill_under_max_bytes_keeps_its_records_in_memory(tmp_path):
    factory = spilling_buffers(tmp_path, 5_000, max_bytes=1_000)
    buffer = factory()
    for _ in range(5):
        buffer.append(b"m" * 996)  # 5000 bytes: the memory limit
    with pytest.raises(SpoolError, match=r"spool\.max_bytes"):
        buffer.append(b"m" * 996)  # the spill of 5000 bytes would pass 1000
    assert buffer.path is None
    assert list(buffer) == [b"m" * 996] * 5
    assert list(tmp_path.iterdir()) == []


def test_max_bytes_must_not_be_negative(tmp_path):
    with pytest.raises(ValueError, match="max_bytes must not be negative"):
        spilling_buffers(tmp_path, 0, max_bytes=-1)


def test_a_spool_error_survives_pickling():
    error = SpoolError("spool failed: x", "/spool", 65536, 0, "no_space")
    copy = pickle.loads(pickle.dumps(error))
    assert (str(copy), copy.directory, copy.needed_bytes, copy.free_bytes, copy.reason) == (
        "spool failed: x",
        "/spool",
        65536,
        0,
        "no_space",
    )


def test_a_live_spool_file_is_named_as_ours_and_held_locked(tmp_path):
    buffer = FileChangeBuffer(tmp_path, 0)
    buffer.append(b"x")
    path = buffer.path
    assert path is not None
    assert path.name.startswith(SPOOL_FILE_PREFIX)
    assert path.name.endswith(SPOOL_FILE_SUFFIX)
    fd = os.open(path, os.O_RDONLY)
    try:
        with pytest.raises(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        buffer.close()
        assert not Path(path).exists()
    finally:
        os.close(fd)
