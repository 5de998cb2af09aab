"""``sink.logversion``: a local table's version from its log's names equals delta-rs's."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from sink.lake.logversion import local_directory, newest_logged_version


def test_the_newest_logged_version_is_the_version_delta_rs_reads(tmp_path: Path) -> None:
    path = tmp_path / "t"
    assert newest_logged_version(path) is None
    rows = pa.table({"id": pa.array([1, 2], pa.int64())})
    for _ in range(12):  # past a checkpoint, which names a version a commit names too
        write_deltalake(str(path), rows, mode="append")
    table = DeltaTable(str(path))
    table.create_checkpoint()
    write_deltalake(str(path), rows, mode="append")
    assert newest_logged_version(path) == DeltaTable(str(path)).version() == 12


def test_only_local_paths_are_listed(tmp_path: Path) -> None:
    assert local_directory(str(tmp_path)) == tmp_path
    assert local_directory(f"file://{tmp_path}") == tmp_path
    assert local_directory("s3://bucket/lake/t") is None
