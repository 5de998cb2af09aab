"""``wal2delta status`` reads a local Delta table's version from its ``_delta_log`` listing
(docs/decisions/0119-*): the same version delta-rs reads, without importing it."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from daemon.status import _delta_version


def test_the_listed_version_is_the_one_delta_rs_reads(tmp_path: Path) -> None:
    path = str(tmp_path / "public" / "orders")
    for version in range(4):
        write_deltalake(path, pa.table({"id": [version]}), mode="append")
        assert _delta_version(path) == DeltaTable(path).version() == version
    assert _delta_version(f"file://{path}") == 3


def test_checkpoints_count_and_temporary_files_and_hints_do_not(tmp_path: Path) -> None:
    log = tmp_path / "t" / "_delta_log"
    log.mkdir(parents=True)
    for name in (
        f"{7:020}.json",
        f"{10:020}.checkpoint.parquet",
        f"{12:020}.checkpoint.{1:010}.{2:010}.parquet",
        "_last_checkpoint",
        "_commit_3c9a.json.tmp",
        f"{99:020}.json.tmp",
        f"{98:019}.json",
        f"{97:020}.crc",
    ):
        (log / name).write_text("")
    assert _delta_version(str(tmp_path / "t")) == 12
    (log / f"{13:020}.json").write_text("")
    assert _delta_version(str(tmp_path / "t")) == 13


def test_a_table_without_a_commit_has_no_version(tmp_path: Path) -> None:
    assert _delta_version(str(tmp_path / "missing")) is None
    (tmp_path / "empty" / "_delta_log").mkdir(parents=True)
    assert _delta_version(str(tmp_path / "empty")) is None
