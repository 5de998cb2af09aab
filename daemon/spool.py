"""The spool directory at start-up: chosen, made, and rid of what dead processes left.

Theory of operation
-------------------
A spill file (``decoder.spill``) lives only as long as the process that spooled into it;
nothing in it is ever replayed by another process, because nothing of it was acknowledged
and the server sends it again. A process that ends without closing its buffers (an OOM
kill, ``SIGKILL``, a power cut) leaves its files behind, and each such end would leak
them onto the volume until it filled. So the supervisor prepares the directory once per
run (``open_spool_directory``):

- a configured ``spool.dir`` is made if missing, and every ``wal2delta-txn-*.spool`` file
  in it whose lock can be taken is removed. Each live spool file is held under an
  exclusive ``flock`` by the process that made it, and the kernel drops the lock when that
  process ends however it ends; a file that can be locked is therefore a dead process's,
  and a file that cannot belongs to a live process sharing the directory and is left
  alone. Nothing but such files is ever touched (no other name, no directory, no link).
- a null ``spool.dir`` gets a fresh ``wal2delta-spool-*`` directory in the system's
  temporary directory, holding a ``wal2delta-spool.lock`` file locked for the run. Other
  such directories of ours whose lock file can be locked belong to dead processes and are
  removed. One without a lock file is left: it was made by a version without one, or it
  is being made right now (the lock file comes a moment after the directory).

Every removal happens while holding the file's lock, and the owner checks after taking its
lock that its file still has a link (``decoder.spill``; here for the lock file), so a
clean-up racing a process that is creating its file never takes a live one.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import structlog

from decoder import SPOOL_FILE_PREFIX, SPOOL_FILE_SUFFIX, spool_error

log = structlog.get_logger("wal2delta.spool")

TEMPORARY_PREFIX: Final = "wal2delta-spool-"
"""Prefix of the temporary spool directories made for a null ``spool.dir``."""
LOCK_FILE: Final = "wal2delta-spool.lock"
"""The file a temporary spool directory's owner holds locked for its run."""
_ATTEMPTS: Final = 100


@dataclass(frozen=True)
class Removed:
    """What a clean-up removed, and what it left because a live process holds it."""

    files: int = 0
    bytes: int = 0
    in_use: int = 0

    def __add__(self, other: Removed) -> Removed:
        return Removed(
            self.files + other.files, self.bytes + other.bytes, self.in_use + other.in_use
        )


def _locked(path: Path) -> int | None:
    """A descriptor of ``path`` holding its exclusive lock, or None (gone, a link, or
    locked by a live process)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        # Still the file that was named (not replaced or removed meanwhile).
        if os.fstat(fd).st_nlink > 0 and os.fstat(fd).st_ino == path.stat().st_ino:
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def _is_spool_file(entry: os.DirEntry[str]) -> bool:
    name = entry.name
    return (
        name.startswith(SPOOL_FILE_PREFIX)
        and name.endswith(SPOOL_FILE_SUFFIX)
        and entry.is_file(follow_symlinks=False)
    )


def remove_left_over_files(directory: Path) -> Removed:
    """Remove the spill files in ``directory`` that no live process holds.

    Only regular files named ``wal2delta-txn-*.spool`` are looked at; one that a live
    process holds locked is counted in ``in_use`` and kept.

    Raises:
        OSError: ``directory`` cannot be listed.
    """
    removed = Removed()
    with os.scandir(directory) as entries:
        candidates = [Path(entry.path) for entry in entries if _is_spool_file(entry)]
    for path in candidates:
        fd = _locked(path)
        if fd is None:
            if path.exists():
                removed += Removed(in_use=1)
            continue
        try:
            size = os.fstat(fd).st_size
            path.unlink()
            removed += Removed(files=1, bytes=size)
        except OSError as exc:
            log.warning("cannot remove a left-over spill file", path=str(path), error=str(exc))
        finally:
            os.close(fd)
    return removed


def _tree_bytes(directory: Path) -> tuple[int, int]:
    """(files, bytes) of the regular files under ``directory``, not following links."""
    files = size = 0
    for root, _, names in os.walk(directory):
        for name in names:
            with contextlib.suppress(OSError):
                stat = os.lstat(os.path.join(root, name))
                files += 1
                size += stat.st_size
    return files, size


def remove_left_over_temporary_directories(parent: Path) -> Removed:
    """Remove the temporary spool directories in ``parent`` whose owners are gone.

    Only directories of this user named ``wal2delta-spool-*`` whose lock file can be
    locked; the files counted are those in them (the lock file not included).
    """
    removed = Removed()
    uid = os.getuid()
    try:
        with os.scandir(parent) as entries:
            candidates = [
                Path(entry.path)
                for entry in entries
                if entry.name.startswith(TEMPORARY_PREFIX)
                and entry.is_dir(follow_symlinks=False)
                and entry.stat(follow_symlinks=False).st_uid == uid
            ]
    except OSError:
        return removed
    for directory in candidates:
        fd = _locked(directory / LOCK_FILE)
        if fd is None:
            if (directory / LOCK_FILE).exists():
                removed += Removed(in_use=1)
            continue
        try:
            files, size = _tree_bytes(directory)
            shutil.rmtree(directory)
            removed += Removed(files=files - 1, bytes=size)
        except OSError as exc:
            log.warning(
                "cannot remove a left-over spool directory", path=str(directory), error=str(exc)
            )
        finally:
            os.close(fd)
    return removed


@dataclass
class SpoolDirectory:
    """The run's spool directory; a temporary one is removed by ``close``."""

    path: Path
    temporary: bool
    lock_fd: int | None = None

    def close(self) -> None:
        """Remove a temporary directory and let its lock go. Idempotent."""
        if self.temporary:
            shutil.rmtree(self.path, ignore_errors=True)
        if self.lock_fd is not None:
            os.close(self.lock_fd)
            self.lock_fd = None


def _make_temporary(parent: Path) -> SpoolDirectory:
    """A fresh ``wal2delta-spool-*`` directory in ``parent`` with its lock file held."""
    for _ in range(_ATTEMPTS):
        path = Path(tempfile.mkdtemp(prefix=TEMPORARY_PREFIX, dir=parent))
        try:
            fd = os.open(path / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        except FileNotFoundError:
            continue  # another process's clean-up took it as left over
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            kept = os.fstat(fd).st_nlink > 0
        except BlockingIOError:
            kept = False
        if kept:
            return SpoolDirectory(path, temporary=True, lock_fd=fd)
        os.close(fd)
    raise OSError(f"{_ATTEMPTS} new spool directories in {parent} were removed at once")


def open_spool_directory(configured: Path | None) -> SpoolDirectory:
    """The run's spool directory, with what dead processes left in its place removed.

    ``configured`` is ``spool.dir``: made if missing and rid of left-over spill files;
    None makes a temporary directory after removing left-over ones of ours.

    Raises:
        SpoolError: the directory cannot be made or listed (retryable, as a spill file
            that cannot be written: a volume not mounted yet, or full).
    """
    where = Path(tempfile.gettempdir()) if configured is None else configured
    try:
        if configured is None:
            removed = remove_left_over_temporary_directories(where)
            spool = _make_temporary(where)
        else:
            configured.mkdir(parents=True, exist_ok=True)
            removed = remove_left_over_files(configured)
            spool = SpoolDirectory(configured, temporary=False)
    except OSError as exc:
        raise spool_error(where, "make or list the spool directory", 0, 0, cause=exc) from exc
    log.info(
        "spool directory ready",
        path=str(spool.path),
        left_over_files_removed=removed.files,
        left_over_bytes_removed=removed.bytes,
        held_by_live_processes=removed.in_use,
        looked_in=str(where),
    )
    return spool
