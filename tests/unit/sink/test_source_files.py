"""Parquet files the embedded engine reads MERGE sources from (``sink/lake/sources.py``): one
file per view, gone after it; a private directory, removed on close, and directories
left by a dead process removed by the next one. The engine reading them is covered by
``tests/integration/test_delta_sink.py`` (every type, inline and from a file)."""

from __future__ import annotations

import gc
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sink.engine.sql import quote
from sink.lake.sources import (
    DIRECTORY_PREFIX,
    FILE_FORMAT,
    LOCK_NAME,
    SourceFiles,
    remove_abandoned,
)

TABLE = pa.table(
    {"id": pa.array([1, 2, None], pa.int64()), "note": pa.array(["a", None, "ü"], pa.string())}
)


def test_a_staged_file_holds_the_table_for_the_block_and_is_named_as_sql_quotes_it(
    tmp_path: Path,
) -> None:
    parent = tmp_path / "a `quoted` dir"  # the reference must escape what quote escapes
    parent.mkdir()
    files = SourceFiles(parent)
    with files.staged(TABLE) as staged, files.staged(TABLE) as other:
        assert staged.path.parent == files.directory
        assert pq.read_table(staged.path).equals(TABLE)
        assert other.path != staged.path  # every source gets its own file
        assert staged.reference == f"{FILE_FORMAT}.{quote(str(staged.path))}"
    assert not staged.path.exists()
    assert not other.path.exists()
    with pytest.raises(RuntimeError), files.staged(TABLE) as failed:
        raise RuntimeError("the statement failed")
    assert not failed.path.exists()  # removed however the block ends
    files.close()


def test_a_file_that_cannot_be_written_leaves_nothing_behind(tmp_path: Path) -> None:
    files = SourceFiles(tmp_path)
    with pytest.raises(OSError, match="No such file"):
        SourceFiles(tmp_path / "missing").write(TABLE)
    assert list(tmp_path.iterdir()) == []
    files.write(TABLE)
    directory = files.directory
    assert directory is not None
    shutil.rmtree(directory)  # the directory vanishes under the sink
    with pytest.raises(OSError, match="No such file"):
        files.write(TABLE)
    files.close()
    assert list(tmp_path.iterdir()) == []


def test_close_removes_the_directory_and_the_next_file_makes_a_new_one(tmp_path: Path) -> None:
    files = SourceFiles(tmp_path)
    assert files.directory is None
    files.write(TABLE).unlink()
    first = files.directory
    assert first is not None
    assert first.is_dir()
    files.close()
    assert not first.exists()
    assert files.directory is None
    path = files.write(TABLE)
    assert path.exists()
    assert files.directory not in (None, first)
    files.close()
    files.close()  # twice is harmless
    assert list(tmp_path.iterdir()) == []


def test_a_live_owners_directory_is_kept_and_an_unlocked_one_removed(tmp_path: Path) -> None:
    live = SourceFiles(tmp_path)
    path = live.write(TABLE)
    abandoned = tmp_path / f"{DIRECTORY_PREFIX}gone"
    abandoned.mkdir()
    (abandoned / LOCK_NAME).touch()
    (abandoned / "7.parquet").write_bytes(b"left behind")
    unrelated = tmp_path / "something-else"
    unrelated.mkdir()
    assert remove_abandoned(tmp_path) == [abandoned]
    assert path.exists()
    assert not abandoned.exists()
    assert unrelated.is_dir()
    live.close()


def test_a_directory_without_a_lock_file_is_removed_only_once_it_is_old(tmp_path: Path) -> None:
    starting = tmp_path / f"{DIRECTORY_PREFIX}starting"
    starting.mkdir()
    assert remove_abandoned(tmp_path) == []
    an_hour_ago = time.time() - 3600
    os.utime(starting, (an_hour_ago, an_hour_ago))
    assert remove_abandoned(tmp_path) == [starting]


def _child_writing_a_file(tmp_path: Path, ending: str) -> tuple[int, Path]:
    """Run a process that writes one source file under ``tmp_path`` and never closes its
    ``SourceFiles``, then runs ``ending``; its exit code and the file it wrote."""
    script = textwrap.dedent(
        f"""
        import os, signal, sys
        from pathlib import Path
        import pyarrow as pa
        from sink.lake.sources import SourceFiles
        files = SourceFiles(Path({str(tmp_path)!r}))
        print(files.write(pa.table({{"id": [1]}})), flush=True)
        {ending}
        """
    )
    child = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[3],
        check=False,
    )
    return child.returncode, Path(child.stdout.strip())


def test_files_of_a_killed_process_are_removed_by_the_next_sink(tmp_path: Path) -> None:
    # Killed before it removes its file: nothing in the process cleans up.
    returncode, left = _child_writing_a_file(tmp_path, "os.kill(os.getpid(), signal.SIGKILL)")
    assert returncode == -signal.SIGKILL
    assert left.exists()
    files = SourceFiles(tmp_path)
    files.write(TABLE)
    assert not left.parent.exists()
    assert [p.name for p in tmp_path.iterdir()] == [files.directory.name]  # type: ignore[union-attr]
    files.close()


def test_an_owner_never_closed_removes_its_files_when_collected_or_at_exit(
    tmp_path: Path,
) -> None:
    files = SourceFiles(tmp_path)
    files.write(TABLE)
    directory = files.directory
    assert directory is not None
    assert directory.is_dir()
    del files
    gc.collect()
    assert not directory.exists()

    returncode, left = _child_writing_a_file(tmp_path, "sys.exit(0)")
    assert returncode == 0
    assert left.name.endswith(".parquet")
    assert not left.parent.exists()
    assert list(tmp_path.iterdir()) == []
