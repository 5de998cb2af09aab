"""The spool directory at start-up: what killed processes left is removed, nothing else.

The left-over files come from real processes killed with ``SIGKILL`` while spooling, so
their locks are dropped by the kernel as after an OOM kill. A live process's file (or
temporary directory) is held locked and must survive the clean-up.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from daemon.spool import (
    LOCK_FILE,
    TEMPORARY_PREFIX,
    open_spool_directory,
    remove_left_over_files,
)
from decoder import FileChangeBuffer, SpoolError

ROOT = Path(__file__).resolve().parents[3]

# A process that spools 300 kB into a spill file, says where, and waits to be killed.
_SPOOLER = """
import sys, time
from pathlib import Path
from decoder import FileChangeBuffer, SpoolError
from daemon.spool import open_spool_directory
configured = None if sys.argv[1] == "-" else Path(sys.argv[1])
spool = open_spool_directory(configured)
buffer = FileChangeBuffer(spool.path, 0)
for _ in range(300):
    buffer.append(b"s" * 996)
list(buffer)  # everything written
print("SPOOL FILE", buffer.path, flush=True)
time.sleep(3600)
"""


@contextmanager
def _spooling(directory: str, tmpdir: Path) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    """A live process with a spill file in ``directory`` (``-``: a temporary spool)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmpdir)}
    process = subprocess.Popen(
        [sys.executable, "-c", _SPOOLER, directory],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
    )
    try:
        assert process.stdout is not None
        # Its log lines come first on stdout.
        line = "-"
        while line and not line.startswith("SPOOL FILE "):
            line = process.stdout.readline()
        assert line, "the spooling process ended before spilling"
        yield process, Path(line.removeprefix("SPOOL FILE ").strip())
    finally:
        process.kill()
        process.wait()


def _killed_spooler(directory: str, tmpdir: Path) -> Path:
    """The spill file a process left when it was killed with SIGKILL while spooling."""
    with _spooling(directory, tmpdir) as (process, path):
        process.send_signal(signal.SIGKILL)
        process.wait()
    assert path.exists()
    return path


def test_files_a_killed_process_left_are_removed_at_start_and_nothing_else(tmp_path):
    spool = tmp_path / "spool"
    spool.mkdir()
    left = _killed_spooler(str(spool), tmp_path)
    size = left.stat().st_size
    assert size == 300 * 1000
    # What is not ours, or not a spill file, stays.
    keep = [
        spool / "notes.txt",
        spool / "wal2delta-txn-abc.txt",  # the prefix without the suffix
        spool / "other-abc.spool",  # the suffix without the prefix
    ]
    for path in keep:
        path.write_bytes(b"keep")
    (spool / "wal2delta-txn-dir.spool").mkdir()  # a directory, not a file
    target = tmp_path / "target"
    target.write_bytes(b"target")
    (spool / "wal2delta-txn-link.spool").symlink_to(target)  # a link, not a file
    with capture_logs() as logs:
        opened = open_spool_directory(spool)
    assert opened.path == spool
    assert not opened.temporary
    assert not left.exists()
    for path in keep:
        assert path.read_bytes() == b"keep"
    assert (spool / "wal2delta-txn-dir.spool").is_dir()
    assert (spool / "wal2delta-txn-link.spool").is_symlink()
    assert target.read_bytes() == b"target"
    (ready,) = [e for e in logs if e["event"] == "spool directory ready"]
    assert ready["left_over_files_removed"] == 1
    assert ready["left_over_bytes_removed"] == size
    assert ready["held_by_live_processes"] == 0
    opened.close()
    assert spool.is_dir()  # a configured directory stays


def test_a_spill_file_of_a_live_process_is_kept(tmp_path):
    with _spooling(str(tmp_path), tmp_path) as (_, other):
        mine = FileChangeBuffer(tmp_path, 0)
        mine.append(b"m" * 100)
        removed = remove_left_over_files(tmp_path)
        assert (removed.files, removed.in_use) == (0, 2)
        assert other.exists()
        assert mine.path is not None
        assert mine.path.exists()
        assert list(mine) == [b"m" * 100]
        mine.close()


def test_a_missing_configured_directory_is_made(tmp_path):
    opened = open_spool_directory(tmp_path / "a" / "b")
    assert (tmp_path / "a" / "b").is_dir()
    opened.close()


@pytest.fixture
def temporary_parent(tmp_path: Path) -> Iterator[Path]:
    """``tempfile.gettempdir()`` answers ``tmp_path / "tmp"`` for the test."""
    parent = tmp_path / "tmp"
    parent.mkdir()
    saved = tempfile.tempdir
    tempfile.tempdir = str(parent)
    try:
        yield parent
    finally:
        tempfile.tempdir = saved


def test_temporary_spools_of_killed_processes_are_removed_and_live_ones_kept(temporary_parent):
    unlocked_elsewhere = temporary_parent / f"{TEMPORARY_PREFIX}no-lock-file"
    unlocked_elsewhere.mkdir()
    (unlocked_elsewhere / "data").write_bytes(b"x")
    with _spooling("-", temporary_parent) as (_, live_file):
        # Started after the live one, so its own clean-up at start did not take this.
        dead = _killed_spooler("-", temporary_parent).parent
        assert dead.name.startswith(TEMPORARY_PREFIX)
        assert live_file.exists()
        with capture_logs() as logs:
            opened = open_spool_directory(None)
        assert not dead.exists()
        assert live_file.exists()
        assert (unlocked_elsewhere / "data").exists()
        assert opened.temporary
        assert opened.path.parent == temporary_parent
        assert (opened.path / LOCK_FILE).exists()
        (ready,) = [e for e in logs if e["event"] == "spool directory ready"]
        assert ready["left_over_files_removed"] == 1
        assert ready["left_over_bytes_removed"] == 300 * 1000
        assert ready["held_by_live_processes"] == 1
        # This run's own directory is live too, for any other process starting now.
        second = open_spool_directory(None)
        assert opened.path.exists()
        second.close()
        opened.close()
        assert not opened.path.exists()
        assert live_file.exists()


def test_a_spool_directory_that_cannot_be_made_is_a_retryable_spool_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_bytes(b"")
    with pytest.raises(SpoolError) as failed:
        open_spool_directory(blocker / "spool")
    error = failed.value
    assert error.retryable
    assert error.reason == "other"
    assert str(error).startswith(
        f"spool failed: cannot make or list the spool directory in {blocker / 'spool'}: "
    )
    assert "(ENOTDIR)" in str(error)
